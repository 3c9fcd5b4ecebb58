"""Reading archived objects for a restore (pure or local-file parts): column-wise Parquet decoding, the json array
format, which windows are restorable, cold-storage options."""

import base64
import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from s3_archive.model.errors import ArchiveIntegrityError, InvalidRestore
from s3_archive.model.manifest import parse_manifest
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.cold import ColdOptions
from s3_archive.restore.readers import _headers_and_sizes, json_array_records, parquet_records
from s3_archive.restore.request import ArchivedRecord, record_bytes
from s3_archive.restore.sources import check_restorable, unrestorable_reason
from s3_archive_tests.manifests import hand_manifest

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
maybe_bytes = st.none() | st.binary(max_size=12)
header = st.tuples(st.text(max_size=4), maybe_bytes)
row = st.tuples(maybe_bytes, maybe_bytes, st.none() | st.lists(header, max_size=4),
                st.integers(min_value=0, max_value=2**41))


def _table(rows: list, extra: bool = False) -> pa.Table:
    cols = {
        "key": pa.array([r[0] for r in rows], pa.binary()),
        "value": pa.array([r[1] for r in rows], pa.binary()),
        "headers": pa.array([None if r[2] is None else [{"key": k, "value": v} for k, v in r[2]] for r in rows],
                            HEADERS),
        "topic": ["t"] * len(rows),
        "partition": pa.array([3] * len(rows), pa.int32()),
        "offset": pa.array(range(100, 100 + len(rows)), pa.int64()),
        "timestamp": pa.array([r[3] * 1000 for r in rows], pa.timestamp("us", tz="UTC")),
        "timestamp_type": pa.array([0] * len(rows), pa.int32()),
    }
    if extra:  # decoded value columns (value_decoding json) next to the envelope: not read
        cols["v_id"] = pa.array([1] * len(rows), pa.int64())
    return pa.table(cols)


def _expected(rows: list) -> list[tuple]:
    return [(3, 100 + i, k, v, list(hs or []), ts, record_bytes(k, v, list(hs or [])))
            for i, (k, v, hs, ts) in enumerate(rows)]


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(row, min_size=1, max_size=30), row_group=st.integers(min_value=1, max_value=7),
       extra=st.booleans())
def test_parquet_records_column_wise_equal_the_row_by_row_reading(rows, row_group, extra):
    buf = io.BytesIO()
    pq.write_table(_table(rows, extra), buf, row_group_size=row_group)
    buf.seek(0)
    assert [tuple(r) for r in parquet_records(buf)] == _expected(rows)


def test_headers_and_sizes_of_a_sliced_batch_and_of_null_lists_over_values():
    rows = [(b"k", b"vv", [("a", b"1"), ("\u00e9", None)], 1), (None, None, None, 2), (b"", b"", [("x", b"")], 3),
            (b"key", None, [("h", b"123")], 4)]
    batch = _table(rows).to_batches()[0].slice(1, 3)
    headers, sizes = _headers_and_sizes(batch)
    assert headers == [[], [("x", b"")], [("h", b"123")]]
    assert sizes == [0, 1, 3 + 1 + 3]
    # A null list whose segment is not empty (allowed by Arrow): no headers, no bytes.
    values = pa.array([{"key": "a", "value": b"zz"}, {"key": "b", "value": b"y"}], HEADERS.value_type)
    lists = pa.ListArray.from_arrays(pa.array([0, 1, 2], pa.int32()), values, mask=pa.array([True, False]))
    batch = pa.record_batch({"key": pa.array([b"k", b"k"]), "value": pa.array([None, b""], pa.binary()),
                             "headers": lists})
    assert lists.to_pylist() == [None, [{"key": "b", "value": b"y"}]]
    assert _headers_and_sizes(batch) == ([[], [("b", b"y")]], [1, 1 + 2])
    assert ArchivedRecord(0, 1, None, None, [], 0).size is None  # readers without sizes: computed per record


def _json_line(offset: int, value: bytes | None, **extra) -> str:
    return json.dumps({"key": base64.b64encode(b"k").decode(), "value": None if value is None else
                       base64.b64encode(value).decode(), "headers": [{"key": "h", "value": None}], "topic": "t",
                       "partition": 0, "offset": offset, "timestamp": "2023-11-14T22:13:20.005000Z",
                       "timestamp_type": 0, **extra})


def test_json_array_objects_as_the_archive_writes_them():
    text = "\n".join(["[" + _json_line(5, b"a]", v_id=1), "," + _json_line(6, None), "," + _json_line(8, b"") + "]"])
    recs = list(json_array_records(io.BytesIO(text.encode()), "obj"))
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp_ms) for r in recs] == [
        (5, b"k", b"a]", [("h", None)], 1_700_000_000_005), (6, b"k", None, [("h", None)], 1_700_000_000_005),
        (8, b"k", b"", [("h", None)], 1_700_000_000_005)]
    assert [r.offset for r in json_array_records(io.BytesIO(f"[{_json_line(1, b'x')}]\n".encode()), "o")] == [1]
    assert list(json_array_records(io.BytesIO(b"[]"), "o")) == []
    assert [r.offset for r in json_array_records(io.BytesIO(f"[\n{_json_line(1, b'x')}\n]".encode()), "o")] \
        == [1]


@pytest.mark.parametrize("text,problem", [
    (_json_line(1, b"x"), "must be a JSON array"),
    ("[" + _json_line(1, b"x"), "not closed"),
    ("[" + _json_line(1, b"x") + "\n" + _json_line(2, b"y") + "]", "one per line"),
    ("[" + _json_line(1, b"x") + "]\n[" + _json_line(2, b"y") + "]", "after the closing"),
])
def test_json_array_objects_of_another_shape_are_reported(text, problem):
    with pytest.raises(ArchiveIntegrityError, match=problem):
        list(json_array_records(io.BytesIO(text.encode()), "s3://b/k.json"))


FULL = ["key", "value", "headers", "topic", "partition", "offset", "timestamp", "timestamp_type"]


@pytest.mark.parametrize("manifest,reason", [
    ({"format": "parquet"}, None),  # written before `restorable` existed
    ({"format": "json", "envelope": FULL, "value_decoding": "json", "restorable": True}, None),
    ({"format": "csv", "restorable": False}, "format 'csv' does not keep key, value and headers byte for byte"),
    ({"format": "bytes"}, "format 'bytes' does not keep"),
    ({"format": "avro", "envelope": ["key", "value"], "restorable": False},
     "its envelope lacks headers, topic, partition, offset, timestamp, timestamp_type"),
    ({"format": "parquet", "envelope": FULL, "value_decoding": "utf8", "restorable": False},
     "stored as UTF-8 text"),
    ({"format": "parquet", "envelope": FULL, "restorable": False}, "its manifest says restorable: false"),
])
def test_unrestorable_reason(manifest, reason):
    got = unrestorable_reason(hand_manifest(**manifest))
    assert got == reason if reason is None else reason in got


def test_a_real_manifest_from_before_restorable_is_judged_by_its_format():
    old = (Path(__file__).parents[1] / "model" / "manifests" / "before-output-options.json").read_bytes()
    assert unrestorable_reason(parse_manifest(old)) is None


def test_check_restorable_names_every_bad_window():
    ok = hand_manifest(format="parquet", restorable=True)
    bad = hand_manifest(format="text", restorable=False)
    manifests = {OffsetWindow(0, i * 10, i * 10 + 10): (bad if i % 2 else ok) for i in range(14)}
    with pytest.raises(InvalidRestore) as e:
        check_restorable("orders", manifests)
    msg = str(e.value)
    assert msg.startswith("7 of 14 selected windows of topic 'orders' are not restorable: window "
                          f"{OffsetWindow(0, 10, 20).key}: format 'text'")
    assert "(and 2 more). Nothing was produced" in msg
    check_restorable("orders", {w: m for w, m in manifests.items() if m is ok})


def test_only_restorable_archives_get_a_restore_asset():
    from s3_archive.config.settings import parse_settings
    from s3_archive.defs.restore.assets import build_restore_assets
    from s3_archive.restore.sources import splits_windows

    base = {"bucket": "bkt"}
    settings_ = parse_settings({"archives": [
        {**base, "name": "raw", "topics": ["raw"]},
        {**base, "name": "decoded", "topics": ["decoded"], "format": "json",
         "value_decoding": {"type": "json", "on_error": "dead_letter"}},
        {**base, "name": "text", "topics": ["as_text"], "value_decoding": {"type": "utf8"}},
        {**base, "name": "slim", "topics": ["slim"], "envelope": {"headers": False}},
        {**base, "name": "csv", "topics": ["csv"], "format": "csv"},
        {**base, "name": "blobs", "topics": ["blobs"], "format": "bytes"},
        {**base, "name": "split", "topics": ["split"], "layout": {
            "template": "{{topic}}/{{partition_by}}/{{topic}}+{{partition}}+{{start_offset}}+{{part}}",
            "partition_by": [{"kind": "value", "field": "region"}]}},
    ]})
    assert [a.key.path[-1] for a in build_restore_assets(settings_)] == ["raw", "decoded", "split"]
    assert [splits_windows(a) for a in settings_.archives] == [False] * 6 + [True]


def test_cold_options_are_checked():
    assert ColdOptions().tier == "Standard" and ColdOptions().days == 7
    with pytest.raises(ValueError, match="cold_restore_tier must be one of Standard, Bulk, Expedited; got 'Fast'"):
        ColdOptions(tier="Fast")
    with pytest.raises(ValueError, match="cold_restore_days must be >= 1, got 0"):
        ColdOptions(days=0)


def test_target_config_that_cannot_be_read_is_said_not_swallowed():
    from s3_archive.io.kafka import KafkaResource
    from s3_archive.restore.target_topic import target_checks

    nowhere = KafkaResource(bootstrap_servers="127.0.0.1:1", timeout_s=1)
    [warning], _ = target_checks(nowhere, "t", [{"min_timestamp_ms": 0}])
    assert warning.startswith("could not read the config of target topic 't' (") and "not checked" in warning
