"""Readiness waits of the local stack's child processes (real child processes, no services)."""

import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from s3_archive.local.processes import StackError, pid_alive, spawn, stop_pid, tied_to_parent, wait_until


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


_MIDDLE = """
import signal, sys, time
from pathlib import Path
from s3_archive.local.processes import spawn
log = Path(sys.argv[1])
if sys.argv[2] == "blocked":  # as a library's thread code can leave the spawning thread
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
if sys.argv[2] == "ignored":  # as a process that ignores SIGTERM passes on to every program it executes
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
tied, detached = spawn(sleeper, log), spawn(sleeper, log, detached=True)
print(tied.pid, detached.pid, flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("sigterm", ["unblocked", "blocked", "ignored"])
def test_a_spawned_child_dies_with_the_process_that_started_it_unless_detached(tmp_path, sigterm):
    # The process that spawns is killed as a timeout would kill a test session: no teardown runs. A SIGTERM blocked
    # in the spawning thread, or ignored by the spawning process, must not reach the child as such (it would ignore
    # the parent-death signal and `stop_pid`).
    middle = subprocess.Popen([sys.executable, "-c", _MIDDLE, str(tmp_path / "log"), sigterm],
                              stdout=subprocess.PIPE, text=True)
    tied, detached = (int(p) for p in middle.stdout.readline().split())
    try:
        assert pid_alive(tied) and pid_alive(detached)
        # setpriv sets the signal and executes `env`, which restores SIGTERM's default action and executes the
        # command: until both have (a loaded machine can take a while) the child is not tied, or ignores the signal.
        deadline = time.monotonic() + 10
        while (Path(f"/proc/{tied}/cmdline").read_bytes().split(b"\0")[0] != sys.executable.encode()
               and time.monotonic() < deadline):
            time.sleep(0.05)
        middle.kill()
        middle.wait()
        deadline = time.monotonic() + 10
        while pid_alive(tied) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pid_alive(tied)
        assert pid_alive(detached)
    finally:
        for pid in (tied, detached):
            start = time.monotonic()
            stop_pid(pid)
            assert time.monotonic() - start < 5  # a zombie left by the stop counts as stopped
        middle.stdout.close()
    assert not pid_alive(detached)


def test_a_tied_command_keeps_its_own_command_line():
    cmd = tied_to_parent(["java", "-cp", "x", "kafka.Kafka"])
    assert cmd[-4:] == ["java", "-cp", "x", "kafka.Kafka"]  # setpriv executes it in its place: same PID and cmdline
    assert cmd[:-4] in ([], [shutil.which("setpriv"), "--pdeathsig", "TERM", "--"])


def test_a_child_started_from_another_thread_is_not_tied_to_that_thread(tmp_path):
    # Linux signals a tied child when the thread that started it ends: a broker restarted from a test's thread
    # must outlive that thread.
    started = []
    t = threading.Thread(target=lambda: started.append(spawn([sys.executable, "-c", "import time; time.sleep(60)"],
                                                             tmp_path / "log")))
    t.start()
    t.join()
    time.sleep(0.5)
    try:
        assert pid_alive(started[0].pid)
    finally:
        stop_pid(started[0].pid)
