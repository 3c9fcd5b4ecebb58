"""Decoding Confluent-framed payloads in the write task (archive/executor/registry_decode.py), with schemas given in
the plan: typed columns, Avro resolution into the reader schema, and each kind of bad record with its reason."""

from __future__ import annotations

import io
import json
from datetime import UTC, date, datetime
from decimal import Decimal

import fastavro
import pyarrow as pa
import pytest

from s3_archive.archive.executor.registry_decode import decode, schema_id_column
from s3_archive.archive.protocol import DecodedPart, DecodePlan
from s3_archive.io.registry_client import RegistryConnection, RegistrySchema
from s3_archive.model.registry_types import avro_columns, json_schema_columns

V1 = {"type": "record", "name": "O", "namespace": "t", "fields": [
    {"name": "id", "type": "long"},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 2}},
    {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "inner", "type": {"type": "record", "name": "I", "fields": [
        {"name": "seen", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}},
    {"name": "many", "type": {"type": "array", "items": {"type": "long", "logicalType": "timestamp-micros"}}},
    {"name": "either", "type": ["null", "int", "string"], "default": None},
]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "email", "type": ["null", "string"], "default": None}]}
BAD = {**V1, "fields": [{"name": "id", "type": "string"}, *V1["fields"][1:]]}  # id changes type
S1, S2 = (RegistrySchema(i, "AVRO", json.dumps(s), (), "t-value", i) for i, s in ((1, V1), (2, V2)))
S3 = RegistrySchema(3, "AVRO", json.dumps(BAD), (), "t-value", 3)
T0 = datetime(2026, 3, 1, 12, 0, 0, 123000, tzinfo=UTC)


def _framed(schema: dict, sid: int, record: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return b"\x00" + sid.to_bytes(4, "big") + out.getvalue()


def _record(i: int) -> dict:
    return {"id": i, "day": date(2026, 3, i + 1), "at": T0, "price": Decimal(f"{i}.50"),
            "uid": f"00000000-0000-4000-8000-00000000000{i}", "inner": {"seen": T0}, "many": [T0],
            "either": i if i % 2 else "s"}


def _plan(reader: RegistrySchema, *schemas: RegistrySchema, dead_letter: str = "") -> DecodePlan:
    struct = avro_columns(reader.text)
    part = DecodedPart("value", "avro", "t-value", reader, schemas, json.dumps(struct),
                       tuple(f["name"] for f in struct["fields"]))
    return DecodePlan("t", (part,), None, dead_letter)


def _batch(values: list[bytes | None]) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_pydict({"_partition": pa.array([0] * n, pa.int32()),
                                       "_offset": pa.array(range(n), pa.int64()),
                                       "value": pa.array(values, pa.binary())})


def test_avro_values_resolve_into_the_newest_schema_with_their_types():
    values = [_framed(V1, 1, _record(1)), _framed(V2, 2, {**_record(2), "email": "e@x"}), None]
    out = decode(_plan(S2, S1, S2), _batch(values)).to_pydict()
    assert out["_good"] == [True, True, True] and out["_reason"] == [None, None, None]
    assert out["id"] == [1, 2, None]
    assert out["email"] == [None, "e@x", None]  # v1's record gets the default
    assert out["day"][:2] == [date(2026, 3, 2), date(2026, 3, 3)]
    assert out["at"][0] == T0 and out["inner"][0] == {"seen": T0} and out["many"][0] == [T0]
    assert out["price"][:2] == [Decimal("1.50"), Decimal("2.50")]
    assert out["uid"][0] == "00000000-0000-4000-8000-000000000001"
    assert out["either"][:2] == ["1", '"s"']  # a union of several types: its JSON text
    assert out[schema_id_column("value")] == [1, 2, None]


def test_bad_records_are_marked_with_their_reason():
    good = _framed(V1, 1, _record(1))
    values = [good, b"text", b"\x00\x00\x00\x00\x07" + good[5:], good[:8], _framed(BAD, 3, {**_record(1), "id": "x"})]
    out = decode(_plan(S1, S1, S3), _batch(values)).to_pydict()
    assert out["_good"] == [True, False, False, False, False]
    assert out["_reason"][1] == ("value: not Confluent-framed (first byte 0x74, 4 bytes; expected magic byte 0 and a "
                                 "4-byte schema id)")
    assert out["_reason"][2] == "value: unknown schema id 7 (the Schema Registry has no such schema)"
    assert out["_reason"][3].startswith("value: does not decode with schema id 1: ")
    assert out["_reason"][4] == ("value: schema id 3 cannot be read as schema id 1 (subject 't-value' version 1): "
                                 "field 'id' is string in one schema and long in the other")
    assert out["id"] == [1, None, None, None, None]  # a bad record stores nothing decoded


def test_dead_letters_carry_the_raw_envelope_and_the_reason():
    envelope = {"type": "struct", "fields": [
        {"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in (
            ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "integer"),
            ("offset", "long"), ("reason", "string"))]}
    batch = _batch([b"junk"]).append_column("key", pa.array([b"k"], pa.binary()))
    out = decode(_plan(S1, S1, dead_letter=json.dumps(envelope)), batch)
    raw = out.column("_raw").to_pylist()[0]
    assert raw == {"key": b"k", "value": b"junk", "topic": "t", "partition": 0, "offset": 0,
                   "reason": out.column("_reason")[0].as_py()}


def test_json_schema_values_match_fields_by_name():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "tags": {"type": "array",
                                                                                  "items": {"type": "string"}}}}
    js = RegistrySchema(5, "JSON", json.dumps(schema))
    struct = json_schema_columns(js.text)
    part = DecodedPart("value", "json_schema", "t-value", None, (js,), json.dumps(struct), ("n", "tags"))
    values = [b"\x00\x00\x00\x00\x05" + json.dumps(v).encode() for v in ({"n": 1, "tags": ["a"]}, {"n": 2},
                                                                         {"n": "three"}, [1])]
    out = decode(DecodePlan("t", (part,)), _batch(values)).to_pydict()
    assert out["n"] == [1, 2, None, None] and out["tags"] == [["a"], None, None, None]
    assert out["_good"] == [True, True, False, False]
    assert "field 'n' does not fit the column type int64" in out["_reason"][2]
    assert "not a JSON object but list" in out["_reason"][3]


def test_the_plan_hides_the_registry_password():
    plan = DecodePlan("t", (), RegistryConnection("https://r", "user", "s3cr3t"))
    assert "s3cr3t" not in repr(plan) and "user" in repr(plan)


@pytest.mark.parametrize("schema,columns", [
    ("\"string\"", {"decoded": "string"}),
    (json.dumps({"type": "map", "values": "int"}), {"decoded": "map"}),
])
def test_a_payload_that_is_not_a_record_is_one_column(schema, columns):
    fields = avro_columns(schema)["fields"]
    assert {f["name"]: f["type"] if isinstance(f["type"], str) else f["type"]["type"] for f in fields} == columns


def test_decoded_field_dimensions_fill_the_bucket_and_order_the_batch():
    schema = {"type": "record", "name": "S", "fields": [{"name": "shop", "type": {"type": "record", "name": "Shop",
                                                                                   "fields": [{"name": "region",
                                                                                               "type": "string"}]}}]}
    s = RegistrySchema(1, "AVRO", json.dumps(schema))
    struct = avro_columns(s.text)
    part = DecodedPart("value", "avro", "t-value", s, (s,), json.dumps(struct), ("shop",))
    plan = DecodePlan("t", (part,), bucket_fields=((1, "value", "shop.region"),))
    batch = _batch([_framed(schema, 1, {"shop": {"region": r}}) for r in ("us", "eu west", "us", "eu west")])
    batch = batch.append_column("_bucket", pa.array(["0/\x001\x00"] * 4))
    out = decode(plan, batch).to_pydict()
    assert out["_bucket"] == ["0/eu%20west", "0/eu%20west", "0/us", "0/us"]
    assert out["_offset"] == [1, 3, 0, 2]  # by bucket, each bucket in offset order
