"""The offset map's translation on generated source logs with gaps of every cause: what a group committed on the
lost cluster must point at the first restored record at or after it, or the end of what was restored."""

from __future__ import annotations

import random

import pytest

from s3_archive.model.errors import RestoreFailed
from s3_archive.restore.ledger import RangeSet
from s3_archive.restore.offset_map import (
    MapPiece,
    OffsetMapRecorder,
    Run,
    resolve,
    restored_end,
    source_runs,
    translate,
    uncovered_by_map,
)


class _Msg:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def offset(self) -> int:
        return self._offset


def _source_log(rng: random.Random, n: int) -> tuple[list[int], set[int]]:
    """Offsets of a source partition's log and which of them a restore produces: compaction removed some, commit
    markers and aborted records take offsets no consumer sees, and a time filter drops others."""
    offsets, kept, o = [], set(), rng.randrange(0, 50)
    while len(offsets) < n:
        kind = rng.random()
        if kind < 0.15:
            o += rng.randrange(1, 20)  # compacted away / before the log start
        elif kind < 0.2:
            o += 1  # a transaction marker
        elif kind < 0.25:
            o += rng.randrange(1, 6)  # aborted records, then their marker
            o += 1
        offsets.append(o)
        if rng.random() > 0.1:  # else filtered out by time
            kept.add(o)
        o += 1
    return offsets, kept


def _restore(rng: random.Random, produced: list[int], target_start: int, sp: int,
             recorder: OffsetMapRecorder) -> tuple[list[MapPiece], dict[int, int], int]:
    """Simulate the run: batches in transactions, each batch's first and last delivery offset reported; a marker
    after each transaction. Returns the pieces, source -> target offset of every record, and the log end."""
    pieces, where, target, i = [], {}, target_start, 0
    while i < len(produced):
        txn = produced[i:i + rng.randrange(1, 40)]
        j = 0
        while j < len(txn):
            batch = txn[j:j + rng.randrange(1, 12)]
            first, last = recorder.track(sp, batch)
            first(None, _Msg(target))
            last(None, _Msg(target + len(batch) - 1))
            for o in batch:
                where[o] = target
                target += 1
            j += len(batch)
        pieces += recorder.pieces(sp, RangeSet([[txn[0], txn[-1] + 1]]))
        target += 1  # the commit marker
        i += len(txn)
    return pieces, where, target


@pytest.mark.parametrize("seed", range(25))
def test_translation_is_the_first_restored_record_at_or_after_the_commit(seed: int) -> None:
    rng = random.Random(seed)
    offsets, kept = _source_log(rng, rng.randrange(1, 400))
    produced = sorted(kept)
    recorder = OffsetMapRecorder("t")
    pieces, where, _ = _restore(rng, produced, rng.randrange(0, 5), 3, recorder)
    ledger = RangeSet([[0, offsets[-1] + 1]])
    runs = resolve(pieces, ledger)
    end = restored_end(runs, 0)
    for committed in range(0, offsets[-1] + 3):
        after = [o for o in produced if o >= committed]
        expected = where[after[0]] if after else max(where.values(), default=-1) + 1
        assert translate(runs, committed, end) == expected, committed
    # compact: one run per gap or transaction, never one per record
    assert len(runs) <= len(source_runs(produced)) + len(pieces)


def test_an_aborted_transactions_piece_is_outranked_by_the_run_that_restored_it_again() -> None:
    # The first attempt put source [10, 20) at target [0, 10) and was aborted (marker at 10); the re-run put the
    # same records at [11, 21). A piece of an aborted attempt never redone is outside the ledger: dropped.
    aborted = MapPiece("t", 0, 0, [Run(10, 0, 10)], [[10, 20]])
    redone = MapPiece("t", 0, 0, [Run(10, 11, 10)], [[10, 20]])
    never_redone = MapPiece("t", 0, 0, [Run(20, 22, 5)], [[20, 25]])
    runs = resolve([redone, never_redone, aborted], RangeSet([[0, 20]]))
    assert runs == [Run(10, 11, 10)]
    assert translate(runs, 0, restored_end(runs, 0)) == 11
    assert translate(runs, 15, 21) == 16
    assert translate(runs, 20, restored_end(runs, 0)) == 21


def test_a_batch_with_foreign_records_between_ours_makes_the_piece_inexact() -> None:
    recorder = OffsetMapRecorder("t")
    first, last = recorder.track(0, [5, 6, 7])
    first(None, _Msg(100))
    last(None, _Msg(103))  # someone else's record among ours
    (piece,) = recorder.pieces(0, RangeSet([[5, 8]]))
    assert not piece.exact


def test_a_transaction_of_two_source_partitions_has_each_ones_pieces() -> None:
    """Batches of source partitions 0 and 1 into target partitions 0 and 1 (and 1 into 0 too: a many-to-one map) in
    one transaction: each source partition's pieces hold only its own batches, with its own covers."""
    recorder = OffsetMapRecorder("t")
    for tp, offsets, sp, at in ((0, [5, 6], 0, 10), (1, [0, 1, 2], 1, 0), (0, [7], 0, 12), (0, [3], 1, 13)):
        first, last = recorder.track(tp, offsets, sp)
        first(None, _Msg(at))
        last(None, _Msg(at + len(offsets) - 1))
    one = recorder.pieces(1, RangeSet([[0, 4]]))
    assert [(p.source_partition, p.target_partition, p.runs, p.covers) for p in one] == [
        (1, 0, [Run(3, 13, 1)], [[0, 4]]), (1, 1, [Run(0, 0, 3)], [[0, 4]])]
    (zero,) = recorder.pieces(0, RangeSet([[5, 8]]))
    assert (zero.source_partition, zero.target_partition, zero.runs, zero.covers) == (0, 0, [Run(5, 10, 3)], [[5, 8]])
    assert recorder.pieces(0, RangeSet([[5, 8]])) == []  # asked for once


def test_a_missing_delivery_offset_is_an_error() -> None:
    recorder = OffsetMapRecorder("t")
    first, _ = recorder.track(0, [1, 2])
    first(None, _Msg(0))
    with pytest.raises(RestoreFailed, match="delivery offsets"):
        recorder.pieces(0, RangeSet([[1, 3]]))


def test_pieces_round_trip_and_a_foreign_version_is_refused() -> None:
    piece = MapPiece("t", 2, 2, [Run(0, 0, 3), Run(7, 3, 2)], [[0, 9]], exact=True)
    assert MapPiece.decode(piece.encode(), "x") == piece
    with pytest.raises(RestoreFailed, match="version 1"):
        MapPiece.decode(b'{"v": 9}', "s3://b/k")


def test_ledger_ranges_without_a_map_are_named() -> None:
    pieces = [MapPiece("t", 0, 0, [Run(0, 0, 5)], [[0, 5]])]
    assert uncovered_by_map(RangeSet([[0, 10]]), pieces) == [[5, 10]]
    assert uncovered_by_map(RangeSet([[0, 5]]), pieces) == []


def test_source_runs() -> None:
    assert source_runs([]) == []
    assert source_runs([3, 4, 5]) == [(3, 3)]
    assert source_runs([1, 2, 4, 7, 8]) == [(1, 2), (4, 1), (7, 2)]
