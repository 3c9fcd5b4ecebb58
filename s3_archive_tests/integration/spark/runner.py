"""One archive run in a fresh process, as a deployed run is: `python -m s3_archive_tests.integration.spark.runner`
reads a job as JSON on stdin (services, SparkResource fields, archive config, topic, windows), materializes the
archive asset with `dg.materialize`, and prints one line `@@RESULT <json>`.

A fresh process because one process has one kind of Spark: the test session's own Spark is a classic local[2]
SparkContext, and a Spark Connect session switches pyspark's functions to Connect process-wide (and a second
SparkContext with another master is refused). No secret is on the command line: the job comes on stdin.

Several jobs can run at once (start_job, then job_result): with a `barrier`, each starts its Spark session, says
so (touches `ready`) and waits for the file `go` before its run, so that the runs' Spark jobs overlap.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from s3_archive_tests.integration.process_list import CommandLineWatch

RESULT = "@@RESULT "


@dataclass
class RunningJob:
    """A job started in a fresh process (start_job); its output goes to files, so nothing blocks on a full pipe."""

    proc: subprocess.Popen
    stdout: Any
    stderr: Any


def start_job(job: dict[str, Any]) -> RunningJob:
    """Start `job` in a fresh Python process (this one's interpreter and environment); job_result waits for it."""
    out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    proc = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=out, stderr=err,
                            text=True, env=os.environ | {"PYTHONUNBUFFERED": "1"})
    proc.stdin.write(json.dumps(job))
    proc.stdin.close()
    return RunningJob(proc, out, err)


def job_result(job: RunningJob, timeout: float = 300.0) -> dict[str, Any]:
    """The result of a started job, or an AssertionError with the process's output (killed after `timeout`)."""
    try:
        job.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        job.proc.kill()
        job.proc.wait()
    outputs = []
    for f in (job.stdout, job.stderr):
        f.seek(0)
        outputs.append(f.read())
        f.close()
    stdout, stderr = outputs
    lines = [ln for ln in stdout.splitlines() if ln.startswith(RESULT)]
    assert job.proc.returncode == 0 and lines, (f"runner exited {job.proc.returncode}\n--- stdout\n"
                                                f"{stdout[-4000:]}\n--- stderr\n{stderr[-8000:]}")
    return json.loads(lines[-1].removeprefix(RESULT))


def run_job(job: dict[str, Any], timeout: float = 300.0, secrets: tuple[str, ...] = ()) -> dict[str, Any]:
    """Run `job` in a fresh Python process (start_job) and wait for its result. With `secrets`, every process's
    command line is read while it runs: the result's `process_list` has the leaks (any command line holding a
    secret), the Spark JVMs seen, and every command line seen (pid -> command line)."""
    watch = CommandLineWatch(list(secrets)) if secrets else None
    with watch or nullcontext():
        out = job_result(start_job(job), timeout)
    if watch is not None:
        out["process_list"] = {"leaks": list(watch.leaks.values()),
                               "spark_jvms": watch.seen_with("org.apache.spark."), "seen": dict(watch.seen)}
    return out


def archive_spec(services: Any, spark: dict[str, Any], cfg: Any, topic: str, windows: list[Any],
                 probe: bool = False, session_first: bool = False, kafka: dict[str, Any] | None = None,
                 barrier: dict[str, str] | None = None) -> dict[str, Any]:
    """The job of one run of the archive asset over `windows` (OffsetWindows) with `SparkResource(**spark)` and
    `KafkaResource(**kafka)` (default: the services' broker); with `probe`, also where the session's tasks run
    (probe_executors); with `session_first`, the session is started (and timed) before the run; with `barrier`
    ({"ready": path, "go": path}), the session is started, `ready` touched and the run waits for `go`."""
    return {"services": {"bootstrap_servers": services.bootstrap_servers,
                         "s3_endpoint_url": services.s3_endpoint_url, "bucket": services.bucket},
            "kafka": kafka or {"bootstrap_servers": services.bootstrap_servers},
            "spark": spark, "config": cfg.model_dump(mode="json", exclude_unset=True), "topic": topic,
            "windows": [[w.partition, w.start, w.end] for w in windows], "probe": probe,
            "session_first": session_first, "barrier": barrier}


def archive_job(services: Any, spark: dict[str, Any], cfg: Any, topic: str, windows: list[Any],
                probe: bool = False, session_first: bool = False, secrets: tuple[str, ...] = (),
                kafka: dict[str, Any] | None = None, rerun_without_manifests: bool = False) -> dict[str, Any]:
    """One run of the archive asset (archive_spec) in a fresh process; with `secrets`, the process list is watched
    (run_job); with `rerun_without_manifests`, the windows' manifests are deleted after the run (a crash after the
    commit) and a second run in the same process (same session) goes over the windows again: its windows are in
    `rerun`."""
    return run_job({**archive_spec(services, spark, cfg, topic, windows, probe, session_first, kafka),
                    "rerun_without_manifests": rerun_without_manifests},
                   secrets=secrets)


def probe_executors(session: Any) -> dict[str, Any]:
    """Where a classic session's tasks run: for each of two tasks, the JVM that runs it (the first `java`
    ancestor of the task's Python worker: its pid, parent pid, main class and classpath) and the s3_archive its
    Python imports; and the driver's JVM pid."""
    sc = session.sparkContext

    def where(_: int) -> dict[str, Any]:
        import s3_archive

        pid = os.getppid()
        while pid > 1:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = [a.decode() for a in f.read().split(b"\0") if a]
            if args and os.path.basename(args[0]) == "java":
                cp = args[args.index("-cp") + 1] if "-cp" in args else ""
                main = next((a for a in args if a.startswith("org.apache.spark.")), "")
                with open(f"/proc/{pid}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
                return {"jvm_pid": pid, "jvm_parent": parent, "jvm_main": main, "classpath": cp,
                        "python_pid": os.getpid(), "s3_archive": s3_archive.__file__}
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        return {"jvm_pid": None, "python_pid": os.getpid(), "s3_archive": s3_archive.__file__}

    return {"driver_jvm_pid": sc._jvm.java.lang.ProcessHandle.current().pid(),
            "tasks": sc.parallelize(range(2), 2).map(where).collect()}


def _wait_at_barrier(spark: Any, ready: str, go: str, timeout: float = 240.0) -> None:
    """Start the Spark session, touch `ready`, and wait until the file `go` exists."""
    spark.session()
    Path(ready).touch()
    deadline = time.monotonic() + timeout
    while not Path(go).exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"barrier: {go} did not appear within {timeout:.0f}s")
        time.sleep(0.005)


def main() -> None:
    t0 = time.monotonic()
    job = json.loads(sys.stdin.read())
    import dagster as dg

    from s3_archive.config.archive import ArchiveConfig
    from s3_archive.io.kafka import KafkaResource
    from s3_archive.io.spark import SparkResource
    from s3_archive.keys.objects import manifest_key
    from s3_archive.model.windows import OffsetWindow
    from s3_archive_tests.integration.archive_helpers import materialize, resources, window_metadata

    imported = time.monotonic() - t0
    services = SimpleNamespace(**job["services"])
    kafka = KafkaResource(**job.get("kafka") or {"bootstrap_servers": services.bootstrap_servers})
    spark = SparkResource(**job["spark"])
    cfg = ArchiveConfig.model_validate(job["config"])
    windows = [OffsetWindow(*w) for w in job["windows"]]
    instance = dg.DagsterInstance.ephemeral()
    session_s = None
    if job.get("session_first"):  # time the session's start apart from the run (for measurements)
        t = time.monotonic()
        spark.session()
        session_s = time.monotonic() - t
    if job.get("barrier"):
        _wait_at_barrier(spark, **job["barrier"])
    res = resources(services, kafka, spark)

    def run() -> dict[str, Any]:
        t, started_at = time.monotonic(), time.time()
        result = materialize(cfg, job["topic"], windows, res, instance, raise_on_error=False)
        seconds, ended_at = time.monotonic() - t, time.time()
        failures = [e.event_specific_data.error.message for e in result.all_events
                    if e.event_type_value == "STEP_FAILURE"]
        errors = [e.user_message for e in instance.all_logs(result.run_id) if e.level >= 40]
        return {"success": result.success, "failures": failures, "errors": errors, "run_s": seconds,
                "windows": window_metadata(result), "run_started_at": started_at, "run_ended_at": ended_at}

    out = {**run(), "import_s": imported, "session_s": session_s}
    if job.get("rerun_without_manifests") and out["success"]:
        client = res["s3"].get_client()
        for w in windows:
            client.delete_object(Bucket=cfg.bucket, Key=manifest_key(cfg.prefix, job["topic"], w))
        out["rerun"] = run()
    if job.get("probe"):
        out["probe"] = probe_executors(spark.session())
    print(RESULT + json.dumps(out, default=str), flush=True)


if __name__ == "__main__":
    main()
