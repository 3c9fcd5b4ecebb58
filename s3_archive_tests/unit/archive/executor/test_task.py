"""The write task without Spark or S3: rotation, statistics and framing do not depend on how the records are cut
into Arrow batches, and match a per-record reference."""

from __future__ import annotations

import hashlib
import io
import json
import random
from dataclasses import replace

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import s3_archive.archive.executor.task as writer_mod
from s3_archive.archive.executor.upload import Written
from s3_archive.archive.protocol import FormatPlan, S3Connection, Slice, WriteJob, slices_of, splittable, window_stats
from s3_archive.keys.layout import OutputLayout
from s3_archive.keys.objects import object_key
from s3_archive.model.windows import OffsetWindow


class FakeUpload(io.RawIOBase):
    """ObjectUpload's interface, in memory (a writable file-like sink, as ParquetWriter needs)."""

    store: dict[str, bytes] = {}

    def __init__(self, conn, bucket, key, manifest_key, *a, **kw) -> None:
        super().__init__()
        self.key, self.buf = key, bytearray()

    def write(self, data) -> int:
        self.buf += bytes(data)
        return len(data)

    def tell(self) -> int:
        return len(self.buf)

    def writable(self) -> bool:
        return True

    def finish(self) -> Written:
        FakeUpload.store[self.key] = bytes(self.buf)
        return Written(self.key, len(self.buf), "etag", hashlib.sha256(self.buf).hexdigest())

    def abort(self) -> None:
        pass


@pytest.fixture(autouse=True)
def fake_upload(monkeypatch):
    FakeUpload.store = {}
    monkeypatch.setattr(writer_mod, "ObjectUpload", FakeUpload)


def _job(window: OffsetWindow, fmt: str = "jsonl", **kw) -> WriteJob:
    return WriteJob(topic="t", bucket="b", prefix="p/", fmt=FormatPlan(fmt, "none", f".{fmt}"), conn=S3Connection(),
                    slices=(Slice(window, window.start, window.end),), payload=("_line",), **kw)


def _batches(offsets: list[int], sizes: list[int], cuts: list[int], buckets: list[str] | None = None):
    rows = {"_partition": [0] * len(offsets), "_offset": offsets, "_ts": [1000 + o for o in offsets],
            "_rec_bytes": sizes}
    if buckets is not None:
        rows["_bucket"] = buckets
    rows["_line"] = [json.dumps({"o": o}).encode() for o in offsets]
    table = pa.table(rows)
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(offsets))), len(offsets)]
    return [b for a, z in zip(bounds[:-1], bounds[1:], strict=True) for b in table.slice(a, z - a).to_batches()]


def _run(job: WriteJob, batches) -> list[dict]:
    FakeUpload.store = {}
    out = list(writer_mod.write_task(job, iter(batches)))
    return out[0].to_pylist() if out else []


def _reference_parts(offsets, sizes, max_records, max_bytes) -> list[list[int]]:
    parts: dict[tuple[int, int], list[int]] = {}
    before, bpart_prev, n = 0, None, 0
    for o, s in zip(offsets, sizes, strict=True):
        bpart = before // max_bytes if max_bytes else 0
        n = n + 1 if bpart == bpart_prev else 1
        bpart_prev = bpart
        rpart = (n - 1) // max_records if max_records else 0
        parts.setdefault((bpart, rpart), []).append(o)
        before += s
    return [parts[k] for k in sorted(parts)]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 60), st.integers(0, 2**31), st.sampled_from([None, 3, 7]), st.sampled_from([None, 1500, 4000]))
def test_rotation_matches_the_per_record_rule_whatever_the_batches(n, seed, max_records, max_bytes):
    rnd = random.Random(seed)
    offsets = sorted(rnd.sample(range(n * 2), n))
    sizes = [rnd.choice([10, 300, 900, 5000]) for _ in offsets]
    window = OffsetWindow(0, 0, n * 2)
    job = _job(window, max_records=max_records, max_bytes=max_bytes)
    rows = _run(job, _batches(offsets, sizes, [rnd.randrange(n + 1) for _ in range(rnd.randrange(4))]))

    expected = _reference_parts(offsets, sizes, max_records, max_bytes)
    objects = sorted(r["key"] for r in rows if r["kind"] == "object")
    assert objects == [object_key("p/", "t", window, i, ".jsonl") for i in range(len(expected))]
    got = [[json.loads(line)["o"] for line in FakeUpload.store[k].decode().splitlines()] for k in objects]
    assert got == expected
    [stats] = [r for r in rows if r["kind"] == "slice"]
    assert (stats["records"], stats["bytes_read"], stats["first_offset"], stats["last_offset"]) == \
        (n, sum(sizes), offsets[0], offsets[-1])
    present = set(offsets)
    absent = {o for a, b in json.loads(stats["absent"]) for o in range(a, b)}
    assert absent == set(range(n * 2)) - present


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.integers(0, 2**31))
def test_buckets_sorted_in_the_task_number_parts_per_bucket_and_find_gaps(n, seed):
    rnd = random.Random(seed)
    offsets = sorted(rnd.sample(range(n * 3), n))
    buckets = [rnd.choice(["a", "b", "c"]) for _ in offsets]
    order = sorted(range(n), key=lambda i: (buckets[i], offsets[i]))  # what sortWithinPartitions gives the task
    layout = OutputLayout.model_validate({
        "template": "{{topic}}/{{partition_by}}/{{topic}}+{{partition}}+{{start_offset}}+{{part}}",
        "partition_by": [{"kind": "key", "hive": False}]})
    window = OffsetWindow(0, 0, n * 3)
    job = _job(window, layout=layout, bucketed=True, max_records=2)
    rows = _run(job, _batches([offsets[i] for i in order], [10] * n, [rnd.randrange(n + 1)],
                              [buckets[i] for i in order]))
    for b in set(buckets):
        mine = [o for o, x in zip(offsets, buckets, strict=True) if x == b]
        for part in range(-(-len(mine) // 2)):
            key = object_key("p/", "t", window, part, ".jsonl", layout, b)
            assert [json.loads(x)["o"] for x in FakeUpload.store[key].decode().splitlines()] == \
                mine[2 * part:2 * part + 2]
    [stats] = [r for r in rows if r["kind"] == "slice"]
    absent = {o for a, b in json.loads(stats["absent"]) for o in range(a, b)}
    assert absent == set(range(n * 3)) - set(offsets)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 30), st.integers(0, 2**31))
def test_json_objects_are_one_array_each_whatever_the_batches(n, seed):
    rnd = random.Random(seed)
    window = OffsetWindow(0, 0, n)
    job = _job(window, fmt="json", max_records=4)
    _run(job, _batches(list(range(n)), [1] * n, [rnd.randrange(n + 1) for _ in range(3)]))
    docs = [json.loads(FakeUpload.store[k]) for k in sorted(FakeUpload.store)]
    assert [d["o"] for doc in docs for d in doc] == list(range(n))
    assert all(isinstance(doc, list) and 0 < len(doc) <= 4 for doc in docs)
    assert all(FakeUpload.store[k].endswith(b"]\n") for k in FakeUpload.store)


def test_slices_cover_the_window_in_order_and_merge_back():
    w = OffsetWindow(2, 100, 161)
    slices = slices_of(w, 105, 3)
    assert [(s.start, s.end, s.index) for s in slices] == [(105, 123, 0), (123, 142, 1), (142, 161, 2)]
    assert slices_of(w, 159, 8) == [Slice(w, 159, 160, 0, 2), Slice(w, 160, 161, 1, 2)]
    rows = [{"slice": 0, "records": 17, "bytes_read": 170, "first_offset": 105, "last_offset": 122,
             "min_timestamp_ms": 5, "max_timestamp_ms": 9, "undecodable": 0, "first_undecodable_offset": None,
             "absent": "[[110, 111]]", "absent_truncated": False, "committed_elsewhere": False},
            {"slice": 2, "records": 1, "bytes_read": 10, "first_offset": 160, "last_offset": 160,
             "min_timestamp_ms": 1, "max_timestamp_ms": 1, "undecodable": 1, "first_undecodable_offset": 160,
             "absent": "[[142, 160]]", "absent_truncated": False, "committed_elsewhere": False}]
    m = window_stats(slices, rows)
    assert (m.records, m.bytes_read, m.first_offset, m.last_offset) == (18, 180, 105, 160)
    assert (m.min_timestamp_ms, m.max_timestamp_ms, m.undecodable, m.first_undecodable_offset) == (1, 9, 1, 160)
    assert m.absent == [[110, 111], [123, 160]]  # slice 1 had no record at all


def test_only_windows_nothing_else_numbers_are_split():
    by_key = OutputLayout.model_validate({"template": "{{topic}}/{{partition_by}}/{{topic}}+{{partition}}+"
                                                      "{{start_offset}}+{{part}}", "partition_by": [{"kind": "key"}]})
    assert splittable(None, False, "parquet") and not splittable(None, True, "parquet")
    assert not splittable(None, False, "bytes") and not splittable(by_key, False, "parquet")
    assert splittable(OutputLayout(), False, "jsonl")


def _envelope(offsets: list[int]) -> pa.Table:
    """Spark's Arrow types for the stored envelope of parquet and avro (every field nullable, as Spark's Kafka
    source has them)."""
    n = len(offsets)
    headers = pa.array([[{"key": "h", "value": b"%d" % o}] for o in offsets],
                       pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))
    return pa.table({"key": pa.array([b"k%d" % o for o in offsets], pa.binary()),
                     "value": pa.array([b"v" * (o % 7) for o in offsets], pa.binary()),
                     "headers": headers, "topic": pa.array(["t"] * n, pa.string()),
                     "partition": pa.array([0] * n, pa.int32()), "offset": pa.array(offsets, pa.int64()),
                     "timestamp": pa.array([1_700_000_000_000_000 + 1000 * o for o in offsets],
                                           pa.timestamp("us", "UTC")),
                     "timestamp_type": pa.array([0] * n, pa.int32())})


@pytest.mark.parametrize("fmt", ["parquet", "avro"])
def test_columns_the_task_derives_give_the_same_bytes_and_statistics_as_columns_sent(fmt):
    """archive/driver/spark_job.py does not send topic, partition, offset and `_ts` when parquet or avro store them: the task
    makes them (writer._stored_table). Same objects, byte for byte, and the same slice statistics."""
    from pyspark.sql import types as T

    from s3_archive.archive.protocol import DERIVED
    from s3_archive.model.registry_types import avro_schema

    offsets = [3, 4, 5, 7, 8, 11]
    env = _envelope(offsets)
    header = T.StructType([T.StructField("key", T.StringType()), T.StructField("value", T.BinaryType())])
    spark_schema = T.StructType([
        T.StructField("key", T.BinaryType()), T.StructField("value", T.BinaryType()),
        T.StructField("headers", T.ArrayType(header)), T.StructField("topic", T.StringType()),
        T.StructField("partition", T.IntegerType()), T.StructField("offset", T.LongType()),
        T.StructField("timestamp", T.TimestampType()), T.StructField("timestamp_type", T.IntegerType())]).json()
    plan = FormatPlan(fmt, "snappy" if fmt == "parquet" else "none", f".{fmt}", spark_schema=spark_schema,
                      avro_schema=avro_schema(spark_schema) if fmt == "avro" else "",
                      dictionary=("topic", "partition", "timestamp_type"))
    window = OffsetWindow(0, 3, 12)
    internal = {"_partition": env["partition"], "_offset": env["offset"],
                "_rec_bytes": pa.array([10] * len(offsets), pa.int64())}
    sent_all = pa.table({**internal, "_ts": pa.array([1_700_000_000_000 + o for o in offsets], pa.int64()),
                         **{c: env[c] for c in env.column_names}})
    lean = pa.table({**internal, **{c: env[c] for c in env.column_names if c not in DERIVED}})
    job = WriteJob(topic="t", bucket="b", prefix="p/", fmt=plan, conn=S3Connection(),
                   slices=(Slice(window, 3, 12),), payload=tuple(env.column_names))
    full = _run(job, sent_all.to_batches(max_chunksize=4))
    full_bytes = dict(FakeUpload.store)
    derived = _run(replace(job, derived=tuple((n, DERIVED[n]) for n in ("topic", "partition", "offset")),
                           ts_stored=True), lean.to_batches(max_chunksize=4))
    assert FakeUpload.store == full_bytes and len(full_bytes) == 1
    assert derived == full
    stats = next(r for r in derived if r["kind"] == "slice")
    assert (stats["min_timestamp_ms"], stats["max_timestamp_ms"], stats["records"]) == \
        (1_700_000_000_003, 1_700_000_000_011, 6)
    assert json.loads(stats["absent"]) == [[6, 7], [9, 11]]


@pytest.mark.parametrize("policy", ["skip", "fail", "bucket"])
def test_records_the_layout_cannot_place_are_skipped_counted_or_fail_the_slice(policy):
    layout = OutputLayout.model_validate({
        "template": "{{topic}}/{{partition_by}}/{{topic}}+{{partition}}+{{start_offset}}+{{part}}",
        "partition_by": [{"kind": "kafka_partition", "hive": False}, {"kind": "value", "field": "r", "hive": False}],
        "on_missing": policy})
    window = OffsetWindow(0, 0, 6)
    buckets = ["0/(null)", "0/(null)", "0/eu", "0/eu", "0/%28null%29", "0/us"]  # of the offsets in `order`
    order = [0, 4, 5, 1, 2, 3]
    job = _job(window, layout=layout, bucketed=True, on_missing=policy,
               missing_segments=layout.missing_segments if policy != "bucket" else ())
    rows = _run(job, _batches(order, [10] * 6, [3], buckets))
    [stats] = [r for r in rows if r["kind"] == "slice"]
    written = sorted(json.loads(line)["o"] for body in FakeUpload.store.values() for line in body.decode().splitlines())
    assert stats["records"] == 6 and json.loads(stats["absent"]) == []
    if policy == "bucket":
        assert written == list(range(6)) and stats["unplaceable"] == 0
    elif policy == "skip":
        # A real "(null)" value is escaped (%28null%29): it is placed.
        assert written == [1, 2, 3, 5] and (stats["unplaceable"], stats["skipped"]) == (2, 2)
        assert stats["first_unplaceable_offset"] == 0
    else:
        assert stats["unplaceable"] == 2 and not [r for r in rows if r["kind"] == "object"]


def test_skipped_tombstones_are_counted_not_written_and_not_absent():
    w = OffsetWindow(0, 10, 16)
    batches = _batches(list(range(10, 16)), [1] * 6, [2, 4])
    tombs = [False, True, True, False, False, True]
    batches = [b.append_column("_tomb", pa.array(tombs[b.column("_offset")[0].as_py() - 10:][:b.num_rows]))
               for b in batches]
    rows = _run(_job(w, skip_tombstones=True), batches)
    [stats] = [r for r in rows if r["kind"] == "slice"]
    assert (stats["records"], stats["tombstones_skipped"], stats["absent"]) == (6, 3, "[]")
    [(key, data)] = FakeUpload.store.items()
    assert [json.loads(line)["o"] for line in data.splitlines()] == [10, 13, 14]
    assert window_stats([Slice(w, 10, 16)], rows).tombstones_skipped == 3


def test_csv_header_row_and_gzip_level_per_object():
    import gzip

    w = OffsetWindow(0, 0, 5)
    job = replace(_job(w, "csv", max_records=2, layout=None),
                  fmt=FormatPlan("csv", "gzip", ".csv.gz", header=b"offset,value", level=1))
    _run(job, _batches(list(range(5)), [1] * 5, [3]))
    assert len(FakeUpload.store) == 3
    for data in FakeUpload.store.values():
        assert data[8] == 4  # gzip header XFL 4: the fastest compression (level 1)
        assert gzip.decompress(data).startswith(b"offset,value\n{")
