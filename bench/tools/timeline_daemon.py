"""PySpark's worker daemon with timestamps, for bench/tools/timeline.py: when does a fresh run's Python worker start,
unpickle its task (which imports the write path), see its first Arrow batch, answer, and call S3? Not run by hand:
the timeline sets it as `spark.python.daemon.module` of the run it times.

Stamps the daemon's own start, each forked worker's start, the task's command unpickled, the first Arrow batch in,
the first result out, the task's end; S3 calls only in a worker that had botocore's client module imported when its
task was unpickled (a reused one: the first task imports boto3 later, so its PUT is not stamped). One JSON line per
event in `$S3A_TIMELINE_DIR/worker-<pid>.jsonl`, wall-clock seconds.

Then it runs the tree's own daemon (`s3_archive.io.pyspark_daemon.main`), so whatever that does before it forks
is measured too. It imports nothing of bench (it runs inside PySpark's daemon, before any task).
"""

from __future__ import annotations

import json
import os
import sys
import time

_DIR = os.environ.get("S3A_TIMELINE_DIR", "")


def event(name: str, **extra) -> None:
    if _DIR:
        with open(os.path.join(_DIR, f"worker-{os.getpid()}.jsonl"), "a") as f:
            f.write(json.dumps({"t": time.time(), "event": name, "pid": os.getpid()} | extra) + "\n")


def _process_start() -> float:  # as bench.common.process_start (this process imports nothing of bench)
    ticks = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19])
    boot = next(float(ln.split()[1]) for ln in open("/proc/stat") if ln.startswith("btime"))
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def _first(it, name: str):
    first = True
    for x in it:
        if first:
            event(name)
            first = False
        yield x


def _hook_worker() -> None:
    import pyspark.worker as pw

    read_udfs = pw.read_udfs

    def timed_read_udfs(*a, **kw):
        event("task command: unpickle start (imports the write path)")
        func, profiler, deserializer, serializer = read_udfs(*a, **kw)
        event("task command: unpickled", modules=len(sys.modules))
        _hook_botocore()

        def func_timed(split_index, iterator):
            event("task: process start")
            out = func(split_index, _first(iterator, "task: first Arrow batch in"))
            yield from _first(out, "task: first result batch out")
            event("task: process end")

        return func_timed, profiler, deserializer, serializer

    pw.read_udfs = timed_read_udfs


_botocore_hooked = False


def _hook_botocore() -> None:
    global _botocore_hooked
    if _botocore_hooked or "botocore.client" not in sys.modules:
        return
    from botocore.client import BaseClient

    call = BaseClient._make_api_call

    def timed(self, operation_name, api_params):
        event(f"S3 {operation_name} start")
        try:
            return call(self, operation_name, api_params)
        finally:
            event(f"S3 {operation_name} end")

    BaseClient._make_api_call = timed
    _botocore_hooked = True


def main() -> None:
    event("daemon: process start", t_process=_process_start())
    from s3_archive.io import pyspark_daemon

    for p in pyspark_daemon.redundant_paths(sys.path, os.environ.get("SPARK_HOME")):
        sys.path.remove(p)
        sys.path_importer_cache.pop(p, None)
    _hook_worker()
    import pyspark.daemon as pd

    worker = pd.worker

    def timed_worker(sock, authenticated):
        event("worker: takes a task (forked, or reused)")
        return worker(sock, authenticated)

    pd.worker = timed_worker
    event("daemon: hooks in, starting the tree's daemon")
    pyspark_daemon.main()


if __name__ == "__main__":
    main()
