"""The deployed shape's run processes as /proc shows them (bench/deployed.py): when each started and was last seen."""

from __future__ import annotations

import os
import threading
import time

from bench.common import read_text


def _is_run_worker(pid: int, ppid: int) -> bool:
    """A run's process: the code server (`dagster api grpc`) starts each with multiprocessing's spawn."""
    args = read_text(f"/proc/{pid}/cmdline")
    return "spawn_main" in args and "grpc" in read_text(f"/proc/{ppid}/cmdline").split("\0")


class RunProcesses:
    """Samples /proc every 50 ms for the runs' processes (children of the code server): pid → [start, last seen]."""

    def __init__(self) -> None:
        self.seen: dict[int, list[float]] = {}
        self._other: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        tck = os.sysconf("SC_CLK_TCK")
        while not self._stop.wait(0.05):
            now = time.time()
            uptime = float(read_text("/proc/uptime").split()[0])
            for d in os.listdir("/proc"):
                if not d.isdigit():
                    continue
                pid = int(d)
                if pid in self.seen:
                    self.seen[pid][1] = now
                    continue
                if pid in self._other:
                    continue
                try:
                    stat = read_text(f"/proc/{pid}/stat").rsplit(")", 1)[1].split()
                    start = now - (uptime - int(stat[19]) / tck)  # /proc/uptime's precision, not btime's seconds
                    if _is_run_worker(pid, int(stat[1])):
                        self.seen[pid] = [start, now]
                    elif now - start > 2:  # not one forked a moment ago that has yet to exec
                        self._other.add(pid)
                except (OSError, ValueError, IndexError):
                    continue

    def __enter__(self) -> RunProcesses:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def around(self, launched: float, ended: float) -> tuple[float, float] | None:
        """(start, exit) of the process that started after `launched` and was still seen at `ended` - 1 s."""
        for start, last in sorted(self.seen.values()):
            if launched - 0.5 <= start <= ended and last >= ended - 1:
                return start, last
        return None
