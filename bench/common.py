"""Helpers the suite's areas and the tools share: progress lines, the machine and the work competing with it, the one
memory sampler (/proc VmRSS / VmHWM), the client of the Spark worker process (bench/worker.py), and `Setup`, what
the areas of one size's run share.

Imports nothing heavy at the top: bench/worker.py imports it in the fresh processes whose start is timed.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.config import HEAVY_LOCK, ROOT

T0 = time.monotonic()
RESULT = "@@RESULT "  # the worker's answer: one stdout line, this prefix and JSON
LOG_TAIL_LINES = 40


def say(msg: str) -> None:
    print(f"[bench {time.monotonic() - T0:7.1f}s] {msg}", flush=True)


# --------------------------------------------------------------------------------------------------------------
# /proc


def read_text(path: str | Path) -> str:
    """A file's text, or "" when it cannot be read (a process gone, a file /proc does not have here)."""
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def status_kb(pid: int | str, field: str) -> int:
    """A `kB` field of /proc/<pid>/status (VmRSS, VmHWM = peak resident set size); 0 if the process is gone."""
    for line in read_text(f"/proc/{pid}/status").splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def descendants(root: int) -> list[int]:
    """The processes below `root` (its children, theirs, ...), from the PPid of every process in /proc."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            ppid = status_kb(d.name, "PPid")  # not a kB field, but a number in the same place
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [root]
    while todo:
        kids = children.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


class RssSampler:
    """Samples a process's resident set every `every_s` (VmHWM is the lifetime peak; the sampled max is this span's).
    `pid()` is asked at every sample: the process may start during the span."""

    def __init__(self, pid: Callable[[], int | None], every_s: float = 0.2) -> None:
        self.pid, self.every_s = pid, every_s
        self.max_kb = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            pid = self.pid()
            if pid:
                self.max_kb = max(self.max_kb, status_kb(pid, "VmRSS"))
            self._stop.wait(self.every_s)

    def __enter__(self) -> RssSampler:
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join()


def process_start(pid: int | str = "self") -> float:
    """A process's start on the wall clock (from /proc: its start in clock ticks after boot)."""
    ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    boot = next(float(ln.split()[1]) for ln in Path("/proc/stat").read_text().splitlines() if ln.startswith("btime"))
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def _ppid(pid: str) -> int:
    stat = read_text(f"/proc/{pid}/stat")
    return int(stat.rsplit(")", 1)[1].split()[1]) if stat else 0


# --------------------------------------------------------------------------------------------------------------
# the machine


def load_average() -> str:
    return " ".join(read_text("/proc/loadavg").split()[:3])


def other_work() -> str:
    """Processes that this benchmark did not start and that compete for the 2 cores (other workers' tests)."""
    me = os.getpid()
    procs = [d.name for d in Path("/proc").iterdir() if d.name.isdigit()]
    parent = {int(p): _ppid(p) for p in procs}

    def ours(pid: int) -> bool:
        for _ in range(64):
            if pid == me:
                return True
            if pid <= 1:
                return False
            pid = parent.get(pid, 0)
        return False

    counts = {"pytest": 0, "kafka.Kafka": 0, "org.apache.spark": 0, "moto.server": 0, "bench/": 0, "postgres": 0,
              "dagster": 0}
    for p in procs:
        if ours(int(p)):
            continue
        cmd = read_text(f"/proc/{p}/cmdline").replace("\0", " ")
        for k in counts:
            if k in cmd:
                counts[k] += 1
    busy = {k: v for k, v in counts.items() if v}
    if not busy:
        return "no other test processes were seen running"
    return ("other work was running on the machine (processes not started by this benchmark: "
            + ", ".join(f"{v} × {k}" for k, v in busy.items()) + "); figures are noisier for it")


def heavy_lock(lock: str = HEAVY_LOCK) -> str:
    """Whether this process or one of its ancestors holds the machine's heavy-run lock (`flock`), from /proc/locks:
    a figure taken while holding it had no other heavy run (broker, Spark, benchmark) beside it."""
    try:
        inode = os.stat(lock).st_ino
    except OSError:
        return f"no {lock} on this machine"
    ancestors, pid = set(), os.getpid()
    for _ in range(64):
        ancestors.add(pid)
        if pid <= 1:
            break
        pid = _ppid(str(pid))
    for line in read_text("/proc/locks").splitlines():
        f = line.split()
        if len(f) > 5 and f[1] == "FLOCK" and f[5].rsplit(":", 1)[-1] == str(inode) and int(f[4]) in ancestors:
            return f"held {lock} (flock) for the whole run: no other heavy run beside it"
    return f"did NOT hold {lock}: other heavy runs may have run beside it"


def machine() -> dict[str, Any]:
    """The machine at the start of a run: CPU, memory, software, load, other work, the heavy lock."""
    cpu = next((ln.split(":", 1)[1].strip() for ln in read_text("/proc/cpuinfo").splitlines()
                if ln.startswith("model name")), platform.processor() or "unknown")
    mem_kb = next((int(ln.split()[1]) for ln in read_text("/proc/meminfo").splitlines()
                   if ln.startswith("MemTotal")), 0)
    nproc = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    import confluent_kafka
    import dagster
    import pyarrow
    import pyspark

    from bench.under_test import SparkResource

    master = SparkResource().local_master()  # what the benchmark's sessions get from the default `local[*]`
    return {"cpu": cpu, "nproc": int(nproc or 0), "mem_gb": mem_kb / 1024 / 1024,
            "kernel": f"Linux {platform.release()}", "load_start": load_average(),
            "other_work": other_work(), "heavy_lock": heavy_lock(),
            "software": f"Python {platform.python_version()}, {java}, pyspark {pyspark.__version__} (local[*] = {master}), "
                        f"dagster {dagster.__version__}, confluent-kafka {confluent_kafka.version()[0]} "
                        f"(librdkafka {confluent_kafka.libversion()[0]}), pyarrow {pyarrow.__version__}, "
                        "Kafka 4.1.1 broker (KRaft), moto server"}


def machine_at_end(mach: dict[str, Any]) -> None:
    """Adds the load average and the other work at the end of the run to `machine()`'s answer."""
    mach["load_end"] = load_average()
    mach["other_work_end"] = other_work()


# --------------------------------------------------------------------------------------------------------------
# the Spark worker's client


def keep_log(log: Path, kept: Path | None) -> None:
    """A worker's log (its stderr: the JVM's log included) copied to `kept` and its tail printed, so that a failure
    stays readable after the run's temporary directory is removed."""
    if kept is None:
        return
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(log, kept)
        tail = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
    except OSError as e:
        say(f"could not keep the worker's log {log}: {e}")
        return
    say(f"the worker's log is kept at {kept}; its last {len(tail)} lines:\n" + "\n".join(tail))


# The commands whose records pass through Spark's JVM (see warm_profile)
JVM_COMMANDS = ("spark_read", "streaming")


def warm_profile(cmd: dict[str, Any]) -> str:
    """The `jvm_profile` of the warm session a command runs in: the JIT docs/performance.md ("Which JIT a session
    kept across runs wants") measures faster for whoever handles its records. `long` (C2) where the records pass
    through Spark's JVM: `read_path: spark`, the table format (Spark writes its data files), Spark's own read and
    Structured Streaming; else `short` (C1 only, SparkResource's default), where the write tasks read and write
    and the JVM only schedules them: a deployment's continuous archive or kept session on the default read path."""
    if cmd.get("read_path") == "spark" or cmd.get("format") == "iceberg" or cmd.get("cmd") in JVM_COMMANDS:
        return "long"
    return "short"


class WorkerProcess:
    """One long-lived `bench.worker` process: its Spark session stays warm between commands."""

    def __init__(self, stack: dict[str, Any], log: Path, kept_log: Path | None) -> None:
        self.log_path, self.kept_log = log, kept_log
        self.log = log.open("ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.worker", json.dumps(stack)], cwd=ROOT,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True)

    def call(self, **cmd: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps(cmd) + "\n")
            self.proc.stdin.flush()
            for line in self.proc.stdout:
                if line.startswith(RESULT):
                    return _checked(json.loads(line[len(RESULT):]), cmd)
            raise RuntimeError(f"the Spark worker exited during {cmd['cmd']} (see {self.kept_log or self.log.name})")
        except Exception:
            self.log.flush()
            keep_log(self.log_path, self.kept_log)
            raise

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"cmd": "stop"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(120)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class SparkWorker:
    """The warm Spark sessions of a benchmark: one long-lived `bench.worker` process per `jvm_profile` a command
    wants (`warm_profile`), each started at its first command; a stack that names `jvm_profile` runs every command
    in that one profile (`warm_up`: one archive on each read path given, not counted). Logs: `log` (and `kept_log`,
    where a log is copied when a command fails; None: not kept) for the first profile started, the others beside
    it with the profile in their name."""

    def __init__(self, stack: dict[str, Any], log: Path, kept_log: Path | None = None) -> None:
        self.stack, self.log_path, self.kept_log = stack, log, kept_log
        self.procs: dict[str, WorkerProcess] = {}

    def _process(self, profile: str) -> WorkerProcess:
        if profile not in self.procs:
            log, kept = self.log_path, self.kept_log
            if self.procs:
                log = log.with_name(f"{log.stem}-{profile}{log.suffix}")
                kept = kept.with_name(f"{kept.stem}-{profile}{kept.suffix}") if kept is not None else None
            self.procs[profile] = WorkerProcess(self.stack | {"jvm_profile": profile}, log, kept)
        return self.procs[profile]

    def call(self, **cmd: Any) -> dict[str, Any]:
        return self._process(self.stack.get("jvm_profile") or warm_profile(cmd)).call(**cmd)

    def warm_up(self, topic: str, prefix: str, windows: list[list[int]], read_paths: tuple[str, ...]) -> None:
        """One archive of `windows` on each read path (into `prefix` + the path), in the session its profile
        picks, not counted: the session's start, its first plans and Python workers, and the JIT's first compiles
        of a run of that size (a one-window warm-up left the first measured run 1.6x slower than the next)."""
        for path in read_paths:
            self.call(cmd="archive", topic=topic, prefix=f"{prefix}{path}/", windows=windows, read_path=path)

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.stop()
        self.procs.clear()


def _checked(out: dict[str, Any], cmd: dict[str, Any]) -> dict[str, Any]:
    if not out.get("ok"):
        raise RuntimeError(f"worker command {cmd['cmd']} failed: {out.get('error')}\n{out.get('traceback', '')}")
    return out


def once(stack: dict[str, Any], log: Path, kept_log: Path | None = None, **cmd: Any) -> dict[str, Any]:
    """One command in a fresh worker process; adds the process's wall time (Python start to exit). On a failure
    the log is copied to `kept_log` (see keep_log)."""
    t = time.monotonic()
    with log.open("ab") as err:
        p = subprocess.run([sys.executable, "-m", "bench.worker", json.dumps(stack), "--once", json.dumps(cmd)],
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True, timeout=3600)
    wall = time.monotonic() - t
    try:
        for line in p.stdout.splitlines():
            if line.startswith(RESULT):
                return _checked(json.loads(line[len(RESULT):]), cmd) | {"process_s": wall}
        raise RuntimeError(f"the Spark worker for {cmd['cmd']} exited with {p.returncode} and no result (see "
                           f"{kept_log or log})")
    except Exception:
        keep_log(log, kept_log)
        raise


def moto_requests(log: Path) -> int:
    """HTTP requests moto has logged so far (one line each)."""
    try:
        return sum("HTTP/1.1" in ln for ln in log.read_text(errors="replace").splitlines())
    except OSError:
        return 0


# --------------------------------------------------------------------------------------------------------------
# one size's run


@dataclass
class Setup:
    """What the areas of one size's run share: the worker's connection settings (`stack`), the clients, the
    workload and its windows, and where the workers' logs go (`kept`: a failed worker's log is copied there)."""

    stack: dict[str, Any]
    kafka: Any  # KafkaResource
    s3: Any  # a boto3 S3 client
    logs: Path
    kept: Path
    moto_log: Path
    records: int
    payload: int
    ends: dict[int, int]
    windows: list[Any]  # OffsetWindow
    per_partition: int
    window_records: int

    @property
    def wlist(self) -> list[list[int]]:
        """The windows as the worker's commands take them."""
        return [[w.partition, w.start, w.end] for w in self.windows]

    def fresh(self, log: str, settings: dict[str, Any] | None = None, **cmd: Any) -> dict[str, Any]:
        """One worker command in a fresh process, with `settings` over the stack's (its log: logs/<log>)."""
        return once(self.stack | (settings or {}), self.logs / log, self.kept / log, **cmd)
