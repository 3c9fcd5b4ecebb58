"""Lanes: the source partitions of a restore split into groups that run side by side, each with its own
transactional producer, so one lane's commit (which drains its producer and waits for the coordinator) no
longer stops every other record, and the broker takes several partitions' batches at once, as from a plain
producer. Pure, except `run_lanes` (threads).

Exactly once holds per lane as it did for the one producer:
- a lane owns whole ledger buckets (source partition sp is recorded in the entry of target partition
  sp % n), so two lanes never write the same ledger entry, and each lane's ledger copy is exact for its buckets;
- a lane restores its source partitions' windows in (partition, start) order, as the run did;
- lanes only run side by side when every target partition takes records from one lane only (mapping `same`, or a
  `map` sending each source partition somewhere else), so each target partition gets what it got before, in
  the same order; `murmur2` and many-to-one maps run as one lane;
- every run opens the producers of all `LANES` transactional ids, used or not: `init_transactions` on each
  aborts an open transaction a crashed run left under that id and fences a run still alive, before the ledger
  is read (the ledger read waits for no transaction of ours).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from s3_archive.restore.routing import PartitionMapping

# Transactional producers a restore may run side by side (and the ids every run initialises). Changing it
# changes the ids a run fences: a crashed run's open transaction under an id no longer opened would hold the
# ledger read back until transaction.timeout.ms.
LANES = 4


def lane_ids(ledger_id: str, lanes: int = LANES) -> list[str]:
    """The transactional.id of each lane; lane 0's is the ledger id itself (the one id of earlier versions)."""
    return [ledger_id] + [f"{ledger_id}.lane{i}" for i in range(1, lanes)]


def side_by_side(mapping: PartitionMapping, source_partitions: Iterable[int]) -> bool:
    """Whether lanes of these source partitions may run side by side: each target partition then takes records
    of one source partition only (`same`, or a `map` sending each one elsewhere)."""
    if mapping.mode == "same":
        return True
    if mapping.mode == "map":
        explicit, sps = dict(mapping.explicit), set(source_partitions)
        targets = [explicit.get(sp) for sp in sps]  # None: unmapped, refused by the mapping's check
        return None not in targets and len(set(targets)) == len(sps)
    return False


def plan_lanes(mapping: PartitionMapping, source_partitions: Iterable[int], num_target: int,
               lanes: int = LANES) -> list[list[int]]:
    """Source partitions per lane (each sorted; lanes in order of their first partition). One lane when lanes
    could write the same target partition (`murmur2`, a many-to-one `map`)."""
    sps = sorted(set(source_partitions))
    if not sps:
        return []
    if lanes <= 1 or not side_by_side(mapping, sps):
        return [sps]
    buckets = sorted({sp % num_target for sp in sps})
    lane_of = {b: i % lanes for i, b in enumerate(buckets)}
    out: list[list[int]] = [[] for _ in range(min(lanes, len(buckets)))]
    for sp in sps:
        out[lane_of[sp % num_target]].append(sp)
    return out


class Stopped(Exception):
    """A lane stopped because another lane failed (or the run was interrupted)."""


_DONE = object()


def run_lanes(work: list[Callable[[threading.Event, Callable[[Any], None]], None]]) -> Iterator[Any]:
    """Each `work(stop, emit)` in a thread of its own; yields what they `emit`, as it comes. The first error of
    any lane is raised here after every lane has stopped (`stop` is set; a lane checks it between batches and
    raises `Stopped`, which is not an error). Closing the generator stops and joins the lanes too."""
    q: queue.Queue = queue.Queue()
    stop = threading.Event()

    def thread(fn: Callable[[threading.Event, Callable[[Any], None]], None]) -> None:
        try:
            fn(stop, q.put)
        except Stopped:
            pass
        except BaseException as e:  # noqa: BLE001 - handed to the caller, which raises it
            stop.set()
            q.put(e)
        finally:
            q.put(_DONE)

    threads = [threading.Thread(target=thread, args=(fn,), name=f"s3-archive-restore-lane-{i}", daemon=True)
               for i, fn in enumerate(work)]
    for t in threads:
        t.start()
    error: BaseException | None = None
    try:
        left = len(threads)
        while left:
            item = q.get()
            if item is _DONE:
                left -= 1
            elif isinstance(item, BaseException):
                error = error or item
            else:  # also after an error: a report says a commit that happened
                yield item
        if error is not None:
            raise error
    finally:
        stop.set()
        for t in threads:
            t.join()
