"""The benchmark keeps a failed Spark worker's log (bench/common.py `keep_log`): its temporary directory is removed at
the end of the run, and with it the JVM's last words."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench import common as bench_common


def test_a_worker_that_dies_leaves_its_log_next_to_the_output(tmp_path, monkeypatch, capsys):
    # a stand-in for `python -m bench.worker`: writes to its stderr (the log) and exits without an answer
    dying = "import sys; sys.stdin.readline(); print('ERROR Uncaught exception: OutOfMemoryError', file=sys.stderr)"

    real = subprocess.Popen

    def popen(_args, **kw):
        return real([sys.executable, "-c", dying], **kw)

    monkeypatch.setattr(bench_common.subprocess, "Popen", popen)
    kept = tmp_path / "out" / "failed-logs-1000mb" / "spark-worker.log"
    worker = bench_common.SparkWorker({}, tmp_path / "spark-worker.log", kept)
    with pytest.raises(RuntimeError, match="exited during format"):
        worker.call(cmd="format")
    worker.stop()
    assert "OutOfMemoryError" in kept.read_text()
    assert "OutOfMemoryError" in capsys.readouterr().out  # its tail is printed too


def test_a_failed_command_of_a_fresh_worker_keeps_its_log(tmp_path, monkeypatch):
    def run(_args, stderr, **kw):
        stderr.write(b"java.lang.OutOfMemoryError: Java heap space\n")
        return subprocess.CompletedProcess([], 52, stdout="@@RESULT {\"ok\": false, \"error\": \"boom\"}\n")

    monkeypatch.setattr(bench_common.subprocess, "run", run)
    kept = tmp_path / "kept" / "fresh.log"
    with pytest.raises(RuntimeError, match="boom"):
        bench_common.once({}, tmp_path / "fresh.log", kept, cmd="fresh")
    assert "OutOfMemoryError" in kept.read_text()
