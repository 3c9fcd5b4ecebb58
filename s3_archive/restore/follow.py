"""Which windows a following restore target restores next (pure; the sensor is defs/restore/sensors.py).

A run restores a range of windows in the order they were created (the offsets sensor creates a partition's windows
in offset order), so records of a source partition reach the target in offset order. The range starts at the first
window not restored yet and ends before the first window not committed by the archive yet: a window still being
archived (or failed) holds back every later one, of any partition, until it is committed.
"""

from __future__ import annotations

from dataclasses import dataclass

# Windows one follow run restores at most (a backlog is caught up over several runs).
MAX_WINDOWS_PER_RUN = 500


@dataclass(frozen=True)
class FollowPlan:
    """The next range to restore (empty: nothing), and how far the target is behind the archive."""

    keys: list[str]  # in creation order; restore them in one run
    behind: int  # windows committed by the archive and not restored yet
    blocked_by: str | None  # the first window not committed yet that holds back later committed ones


def plan_follow(keys: list[str], archived: set[str], restored: set[str],
                max_windows: int = MAX_WINDOWS_PER_RUN) -> FollowPlan:
    """`keys`: the topic's windows in creation order; `archived`: those committed; `restored`: those the target
    has restored."""
    behind = sum(1 for k in keys if k in archived and k not in restored)
    first = next((i for i, k in enumerate(keys) if k not in restored), len(keys))
    run: list[str] = []
    for k in keys[first:]:
        if k not in archived or len(run) >= max_windows:
            break
        run.append(k)
    end = first + len(run)
    later = end < len(keys) and keys[end] not in archived and any(
        k in archived and k not in restored for k in keys[end + 1:])
    return FollowPlan(run, behind, keys[end] if later else None)
