"""Schema Registry payloads decoded in the write task, on task batches (executor/task.py), whichever way the
records were read: `decode(plan, batch)` reads the raw `value` (and `key`) binary columns, appends the decoded
fields as the plan's columns, and marks each record that does not decode (`_good` false, `_reason` why).

A payload is Confluent-framed: magic byte 0, the writer schema's id (4 bytes, big-endian), the encoded record
(Protobuf: message indexes first). The writer schema comes from the plan (the subject's versions when the job was
planned) or, for an id the plan lacks, from the registry (cached per process). Every value, Avro, Protobuf or JSON
Schema, is decoded with its own writer schema and its fields matched by name to the plan's columns (the union of the
subject's versions' fields): a field its version lacks is null.

A record does not decode when it is not framed, names an id the registry does not know, fails to decode with its
schema, or a field's value does not fit its column (a schema the plan lacks that gives the field another type):
`_reason` says which, naming the id or the field. A null payload (a tombstone, a null key) decodes to nulls.

Dead letters: `_raw` is the record's raw envelope (with `reason`), built from the batch's envelope columns, which
the driver sends whole when an archive keeps dead letters (driver/spark_job.py).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from s3_archive.archive.executor.avro_columnar import decode_columns
from s3_archive.archive.executor.avro_decoding import AvroDecoder, cast_times, time_units
from s3_archive.archive.protocol import DecodedPart, DecodePlan
from s3_archive.io.registry_client import HEADER_BYTES, RegistrySchema, UnknownSchemaId
from s3_archive.keys.buckets import decoded_placeholder
from s3_archive.model.json_schema_types import json_reader
from s3_archive.model.registry_types import NOT_A_RECORD

GOOD, REASON, RAW = "_good", "_reason", "_raw"
_MISFIT = (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError)


def schema_id_column(part: str) -> str:
    """The column holding each record's writer schema id of `part` (null: not decoded), for the slice statistics."""
    return f"_{part}_schema_id"


# --- Arrow types of the decoded columns ------------------------------------------------------------------------
_ATOMIC = {"boolean": pa.bool_(), "integer": pa.int32(), "long": pa.int64(), "float": pa.float32(),
           "double": pa.float64(), "string": pa.string(), "binary": pa.binary(), "date": pa.date32(),
           "timestamp": pa.timestamp("us", tz="UTC"), "timestamp_ntz": pa.timestamp("us"), "null": pa.null(),
           "short": pa.int16(), "byte": pa.int8()}


def arrow_type(t: Any) -> pa.DataType:
    """The Arrow type of a Spark type (JSON), as a write task stores it."""
    if isinstance(t, str):
        if t.startswith("decimal("):
            p, s = (int(x) for x in t[len("decimal("):-1].split(","))
            return pa.decimal128(p, s)
        return _ATOMIC[t]
    if t["type"] == "struct":
        return pa.struct([pa.field(f["name"], arrow_type(f["type"]), True) for f in t["fields"]])
    if t["type"] == "array":
        return pa.list_(arrow_type(t["elementType"]))
    if t["type"] == "map":
        return pa.map_(arrow_type(t["keyType"]), arrow_type(t["valueType"]))
    raise ValueError(f"no Arrow type for the Spark type {t!r}")


class _JsonDecoder:
    """Payloads of one JSON Schema: parsed, and the values its schema gives no fixed type made JSON text
    (model/json_schema_types.py)."""

    def __init__(self, writer: RegistrySchema) -> None:
        self.record, self._convert = json_reader(json.loads(writer.text))

    def __call__(self, payload: bytes) -> Any:
        value = json.loads(payload)
        if self.record and not isinstance(value, dict):
            raise ValueError(f"not a JSON object but {type(value).__name__}")
        if self._convert is not None:
            value = self._convert(value)
        return value if self.record else {NOT_A_RECORD: value}


class Incompatible(ValueError):
    """A schema id names a schema of another type than the part's."""


@dataclass
class _Decoders:
    """Decoders by (type, writer schema), made on first use; per process, shared by a worker's tasks
    (keyed by the schemas' text, not their ids: two registries may give one id to different schemas)."""

    by_key: dict[tuple[str, str], Any] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


_DECODERS = _Decoders()


def _writer_schema(plan: DecodePlan, part: DecodedPart, schema_id: int) -> RegistrySchema:
    for s in part.schemas:
        if s.id == schema_id:
            return s
    if plan.registry is None:
        raise UnknownSchemaId(f"schema id {schema_id}")
    return plan.registry.client().by_id(schema_id)


def _decoder(plan: DecodePlan, part: DecodedPart, schema_id: int) -> Any:
    """The decoder of payloads written with `schema_id` into the part's columns; UnknownSchemaId, or Incompatible
    (a message naming both ids and why) when it cannot be made."""
    writer = _writer_schema(plan, part, schema_id)
    key = (part.kind, writer.text)
    with _DECODERS.lock:
        found = _DECODERS.by_key.get(key)
    if found is not None:
        if isinstance(found, Exception):
            raise found
        return found
    try:
        if writer.schema_type != {"avro": "AVRO", "protobuf": "PROTOBUF", "json_schema": "JSON"}[part.kind]:
            raise Incompatible(f"schema id {schema_id} is a {writer.schema_type} schema, not {part.kind}")
        if part.kind == "avro":
            dec: Any = AvroDecoder(writer)
        elif part.kind == "protobuf":
            from s3_archive.archive.protobuf_schemas import ProtobufDecoder

            dec = ProtobufDecoder(writer)
        else:
            dec = _JsonDecoder(writer)
    except Incompatible as e:
        with _DECODERS.lock:
            _DECODERS.by_key[key] = e
        raise
    with _DECODERS.lock:
        _DECODERS.by_key[key] = dec
    return dec


# --- decoding a batch ------------------------------------------------------------------------------------------
def _frame(payload: bytes) -> tuple[int, bytes]:
    if len(payload) < HEADER_BYTES or payload[0] != 0:
        first = f"0x{payload[0]:02x}" if payload else "nothing"
        raise _NotFramed(f"not Confluent-framed (first byte {first}, {len(payload)} bytes; expected magic byte 0 "
                         "and a 4-byte schema id)")
    return int.from_bytes(payload[1:HEADER_BYTES], "big", signed=True), payload[HEADER_BYTES:]  # a Java int


class _NotFramed(ValueError):
    pass


def _decode_part(plan: DecodePlan, part: DecodedPart, raw: pa.Array, reasons: list[str | None],
                 ) -> tuple[list[Any], list[int | None]]:
    """Each row's decoded value (a dict of the part's fields; None for a null payload or a bad record) and its
    writer schema id; a bad record's reason goes into `reasons`."""
    values: list[Any] = [None] * len(raw)
    ids: list[int | None] = [None] * len(raw)
    payloads = raw.to_pylist()
    decoders: dict[int, Any] = {}
    for i, payload in enumerate(payloads):
        if payload is None or reasons[i] is not None:
            continue
        try:
            schema_id, body = _frame(payload)
            ids[i] = schema_id
            dec = decoders.get(schema_id)
            if dec is None:
                dec = decoders[schema_id] = _decoder(plan, part, schema_id)
            values[i] = dec(body)
        except _NotFramed as e:
            reasons[i] = f"{part.part}: {e}"
        except UnknownSchemaId:
            reasons[i] = f"{part.part}: unknown schema id {ids[i]} (the Schema Registry has no such schema)"
        except Incompatible as e:
            reasons[i] = f"{part.part}: {e}"
        except Exception as e:  # the payload does not decode with its schema
            reasons[i] = f"{part.part}: does not decode with schema id {ids[i]}: {type(e).__name__}: {e}"
    return values, ids


def _build_type(t: Any, raw: bool) -> pa.DataType:
    """The Arrow type values are built as: with `raw` (Avro, whose dates and timestamps come as numbers) dates as
    int32 and timestamps as int64, cast afterwards (`_stored`)."""
    if not raw:
        return arrow_type(t)
    if t in ("date",):
        return pa.int32()
    if t in ("timestamp", "timestamp_ntz"):
        return pa.int64()
    if isinstance(t, dict) and t["type"] == "struct":
        return pa.struct([pa.field(f["name"], _build_type(f["type"], raw), True) for f in t["fields"]])
    if isinstance(t, dict) and t["type"] == "array":
        return pa.list_(_build_type(t["elementType"], raw))
    if isinstance(t, dict) and t["type"] == "map":
        return pa.map_(_build_type(t["keyType"], raw), _build_type(t["valueType"], raw))
    return arrow_type(t)


def _columns(plan: DecodePlan, part: DecodedPart, values: list[Any], ids: list[int | None],
             reasons: list[str | None]) -> list[pa.Array]:
    """The part's stored columns from its decoded values (one struct array built from the dicts in Arrow's C++,
    then flattened); a value that does not fit the columns' types makes its record bad (its reason names the
    field)."""
    spark = json.loads(part.struct_type)
    t = _build_type(spark, part.kind == "avro")
    try:
        built = pa.array(values, type=t)
    except _MISFIT:
        for i, v in enumerate(values):  # find the records that do not fit
            if v is None:
                continue
            for f in t:
                try:
                    pa.array([v.get(f.name)], type=f.type)
                except _MISFIT as e:
                    if reasons[i] is None:
                        reasons[i] = (f"{part.part}: field {f.name!r} of schema id {ids[i]} does not fit the column "
                                      f"type {f.type}: {e}")
                    values[i] = None
                    break
        built = pa.array(values, type=t)
    if part.kind != "avro":
        return built.flatten()
    decoded_ids = pa.array([i if v is not None else None for i, v in zip(ids, values, strict=True)], pa.int32())
    return _timed(plan, part, built, decoded_ids, spark).flatten()


def _all_good(reasons: list[str | None]) -> bool:
    """No record has a reason yet (list.count runs in C: no Python loop over the batch)."""
    return reasons.count(None) == len(reasons)


def _native_columns(plan: DecodePlan, part: DecodedPart, raw: pa.Array, reasons: list[str | None],
                    ) -> tuple[pa.StructArray, pa.Array] | None:
    """An Avro part's struct and writer schema ids decoded natively (avro_columnar.py), or None when fastavro
    decodes it (a schema or payload the native decoder does not take, or a field that is a bucket dimension)."""
    if part.kind != "avro" or any(p == part.part for _, p, _ in plan.bucket_fields):
        return None
    skip = None if _all_good(reasons) else pa.array([r is not None for r in reasons], pa.bool_())
    return decode_columns(part, _build_type(json.loads(part.struct_type), True), raw, skip)


def _timed(plan: DecodePlan, part: DecodedPart, built: pa.StructArray, ids: pa.Array, spark: Any,
           ) -> pa.StructArray:
    """Avro's date and timestamp numbers cast by their unit, which is each record's writer schema's (two versions
    may give one field timestamp-millis and timestamp-micros): one cast when the batch's writers agree on every
    unit, else one per group of writers that do, put back in row order. `ids`: each decoded row's writer schema id
    (null: a null row)."""
    units = {i: time_units(json.loads(_writer_schema(plan, part, i).text)) for i in pc.unique(ids).to_pylist()
             if i is not None}
    by_id = {i: repr(u) for i, u in units.items()}
    distinct = {k: units[i] for i, k in by_id.items()}
    if len(distinct) <= 1:
        return _cast_struct(built, next(iter(distinct.values()), {}), spark)
    first = next(iter(distinct))
    groups: dict[str, list[int]] = {k: [] for k in distinct}
    for row, i in enumerate(ids.to_pylist()):  # a row without an id holds nulls: any group's cast fits it
        groups[by_id[i] if i is not None else first].append(row)
    order = [row for rows in groups.values() for row in rows]
    pieces = [_cast_struct(built.take(pa.array(rows, pa.int64())), distinct[k], spark)
              for k, rows in groups.items() if rows]
    return pa.concat_arrays(pieces).take(pc.sort_indices(pa.array(order, pa.int64())))


def _cast_struct(built: pa.StructArray, units: dict[str, Any], spark: Any) -> pa.StructArray:
    columns = built.flatten()
    cast = [cast_times(col, units.get(f.name), arrow_type(sf["type"]))
            for f, col, sf in zip(built.type, columns, spark["fields"], strict=True)]
    return pa.StructArray.from_arrays(cast, fields=[f.with_type(c.type) for f, c in zip(built.type, cast,
                                                                                          strict=True)],
                                      mask=built.is_null() if built.null_count else None)


def decode(plan: DecodePlan, batch: pa.RecordBatch, native: bool = True) -> pa.RecordBatch:
    """The batch with each part's decoded columns, `_good`, `_reason`, the writer schema ids, and (with dead letters)
    `_raw` appended. A record marked bad has null decoded columns. `native` false: Avro decoded by fastavro even
    where the native decoder applies (the same output; for comparing the two)."""
    n = batch.num_rows
    reasons: list[str | None] = [None] * n
    decoded: list[tuple[DecodedPart, list[Any] | None, Any]] = []
    for part in plan.parts:
        columnar = _native_columns(plan, part, batch.column(part.part), reasons) if native else None
        if columnar is not None:
            decoded.append((part, None, columnar))
        else:
            decoded.append((part, *_decode_part(plan, part, batch.column(part.part), reasons)))
    names, arrays = list(batch.schema.names), list(batch.columns)
    for part, values, ids in decoded:
        if values is None:  # decoded natively: every payload decoded, with its writer schema's types
            built, id_column = ids
            cols = _timed(plan, part, built, id_column, json.loads(part.struct_type)).flatten()
        else:
            cols, id_column = _columns(plan, part, values, ids, reasons), pa.array(ids, type=pa.int32())
        names += list(part.columns)
        arrays += cols
        names.append(schema_id_column(part.part))
        arrays.append(id_column)
    every = _all_good(reasons)  # the usual batch: no Python pass over its records for `_good` and `_reason`
    good = pa.array(np.ones(n, dtype=bool)) if every else pa.array([r is None for r in reasons], type=pa.bool_())
    if GOOD in names:  # the batch's own verdict (e.g. a value decoding of Spark's) too
        i = names.index(GOOD)
        good = pc.and_(arrays[i], good)
        del names[i], arrays[i]
    if not pc.all(good).as_py():
        # a bad record stores nothing decoded, and used no schema (the manifest lists the schemas used)
        for part, _, _ in decoded:
            for c in (*part.columns, schema_id_column(part.part)):
                i = names.index(c)
                arrays[i] = pc.if_else(good, arrays[i], pa.nulls(n, arrays[i].type))
    names += [GOOD, REASON]
    arrays += [good, pa.nulls(n, pa.string()) if every else pa.array(reasons, type=pa.string())]
    if plan.dead_letter_schema:
        names.append(RAW)
        arrays.append(_raw_envelope(plan, batch, arrays[-1]))
    out = pa.RecordBatch.from_arrays(arrays, names=names)
    if plan.bucket_fields:
        out = _bucketed(plan, out, {part.part: values for part, values, _ in decoded if values is not None})
    return out


def field_text(value: Any, path: str) -> str | None:
    """A decoded field's text as a partition value, as keys.buckets.json_field_text gives a JSON field's: a string
    as it is, numbers and booleans as JSON writes them, an object or array as compact JSON, a missing field null."""
    for name in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(name)
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), default=str)


def _bucketed(plan: DecodePlan, batch: pa.RecordBatch, values: dict[str, list[Any]]) -> pa.RecordBatch:
    """`_bucket` with each decoded field dimension's value in its placeholder, and the batch in bucket order
    (stable: each bucket's records stay in offset order, as rotation needs)."""
    from s3_archive.keys.values import encode_value

    buckets = batch.column("_bucket").to_pylist()
    for index, part, path in plan.bucket_fields:
        marker = decoded_placeholder(index)
        vals = values[part]
        buckets = [b.replace(marker, encode_value(field_text(vals[i], path))) for i, b in enumerate(buckets)]
    i = batch.schema.get_field_index("_bucket")
    batch = batch.set_column(i, "_bucket", pa.array(buckets, pa.string()))
    return batch.take(pc.sort_indices(batch, [("_bucket", "ascending")]))


def _raw_envelope(plan: DecodePlan, batch: pa.RecordBatch, reasons: pa.Array) -> pa.Array:
    """Each record's raw envelope and reason, as the dead-letter objects store it."""
    schema = [pa.field(f["name"], arrow_type(f["type"]), f["nullable"])
              for f in json.loads(plan.dead_letter_schema)["fields"]]
    n = batch.num_rows
    own = {"topic": pa.array([plan.topic] * n, pa.string()), "partition": batch.column("_partition"),
           "offset": batch.column("_offset"), "reason": reasons}
    arrays = [(own[f.name] if f.name in own else batch.column(f.name)).cast(f.type) for f in schema]
    return pa.StructArray.from_arrays(arrays, fields=schema)


def table_rows(plan: DecodePlan, columns: tuple[str, ...], fail_marker: str | None,
               batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow's function for a table format (Iceberg, whose rows Spark writes): each batch of envelope columns
    decoded, as the stored `columns`. The records that do not decode are left out (their dead letters are written
    by a write job of their own); with `fail_marker` the first one fails the task instead, its message starting with
    the marker (the driver turns it into UndecodableValue)."""
    for batch in batches:
        if batch.num_rows == 0:
            continue
        out = decode(plan, batch)
        good = out.column(GOOD)
        if not pc.all(good).as_py():
            if fail_marker is not None:
                i = pc.index(good, False).as_py()
                raise ValueError(f"{fail_marker}topic {plan.topic!r} partition {out.column('partition')[i]} offset "
                                 f"{out.column('offset')[i]}: {out.column(REASON)[i]}")
            out = out.filter(good)
        yield pa.RecordBatch.from_arrays([out.column(c) for c in columns], names=list(columns))
