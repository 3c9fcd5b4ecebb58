"""An object rewritten by an erasure is what the archive's encoders write for the records left: with nothing to
erase, the bytes it had (every format, every text codec); without some records, the bytes the encoder writes for the
others; with them nulled, their position kept. Objects as the archive writes them come from the encoders themselves
(integration/erasure/test_erase.py does the same with objects Spark's archive run wrote)."""

from __future__ import annotations

import base64
import io
import json
from datetime import UTC, datetime

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3_archive.archive.executor.encoders import AvroEncoder, LinesEncoder, ParquetEncoder
from s3_archive.archive.protocol import PARQUET_DICTIONARY, FormatPlan
from s3_archive.erasure.erasure import EraseRequest, FieldEquals
from s3_archive.erasure.rewrite import ObjectFormat, decode, matching, rewritten
from s3_archive.model.errors import ErasureRefused
from s3_archive.model.registry_types import avro_schema

N = 40
VICTIM = b"victim"
KEYS = [VICTIM if i % 7 == 3 else f"k{i}".encode() if i % 11 else None for i in range(N)]
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
TABLE = pa.table({
    "key": pa.array(KEYS, pa.binary()),
    "value": pa.array([f"value-{i}".encode() * (i % 5) if i % 13 else None for i in range(N)], pa.binary()),
    "topic": pa.array(["t"] * N, pa.string()),
    "partition": pa.array([0] * N, pa.int32()),
    "offset": pa.array(range(100, 100 + N), pa.int64()),
    "timestamp": pa.array([datetime(2026, 1, 1, tzinfo=UTC)] * N, pa.timestamp("us", "UTC")),
    "timestamp_type": pa.array([0] * N, pa.int32()),
    "headers": pa.array([[{"key": "h", "value": bytes([i])}] if i % 2 else [] for i in range(N)], HEADERS),
    "user": pa.array([i % 4 for i in range(N)], pa.int64()),
})
SPARK = {"type": "struct", "fields": [
    {"name": "key", "type": "binary", "nullable": True}, {"name": "value", "type": "binary", "nullable": True},
    {"name": "topic", "type": "string", "nullable": True}, {"name": "partition", "type": "integer", "nullable": True},
    {"name": "offset", "type": "long", "nullable": True}, {"name": "timestamp", "type": "timestamp", "nullable": True},
    {"name": "timestamp_type", "type": "integer", "nullable": True},
    {"name": "headers", "nullable": True, "type": {"type": "array", "containsNull": True, "elementType": {
        "type": "struct", "fields": [{"name": "key", "type": "string", "nullable": True},
                                     {"name": "value", "type": "binary", "nullable": True}]}}},
    {"name": "user", "type": "long", "nullable": True},
]}
BY_KEY = EraseRequest("t", (VICTIM,))
VICTIM_ROWS = [i for i in range(N) if KEYS[i] == VICTIM]
KEY = "p/t/kafka_partition=0/t+0+0000000000000000100-0000000000000000140+00000"


def _parquet(table: pa.Table, codec: str, column_codecs: tuple[tuple[str, str], ...] = ()) -> bytes:
    sink = io.BytesIO()
    enc = ParquetEncoder(FormatPlan("parquet", codec, ".parquet", spark_schema=json.dumps(SPARK),
                                    dictionary=PARQUET_DICTIONARY, column_codecs=column_codecs), sink)
    enc.write(table)
    enc.close()
    return sink.getvalue()


def _avro(table: pa.Table, codec: str, key: str) -> bytes:
    sink = io.BytesIO()
    enc = AvroEncoder(FormatPlan("avro", codec, ".avro", avro_schema=avro_schema(json.dumps(SPARK))), sink, key)
    enc.write(table)
    enc.close()
    return sink.getvalue()


def _json_line(row: dict) -> bytes:
    b64 = {k: (base64.b64encode(v).decode() if isinstance(v, bytes) else v) for k, v in row.items()}
    b64["headers"] = [{"key": h["key"], "value": base64.b64encode(h["value"]).decode()} for h in row["headers"]]
    b64["timestamp"] = "2026-01-01T00:00:00.000000Z"
    return json.dumps(b64, separators=(",", ":")).encode()


def _csv_line(row: dict) -> bytes:
    key = b"" if row["key"] is None else base64.b64encode(row["key"])
    value = b"" if row["value"] is None else base64.b64encode(row["value"])
    return b",".join([key, value, str(row["offset"]).encode(), b"1767225600000", b""])  # unix_millis, as Spark


def _lines(name: str, codec: str, rows: list[dict], header: bytes = b"") -> bytes:
    sink = io.BytesIO()
    enc = LinesEncoder(FormatPlan(name, codec, "", header=header), sink)
    render = _csv_line if name == "csv" else _json_line
    enc.write(pa.table({"_line": pa.array([render(r) for r in rows], pa.binary())}))
    enc.close()
    return sink.getvalue()


ROWS = TABLE.to_pylist()
KEPT = [r for i, r in enumerate(ROWS) if i not in VICTIM_ROWS]
CSV = ("key", "value", "offset", "timestamp", "headers")


def _case(name: str, codec: str, rows: list[dict], header: bytes = b"") -> bytes:
    table = pa.Table.from_pylist(rows, schema=TABLE.schema)
    if name == "parquet":
        return _parquet(table, codec)
    if name == "avro":
        return _avro(table, codec, KEY + ".avro")
    return _lines(name, codec, rows, header)


FORMATS = [("parquet", "snappy"), ("parquet", "zstd"), ("parquet", "none"), ("avro", "snappy"), ("avro", "zstd"),
           ("avro", "none"), *[(f, c) for f in ("jsonl", "json", "csv") for c in ("none", "gzip", "zstd", "bzip2")]]


def _fmt(name: str, codec: str, header: bytes = b"") -> ObjectFormat:
    return ObjectFormat(name, codec, csv_fields=CSV if name == "csv" else (), header=header)


@pytest.mark.parametrize("name, codec", FORMATS)
def test_an_object_rewritten_without_any_record_erased_is_the_object_it_was(name, codec):
    original = _case(name, codec, ROWS)
    d = decode(original, KEY + ".avro", _fmt(name, codec), BY_KEY)
    assert d.offsets == list(range(100, 100 + N))
    assert rewritten(d, [], "drop") == original
    assert rewritten(d, [], "null") == original


@pytest.mark.parametrize("name, codec", FORMATS)
def test_an_object_without_the_erased_records_is_what_the_encoder_writes_for_the_others(name, codec):
    original = _case(name, codec, ROWS)
    d = decode(original, KEY + ".avro", _fmt(name, codec), BY_KEY)
    rows = matching(d, BY_KEY)
    assert rows == VICTIM_ROWS
    assert rewritten(d, rows, "drop") == _case(name, codec, KEPT)


@pytest.mark.parametrize("configured", ["snappy", "zstd", "gzip"])
def test_a_column_of_another_codec_keeps_it_when_the_object_is_rewritten(configured):
    own = (("value", "zstd"),)  # a decoded archive's raw value beside its snappy columns (archive/driver/output.py)
    original = _parquet(TABLE, "snappy", own)
    d = decode(original, KEY + ".parquet", _fmt("parquet", configured), BY_KEY)
    assert (d.fmt.codec, d.fmt.column_codecs) == ("snappy", own)
    assert rewritten(d, [], "drop") == original
    assert rewritten(d, VICTIM_ROWS, "drop") == _parquet(pa.Table.from_pylist(KEPT, schema=TABLE.schema), "snappy", own)


@pytest.mark.parametrize("name, codec", [("parquet", "snappy"), ("avro", "snappy"), ("jsonl", "gzip"),
                                         ("json", "none"), ("csv", "zstd")])
def test_nulled_records_keep_their_position_and_nothing_else(name, codec):
    d = decode(_case(name, codec, ROWS), KEY + ".avro", _fmt(name, codec), BY_KEY)
    again = decode(rewritten(d, VICTIM_ROWS, "null"), KEY + ".avro", _fmt(name, codec), BY_KEY)
    assert again.offsets == d.offsets and matching(again, BY_KEY) == []
    if name == "parquet":
        got = pq.read_table(io.BytesIO(rewritten(d, VICTIM_ROWS, "null"))).to_pylist()
    elif name == "avro":
        got = list(fastavro.reader(io.BytesIO(rewritten(d, VICTIM_ROWS, "null"))))
    else:
        got = [{"key": k} for k in again.columns["key"]]
    for i, r in enumerate(got):
        if i in VICTIM_ROWS:
            assert all(v is None for n, v in r.items() if n not in ("topic", "partition", "offset", "timestamp",
                                                                    "timestamp_type")), r
        else:
            assert r["key"] == KEYS[i]
    if name not in ("parquet", "avro"):  # the lines kept are the lines as written, not rendered again
        assert [ln for i, ln in enumerate(again.rows) if i not in VICTIM_ROWS] == [
            ln for i, ln in enumerate(d.rows) if i not in VICTIM_ROWS]


def test_a_csv_header_row_is_written_again_and_not_taken_for_a_record():
    header = b"key,value,offset,timestamp,headers"
    original = _case("csv", "gzip", ROWS, header)
    d = decode(original, KEY + ".csv.gz", _fmt("csv", "gzip", header), BY_KEY)
    assert len(d) == N and rewritten(d, [], "drop") == original
    assert rewritten(d, VICTIM_ROWS, "drop") == _case("csv", "gzip", KEPT, header)


def test_an_object_left_without_records_is_not_written():
    only = [r for i, r in enumerate(ROWS) if i in VICTIM_ROWS]
    for name, codec in (("parquet", "snappy"), ("avro", "snappy"), ("jsonl", "none"), ("csv", "gzip")):
        d = decode(_case(name, codec, only), KEY + ".avro", _fmt(name, codec), BY_KEY)
        assert rewritten(d, matching(d, BY_KEY), "drop") is None
        assert rewritten(d, matching(d, BY_KEY), "null") is not None  # nulled records stay


def test_a_predicate_matches_a_decoded_column_and_a_format_without_it_is_refused():
    user = EraseRequest("t", predicate=FieldEquals("user", 2))
    for name in ("parquet", "avro", "jsonl"):
        d = decode(_case(name, "none", ROWS), KEY, _fmt(name, "none"), user)
        assert matching(d, user) == [i for i in range(N) if i % 4 == 2], name
    d = decode(_case("csv", "none", ROWS), KEY, _fmt("csv", "none"), user)
    with pytest.raises(ErasureRefused, match="has no 'user'"):
        matching(d, user)
    dead = decode(_case("parquet", "snappy", ROWS), KEY, ObjectFormat("parquet", "snappy", dead_letter=True), user)
    dead.columns["user"] = None  # a dead letter holds the raw envelope: no decoded column, nothing matches there
    assert matching(dead, user) == []


def test_formats_without_key_or_offset_are_refused():
    with pytest.raises(ErasureRefused, match="keeps no key or offset"):
        decode(b"text\n", KEY, ObjectFormat("text", "none"), BY_KEY)
    with pytest.raises(ErasureRefused, match="stores no offset"):
        decode(_parquet(TABLE.drop_columns(["offset"]), "snappy"), KEY, ObjectFormat("parquet", "snappy"), BY_KEY)


def test_an_avro_object_rewritten_again_keeps_the_sync_marker_of_its_first_name():
    original = _case("avro", "snappy", ROWS)
    second_generation = KEY + ".g2-abc.avro"
    d = decode(original, second_generation, _fmt("avro", "snappy"), BY_KEY)
    assert rewritten(d, [], "drop", origin=KEY + ".avro") == original
    assert rewritten(d, [], "drop") != original  # the marker of the new name is not the archive's
