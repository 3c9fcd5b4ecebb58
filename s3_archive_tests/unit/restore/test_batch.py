"""The restore's column-wise batches: selection (offset scope, ledger, time filter) equals a record-by-record
reference, a window's batches are checked for order and partition, the murmur2 route's cache changes nothing."""

import io
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from s3_archive.model.errors import ArchiveIntegrityError
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.batch import ReadAhead, Records, batches_of, increasing, select
from s3_archive.restore.ledger import RangeSet
from s3_archive.restore.readers import parquet_batches
from s3_archive.restore.request import ArchivedRecord, Filters, record_bytes
from s3_archive.restore.routing import PartitionMapping, murmur2_partition
from s3_archive.restore.sources import window_batches
from s3_archive_tests.manifests import hand_manifest


def _records(offsets: list[int], timestamps: list[int]) -> Records:
    rows = [ArchivedRecord(0, o, str(o).encode(), b"v" * (o % 3), [("h", None)] if o % 2 else [], t)
            for o, t in zip(offsets, timestamps)]
    return Records.from_rows(rows)


@settings(max_examples=200, deadline=None)
@given(offsets=st.lists(st.integers(0, 80), max_size=40, unique=True).map(sorted),
       lo=st.integers(0, 80), width=st.integers(1, 80),
       done=st.lists(st.tuples(st.integers(0, 80), st.integers(0, 15)), max_size=4),
       time_range=st.none() | st.tuples(st.none() | st.integers(0, 50), st.none() | st.integers(51, 100)),
       seed=st.integers(0, 100))
def test_select_equals_the_record_by_record_checks(offsets, lo, width, done, time_range, seed):
    timestamps = [(o * 37 + seed) % 100 for o in offsets]
    batch = _records(offsets, timestamps)
    ledger = RangeSet((a, a + n) for a, n in done)
    filters = Filters(*time_range) if time_range else Filters()
    hi = lo + width

    got, skipped, filtered = select(batch, lo, hi, ledger if ledger.overlaps(lo, hi) else None, filters)

    want, want_skipped, want_filtered = [], 0, 0
    for r in batch.records():  # the order the restore always checked them in
        if not lo <= r.offset < hi:
            want_filtered += 1
        elif r.offset in ledger:
            want_skipped += 1
        elif not filters.time_ok(r.timestamp_ms):
            want_filtered += 1
        else:
            want.append(r)
    assert list(got.records()) == want
    assert (skipped, filtered) == (want_skipped, want_filtered)


@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 20)), max_size=8), st.integers(0, 80),
       st.integers(0, 20))
def test_range_set_overlaps_equals_a_set_of_offsets(adds, a, n):
    rs = RangeSet((x, x + k) for x, k in adds)
    assert rs.overlaps(a, a + n) == any(x in rs for x in range(a, a + n))


def test_records_from_rows_compute_missing_sizes_and_slice_and_take():
    rows = [(1, 5, b"k", b"vv", [("\u00e9", b"1")], 7), ArchivedRecord(1, 6, None, None, [], 8)]
    b = Records.from_rows(rows)
    assert b.sizes == [record_bytes(b"k", b"vv", [("\u00e9", b"1")]), 0] == [1 + 2 + 2 + 1, 0]
    assert list(b.rows()) == [(1, 5, b"k", b"vv", [("\u00e9", b"1")], 7, 6), (1, 6, None, None, [], 8, 0)]
    assert list(b.slice(1, 2).records()) == [ArchivedRecord(1, 6, None, None, [], 8, 0)]
    assert list(b.take([1, 0]).rows())[0][1] == 6
    assert len(Records.from_rows([])) == 0
    assert [len(x) for x in batches_of(iter(rows * 3), 4)] == [4, 2]
    assert increasing([1, 2, 5]) and increasing([]) and not increasing([1, 1]) and not increasing([2, 1])


def _parquet(partition: int, offsets: list[int]) -> bytes:
    headers = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    buf = io.BytesIO()
    pq.write_table(pa.table({
        "key": pa.array([b"k"] * len(offsets), pa.binary()), "value": pa.array([b"v"] * len(offsets), pa.binary()),
        "headers": pa.array([[{"key": "h", "value": b"1"}]] * len(offsets), headers),
        "partition": pa.array([partition] * len(offsets), pa.int32()), "offset": pa.array(offsets, pa.int64()),
        "timestamp": pa.array([1000] * len(offsets), pa.timestamp("ms"))}), buf)
    return buf.getvalue()


def _window_offsets(window: OffsetWindow, objects: list[bytes], interleaved: bool = False) -> list[int]:
    data = {f"o{i}": b for i, b in enumerate(objects)}
    manifest = hand_manifest("t", window, [{"key": k, "size": len(b), "etag": "e"} for k, b in data.items()])
    opener = lambda obj: io.BytesIO(data[obj.key])  # noqa: E731 - local files instead of S3
    return [o for b in window_batches(None, "b", window, manifest, interleaved, opener) for o in b.offsets]


def test_window_batches_check_partition_order_and_bounds_a_batch_at_a_time():
    w = OffsetWindow(2, 10, 20)
    assert _window_offsets(w, [_parquet(2, [10, 11, 13]), _parquet(2, [14, 19])]) == [10, 11, 13, 14, 19]
    assert _window_offsets(w, [_parquet(2, [10, 14]), _parquet(2, [11, 19])], interleaved=True) == [10, 11, 14, 19]
    bad = {"partition": [_parquet(3, [10, 11])], "order": [_parquet(2, [10, 12, 11])],
           "repeat": [_parquet(2, [10, 11]), _parquet(2, [11, 12])], "before": [_parquet(2, [9, 10])],
           "after": [_parquet(2, [18, 20])]}
    expected = {"partition": "partition 3 offset 10 does not follow offset -1",
                "order": "offset 11 does not follow offset 12", "repeat": "offset 11 does not follow offset 11",
                "before": "offset 9 does not follow offset -1", "after": "offset 20 does not follow offset 18"}
    for what, objects in bad.items():
        with pytest.raises(ArchiveIntegrityError, match=expected[what]):
            _window_offsets(w, objects)


def test_the_murmur2_route_remembers_keys_without_changing_a_choice():
    route = PartitionMapping.parse("murmur2").compiled(5)
    keys = [f"user-{i % 7}".encode() for i in range(50)] + [b"", b"\x00\xff"]
    assert [route(3, k) for k in keys] == [murmur2_partition(k, 5) for k in keys]
    assert route(3, None) == route(3, None) == 3


def test_parquet_headers_when_every_record_has_the_same_count_or_not():
    headers = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    for rows in ([[("a", b"1"), ("b", None)]] * 70, [[("a", b"1")], [], [("b", b"2"), ("b", b"3")]] * 30,
                 [[]] * 5, [None, [("n", b"")]] * 40):
        buf = io.BytesIO()
        pq.write_table(pa.table({
            "key": pa.array([None] * len(rows), pa.binary()), "value": pa.array([b""] * len(rows), pa.binary()),
            "headers": pa.array([None if r is None else [{"key": k, "value": v} for k, v in r] for r in rows],
                                headers),
            "partition": pa.array([0] * len(rows), pa.int32()), "offset": pa.array(range(len(rows)), pa.int64()),
            "timestamp": pa.array([1] * len(rows), pa.timestamp("ms"))}), buf)
        buf.seek(0)
        got = [h for b in parquet_batches(buf, 64) for h in b.headers]
        assert got == [r or [] for r in rows]
        assert all(type(h) is list for h in got)


def test_read_ahead_keeps_order_raises_the_readers_error_and_stops_when_closed():
    import threading

    def reader(n: int, fail_at: int | None = None, closed: list | None = None):
        try:
            for i in range(n):
                if i == fail_at:
                    raise ArchiveIntegrityError(f"bad batch {i}")
                yield _records([i], [1])
        finally:
            if closed is not None:
                closed.append(threading.current_thread().name)

    for depth in (0, 1, 3):
        assert [b.offsets[0] for b in ReadAhead(reader(10), depth)] == list(range(10))
        got = []
        with pytest.raises(ArchiveIntegrityError, match="bad batch 4"):
            for b in ReadAhead(reader(10, fail_at=4), depth):
                got.append(b.offsets[0])
        assert got == [0, 1, 2, 3]
    closed: list = []
    it = ReadAhead(reader(1000, closed=closed), 2)
    assert next(it).offsets == [0]
    it.close()  # stops the thread, then closes the reader in the caller's thread
    assert closed == [threading.current_thread().name]
    assert not [t for t in threading.enumerate() if t.name == "s3-archive-restore-read"]


def test_read_ahead_starts_reading_when_made_and_closing_an_unread_one_stops_it():
    """A run starts its readers before its producers are ready: the thread reads before any batch is asked for,
    and closing it unread (a run that failed first) stops the thread and closes the reader."""
    import threading

    read: list[int] = []
    closed: list[str] = []

    def reader():
        try:
            for i in range(1000):
                read.append(i)
                yield _records([i], [1])
        finally:
            closed.append(threading.current_thread().name)

    it = ReadAhead(reader(), 2)
    deadline = time.monotonic() + 5
    while len(read) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert read[:2] == [0, 1] and len(read) <= 4  # read ahead at once, at most `depth` batches (+ one in hand)
    it.close()
    assert closed == [threading.current_thread().name]
    assert not [t for t in threading.enumerate() if t.name == "s3-archive-restore-read"]
    assert list(it) == []


def test_window_reads_run_ahead_into_the_next_window_and_close_the_one_being_read():
    import threading

    from s3_archive.model.windows import OffsetWindow
    from s3_archive.restore.batch import WindowReads, WindowSource

    opened: list[int] = []
    closed: list[int] = []

    def source(p: int, n: int) -> WindowSource:
        def batches():
            opened.append(p)
            try:
                for i in range(n):
                    yield _records([i], [1])
            finally:
                closed.append(p)

        return WindowSource(OffsetWindow(p, 0, max(n, 1)), batches, n)  # window 1: no record (all absent)

    srcs = [source(0, 1), source(1, 0), source(2, 3)]
    reads = WindowReads(srcs, 2)
    assert [b.offsets for b in reads.of(srcs[0])] == [[0]]
    deadline = time.monotonic() + 5
    while opened != [0, 1, 2] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert opened == [0, 1, 2]  # the next windows are opened while the caller is still at the first one's end
    assert list(reads.of(srcs[1])) == []
    it = reads.of(srcs[2])
    assert next(it).offsets == [0]
    reads.close()  # mid-window: the thread stops and the window being read is closed
    assert closed == [0, 1, 2]
    assert not [t for t in threading.enumerate() if t.name == "s3-archive-restore-read"]

    reads = WindowReads(srcs, 1, materialize=True)
    with pytest.raises(RuntimeError, match="asked for out of order"):
        list(reads.of(srcs[2]))
    reads.close()


def test_window_reads_ask_for_the_next_windows_object_once_the_current_ones_first_batch_is_in():
    from s3_archive.model.windows import OffsetWindow
    from s3_archive.restore.batch import WindowReads, WindowSource

    events: list[str] = []

    def source(p: int, n: int) -> WindowSource:
        def batches():
            for i in range(n):
                events.append(f"read {p}.{i}")
                yield _records([i], [1])

        return WindowSource(OffsetWindow(p, 0, max(n, 1)), batches, n, prefetch=lambda: events.append(f"ahead {p}"))

    srcs = [source(0, 2), source(1, 0), source(2, 1)]
    reads = WindowReads(srcs, 0)
    for src in srcs:
        list(reads.of(src))
    reads.close()
    # never the first window (the run's Prefetch starts it); an empty window asks for the next at its end
    assert events == ["read 0.0", "ahead 1", "read 0.1", "ahead 2", "read 2.0"]


def test_objects_older_than_the_restore_are_frozen_only_while_it_runs():
    import gc

    from s3_archive.restore.run import older_objects_frozen

    assert gc.get_freeze_count() == 0
    with older_objects_frozen():
        assert gc.get_freeze_count() > 0  # the collector leaves the process's older objects alone
        made = [[i] for i in range(10)]
    assert gc.get_freeze_count() == 0 and made
    gc.freeze()  # a process that freezes objects itself keeps its freeze
    try:
        frozen = gc.get_freeze_count()
        made_after = [[i] for i in range(1000)]  # a second freeze would move these too
        with older_objects_frozen():
            # not frozen again (that would move every object made since into the permanent generation)
            assert gc.get_freeze_count() <= frozen
        # nor unfrozen; frozen objects that other threads free meanwhile leave the count, so "at most", not "equal"
        assert 0 < gc.get_freeze_count() <= frozen and made_after
    finally:
        gc.unfreeze()


def _arrow_records(rows: list[ArchivedRecord]) -> Records:
    """`rows` as a Parquet reader hands them: every column an Arrow array (timestamps in µs, as Spark writes)."""
    headers = pa.list_(pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())])))
    buf = io.BytesIO()
    pq.write_table(pa.table({
        "key": pa.array([r.key for r in rows], pa.binary()), "value": pa.array([r.value for r in rows], pa.binary()),
        "headers": pa.array([[{"key": k, "value": v} for k, v in r.headers] for r in rows], headers),
        "partition": pa.array([r.partition for r in rows], pa.int32()),
        "offset": pa.array([r.offset for r in rows], pa.int64()),
        "timestamp": pa.array([r.timestamp_ms * 1000 for r in rows], pa.timestamp("us", tz="UTC"))}), buf)
    buf.seek(0)
    (batch,) = parquet_batches(buf, 1000)
    return batch


@settings(max_examples=100, deadline=None)
@given(offsets=st.lists(st.integers(0, 80), min_size=1, max_size=40, unique=True).map(sorted),
       lo=st.integers(0, 80), width=st.integers(1, 80),
       done=st.lists(st.tuples(st.integers(0, 80), st.integers(0, 15)), max_size=4),
       time_range=st.none() | st.tuples(st.none() | st.integers(-50, 50), st.none() | st.integers(51, 100)),
       seed=st.integers(0, 100))
def test_a_batch_of_arrow_columns_selects_clamps_and_counts_as_one_of_lists(offsets, lo, width, done, time_range,
                                                                            seed):
    timestamps = [(o * 37 + seed) % 150 - 50 for o in offsets]  # some <= 0
    lists = _records(offsets, timestamps)
    arrow = _arrow_records(list(lists.records()))
    assert arrow.arrow("keys") is not None and arrow.arrow("headers") is not None
    ledger = RangeSet((a, a + n) for a, n in done)
    filters = Filters(*time_range) if time_range else Filters()
    hi = lo + width
    got = [select(b, lo, hi, ledger if ledger.overlaps(lo, hi) else None, filters) for b in (lists, arrow)]
    (a, *counts_a), (b, *counts_b) = got
    assert counts_a == counts_b
    assert a.total_bytes() == b.total_bytes() == sum(a.sizes)
    assert a.clamp_timestamps() == b.clamp_timestamps()
    # the native producer gets the reader's columns, sliced and taken, not lists made back into arrays
    assert b.arrow("keys") is not None and b.arrow("values") is not None and b.arrow("headers") is not None
    assert b.arrow("timestamps").to_pylist() == a.timestamps
    assert list(b.records()) == list(a.records())
    assert list(b.slice(1, 3).records()) == list(a.slice(1, 3).records())


def test_replacing_a_column_drops_its_arrow_array_and_keeps_the_others():
    b = _arrow_records([ArchivedRecord(0, 5, b"k", b"v", [("h", b"1")], 7)])
    b.headers = [b.headers[0] + [("p", b"2")]]
    assert b.arrow("headers") is None and b.arrow("keys") is not None
    c = b.with_columns(values=[b"w"])
    assert c.arrow("values") is None and c.arrow("keys") is not None
    assert list(c.rows()) == [(0, 5, b"k", b"w", [("h", b"1"), ("p", b"2")], 7, 1 + 1 + 1 + 1)]
    assert b.materialized() is b and list(b.values) == [b"v"]
