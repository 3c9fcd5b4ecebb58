"""Small helpers for the local stack's child processes: free ports, readiness waits, stopping by PID."""

from __future__ import annotations

import functools
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tenacity import RetryCallState, Retrying, retry_if_exception, retry_if_result, stop_after_delay, wait_fixed


class StackError(RuntimeError):
    """Something the local stack cannot do; the message says what is wrong and what to do."""


def purge_command() -> str:
    """`s3-archive local down --purge` as it runs when typed where the user is: by name if `s3-archive` on PATH is
    this one, else by its path (after `make demo`, `.venv/bin/s3-archive` from the repository)."""
    import sys

    ours = Path(sys.executable).parent / "s3-archive"
    found = shutil.which("s3-archive")
    if found and Path(found).resolve() == ours.resolve():
        return "s3-archive local down --purge"
    try:
        return f"{ours.relative_to(Path.cwd())} local down --purge"
    except ValueError:
        return f"{ours} local down --purge"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_port_free(port: int, what: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # As the servers themselves bind (the JVM and Python set SO_REUSEADDR): connections of a stopped server
        # still in TIME_WAIT do not hold the port, a listening socket does. So a server restarts on its port.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as e:
            raise StackError(f"port {port} for {what} is already in use ({e.strerror}); pick another port") from e


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read (it holds a secret), replacing any file there."""
    path.unlink(missing_ok=True)
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write(text)


def pid_alive(pid: int) -> bool:
    """True while `pid` runs. A zombie (exited, not yet reaped: a stopped server whose parent is gone, where the
    machine's init does not reap) is not alive."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"  # the state follows the command name in parentheses


def tied_to_parent(cmd: list[str]) -> list[str]:
    """`cmd` run so that it gets SIGTERM when its parent dies, however it dies (SIGKILL, a timeout's kill):
    through util-linux's `setpriv --pdeathsig`, which sets the signal and then executes `cmd` in its place (same
    PID, same command line). Linux sends it when the *thread* that started the child ends: start such children
    from a thread that lives as long as they should (the main thread). As is where `setpriv` is missing."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "TERM", "--", *cmd] if setpriv else cmd


@functools.cache
def _default_sigterm() -> list[str]:
    """A prefix that runs a command with SIGTERM's default action: coreutils' `env --default-signal` (8.31+). A
    signal a process ignores stays ignored in every program it executes, and some library in a long test session
    can leave SIGTERM ignored: a server started from it would ignore `stop_pid` and the parent-death signal."""
    env = shutil.which("env")
    if env is None:
        return []
    ok = subprocess.run([env, "--default-signal=TERM", "true"], capture_output=True).returncode == 0
    return [env, "--default-signal=TERM"] if ok else []


def spawn(cmd: list[str], log: Path, env: dict[str, str] | None = None, detached: bool = False,
          ) -> subprocess.Popen:
    """Start a child in its own session (so stopping it also stops its children) with output to a log file.
    Unless `detached`, a child started from the main thread is tied to this process (`tied_to_parent`): a test
    session or benchmark killed before its teardown leaves no server behind. One started from another thread is
    not (the signal would come when that thread ends, e.g. a test's thread restarting a broker). `s3-archive
    local up` starts detached servers, which outlive it."""
    cmd = [*_default_sigterm(), *cmd]
    if not detached and threading.current_thread() is threading.main_thread():
        cmd = tied_to_parent(cmd)
    log.parent.mkdir(parents=True, exist_ok=True)
    # A child inherits the calling thread's blocked signals across fork and exec, and a server must die by SIGTERM
    # (`stop_pid`, the parent-death signal): unblock it while forking (a library's thread code can leave it blocked).
    blocked = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    try:
        with open(log, "ab") as out:
            return subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                env={**os.environ, **(env or {})},
            )
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def stop_pid(pid: int, timeout: float = 20.0) -> None:
    """SIGTERM the process group we started, then SIGKILL if it lingers."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                # Reap it if it is our child; otherwise just poll.
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    return
            except ChildProcessError:
                if not pid_alive(pid):
                    return
            time.sleep(0.1)


def wait_until(ready: Callable[[], bool], timeout: float, proc: subprocess.Popen, what: str, log: Path) -> None:
    """Call `ready` every 0.25 s until it returns True, for at most `timeout` seconds; StackError at once if the
    process exits."""

    def attempt() -> bool:
        if proc.poll() is not None:
            raise StackError(f"{what} exited with code {proc.returncode} while starting; log {log}:\n{_tail(log)}")
        return ready()

    def gave_up(_: RetryCallState) -> None:
        raise StackError(f"{what} did not become ready within {timeout:.0f}s; see {log}")

    # An exception from `ready` means not ready yet (connection refused, timeouts); not an exit, nor an interrupt.
    Retrying(retry=retry_if_result(lambda ok: not ok) | retry_if_exception(
                 lambda e: isinstance(e, Exception) and not isinstance(e, StackError)),
             stop=stop_after_delay(timeout), wait=wait_fixed(0.25), retry_error_callback=gave_up)(attempt)


def _tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
