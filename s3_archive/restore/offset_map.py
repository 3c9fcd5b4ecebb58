"""The restore's source -> target offset map: where each restored record landed in the target, kept compactly as
runs (a run: `length` records at consecutive source offsets and consecutive target offsets), one piece per
transaction and target partition, stored in S3 beside the ledger (restore/offset_map_store.py). Pure.

Recording: for each batch handed to the producer, the delivery offsets of its first and last record are asked for
(`OffsetMapRecorder.track`); a batch's records are consecutive in the target when the last one's offset is the
first one's + n - 1 (the restore is the partition's only writer), else the piece is marked inexact. Before a
transaction commits its piece is written (`pieces`), so every committed transaction has one; a piece of a
transaction that was aborted afterwards is outranked by the one of the run that restored the same source offsets
again (later, so at higher target offsets), and pieces outside the ledger are ignored (`resolve`).

Translating a consumer group's committed source offset X (`translate`): the target offset of the first restored
record whose source offset is >= X, or the end of what was restored when none is. Exact with gaps of any cause
(compaction, transaction markers, aborted records, a window's skipped records, a time filter): gaps have no run.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from s3_archive.model.errors import RestoreFailed
from s3_archive.restore.ledger import RangeSet

MAP_VERSION = 1


@dataclass(frozen=True, order=True)
class Run:
    """`length` records: source offsets [source, source + length) at target offsets [target, target + length)."""

    source: int
    target: int
    length: int

    @property
    def source_end(self) -> int:
        return self.source + self.length


@dataclass
class MapPiece:
    """One transaction's records of source partition `source_partition` in target partition `target_partition`;
    `covers`: the source ranges the transaction added to the ledger (records or not)."""

    source_topic: str
    source_partition: int
    target_partition: int
    runs: list[Run]
    covers: list[list[int]] = field(default_factory=list)
    exact: bool = True

    @property
    def first_target(self) -> int:
        return self.runs[0].target if self.runs else -1

    def encode(self) -> bytes:
        return json.dumps({"v": MAP_VERSION, "source": self.source_topic, "sp": self.source_partition,
                           "tp": self.target_partition, "exact": self.exact, "covers": self.covers,
                           "runs": [[r.source, r.target, r.length] for r in self.runs]},
                          separators=(",", ":")).encode()

    @classmethod
    def decode(cls, body: bytes, where: str) -> MapPiece:
        try:
            doc = json.loads(body)
            if doc.get("v") != MAP_VERSION:
                raise ValueError(f"version {doc.get('v')!r}")
            return cls(doc["source"], int(doc["sp"]), int(doc["tp"]), [Run(*map(int, r)) for r in doc["runs"]],
                       [[int(a), int(b)] for a, b in doc["covers"]], bool(doc["exact"]))
        except (ValueError, KeyError, TypeError) as e:
            raise RestoreFailed(f"offset map piece {where} is not one this version reads (version {MAP_VERSION}): "
                                f"{e}") from None


def source_runs(offsets: Sequence[int]) -> list[tuple[int, int]]:
    """(start, length) of each run of consecutive offsets in ascending `offsets`."""
    if not offsets:
        return []
    if offsets[-1] - offsets[0] == len(offsets) - 1:
        return [(offsets[0], len(offsets))]
    out, start, prev = [], offsets[0], offsets[0]
    for o in offsets[1:]:
        if o != prev + 1:
            out.append((start, prev - start + 1))
            start = o
        prev = o
    out.append((start, prev - start + 1))
    return out


def _append(runs: list[Run], run: Run) -> None:
    if runs and runs[-1].source_end == run.source and runs[-1].target + runs[-1].length == run.target:
        last = runs[-1]
        runs[-1] = Run(last.source, last.target, last.length + run.length)
    else:
        runs.append(run)


class _Tracked:
    __slots__ = ("tp", "sp", "runs", "n", "first", "last")

    def __init__(self, tp: int, sp: int | None, runs: list[tuple[int, int]], n: int) -> None:
        self.tp, self.sp, self.runs, self.n = tp, sp, runs, n
        self.first: int | None = None
        self.last: int | None = None


class OffsetMapRecorder:
    """What the open transaction produced, batch by batch, and where its batches' first and last records landed
    (delivery callbacks). `pieces` after the producer's flush: one per target partition."""

    def __init__(self, source_topic: str) -> None:
        self.source_topic = source_topic
        self.tracked: list[_Tracked] = []

    def track(self, tp: int, offsets: Sequence[int], source_partition: int | None = None,
              ) -> tuple[Callable, Callable]:
        """The delivery callbacks to give the batch's first and last record (the same record when n = 1);
        `source_partition`: the batch's (None: whichever `pieces` asks for, for a run of one source partition at a
        time)."""
        t = _Tracked(tp, source_partition, source_runs(offsets), len(offsets))
        self.tracked.append(t)

        def first(err: object, msg: object) -> None:
            if err is None:
                t.first = msg.offset()  # type: ignore[attr-defined]

        def last(err: object, msg: object) -> None:
            if err is None:
                t.last = msg.offset()  # type: ignore[attr-defined]

        return first, last

    def reset(self) -> None:
        self.tracked = []

    def pieces(self, source_partition: int, covers: RangeSet) -> list[MapPiece]:
        """The open transaction's pieces of `source_partition` once every delivery is known; their tracking is
        done (a transaction spanning several source partitions asks for each one's)."""
        out: dict[int, MapPiece] = {}
        mine = [t for t in self.tracked if t.sp is None or t.sp == source_partition]
        self.tracked = [t for t in self.tracked if not (t.sp is None or t.sp == source_partition)]
        for t in mine:
            piece = out.setdefault(t.tp, MapPiece(self.source_topic, source_partition, t.tp, [], covers.ranges()))
            if t.first is None or (t.n > 1 and t.last is None):
                raise RestoreFailed(f"the delivery offsets of a batch for target partition {t.tp} are not known "
                                    "after the producer's flush")
            if t.n > 1 and t.last != t.first + t.n - 1:
                piece.exact = False  # another writer's records between ours: no run can be trusted
            target = t.first
            for s, n in t.runs:
                _append(piece.runs, Run(s, target, n))
                target += n
        return [out[tp] for tp in sorted(out)]


def resolve(pieces: Iterable[MapPiece], ledger: RangeSet) -> list[Run]:
    """The runs of one (source partition, target partition), non-overlapping and in source order: where pieces
    cover the same source offsets the one at the higher target offsets wins (the later run: the earlier
    transaction was aborted), and only offsets the ledger holds count (a piece of an aborted transaction nothing
    restored again is dropped)."""
    runs = sorted((r for p in pieces for r in p.runs), key=lambda r: -r.target)
    claimed = RangeSet()
    out: list[Run] = []
    for r in runs:
        for a, b in _uncovered(claimed, r.source, r.source_end):
            for la, lb in _intersect(ledger, a, b):
                out.append(Run(la, r.target + (la - r.source), lb - la))
        claimed.add(r.source, r.source_end)
    out.sort()
    merged: list[Run] = []
    for r in out:
        _append(merged, r)
    return merged


def _uncovered(rs: RangeSet, a: int, b: int) -> list[tuple[int, int]]:
    out, pos = [], a
    for s, e in rs.ranges():
        if e <= pos or s >= b:
            continue
        if s > pos:
            out.append((pos, s))
        pos = max(pos, e)
    if pos < b:
        out.append((pos, b))
    return out


def _intersect(rs: RangeSet, a: int, b: int) -> list[tuple[int, int]]:
    return [(max(a, s), min(b, e)) for s, e in rs.ranges() if s < b and e > a]


def translate(runs: Sequence[Run], committed: int, end: int) -> int:
    """The target offset of the first restored record whose source offset is >= `committed`; `end` (where the
    restored records end in the target) when there is none. `runs` as `resolve` returns them."""
    i = bisect.bisect_right([r.source_end for r in runs], committed)
    if i == len(runs):
        return end
    r = runs[i]
    return r.target + max(0, committed - r.source)


def restored_end(runs: Sequence[Run], empty: int) -> int:
    """The target offset after the last restored record (`empty` when nothing was restored)."""
    return max((r.target + r.length for r in runs), default=empty)


def uncovered_by_map(ledger: RangeSet, pieces: Iterable[MapPiece]) -> list[list[int]]:
    """The ledger's source ranges no piece covers: restored without an offset map (a plain restore), so their
    records' target offsets are not known."""
    covered = RangeSet()
    for p in pieces:
        for a, b in p.covers:
            covered.add(a, b)
    return [[a, b] for s, e in ledger.ranges() for a, b in _uncovered(covered, s, e)]
