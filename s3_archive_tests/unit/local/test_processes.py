"""Readiness waits of the local stack's child processes (real child processes, no services)."""

import subprocess
import sys
import time

import pytest

from s3_archive.local.processes import StackError, wait_until

pytestmark = pytest.mark.unit


@pytest.fixture
def child():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    yield proc
    proc.kill()
    proc.wait()


def test_ready_after_some_failed_and_false_checks(child, tmp_path):
    answers = iter([ConnectionRefusedError("refused"), False, TimeoutError("slow"), True])

    def ready() -> bool:
        a = next(answers)
        if isinstance(a, BaseException):
            raise a
        return a
    wait_until(ready, 10, child, "the thing", tmp_path / "log")
    assert next(answers, "all used") == "all used"


def test_never_ready_fails_after_the_timeout_naming_the_log(child, tmp_path):
    start = time.monotonic()
    with pytest.raises(StackError, match=f"the thing did not become ready within 1s; see {tmp_path / 'log'}"):
        wait_until(lambda: False, 1, child, "the thing", tmp_path / "log")
    assert 1 <= time.monotonic() - start < 3


def test_a_process_that_exits_fails_at_once_with_its_log(tmp_path):
    log = tmp_path / "log"
    log.write_text("line 1\nboom\n")
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    proc.wait()
    start = time.monotonic()
    with pytest.raises(StackError, match=r"the thing exited with code 3 while starting; log .*:\nline 1\nboom"):
        wait_until(lambda: False, 30, proc, "the thing", log)
    assert time.monotonic() - start < 1
