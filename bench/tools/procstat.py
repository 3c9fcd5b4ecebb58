"""CPU time of processes and threads from /proc (utime + stime, in seconds): how much CPU did a process tree, or each
thread of a JVM, spend between two moments? The reader behind bench/tools/cpu_accounting.py, not a command of its
own: `snapshot()` before and after, then `cpu_delta` / `thread_deltas` between the two.

A process's CPU over an interval is taken as the growth of `own + reaped` summed over a set of processes: `own` is
its utime + stime, `reaped` its cutime + cstime (the children it has waited for). A child that ends during the
interval moves its time into its parent's `reaped`, so a set closed under "parent of" (a process and all its
descendants) loses nothing when its members come and go (PySpark's forked workers).

The parsing is pure (`parse_stat`, `cpu_delta`); `snapshot()` reads /proc.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Stat:
    pid: int
    ppid: int
    comm: str
    own: float  # utime + stime, s
    reaped: float  # cutime + cstime, s
    start: int  # start time in clock ticks after boot (tells a reused pid apart)


def parse_stat(text: str) -> Stat:
    """One /proc/<pid>/stat or /proc/<pid>/task/<tid>/stat line (comm may hold spaces and parentheses)."""
    head, _, rest = text.rpartition(")")
    pid, _, comm = head.partition(" (")
    f = rest.split()
    # fields after comm: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14) ... starttime(19)
    return Stat(int(pid), int(f[1]), comm, (int(f[11]) + int(f[12])) / TICK, (int(f[13]) + int(f[14])) / TICK,
                int(f[19]))


def _read_stat(path: Path) -> Stat | None:
    try:
        return parse_stat(path.read_text())
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class Snapshot:
    procs: dict[int, Stat]
    threads: dict[int, Stat]  # the threads of the watched processes (by tid; `ppid` holds the owning pid)
    machine_busy: float  # s of CPU the whole machine spent busy since boot (all cores)
    machine_total: float  # s of CPU time since boot (all cores, busy + idle)


def machine_cpu(text: str) -> tuple[float, float]:
    """(busy, total) seconds from the `cpu` line of /proc/stat: idle and iowait are not busy."""
    f = [int(x) for x in text.splitlines()[0].split()[1:]]
    total = sum(f[:8])  # user nice system idle iowait irq softirq steal (guest is inside user)
    return (total - f[3] - f[4]) / TICK, total / TICK


def snapshot(thread_pids: Iterable[int] = ()) -> Snapshot:
    procs = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            s = _read_stat(d / "stat")
            if s is not None:
                procs[s.pid] = s
    threads = {}
    for pid in thread_pids:
        try:
            tids = list((Path("/proc") / str(pid) / "task").iterdir())
        except OSError:
            continue
        for t in tids:
            s = _read_stat(t / "stat")
            if s is not None:
                threads[s.pid] = Stat(s.pid, pid, s.comm, s.own, 0.0, s.start)
    busy, total = machine_cpu(Path("/proc/stat").read_text())
    return Snapshot(procs, threads, busy, total)


def descendants(procs: dict[int, Stat], root: int) -> set[int]:
    """`root` and every process below it."""
    kids: dict[int, list[int]] = {}
    for s in procs.values():
        kids.setdefault(s.ppid, []).append(s.pid)
    out, todo = set(), [root]
    while todo:
        p = todo.pop()
        if p in procs and p not in out:
            out.add(p)
            todo += kids.get(p, [])
    return out


def cpu_delta(before: dict[int, Stat], after: dict[int, Stat], members: Callable[[dict[int, Stat]], set[int]],
              reaped: bool = True) -> float:
    """CPU seconds a set of processes spent between two snapshots. `members(procs)` picks the set in a snapshot;
    `reaped`: count what its members' waited-for children spent (off for a process whose children are not its
    own work, e.g. this benchmark's process and its earlier `jcmd` calls)."""
    def total(procs: dict[int, Stat]) -> float:
        return sum(procs[p].own + (procs[p].reaped if reaped else 0.0) for p in members(procs))
    return total(after) - total(before)


def thread_deltas(before: dict[int, Stat], after: dict[int, Stat], owner: int) -> dict[int, tuple[str, float]]:
    """Per thread of process `owner` alive at the end: (name, CPU seconds in the interval); a thread that started
    during it counts whole. Threads that ended during it are missing (their time is in the process's total)."""
    out = {}
    for tid, s in after.items():
        if s.ppid != owner:
            continue
        b = before.get(tid)
        out[tid] = (s.comm, s.own - (b.own if b is not None and b.start == s.start else 0.0))
    return out


_NUMBERED = re.compile(r"[\s#\-_]*\d+$")


def thread_group(name: str) -> str:
    """A thread name without its number (`GC Thread#1` -> `GC Thread`), so a pool's threads add up. Linux keeps
    15 characters of a name (`Executor task l` is Spark's `Executor task launch worker for task ...`)."""
    return _NUMBERED.sub("", name) or name
