"""Where a Spark JVM's CPU went, from a JFR recording's execution samples (`jdk.ExecutionSample`: a thread running
Java code, every 10 ms with JFR's `profile` settings; threads blocked in native code are not sampled).

    .venv/bin/python -m bench.tools.jfr_top REC.jfr [REC2.jfr ...]   # prints the split, top frames and packages

A recording: `bench.tools.cpu_accounting ... --jfr DIR` (one archive and one count per arm under JFR), or
`jcmd PID JFR.start settings=profile` / `JFR.stop filename=REC.jfr` around any run of a live Spark JVM.

`jfr print --stack-depth 256 --events jdk.ExecutionSample` renders the samples; `parse` reads that text and
`split` puts each sample of a Spark task thread into one stage of the archive's pipeline by its stack, leaf first:
the first frame of a known stage decides (Kafka client, Kafka record -> row, rows -> Arrow, Arrow IPC, ...).
Frames of Spark's generated code and expressions, and of sockets and streams, are "weak" (see WEAK_*): they count
for the stage that called them, or as the projections and the socket to Python when the task's own loop did.
Generic JDK and Scala frames are attributed to their caller in the self-frame counts.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass

_THREAD = re.compile(r'^\s*sampledThread = "(.*)" \(javaThreadId')

# Stages, checked on each frame from the leaf: the first that matches decides, with the weak frames below it.
KAFKA = ("Kafka record -> UnsafeRow (KafkaRecordToRowConverter)", "Kafka client (fetch, decompress, parse records)",
         "Spark Kafka source (consumer, offsets)")
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (KAFKA[0], ("org.apache.spark.sql.kafka010.KafkaRecordToRow",)),
    (KAFKA[1], ("org.apache.kafka.",)),
    (KAFKA[2], ("org.apache.spark.sql.kafka010.",)),
    ("rows -> Arrow (Spark ArrowWriter)", ("org.apache.spark.sql.execution.arrow.",)),
    ("Arrow vectors and IPC", ("org.apache.arrow.",)),
    ("Python runner (mapInArrow)", ("org.apache.spark.sql.execution.python.", "org.apache.spark.api.python.")),
    ("Spark other", ("org.apache.spark.",)),
)
PROJECTIONS = "projections (generated code, expressions)"
SOCKET = "socket to Python"
# Weak frames belong to the stage that called them: generated code and expressions are the projections when the
# task's row loop called them (not the Kafka source's record -> UnsafeRow, not the ArrowWriter reading UnsafeRows);
# socket and stream frames are the socket to Python unless the Kafka client called them (its fetches).
WEAK_PROJECTION = ("org.apache.spark.sql.catalyst.", "org.apache.spark.unsafe.")
WEAK_IO = ("sun.nio.ch.", "java.net.", "java.io.BufferedOutputStream", "java.io.DataOutputStream",
           "java.nio.channels.")
ROW_LOOP = ("Python runner (mapInArrow)", "Spark other")
GENERIC = ("java.lang.", "java.util.", "jdk.internal.", "sun.misc.", "scala.", "java.nio.", "java.io.", "java.security.")

# inclusive markers: share of task-thread samples whose stack holds a frame starting with the marker
MARKERS: tuple[tuple[str, str], ...] = (
    ("Kafka consumer poll", "org.apache.kafka.clients.consumer."),
    ("Kafka record -> UnsafeRow", "org.apache.spark.sql.kafka010.KafkaRecordToRow"),
    ("Spark Kafka reader (all of the source)", "org.apache.spark.sql.kafka010."),
    ("generated row loop (processNext)", "org.apache.spark.sql.catalyst.expressions.GeneratedClass$GeneratedIterator"),
    ("UTF8String (concat_ws, casts)", "org.apache.spark.unsafe.types.UTF8String"),
    ("ArrowWriter.write (rows -> Arrow)", "org.apache.spark.sql.execution.arrow.ArrowWriter.write"),
    ("Arrow IPC write (ArrowStreamWriter)", "org.apache.arrow.vector.ipc."),
    ("socket write", "sun.nio.ch."),
)


@dataclass(frozen=True)
class Sample:
    thread: str
    frames: tuple[str, ...]  # `package.Class.method`, leaf first


def parse(text: str) -> list[Sample]:
    """The samples of `jfr print --events jdk.ExecutionSample` text output."""
    out: list[Sample] = []
    thread, frames, in_stack = "", [], False
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("jdk.ExecutionSample"):
            thread, frames, in_stack = "", [], False
        elif m := _THREAD.match(line):
            thread = m.group(1)
        elif s.startswith("stackTrace = ["):
            in_stack = True
        elif in_stack and s == "]":
            in_stack = False
            out.append(Sample(thread, tuple(frames)))
        elif in_stack and "(" in s:
            frames.append(s[: s.index("(")])
    return out


def thread_group(name: str) -> str:
    """`Executor task launch worker for task 3.0 in stage 7.0 (TID 21)` -> `Executor task launch worker`."""
    name = re.sub(r" for task .*$", "", name)
    return re.sub(r"[\s#\-_]*\d+$", "", name) or name


def is_task(s: Sample) -> bool:
    return s.thread.startswith("Executor task launch worker")


def stage(frames: tuple[str, ...]) -> str:
    proj = io = False
    for f in frames:
        if f.startswith(WEAK_PROJECTION):
            proj = True
            continue
        for name, prefixes in STAGES:
            if f.startswith(prefixes):
                if name in KAFKA:
                    return name
                if io:
                    return SOCKET
                return PROJECTIONS if proj and name in ROW_LOOP else name
        io = io or f.startswith(WEAK_IO)
    return PROJECTIONS if proj else SOCKET if io else "other"


def self_frame(frames: tuple[str, ...]) -> str:
    """The leaf frame, or the first non-generic frame under a generic leaf (a copy, a hash map: its caller)."""
    for f in frames:
        if not f.startswith(GENERIC):
            return f
    return frames[0] if frames else "?"


def package(frame: str, depth: int = 5) -> str:
    cls = frame.rsplit(".", 1)[0]
    return ".".join(cls.split(".")[:depth])


@dataclass(frozen=True)
class Profile:
    samples: int
    threads: Counter  # samples per thread group
    task_samples: int
    stages: Counter  # task samples per stage
    top_self: Counter  # task samples per self frame
    top_packages: Counter  # task samples per package of the self frame
    markers: Counter  # task samples per inclusive marker

    def render(self, top: int = 25) -> str:
        def pct(n: int, of: int) -> str:
            return f"{100 * n / of:5.1f} %" if of else "  -  "

        t = self.task_samples
        lines = [f"{self.samples} execution samples; by thread group:"]
        lines += [f"  {pct(n, self.samples)}  {n:6d}  {g}" for g, n in self.threads.most_common(12)]
        lines.append(f"Spark task threads, {t} samples, by stage (leaf first, see bench/tools/jfr_top.py):")
        lines += [f"  {pct(n, t)}  {n:6d}  {g}" for g, n in self.stages.most_common()]
        lines.append("task threads, inclusive (a frame anywhere on the stack):")
        lines += [f"  {pct(self.markers[k], t)}  {self.markers[k]:6d}  {k}" for k, _ in MARKERS]
        lines.append(f"task threads, top {top} self frames:")
        lines += [f"  {pct(n, t)}  {n:6d}  {g}" for g, n in self.top_self.most_common(top)]
        lines.append("task threads, self time by package:")
        lines += [f"  {pct(n, t)}  {n:6d}  {g}" for g, n in self.top_packages.most_common(15)]
        return "\n".join(lines)


def profile(samples: list[Sample]) -> Profile:
    tasks = [s for s in samples if is_task(s)]
    markers: Counter = Counter()
    for s in tasks:
        for name, prefix in MARKERS:
            if any(f.startswith(prefix) for f in s.frames):
                markers[name] += 1
    return Profile(len(samples), Counter(thread_group(s.thread) for s in samples), len(tasks),
                   Counter(stage(s.frames) for s in tasks), Counter(self_frame(s.frames) for s in tasks),
                   Counter(package(self_frame(s.frames)) for s in tasks), markers)


def read_recording(path: str, jfr: str = "jfr") -> list[Sample]:
    text = subprocess.run([jfr, "print", "--stack-depth", "256", "--events", "jdk.ExecutionSample", path],
                          check=True, capture_output=True, text=True).stdout
    return parse(text)


def main() -> None:
    samples = [s for path in sys.argv[1:] for s in read_recording(path)]
    print(profile(samples).render())


if __name__ == "__main__":
    main()
