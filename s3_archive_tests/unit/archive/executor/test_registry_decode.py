"""Decoding Confluent-framed payloads in the write task (archive/executor/registry_decode.py), with schemas given in
the plan: typed columns, each record decoded with its own writer schema into the union of the versions' fields, and
each kind of bad record with its reason."""

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
from s3_archive_tests.unit.archive.executor.union_plans import union_plan

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


def _plan(columns: RegistrySchema, *schemas: RegistrySchema, dead_letter: str = "") -> DecodePlan:
    """A plan whose columns are `columns`'s fields, knowing `schemas`."""
    struct = avro_columns(columns.text)
    part = DecodedPart("value", "avro", "t-value", schemas, json.dumps(struct),
                       tuple(f["name"] for f in struct["fields"]))
    return DecodePlan("t", (part,), None, dead_letter)


def _batch(values: list[bytes | None]) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_pydict({"_partition": pa.array([0] * n, pa.int32()),
                                       "_offset": pa.array(range(n), pa.int64()),
                                       "value": pa.array(values, pa.binary())})


def test_avro_values_decode_with_their_own_schema_into_the_columns_with_their_types():
    values = [_framed(V1, 1, _record(1)), _framed(V2, 2, {**_record(2), "email": "e@x"}), None]
    out = decode(_plan(S2, S1, S2), _batch(values)).to_pydict()
    assert out["_good"] == [True, True, True] and out["_reason"] == [None, None, None]
    assert out["id"] == [1, 2, None]
    assert out["email"] == [None, "e@x", None]  # v1's record has no such field
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
    # a writer schema giving a field another type than its column's (plans refuse such versions of the subject;
    # an id of another subject is fetched by id)
    assert out["_reason"][4].startswith("value: field 'id' of schema id 3 does not fit the column type int64: ")
    assert out["id"] == [1, None, None, None, None]  # a bad record stores nothing decoded


def test_a_schema_id_with_its_top_bit_set_is_read_as_the_signed_int_serializers_write_and_marks_only_its_record():
    """The 4-byte schema id is a Java int (Confluent's serializers write and read it signed): 0xffffffff is -1, an
    id no registry has, so that record is bad and the batch's other records are archived."""
    good = _framed(V1, 1, _record(1))
    out = decode(_plan(S1, S1), _batch([good, b"\x00\xff\xff\xff\xff" + good[5:]])).to_pydict()
    assert out["_good"] == [True, False]
    assert out["_reason"][1] == "value: unknown schema id -1 (the Schema Registry has no such schema)"
    assert out["id"] == [1, None] and out[schema_id_column("value")] == [1, None]


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
    part = DecodedPart("value", "json_schema", "t-value", (js,), json.dumps(struct), ("n", "tags"))
    values = [b"\x00\x00\x00\x00\x05" + json.dumps(v).encode() for v in ({"n": 1, "tags": ["a"]}, {"n": 2},
                                                                         {"n": "three"}, [1])]
    out = decode(DecodePlan("t", (part,)), _batch(values)).to_pydict()
    assert out["n"] == [1, 2, None, None] and out["tags"] == [["a"], None, None, None]
    assert out["_good"] == [True, True, False, False]
    assert "field 'n' of schema id 5 does not fit the column type int64" in out["_reason"][2]
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
    part = DecodedPart("value", "avro", "t-value", (s,), json.dumps(struct), ("shop",))
    plan = DecodePlan("t", (part,), bucket_fields=((1, "value", "shop.region"),))
    batch = _batch([_framed(schema, 1, {"shop": {"region": r}}) for r in ("us", "eu west", "us", "eu west")])
    batch = batch.append_column("_bucket", pa.array(["0/\x001\x00"] * 4))
    out = decode(plan, batch).to_pydict()
    assert out["_bucket"] == ["0/eu%20west", "0/eu%20west", "0/us", "0/us"]
    assert out["_offset"] == [1, 3, 0, 2]  # by bucket, each bucket in offset order


def test_a_field_a_later_avro_version_removed_keeps_the_values_of_records_that_have_it():
    v3 = {**V2, "fields": [f for f in V2["fields"] if f["name"] != "uid"]}
    s3 = RegistrySchema(3, "AVRO", json.dumps(v3), (), "t-value", 3)
    values = [_framed(V1, 1, _record(1)), _framed(v3, 3, {k: v for k, v in _record(2).items() if k != "uid"})]
    out = decode(union_plan(S1, S2, s3), _batch(values)).to_pydict()
    assert out["_good"] == [True, True]
    assert out["uid"] == ["00000000-0000-4000-8000-000000000001", None]
    assert out["id"] == [1, 2] and out["at"] == [T0, T0]


def test_two_versions_with_other_time_units_cast_each_record_by_its_own():
    micros = {**V1, "fields": [{**f, "type": {"type": "long", "logicalType": "timestamp-micros"}} if f["name"] == "at"
                               else f for f in V1["fields"]]}
    s9 = RegistrySchema(9, "AVRO", json.dumps(micros), (), "t-value", 2)
    later = T0.replace(microsecond=123456)
    values = [_framed(micros, 9, {**_record(2), "at": later}), _framed(V1, 1, _record(1)), None,
              _framed(micros, 9, {**_record(3), "at": later})]
    out = decode(union_plan(S1, s9), _batch(values)).to_pydict()
    assert out["at"] == [later, T0, None, later] and out["id"] == [2, 1, None, 3]
    assert out["day"][:2] == [date(2026, 3, 3), date(2026, 3, 2)]


def test_avro_bytes_fixed_and_unions_of_records():
    schema = {"type": "record", "name": "B", "fields": [
        {"name": "raw", "type": "bytes"}, {"name": "digest", "type": {"type": "fixed", "name": "D", "size": 4}},
        {"name": "pay", "type": [
            {"type": "record", "name": "Card", "fields": [{"name": "number", "type": "string"}]},
            {"type": "record", "name": "Iban", "fields": [{"name": "iban", "type": "string"}]}]}]}
    s = RegistrySchema(4, "AVRO", json.dumps(schema))
    values = [_framed(schema, 4, {"raw": b"\x00\xff", "digest": b"abcd", "pay": {"number": "4111"}}),
              _framed(schema, 4, {"raw": b"", "digest": b"wxyz", "pay": ("Iban", {"iban": "NO93"})})]
    out = decode(union_plan(s), _batch(values)).to_pydict()
    assert out["raw"] == [b"\x00\xff", b""] and out["digest"] == [b"abcd", b"wxyz"]
    assert [json.loads(v) for v in out["pay"]] == [{"number": "4111"}, {"iban": "NO93"}]  # JSON text


JSON_SHAPES = {"type": "object", "properties": {
    "meta": {"type": "object"},  # free-form
    "extra": {"type": "object", "additionalProperties": True},
    "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
    "either": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
    "maybe": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    "lines": {"type": "array", "items": {"$ref": "#/$defs/Line"}},
    "node": {"$ref": "#/definitions/Node"},
    "any": {},
}, "$defs": {"Line": {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"},
                                                        "attrs": {"type": "object"}}}},
    "definitions": {"Node": {"type": "object", "properties": {"name": {"type": "string"},
                                                                "kids": {"type": "array",
                                                                         "items": {"$ref": "#/definitions/Node"}}}}}}


def test_json_schema_shapes_without_a_fixed_type_are_json_text():
    js = RegistrySchema(6, "JSON", json.dumps(JSON_SHAPES))
    struct = json_schema_columns(js.text)
    types = {f["name"]: f["type"] for f in struct["fields"]}
    assert {n: t for n, t in types.items() if isinstance(t, str)} == {
        "meta": "string", "extra": "string", "either": "string", "maybe": "string", "any": "string"}
    assert types["counts"]["type"] == "map" and types["counts"]["valueType"] == "long"
    assert types["lines"]["elementType"]["fields"][2] == {"name": "attrs", "type": "string", "nullable": True,
                                                          "metadata": {}}
    assert types["node"]["fields"][1]["type"]["elementType"] == "string"  # recursive: its JSON text
    part = DecodedPart("value", "json_schema", "t-value", (js,), json.dumps(struct),
                       tuple(f["name"] for f in struct["fields"]))
    record = {"meta": {"a": [1, {"b": None}], "é": "ü"}, "extra": {"x": 1}, "counts": {"a": 2},
              "either": "s", "maybe": "m", "lines": [{"sku": "s1", "qty": 2, "attrs": {"c": True}}],
              "node": {"name": "root", "kids": [{"name": "leaf", "kids": []}]}, "any": 5}
    values = [b"\x00\x00\x00\x00\x06" + json.dumps(v).encode() for v in (record, {"either": 7, "maybe": None})]
    out = decode(DecodePlan("t", (part,)), _batch(values)).to_pydict()
    assert out["_good"] == [True, True], out["_reason"]
    assert out["meta"] == ['{"a":[1,{"b":null}],"é":"ü"}', None]
    assert out["extra"] == ['{"x":1}', None] and [dict(c) if c else c for c in out["counts"]] == [{"a": 2}, None]
    assert out["either"] == ['"s"', "7"] and out["maybe"] == ["m", None] and out["any"] == ["5", None]
    assert out["lines"][0] == [{"sku": "s1", "qty": 2, "attrs": '{"c":true}'}]
    assert out["node"][0] == {"name": "root", "kids": ['{"name":"leaf","kids":[]}']}


def test_avro_versions_widen_numbers_and_refuse_other_type_changes():
    from s3_archive.model.registry_types import IncompatibleFields, merge_types

    def of(t: str) -> dict:
        return avro_columns(json.dumps({"type": "record", "name": "N", "fields": [{"name": "n", "type": t}]}))

    assert merge_types(of("int"), of("long"))["fields"][0]["type"] == "long"
    assert merge_types(of("float"), of("double"))["fields"][0]["type"] == "double"
    assert merge_types(of("long"), of("float"))["fields"][0]["type"] == "float"
    with pytest.raises(IncompatibleFields, match="field 'n' is long in one schema and string in the other"):
        merge_types(of("long"), of("string"))
