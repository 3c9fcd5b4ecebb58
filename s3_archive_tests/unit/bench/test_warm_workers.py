"""The benchmark's warm Spark sessions (bench/common.py `SparkWorker`): each command runs in the session of the JIT a
kept session of its read path wants (`warm_profile`), one process per profile, started at its first command."""

from __future__ import annotations

import subprocess
import sys

from bench import common as bench_common

# a stand-in for `python -m bench.worker STACK`: answers each command with its own stack's profile and its PID
ECHO = """
import json, os, sys
stack = json.loads(sys.argv[-1])
for line in sys.stdin:
    cmd = json.loads(line)
    if cmd["cmd"] == "stop":
        break
    print("@@RESULT " + json.dumps({"ok": True, "profile": stack["jvm_profile"], "pid": os.getpid(), **cmd}),
          flush=True)
"""


def _echo_workers(monkeypatch) -> None:
    real = subprocess.Popen

    def popen(args, **kw):
        return real([sys.executable, "-c", ECHO, args[-1]], **kw)

    monkeypatch.setattr(bench_common.subprocess, "Popen", popen)


def test_each_command_runs_in_the_session_of_its_read_path(tmp_path, monkeypatch):
    _echo_workers(monkeypatch)
    worker = bench_common.SparkWorker({"bucket": "b"}, tmp_path / "spark-worker.log", tmp_path / "kept.log")
    try:
        default = worker.call(cmd="archive", topic="t")
        assert default["profile"] == "short"
        assert worker.call(cmd="format", format="jsonl")["pid"] == default["pid"]
        assert worker.call(cmd="decoded", decoding="avro")["pid"] == default["pid"]
        spark = worker.call(cmd="archive", topic="t", read_path="spark")
        assert spark["profile"] == "long" and spark["pid"] != default["pid"]
        for cmd in ({"cmd": "format", "format": "iceberg"}, {"cmd": "drop_table", "format": "iceberg"},
                    {"cmd": "spark_read"}, {"cmd": "streaming"}):
            assert worker.call(**cmd)["pid"] == spark["pid"], cmd
    finally:
        worker.stop()
    assert sorted(p.name for p in tmp_path.glob("spark-worker*.log")) == ["spark-worker-long.log",
                                                                            "spark-worker.log"]


def test_a_stack_that_names_a_profile_runs_every_command_in_it(tmp_path, monkeypatch):
    _echo_workers(monkeypatch)
    worker = bench_common.SparkWorker({"jvm_profile": "long"}, tmp_path / "w.log")
    try:
        outs = [worker.call(cmd="archive"), worker.call(cmd="archive", read_path="spark")]
    finally:
        worker.stop()
    assert {o["profile"] for o in outs} == {"long"} and outs[0]["pid"] == outs[1]["pid"]


def test_warm_up_archives_once_on_each_read_path(tmp_path, monkeypatch):
    _echo_workers(monkeypatch)
    seen = []
    worker = bench_common.SparkWorker({}, tmp_path / "w.log")
    real_call = bench_common.WorkerProcess.call

    def call(self, **cmd):
        out = real_call(self, **cmd)
        seen.append((out["profile"], out["read_path"], out["prefix"]))
        return out

    monkeypatch.setattr(bench_common.WorkerProcess, "call", call)
    try:
        worker.warm_up("t", "warmup/", [[0, 0, 10]], ("librdkafka", "spark"))
    finally:
        worker.stop()
    assert seen == [("short", "librdkafka", "warmup/librdkafka/"), ("long", "spark", "warmup/spark/")]
