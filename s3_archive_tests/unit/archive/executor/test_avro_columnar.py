"""The native Avro decoder (archive/executor/avro_columnar.py, native/src/avro_decode.rs) against fastavro's path:
the same payloads decoded both ways give the same batch (columns, types, values, nulls, schema ids, reasons), over
the schema shapes the decoding supports natively; the shapes it does not take are decoded by fastavro."""

from __future__ import annotations

import io
import json
import re
from datetime import UTC, date, datetime
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from s3_archive.archive.executor import avro_columnar, registry_decode
from s3_archive.archive.executor.avro_columnar import fits
from s3_archive.archive.protocol import DecodePlan
from s3_archive.io.registry_client import RegistrySchema
from s3_archive.model.registry_types import avro_columns, merge_types
from s3_archive_tests.unit.archive.executor.union_plans import union_plan

T0 = datetime(2026, 3, 1, 12, 0, 0, 123000, tzinfo=UTC)
MILLIS = {"type": "long", "logicalType": "timestamp-millis"}
MICROS = {"type": "long", "logicalType": "timestamp-micros"}
EVENT = {"type": "record", "name": "Event", "namespace": "bench", "fields": [  # bench/registry.py's
    {"name": "id", "type": "long"}, {"name": "user", "type": "string"},
    {"name": "event", "type": {"type": "enum", "name": "Kind", "symbols": ["view", "click", "buy"]}},
    {"name": "ts", "type": MILLIS}, {"name": "amount", "type": "double"}, {"name": "pad", "type": "string"}]}
V1 = {"type": "record", "name": "O", "namespace": "t", "fields": [
    {"name": "id", "type": "long"},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "at", "type": MILLIS},
    {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "inner", "type": {"type": "record", "name": "I", "fields": [{"name": "seen", "type": MILLIS}]}},
    {"name": "many", "type": {"type": "array", "items": MICROS}},
]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "email", "type": ["null", "string"], "default": None}]}
V3 = {**V2, "fields": [f for f in V2["fields"] if f["name"] != "uid"]}
V1_MICROS = {**V1, "fields": [{**f, "type": MICROS} if f["name"] == "at" else f for f in V1["fields"]]}
WIDE = {"type": "record", "name": "W", "fields": [
    {"name": "flag", "type": "boolean"}, {"name": "small", "type": "int"}, {"name": "f", "type": "float"},
    {"name": "raw", "type": "bytes"}, {"name": "digest", "type": {"type": "fixed", "name": "D", "size": 4}},
    {"name": "again", "type": ["null", "D"]},
    {"name": "maybe", "type": ["string", "null"]},
    {"name": "kind", "type": ["null", {"type": "enum", "name": "K", "symbols": ["a", "b"]}]},
    {"name": "shop", "type": ["null", {"type": "record", "name": "Shop", "fields": [
        {"name": "region", "type": "string"}, {"name": "opened", "type": ["null", MILLIS]},
        {"name": "tags", "type": {"type": "array", "items": ["null", "string"]}}]}]},
    {"name": "shops", "type": ["null", {"type": "array", "items": "Shop"}]},
    {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}]},
    {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
    {"name": "clock", "type": {"type": "int", "logicalType": "time-millis"}},
]}
# a later version: int → long and float → double (the columns widen), a field removed, one added
WIDE2 = {**WIDE, "fields": [{**f, "type": {"int": "long", "float": "double"}[f["type"]]}
                            if f["name"] in ("small", "f") else f for f in WIDE["fields"] if f["name"] != "raw"]
         + [{"name": "note", "type": ["null", "string"], "default": None}]}


def _schema(sid: int, schema: dict) -> RegistrySchema:
    return RegistrySchema(sid, "AVRO", json.dumps(schema), (), "t-value", sid)


def _framed(schema: dict, sid: int, record: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return b"\x00" + sid.to_bytes(4, "big") + out.getvalue()


def _batch(values: list[bytes | None]) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_pydict({"_partition": pa.array([0] * n, pa.int32()),
                                       "_offset": pa.array(range(n), pa.int64()),
                                       "value": pa.array(values, pa.binary())})


def _both(plan: DecodePlan, values: list[bytes | None], monkeypatch: pytest.MonkeyPatch,
          ) -> tuple[pa.RecordBatch, pa.RecordBatch, bool]:
    """The batch decoded natively (where it applies) and by fastavro, and whether the native decoder decoded it."""
    used: list[bool] = []
    real = avro_columnar.decode_columns

    def spy(*args: Any) -> Any:
        out = real(*args)
        used.append(out is not None)
        return out

    with monkeypatch.context() as m:
        m.setattr(registry_decode, "decode_columns", spy)
        native = registry_decode.decode(plan, _batch(values))
    slow = registry_decode.decode(plan, _batch(values), native=False)
    return native, slow, any(used)


def _parquet(batch: pa.RecordBatch) -> bytes:
    out = io.BytesIO()
    pq.write_table(pa.Table.from_batches([batch]), out)
    return out.getvalue()


def _same(native: pa.RecordBatch, slow: pa.RecordBatch) -> None:
    """The same batch: schema, null counts, and the bytes of its Parquet (every value exactly, NaNs and dates
    past Python's range too)."""
    # fastavro's messages name the BytesIO it read (`<_io.BytesIO object at 0x…>`): every run another address
    native, slow = (b.set_column(b.schema.get_field_index("_reason"), "_reason", pa.array(
        [re.sub("0x[0-9a-f]{6,}", "0x…", r) if r else r for r in b.column("_reason").to_pylist()], pa.string()))
        for b in (native, slow))
    assert native.schema == slow.schema
    assert [c.null_count for c in native.columns] == [c.null_count for c in slow.columns]
    assert _parquet(native) == _parquet(slow)


def _v1(i: int) -> dict:
    return {"id": i, "day": date(2026, 3, i + 1), "at": T0, "uid": f"00000000-0000-4000-8000-00000000000{i}",
            "inner": {"seen": T0}, "many": [T0, T0.replace(microsecond=5)]}


def _wide(i: int) -> dict:
    shop = {"region": f"r{i}", "opened": T0 if i % 2 else None, "tags": ["x", None]}
    return {"flag": bool(i % 2), "small": -i, "f": 1.5 * i, "raw": bytes([i]), "digest": b"abcd",
            "again": None if i % 3 else b"wxyz", "maybe": None if i % 2 else "m", "kind": "b" if i % 2 else None,
            "shop": shop if i % 4 else None, "shops": [shop, shop] if i % 3 else None,
            "day": date(2026, 1, 1) if i % 2 else None, "local": datetime(2026, 1, 1, 1, 2, 3, 4000),
            "clock": 1000 * i}


SHAPES = {
    "bench": ((EVENT,), lambda i: [_framed(EVENT, 1, {"id": i, "user": f"u{i}", "event": "click", "ts": T0,
                                                      "amount": i / 3, "pad": "é" * i}) for i in range(5)]),
    "versions": ((V1, V2), lambda _: [_framed(V1, 1, _v1(1)), _framed(V2, 2, {**_v1(2), "email": "e@x"}), None,
                                      _framed(V2, 2, {**_v1(3), "email": None}), _framed(V1, 1, _v1(4))]),
    "a field removed": ((V1, V2, V3), lambda _: [_framed(V1, 1, _v1(1)), _framed(V3, 3, {**_v1(2), "email": "e"})]),
    "time units": ((V1, V1_MICROS), lambda _: [_framed(V1_MICROS, 2, {**_v1(2), "at": T0.replace(microsecond=7)}),
                                               _framed(V1, 1, _v1(1)), None,
                                               _framed(V1_MICROS, 2, {**_v1(3), "at": T0})]),
    "wide": ((WIDE, WIDE2), lambda _: [_framed(WIDE, 1, _wide(i)) if i % 3 else
                                       _framed(WIDE2, 2, {**_wide(i), "small": 2 ** 40, "note": "n"})
                                       for i in range(12)]),
    "nulls only": ((EVENT,), lambda _: [None, None]),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_native_and_fastavro_decode_the_same_payloads_alike(shape, monkeypatch):
    schemas, payloads = SHAPES[shape]
    plan = union_plan(*(_schema(i + 1, s) for i, s in enumerate(schemas)))
    native, slow, used = _both(plan, payloads(0), monkeypatch)
    assert used, "the native decoder did not decode the batch"
    assert all(native.column("_good").to_pylist())
    _same(native, slow)


def test_malformed_payloads_are_decoded_by_fastavro_with_its_reasons(monkeypatch):
    good = _framed(EVENT, 1, {"id": 1, "user": "u", "event": "buy", "ts": T0, "amount": 1.0, "pad": ""})
    plan = union_plan(_schema(1, EVENT))
    for bad in (b"text", b"\x00\x00\x00\x00\x07" + good[5:], good[:8], good + b"\x01", good + good[:5],
                good[:6] + b"\x02\xff" + good[8:],  # a string that is not UTF-8
                good[:8] + b"\x12" + good[9:]):  # an enum index past its symbols
        native, slow, used = _both(plan, [good, bad, None], monkeypatch)
        assert not used, bad
        _same(native, slow)
    native, slow, used = _both(plan, [good, None], monkeypatch)  # the decoder is whole again after a bad batch
    assert used
    _same(native, slow)


def test_a_damaged_union_branch_or_enum_index_is_refused_natively_as_fastavro_refuses_it(monkeypatch):
    schema = {"type": "record", "name": "N", "fields": [
        {"name": "id", "type": "long"}, {"name": "email", "type": ["null", "string"]},
        {"name": "phone", "type": ["string", "null"]}, {"name": "k", "type": {"type": "enum", "name": "E",
                                                                              "symbols": ["a", "b"]}}]}
    plan = union_plan(_schema(1, schema))
    good = _framed(schema, 1, {"id": 1, "email": "x", "phone": "y", "k": "b"})  # 5 + [02] [02 02 78] [00 02 79] [02]
    assert good[5:] == b"\x02\x02\x02x\x00\x02y\x02"
    for at, byte in ((6, 0x04), (6, 0x01), (6, 0x03), (9, 0x04), (9, 0x01), (12, 0x04), (12, 0x01), (12, 0x03)):
        bad = good[:at] + bytes([byte]) + good[at + 1:]
        native, slow, used = _both(plan, [good, bad], monkeypatch)
        assert not used, (at, byte)
        _same(native, slow)
    native, slow, used = _both(plan, [good, good[:6] + b"\x00" + good[9:]], monkeypatch)  # email null: fine
    assert used and native.column("email").to_pylist() == ["x", None]
    _same(native, slow)


def test_a_record_the_plan_lacks_goes_to_fastavro(monkeypatch):
    plan = union_plan(_schema(1, EVENT))
    other = _framed(V1, 9, _v1(1))  # an id of another schema, which fastavro's path fetches (here: unknown)
    native, slow, used = _both(plan, [other], monkeypatch)
    assert not used and native.column("_good").to_pylist() == [False]
    _same(native, slow)


NOT_NATIVE = {
    "union of several types": {"name": "u", "type": ["null", "int", "string"]},
    "int or long": {"name": "u", "type": ["int", "long"]},
    "map": {"name": "m", "type": {"type": "map", "values": "long"}},
    "decimal": {"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 2}},
    "null": {"name": "n", "type": "null"},
    "nanos": {"name": "t", "type": {"type": "long", "logicalType": "timestamp-nanos"}},
}


@pytest.mark.parametrize("shape", NOT_NATIVE)
def test_schemas_the_native_decoder_cannot_match_are_decoded_by_fastavro(shape, monkeypatch):
    schema = {"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"}, NOT_NATIVE[shape]]}
    s = _schema(1, schema)
    assert not fits(s.text, registry_decode._build_type(avro_columns(s.text), True))
    assert fits(_schema(1, EVENT).text, registry_decode._build_type(avro_columns(_schema(1, EVENT).text), True))
    native, slow, used = _both(union_plan(s), [None], monkeypatch)
    assert not used
    _same(native, slow)


def test_a_payload_that_is_not_a_record_and_a_widening_beyond_long_go_to_fastavro():
    columns = registry_decode._build_type(avro_columns('"string"'), True)
    assert not fits('"string"', columns)
    wide = {"type": "record", "name": "N", "fields": [{"name": "n", "type": "long"}]}
    as_double = registry_decode._build_type(merge_types(avro_columns(json.dumps(wide)), avro_columns(json.dumps(
        {**wide, "fields": [{"name": "n", "type": "double"}]}))), True)
    assert not fits(json.dumps(wide), as_double)  # long → double: fastavro's path converts each value


def test_a_bucket_dimension_part_is_decoded_by_fastavro(monkeypatch):
    plan = union_plan(_schema(1, EVENT))
    plan = DecodePlan("t", plan.parts, bucket_fields=((1, "value", "user"),))
    called: list[Any] = []
    monkeypatch.setattr(registry_decode, "decode_columns", lambda *a: called.append(a))
    payload = _framed(EVENT, 1, {"id": 1, "user": "u", "event": "buy", "ts": T0, "amount": 1.0, "pad": ""})
    out = registry_decode.decode(plan, _batch([payload]).append_column("_bucket", pa.array(["0/\x001\x00"])))
    assert out.column("_bucket").to_pylist() == ["0/u"] and not called


_LONG = st.integers(-(2 ** 63), 2 ** 63 - 1)
_TEXT = st.text(max_size=12)
_SHOP = st.fixed_dictionaries({"region": _TEXT, "opened": st.none() | st.integers(-(2 ** 40), 2 ** 40),
                               "tags": st.lists(st.none() | _TEXT, max_size=3)})
_WIDE = st.fixed_dictionaries({
    "flag": st.booleans(), "small": st.integers(-(2 ** 31), 2 ** 31 - 1),
    "f": st.floats(width=32, allow_nan=False), "raw": st.binary(max_size=8), "digest": st.binary(min_size=4,
                                                                                                  max_size=4),
    "again": st.none() | st.binary(min_size=4, max_size=4), "maybe": st.none() | _TEXT,
    "kind": st.none() | st.sampled_from(["a", "b"]), "shop": st.none() | _SHOP,
    "shops": st.none() | st.lists(_SHOP, max_size=2), "day": st.none() | st.integers(-700_000, 700_000),
    "local": st.integers(-(2 ** 45), 2 ** 45), "clock": st.integers(0, 86_399_999)})
_MUTATION = st.one_of(st.none(), st.tuples(st.integers(0, 60), st.binary(max_size=3)), st.integers(0, 40))


def _mutated(payload: bytes, how: Any) -> bytes:
    if how is None:
        return payload
    if isinstance(how, int):  # truncated
        return payload[:how]
    at, junk = how  # bytes overwritten
    return payload[:at] + junk + payload[at + len(junk):]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.lists(st.tuples(st.booleans(), _WIDE, _MUTATION), min_size=1, max_size=6))
def test_any_records_and_damaged_payloads_decode_alike(records, monkeypatch):
    raw_plain = {"type": "record", "name": "W", "fields": json.loads(json.dumps(WIDE["fields"]))}
    for f in raw_plain["fields"]:  # write the time numbers as they are
        if f["name"] in ("day", "local", "clock"):
            f["type"] = ["null", "int"] if f["name"] == "day" else ("int" if f["name"] == "clock" else "long")
        if f["name"] == "shop":
            f["type"][1]["fields"][1]["type"] = ["null", "long"]
    plain2 = {**raw_plain, "fields": [{**f, "type": {"int": "long", "float": "double"}[f["type"]]}
                                      if f["name"] in ("small", "f") else f for f in raw_plain["fields"]
                                      if f["name"] != "raw"] + [{"name": "note", "type": ["null", "string"]}]}
    plan = union_plan(_schema(1, WIDE), _schema(2, WIDE2))
    payloads = [_mutated(_framed(plain2, 2, {**r, "note": None}) if later else _framed(raw_plain, 1, r), how)
                for later, r, how in records]
    try:
        slow = registry_decode.decode(plan, _batch(payloads), native=False)
    except pa.ArrowInvalid as e:  # a damaged schema id past int32 fails fastavro's path so (seen, left as it is)
        with pytest.raises(type(e), match=re.escape(str(e))):
            _both(plan, payloads, monkeypatch)
        return
    native, slow, used = _both(plan, payloads, monkeypatch)
    if all(how is None for _, _, how in records):
        assert used
    _same(native, slow)
