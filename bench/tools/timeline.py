"""A timeline of one fresh one-record run (issue #14): seconds from the run process's start to each step of the
driver (Python), the JVM (class loading, CDS), Spark's scheduler (event log, log4j at INFO) and the Python worker.

    flock /tmp/locks/heavy .venv/bin/python -m bench.tools.timeline --runs 2 --out /tmp/timeline
    flock /tmp/locks/heavy .venv/bin/python -m bench.tools.timeline --runs 1 --xshare-on   # fails if CDS does not map
    .venv/bin/python -m bench.tools.timeline --parse /tmp/timeline/run0-tree0            # an earlier run's timeline

Each run is `bench.worker --once one` (what make bench's run-overhead figure times) in a fresh process, with:
- the driver's steps timed by wrapping functions (this module, `--child`; the code under test is not changed);
- `-Xlog:class+load`, `-Xlog:cds`, `-Xlog:startuptime` into files (wall-clock milliseconds), on top of the
  default `jvm_profile: short` options;
- Spark's event log (`spark.eventLog.enabled`: SQL execution, job, stage, task times) and log4j at INFO into a
  file (`%d{UNIX_MILLIS}`);
- the Python workers' daemon `bench.tools.timeline_daemon` (which runs the tree's own daemon after its hooks).
The logging costs a little time itself (about 1 s): compare the run's total with make bench's run overhead.
`--trees A,B` runs each source tree (a checkout with this tool) in turn, round by round.
"""

from __future__ import annotations

import argparse
import functools
import importlib.abc
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.common import process_start
from bench.config import BUCKET, ROOT

LOG4J = """\
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {dir}/spark.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{UNIX_MILLIS}} [%t] %c: %m%n
logger.spark.name = org.apache.spark
logger.spark.level = info
logger.kafka.name = org.apache.kafka
logger.kafka.level = info
logger.cc.name = org.apache.kafka.clients.consumer.ConsumerConfig
logger.cc.level = warn
logger.ac.name = org.apache.kafka.clients.admin.AdminClientConfig
logger.ac.level = warn
logger.mc.name = org.apache.kafka.common.metrics
logger.mc.level = warn
"""
# Classes whose first load marks a step (class+load log)
MARKERS = {
    "org.apache.spark.deploy.SparkSubmit": "JVM: SparkSubmit loaded",
    "org.apache.spark.SparkContext": "JVM: SparkContext class loaded",
    "org.apache.spark.sql.SparkSession": "JVM: SparkSession class loaded",
    "org.apache.spark.sql.catalyst.analysis.Analyzer": "JVM: Analyzer loaded (first SQL analysis)",
    "org.apache.spark.sql.kafka010.KafkaSourceProvider": "JVM: Kafka source provider loaded",
    "org.apache.kafka.clients.admin.KafkaAdminClient": "JVM: Kafka admin client loaded (driver offsets)",
    "org.apache.kafka.clients.consumer.KafkaConsumer": "JVM: KafkaConsumer loaded",
    "org.codehaus.janino.Compiler": "JVM: Janino compiler loaded (first codegen)",
    "org.apache.spark.scheduler.DAGScheduler": "JVM: DAGScheduler loaded",
    "org.apache.spark.api.python.PythonWorkerFactory": "JVM: PythonWorkerFactory loaded",
    "org.apache.spark.sql.execution.arrow.ArrowWriter": "JVM: ArrowWriter loaded",
}


# ---------------------------------------------------------------- child: one run with the driver's steps timed

EVENTS: list[dict[str, Any]] = []
_lock = threading.Lock()


def _ev(name: str) -> None:
    with _lock:
        EVENTS.append({"t": time.time(), "event": name, "thread": threading.current_thread().name})


def _wrap(owner: Any, attr: str, label: str) -> None:
    fn = getattr(owner, attr)

    @functools.wraps(fn)
    def timed(*a, **kw):
        _ev(f"{label} start")
        try:
            return fn(*a, **kw)
        finally:
            _ev(f"{label} end")

    setattr(owner, attr, timed)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Times the import of some modules and patches others right after they are imported, so that the child
    imports nothing earlier than the run itself would (pyspark is imported when the session starts)."""

    def __init__(self, patches: dict[str, Any], timed: set[str]) -> None:
        self.patches, self.timed, self.busy = patches, timed, False

    def find_spec(self, name, path, target=None):
        if self.busy or (name not in self.patches and name not in self.timed):
            return None
        self.busy = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.busy = False
        if spec is None or spec.loader is None:
            return spec
        exec_module, patch = spec.loader.exec_module, self.patches.get(name)
        timed = name in self.timed

        def exec_and_patch(module):
            if timed:
                _ev(f"import {name} start")
            exec_module(module)
            if timed:
                _ev(f"import {name} end")
            if patch:
                patch(module)

        spec.loader.exec_module = exec_and_patch
        return spec


def _child(stack: dict[str, Any], out: Path) -> None:
    t_imports = time.time()
    import dagster as dg

    from bench.worker import KafkaResource, S3Resource, SparkResource, Worker, jvm_pid
    from bench.worker import archive_mod as window

    assert "pyspark" not in sys.modules, "the bench worker imports pyspark before the run: the timeline would hide it"
    EVENTS.append({"t": t_imports, "event": "child: bench imports start", "thread": "main"})
    _ev("child: bench imports end")
    sys.meta_path.insert(0, _AfterImport({
        "pyspark.core.context": lambda m: (
            _wrap(m, "launch_gateway", "pyspark: launch_gateway (spark-submit, JVM, Py4J)"),
            _wrap(m.SparkContext, "_do_init", "pyspark: SparkContext init")),
        "pyspark.sql.session": lambda m: _wrap(m.SparkSession.Builder, "getOrCreate",
                                               "pyspark: SparkSession getOrCreate"),
        "pyspark.sql.classic.dataframe": lambda m: _wrap(m.DataFrame, "collect",
                                                         "pyspark: collect (plan, job, result)"),
        "s3_archive.archive.driver.spark_job": lambda m: (_wrap(m, "read_slices", "write: read_slices (DataFrame)"),
                                               _wrap(m, "write_frame", "write: write_frame (analysis)")),
    }, {"pyspark", "dagster_pyspark", "pyarrow", "s3_archive.archive.driver.spark_job"}))
    _wrap(dg, "materialize", "dg.materialize")
    _wrap(S3Resource, "get_client", "asset: S3 client")
    _wrap(KafkaResource, "partitions", "Kafka: partitions (metadata)")
    _wrap(KafkaResource, "offsets", "Kafka: offsets (driver, librdkafka)")
    _wrap(SparkResource, "session", "SparkResource.session")
    _wrap(window, "run_manifests", "archive: manifest listing (the bucket check)")
    _wrap(window, "_committed", "archive: manifest lookup")
    _wrap(window, "_write", "archive: _write (the Spark job)")
    _wrap(window, "open_uploads", "archive: open_uploads")
    _wrap(window, "_commit_one", "archive: commit")
    res = Worker(stack).cmd_one(one_topic="one", prefix=f"tl-{time.time():.0f}/")
    pid = jvm_pid()
    jvm = {"pid": pid, "start": process_start(pid)} if pid else {}
    from pyspark.sql import SparkSession

    SparkSession._instantiatedSession.stop()  # flushes the event log
    (out / "driver.json").write_text(json.dumps({"process_start": process_start(), "events": EVENTS, "jvm": jvm,
                                                 "result": {k: v for k, v in res.items() if k != "java_options"},
                                                 "java_options": res.get("java_options", "")}))


# ---------------------------------------------------------------- parent: stack, runs, the merged timeline


def _jvm_extra(d: Path, xshare_on: bool) -> str:
    (d / "log4j2.properties").write_text(LOG4J.format(dir=d))
    opts = [f"-Dlog4j2.configurationFile=file:{d}/log4j2.properties",
            f"-Xlog:class+load=info:file={d}/classload.log:timemillis,uptimemillis",
            f"-Xlog:cds=info,class+path=info:file={d}/cds.log:timemillis,uptimemillis",
            f"-Xlog:startuptime=info:file={d}/startup.log:timemillis,uptimemillis",
            f"-Xlog:gc=info,safepoint=info:file={d}/gc.log:timemillis,uptimemillis"]
    if xshare_on:
        opts.append("-Xshare:on")
    return " ".join(opts)


def run_once(tree: Path, stack: dict[str, Any], d: Path, xshare_on: bool) -> None:
    from bench.under_test import driver_java_options, paths

    d.mkdir(parents=True)
    (d / "events").mkdir()
    default = driver_java_options("short", [str(j) for j in paths.spark_jars()])
    conf = {"spark.driver.extraJavaOptions": f"{default} {_jvm_extra(d, xshare_on)}",
            "spark.eventLog.enabled": "true", "spark.eventLog.dir": f"file://{d}/events",
            "spark.eventLog.compress": "false", "spark.python.daemon.module": "bench.tools.timeline_daemon"}
    env = os.environ | {"PYTHONPATH": str(tree), "S3_ARCHIVE_STATE_DIR": str(d / "state"),
                        "S3A_TIMELINE_DIR": str(d)}
    with (d / "stderr.log").open("wb") as err:
        p = subprocess.run([sys.executable, "-m", "bench.tools.timeline", "--child", json.dumps(stack | {
            "spark_conf": conf}), str(d)], cwd=tree, env=env, stdout=err, stderr=err, timeout=900)
    if p.returncode:
        raise RuntimeError(f"the timeline run in {tree} exited with {p.returncode}; see {d}/stderr.log")


def _classload(d: Path) -> tuple[list[tuple[float, str]], dict[str, Any]]:
    """Marker events and counts of the class+load log: where each class came from."""
    events: list[tuple[float, str]] = []
    sources: Counter[str] = Counter()
    seen: set[str] = set()
    line_re = re.compile(r"\[(\d+)ms\]\[(\d+)ms\].*? (\S+) source: (.*)$")
    first = last = None
    for line in (d / "classload.log").read_text(errors="replace").splitlines():
        m = line_re.match(line)
        if not m:
            continue
        t, name, src = int(m[1]) / 1000, m[3], m[4]
        if first is None:
            first = t
            events.append((t - int(m[2]) / 1000, "JVM: the driver's java started (-Xlog uptime; after exec)"))
        last = t
        kind = ("CDS dynamic archive (top)" if "shared objects file (top)" in src
                else "CDS base archive" if "shared objects file" in src
                else "jar" if src.startswith(("jar:", "file:")) and ".jar" in src
                else "jrt (JDK modules)" if src.startswith("jrt:")
                else "generated" if src.startswith("__") or "Lambda" in name or "$$" in name
                else src.split(" ")[0][:40])
        sources[kind] += 1
        if name in MARKERS and name not in seen:
            seen.add(name)
            events.append((t, MARKERS[name]))
        if name.startswith("org.apache.spark.sql.catalyst.expressions.GeneratedClass") and "codegen" not in seen:
            seen.add("codegen")
            events.append((t, "JVM: first generated class defined"))
    if first is not None:
        events.append((first, "JVM: first class loaded"))
        events.append((last, "JVM: last class loaded"))
    return events, {"classes": sum(sources.values()), "by_source": dict(sources.most_common())}


def _eventlog(d: Path) -> list[tuple[float, str]]:
    files = [f for f in (d / "events").iterdir() if f.is_file()]
    out: list[tuple[float, str]] = []
    for f in files:
        for line in f.read_text().splitlines():
            e = json.loads(line)
            kind = e["Event"].rsplit(".", 1)[-1]
            if kind == "SparkListenerApplicationStart":
                out.append((e["Timestamp"] / 1000, "Spark: application start"))
            elif kind == "SparkListenerExecutorAdded":
                out.append((e["Timestamp"] / 1000, "Spark: executor added"))
            elif kind == "SparkListenerSQLExecutionStart":
                out.append((e["time"] / 1000, f"Spark: SQL execution {e['executionId']} start"))
            elif kind == "SparkListenerSQLExecutionEnd":
                out.append((e["time"] / 1000, f"Spark: SQL execution {e['executionId']} end"))
            elif kind == "SparkListenerJobStart":
                out.append((e["Submission Time"] / 1000, f"Spark: job {e['Job ID']} submitted"))
            elif kind == "SparkListenerJobEnd":
                out.append((e["Completion Time"] / 1000, f"Spark: job {e['Job ID']} end"))
            elif kind == "SparkListenerStageSubmitted":
                out.append((e["Stage Info"]["Submission Time"] / 1000,
                            f"Spark: stage {e['Stage Info']['Stage ID']} submitted"))
            elif kind == "SparkListenerTaskStart":
                out.append((e["Task Info"]["Launch Time"] / 1000, f"Spark: task {e['Task Info']['Task ID']} start"))
            elif kind == "SparkListenerTaskEnd":
                m = e.get("Task Metrics") or {}
                out.append((e["Task Info"]["Finish Time"] / 1000,
                            f"Spark: task {e['Task Info']['Task ID']} end (deserialize "
                            f"{m.get('Executor Deserialize Time')} ms, run {m.get('Executor Run Time')} ms, "
                            f"GC {m.get('JVM GC Time')} ms)"))
    return out


SPARK_LOG = [  # (regex on a log4j line, label): first match only
    (r"SparkContext: Running Spark version", "log4j: SparkContext starting"),
    (r"Successfully started service 'sparkDriver'", "log4j: RPC env up"),
    (r"BlockManager: Initialized BlockManager|BlockManagerMaster: Registered BlockManager",
     "log4j: BlockManager registered"),
    (r"SharedState: Warehouse path", "log4j: SharedState (first SQL use)"),
    (r"AppInfoParser: Kafka version", "log4j: first Kafka client created"),
    (r"CodeGenerator: Code generated in", "log4j: first codegen compiled"),
    (r"DAGScheduler: Got job", "log4j: DAGScheduler got job"),
    (r"Executor: Running task", "log4j: executor running task"),
    (r"Executor: Finished task", "log4j: executor finished task"),
    (r"PythonWorkerFactory|Python daemon", "log4j: Python worker factory"),
    (r"PythonRunner: Times:", "log4j: PythonRunner times"),
]


def _spark_log(d: Path) -> tuple[list[tuple[float, str]], list[str], float]:
    out: list[tuple[float, str]] = []
    found: set[str] = set()
    codegen: list[str] = []
    codegen_ms = 0.0
    for line in (d / "spark.log").read_text(errors="replace").splitlines():
        m = re.match(r"(\d{13}) (.*)$", line)
        if not m:
            continue
        t, text = int(m[1]) / 1000, m[2]
        c = re.search(r"Code generated in ([\d.]+) ms", text)
        if c:
            codegen_ms += float(c[1])
            codegen.append(f"{t:.3f} {text[-60:]}")
        if "AppInfoParser: Kafka version" in text or "Times:" in text or "Code generated" in text:
            out.append((t, "log4j: " + text.split(": ", 1)[-1][:90]))
            continue
        for rx, label in SPARK_LOG:
            if label not in found and re.search(rx, text):
                found.add(label)
                out.append((t, label + (f" ({text.split(': ', 1)[-1][:80]})" if "Times" in label else "")))
    return out, codegen, codegen_ms


def _workers(d: Path) -> list[tuple[float, str]]:
    out: list[tuple[float, str]] = []
    for f in sorted(d.glob("worker-*.jsonl")):
        for line in f.read_text().splitlines():
            e = json.loads(line)
            if "t_process" in e:
                out.append((e["t_process"], f"py[{e['pid']}] daemon: python process started (/proc, ±10 ms)"))
            out.append((e["t"], f"py[{e['pid']}] {e['event']}"))
    return out


def timeline(d: Path) -> dict[str, Any]:
    drv = json.loads((d / "driver.json").read_text())
    t0 = drv["process_start"]
    rows: list[tuple[float, str]] = [(t0, "run process started (/proc, ±10 ms)")]
    rows += [(e["t"], f"driver: {e['event']}" + (f" [{e['thread']}]" if e["thread"] != "MainThread" and
                                                  e["thread"] != "main" else "")) for e in drv["events"]]
    if drv.get("jvm"):
        rows.append((drv["jvm"]["start"], "spark-submit process started (/proc, ±10 ms; java execs into it)"))
    cl, counts = _classload(d)
    rows += cl
    rows += _eventlog(d)
    sl, codegen, codegen_ms = _spark_log(d)
    rows += sl
    rows += _workers(d)
    rows.sort()
    cds = (d / "cds.log").read_text(errors="replace").splitlines() if (d / "cds.log").exists() else []
    gc = (d / "gc.log").read_text(errors="replace") if (d / "gc.log").exists() else ""
    pauses = [float(ms) for ms in re.findall(r"Pause.* ([\d.]+)ms$", gc, re.M)]
    return {"dir": str(d), "result": drv["result"], "java_options": drv["java_options"],
            "timeline": [(round(t - t0, 3), label) for t, label in rows], "classes": counts,
            "codegen_compiles": len(codegen), "codegen_ms": round(codegen_ms, 1),
            "gc_pauses": len(pauses), "gc_pause_ms": round(sum(pauses), 1),
            "cds_log": [ln for ln in cds if re.search(r"(?i)open|mapped|archive|error|fail|mismatch|disab", ln)][:12]}


def _print(tl: dict[str, Any], tree: str) -> None:
    print(json.dumps({"tree": tree, "dir": tl["dir"], "run_s": round(tl["result"]["seconds"], 2),
                      "process_to_done_s": round(tl["result"]["process_to_done_s"], 2), "classes": tl["classes"],
                      "codegen_compiles": tl["codegen_compiles"], "codegen_ms": tl["codegen_ms"],
                      "gc_pauses": tl["gc_pauses"], "gc_pause_ms": tl["gc_pause_ms"],
                      "cds_log": tl["cds_log"]}), flush=True)
    print("\n".join(f"  {t:7.3f}  {label}" for t, label in tl["timeline"]), flush=True)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(json.loads(sys.argv[2]), Path(sys.argv[3]))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1, help="fresh runs per tree")
    ap.add_argument("--trees", default=str(ROOT), help="source trees, comma-separated (runs interleaved)")
    ap.add_argument("--out", default="", help="directory for the logs (default: a new temp directory)")
    ap.add_argument("--xshare-on", action="store_true", help="-Xshare:on: the JVM fails if CDS cannot map")
    ap.add_argument("--parse", default="", help="only print the timeline of an earlier run's directory")
    args = ap.parse_args()
    if args.parse:
        _print(timeline(Path(args.parse)), "")
        return
    from bench import workload as wl
    from bench.under_test import KafkaResource, temporary_stack

    out = Path(args.out or tempfile.mkdtemp(prefix="timeline-"))
    out.mkdir(parents=True, exist_ok=True)
    trees = [Path(t).resolve() for t in args.trees.split(",")]
    with temporary_stack("bench-timeline-", BUCKET, remove=True) as (broker, moto, _root):
        kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers)
        stack = {"bootstrap_servers": broker.bootstrap_servers, "s3_endpoint_url": moto.endpoint_url,
                 "bucket": BUCKET, "jvm_profile": "short"}
        wl.create_topic(kafka, "one")
        wl.produce(kafka, "one", 2 * wl.PARTITIONS)
        for i in range(args.runs):
            for k, tree in enumerate(trees):
                d = out / f"run{i}-tree{k}"
                run_once(tree, stack, d, args.xshare_on)
                try:
                    tl = timeline(d)
                except Exception as e:  # the logs stay: `--parse DIR` once this is mended
                    print(json.dumps({"tree": str(tree), "dir": str(d), "parse_error": repr(e)}), flush=True)
                    continue
                (d / "timeline.json").write_text(json.dumps(tl, indent=1))
                _print(tl, str(tree))


if __name__ == "__main__":
    main()
