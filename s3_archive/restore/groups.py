"""Producer groups of a restore run (pure): which source partitions each transactional producer owns, and the fixed
set of transactional ids every run initialises.

A run produces with up to `producers` transactional producers side by side, each owning whole ledger entries: the
entry of target-partition bucket b (source partitions sp with sp % n == b, n = target partitions) belongs to group
b % g (g = the run's groups), so no two producers ever commit the same entry, and a source partition's windows all
go through one producer, in order. Every run (whatever its `producers` and its windows) first initialises all of
`transactional_ids(ledger, n)`: a crashed run's open transaction under any of them is aborted before the ledger is
read, and a concurrent run of the same restore is fenced whichever of them it used.
"""

from __future__ import annotations

from collections.abc import Iterable

from s3_archive.model.errors import InvalidRestore

# The most producers a run may use; every run initialises min(this, target partitions) transactional ids.
MAX_PRODUCERS = 16


def check_producers(producers: int) -> int:
    if not isinstance(producers, int) or isinstance(producers, bool) or not 1 <= producers <= MAX_PRODUCERS:
        raise InvalidRestore(f"producers must be an integer from 1 to {MAX_PRODUCERS}, got {producers!r}")
    return producers


def transactional_ids(ledger_id: str, num_target: int) -> list[str]:
    """The restore's transactional ids, group 0's first: the ledger id itself (what a run with one producer has
    always used), then `<ledger id>.p1`, `.p2`, ... up to min(MAX_PRODUCERS, num_target) ids."""
    return [ledger_id] + [f"{ledger_id}.p{g}" for g in range(1, min(MAX_PRODUCERS, max(1, num_target)))]


def group_count(producers: int, num_target: int) -> int:
    """Groups a run has: at most one per target-partition bucket."""
    return max(1, min(producers, num_target, MAX_PRODUCERS))


def group_of(source_partition: int, num_target: int, groups: int) -> int:
    """The group owning `source_partition`'s ledger entry (bucket sp % n) and so its windows."""
    return (source_partition % num_target) % groups


def plan_groups(source_partitions: Iterable[int], num_target: int, producers: int) -> dict[int, list[int]]:
    """group -> its source partitions (sorted), only groups with any; a single group is group 0."""
    groups = group_count(producers, num_target)
    out: dict[int, list[int]] = {}
    for sp in sorted(set(source_partitions)):
        out.setdefault(group_of(sp, num_target, groups), []).append(sp)
    return dict(sorted(out.items()))
