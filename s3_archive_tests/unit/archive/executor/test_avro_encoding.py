"""The columnar Avro encoder writes the bytes fastavro writes record by record (the reference), for the envelope
and for decoded values of every Spark type our avro schema maps, with nulls at every level, extreme numbers, empty
lists and maps, and blocks cut across Arrow batches."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import random

import fastavro
import numpy as np
import pyarrow as pa
import pytest

from s3_archive.archive.executor import avro_encoding as avro_binary
from s3_archive.archive.executor.encoders import AvroEncoder, _timestamps_as_micros
from s3_archive.archive.protocol import FormatPlan
from s3_archive.model.registry_types import avro_schema

ENVELOPE = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("timestamp", pa.timestamp("us", "UTC")), ("timestampType", pa.int32()),
    ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
])
ENVELOPE_SPARK = {"type": "struct", "fields": [
    {"name": "key", "type": "binary", "nullable": True}, {"name": "value", "type": "binary", "nullable": True},
    {"name": "topic", "type": "string", "nullable": True}, {"name": "partition", "type": "integer", "nullable": True},
    {"name": "offset", "type": "long", "nullable": True}, {"name": "timestamp", "type": "timestamp", "nullable": True},
    {"name": "timestampType", "type": "integer", "nullable": True},
    {"name": "headers", "nullable": True, "type": {"type": "array", "containsNull": True, "elementType": {
        "type": "struct", "fields": [{"name": "key", "type": "string", "nullable": True},
                                     {"name": "value", "type": "binary", "nullable": True}]}}},
]}

DECODED = pa.schema([
    ("b", pa.bool_()), ("i8", pa.int8()), ("i16", pa.int16()), ("i32", pa.int32()), ("i64", pa.int64()),
    ("f32", pa.float32()), ("f64", pa.float64()), ("s", pa.string()), ("day", pa.date32()),
    ("local", pa.timestamp("us")), ("amount", pa.decimal128(12, 3)),
    ("tags", pa.list_(pa.int64())), ("scores", pa.map_(pa.string(), pa.float64())),
    ("inner", pa.struct([("name", pa.string()), ("deep", pa.struct([("n", pa.int64())])),
                         ("when", pa.timestamp("us", "UTC"))])),
    ("req", pa.int64()),
])


def _f(name: str, t, nullable: bool = True) -> dict:
    return {"name": name, "type": t, "nullable": nullable}


DECODED_SPARK = {"type": "struct", "fields": [
    _f("b", "boolean"), _f("i8", "byte"), _f("i16", "short"), _f("i32", "integer"), _f("i64", "long"),
    _f("f32", "float"), _f("f64", "double"), _f("s", "string"), _f("day", "date"), _f("local", "timestamp_ntz"),
    _f("amount", "decimal(12,3)"),
    _f("tags", {"type": "array", "elementType": "long", "containsNull": True}),
    _f("scores", {"type": "map", "keyType": "string", "valueType": "double", "valueContainsNull": True}),
    _f("inner", {"type": "struct", "fields": [
        _f("name", "string"), _f("deep", {"type": "struct", "fields": [_f("n", "long")]}), _f("when", "timestamp")]}),
    _f("req", "long", nullable=False),
]}

_INTS = {8: [-128, 127, 0, -1, 63, 64], 16: [-32768, 32767, -65, 8191, 8192],
         32: [-2**31, 2**31 - 1, -64, 300, 16384], 64: [-2**63, 2**63 - 1, -2**56, 2**35, 127, 128]}


def _maybe(rng: random.Random, value, p: float = 0.2):
    return None if rng.random() < p else value


def _int(rng: random.Random, bits: int) -> int:
    return rng.choice(_INTS[bits]) if rng.random() < 0.5 else rng.randint(-2 ** (bits - 1), 2 ** (bits - 1) - 1)


def _text(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("aé€😀 \n\"") for _ in range(rng.randint(0, n)))


def _envelope_rows(rng: random.Random, n: int, value_size: int) -> list[dict]:
    t0 = dt.datetime(2026, 11, 23, tzinfo=dt.timezone.utc)
    return [{"key": _maybe(rng, rng.randbytes(rng.randint(0, 20))),
             "value": _maybe(rng, rng.randbytes(rng.randint(0, value_size))),
             "topic": "orders", "partition": rng.randint(0, 5), "offset": 10**12 + i,
             "timestamp": _maybe(rng, t0 + dt.timedelta(microseconds=rng.randint(-10**15, 10**15)), 0.05),
             "timestampType": rng.choice([0, 1]),
             "headers": _maybe(rng, [{"key": _maybe(rng, _text(rng, 8)), "value": _maybe(rng, rng.randbytes(5))}
                                     for _ in range(rng.choice([0, 0, 1, 3]))])}
            for i in range(n)]


def _decoded_rows(rng: random.Random, n: int) -> list[dict]:
    def row() -> dict:
        return {"b": _maybe(rng, rng.random() < 0.5), "i8": _maybe(rng, _int(rng, 8)),
                "i16": _maybe(rng, _int(rng, 16)), "i32": _maybe(rng, _int(rng, 32)),
                "i64": _maybe(rng, _int(rng, 64)),
                "f32": _maybe(rng, rng.choice([0.5, -2.25, 1e30, float("inf")])),
                "f64": _maybe(rng, rng.uniform(-1e300, 1e300)), "s": _maybe(rng, _text(rng, 30)),
                "day": _maybe(rng, dt.date(1970, 1, 1) + dt.timedelta(days=rng.randint(-10**5, 10**5))),
                "local": _maybe(rng, dt.datetime(2001, 2, 3) + dt.timedelta(microseconds=rng.randint(0, 10**14))),
                "amount": _maybe(rng, decimal.Decimal(rng.randint(-10**12 + 1, 10**12 - 1)).scaleb(-3)),
                "tags": _maybe(rng, [_maybe(rng, _int(rng, 64)) for _ in range(rng.choice([0, 1, 2, 7]))]),
                "scores": _maybe(rng, [(f"k{j}é", _maybe(rng, rng.random())) for j in range(rng.choice([0, 2]))]),
                "inner": _maybe(rng, {"name": _maybe(rng, _text(rng, 10)),
                                      "deep": _maybe(rng, {"n": _maybe(rng, _int(rng, 64))}),
                                      "when": _maybe(rng, dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc))}),
                "req": _int(rng, 64)}
    return [row() for _ in range(n)]


def _reference(schema_json: str, table: pa.Table, key: str, codec: str) -> bytes:
    """fastavro, one record at a time: what the avro format wrote before the columnar encoder."""
    out = io.BytesIO()
    import hashlib

    w = fastavro.write.Writer(out, fastavro.parse_schema(json.loads(schema_json)), codec=codec,
                              sync_interval=1 << 20, sync_marker=hashlib.md5(key.encode()).digest())
    for record in _timestamps_as_micros(table).to_pylist(maps_as_pydicts="strict"):
        w.write(record)
    w.flush()
    return out.getvalue()


def _columnar(schema_json: str, table: pa.Table, key: str, codec: str, cuts: list[int]) -> bytes:
    out = io.BytesIO()
    enc = AvroEncoder(FormatPlan("avro", codec, ".avro", avro_schema=schema_json), out, key)
    assert enc._blocks is not None, "the schema should take the columnar path"
    bounds = [0, *sorted(cuts), table.num_rows]
    for a, z in zip(bounds, bounds[1:], strict=False):
        enc.write(table.slice(a, z - a))
    enc.close()
    return out.getvalue()


def _cuts(rng: random.Random, n: int) -> list[int]:
    return [rng.randint(0, n) for _ in range(rng.randint(0, 4))]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("codec", ["none", "snappy", "deflate", "zstd"])
def test_envelope_matches_fastavro(seed, codec):
    rng = random.Random(seed)
    # large values on some seeds: more than one 1 MiB block, cut inside and across batches
    table = pa.Table.from_pylist(_envelope_rows(rng, 300, 40_000 if seed % 2 else 200), schema=ENVELOPE)
    schema_json = avro_schema(json.dumps(ENVELOPE_SPARK))
    fastavro_codec = {"none": "null", "zstd": "zstandard"}.get(codec, codec)
    expected = _reference(schema_json, table, f"k{seed}", fastavro_codec)
    got = _columnar(schema_json, table, f"k{seed}", codec, _cuts(rng, table.num_rows))
    assert got == expected
    assert [r["offset"] for r in fastavro.reader(io.BytesIO(got))] == table.column("offset").to_pylist()


@pytest.mark.parametrize("seed", range(8))
def test_every_decoded_type_matches_fastavro(seed):
    rng = random.Random(100 + seed)
    table = pa.Table.from_pylist(_decoded_rows(rng, 250), schema=DECODED)
    schema_json = avro_schema(json.dumps(DECODED_SPARK))
    assert avro_binary.supported(json.loads(schema_json))
    assert _columnar(schema_json, table, "d", "none", _cuts(rng, 250)) == _reference(schema_json, table, "d", "null")


def test_blocks_cut_where_fastavro_cuts_them():
    """Records that fill a block exactly (one record, two records: 5 bytes of tags and length each), and records
    straddling it: the same blocks."""
    for size in ((1 << 20) - 5, (1 << 19) - 5, 300_000):
        rows = [{"value": b"x" * size, "key": None} for _ in range(5)]
        schema = pa.schema([("key", pa.binary()), ("value", pa.binary())])
        table = pa.Table.from_pylist(rows, schema=schema)
        spark = {"type": "struct", "fields": [_f("key", "binary"), _f("value", "binary")]}
        schema_json = avro_schema(json.dumps(spark))
        got = _columnar(schema_json, table, "b", "none", [1, 1, 3])
        assert got == _reference(schema_json, table, "b", "null")
        counts = [b.num_records for b in fastavro.block_reader(io.BytesIO(got))]
        assert sum(counts) == 5 and len(counts) > 1, counts


def test_varints_are_avro_longs():
    values = np.array([0, -1, 1, -64, 63, 64, -65, 2**31 - 1, -2**31, 2**63 - 1, -2**63], dtype=np.int64)
    encoded = avro_binary.varints(values).to_pylist()
    for v, e in zip(values.tolist(), encoded, strict=True):
        out = io.BytesIO()
        fastavro.schemaless_writer(out, "long", v)
        assert e == out.getvalue(), v


def test_sliced_nested_arrays_encode_only_their_rows():
    """Lists, maps and structs sliced out of a larger array (Arrow offsets not at zero)."""
    rng = random.Random(7)
    table = pa.Table.from_pylist(_decoded_rows(rng, 60), schema=DECODED).slice(17, 30)
    table = pa.Table.from_arrays([c.combine_chunks() for c in table.columns], schema=DECODED)
    schema_json = avro_schema(json.dumps(DECODED_SPARK))
    assert _columnar(schema_json, table, "s", "none", []) == _reference(schema_json, table, "s", "null")


def test_schemas_it_cannot_encode_fall_back_to_fastavro():
    assert not avro_binary.supported(["int", "string", "null"])
    assert not avro_binary.supported({"type": "enum", "name": "e", "symbols": ["A"]})
    assert avro_binary.supported(["null", {"type": "array", "items": "long"}])
    schema = {"type": "record", "name": "r", "fields": [{"name": "u", "type": ["int", "string", "null"]}]}
    out = io.BytesIO()
    enc = AvroEncoder(FormatPlan("avro", "none", ".avro", avro_schema=json.dumps(schema)), out, "u")
    assert enc._blocks is None
    enc.write(pa.table({"u": pa.array([1, None, 3], pa.int64())}))
    enc.close()
    assert [r["u"] for r in fastavro.reader(io.BytesIO(out.getvalue()))] == [1, None, 3]
