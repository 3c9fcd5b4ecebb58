"""The manifest of an Iceberg window with dead letters: the table's statistics plus the dead letters' (the write
job's result rows), so it counts and lists every record of the window, as the other formats' manifests do."""

from __future__ import annotations

from s3_archive.archive.driver.archive_run import PendingWindow
from s3_archive.archive.driver.iceberg_commit import _Table, _window_manifest
from s3_archive.config.archive import ArchiveConfig
from s3_archive.model.windows import OffsetWindow


def _cfg() -> ArchiveConfig:
    return ArchiveConfig(name="orders", topics=["t"], bucket="b-1", prefix="arch/", format="iceberg",
                         value_decoding={"type": "json", "on_error": "dead_letter"})


def _slice(records, first, last, t0, t1, nbytes):
    return {"kind": "slice", "window": "w", "records": records, "bytes_read": nbytes, "first_offset": first,
            "last_offset": last, "min_timestamp_ms": t0, "max_timestamp_ms": t1, "undecodable": records}


def _manifest(cfg, w, read_start, stats, snapshot, attempt, dead):
    """Window `w`'s manifest, read from `read_start`, its rows in the table committed by `snapshot` of `attempt`."""
    table = _Table("c.db.t", done={w.key: (snapshot, attempt)}, stats={w.key: stats} if stats else {},
                   dead={w.key: dead})
    return _window_manifest(cfg, PendingWindow(cfg.location("t", w), read_start, [], []), table, attempt)


def _dead(key):
    return {"kind": "dead", "window": "w", "key": key, "size": 10, "etag": '"e"'}


def test_dead_letters_are_counted_and_listed_with_the_tables_rows():
    w = OffsetWindow(0, 10, 20)
    table = {"n": 7, "bytes": 70, "first": 11, "last": 18, "t0": 1_000, "t1": 5_000}
    dead = [_slice(2, 10, 19, 500, 4_000, 30), _dead("arch/_dead_letter/t/b.parquet"), _slice(1, 15, 15, 6_000, 6_000, 5),
            _dead("arch/_dead_letter/t/a.parquet")]
    m = _manifest(_cfg(), w, 10, table, 42, "att", dead)
    assert (m.record_count, m.undecodable_records, m.bytes_read) == (10, 3, 105)
    assert (m.first_offset, m.last_offset, m.min_timestamp_ms, m.max_timestamp_ms) == (10, 19, 500, 6_000)
    assert m.absent_offset_count == 0  # dead letters are not gaps
    assert [o.key for o in m.dead_letter_objects] == ["arch/_dead_letter/t/a.parquet", "arch/_dead_letter/t/b.parquet"]


def test_a_window_of_dead_letters_only_and_one_without_any():
    w = OffsetWindow(0, 0, 2)
    only = _manifest(_cfg(), w, 0, None, 1, "att", [_slice(2, 0, 1, 1, 2, 8), _dead("k")])
    assert (only.record_count, only.undecodable_records, only.first_offset, only.last_offset) == (2, 2, 0, 1)
    none = _manifest(_cfg(), w, 0, {"n": 2, "bytes": 4, "first": 0, "last": 1, "t0": 1, "t1": 2}, 1, "att", [])
    assert (none.record_count, none.undecodable_records, none.dead_letter_objects) == (2, 0, [])
