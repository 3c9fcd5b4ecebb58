"""Avro payloads of a Schema Registry decoded in the write task (registry_decode.py): fastavro reads each payload
with its own writer schema (its fields are matched by name to the columns, the union of the subject's versions);
logical types Arrow converts faster than Python are left as numbers here and cast afterwards (`cast_times`).
"""

from __future__ import annotations

import io
import json
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from s3_archive.io.registry_client import RegistrySchema
from s3_archive.model.registry_types import NOT_A_RECORD

# Logical types fastavro need not convert: uuid and time-* are stored as their physical type (Spark's mapping);
# dates and timestamps are cast by Arrow from their numbers (a Python datetime per value costs more than decoding)
_PLAIN_LOGICAL = {"uuid", "time-millis", "time-micros", "date", "timestamp-millis", "timestamp-micros",
                  "local-timestamp-millis", "local-timestamp-micros"}


def plain_schema(schema: Any) -> Any:
    """The Avro schema with the logical types Arrow converts made plain, so fastavro returns numbers and str."""
    if isinstance(schema, list):
        return [plain_schema(s) for s in schema]
    if isinstance(schema, dict):
        out = {k: plain_schema(v) if k in ("type", "items", "values", "fields") else v for k, v in schema.items()}
        if out.get("logicalType") in _PLAIN_LOGICAL:
            out.pop("logicalType")
        return out
    return schema


def _union_converter(schema: Any, named: dict[str, Any]) -> Any:
    """A function making a decoded Avro value fit its columns (unions of several types as JSON text), or None
    when the value fits as fastavro returns it."""
    if isinstance(schema, str):
        return named.get(schema)
    if isinstance(schema, list):
        types = [t for t in schema if t != "null"]
        if len(types) == 1:
            return _union_converter(types[0], named)
        kinds = {t if isinstance(t, str) else t.get("type") for t in types}
        if kinds <= {"int", "long"} or kinds <= {"float", "double"}:
            return None
        return lambda v: None if v is None else json.dumps(v, default=str, sort_keys=True)
    kind = schema.get("type")
    if kind == "record":
        convs = {f["name"]: _union_converter(f["type"], named) for f in schema["fields"]}
        convs = {k: c for k, c in convs.items() if c is not None}
        conv = None if not convs else (lambda v: None if v is None else
                                       {**v, **{k: c(v.get(k)) for k, c in convs.items()}})
        named[schema["name"]] = conv
        return conv
    if kind == "array":
        c = _union_converter(schema["items"], named)
        return None if c is None else (lambda v: None if v is None else [c(x) for x in v])
    if kind == "map":
        c = _union_converter(schema["values"], named)
        return None if c is None else (lambda v: None if v is None else {k: c(x) for k, x in v.items()})
    if isinstance(kind, list | dict):
        return _union_converter(kind, named)
    return None


class AvroDecoder:
    """Payloads of one writer schema into dicts of its fields (or `decoded`, for a value that is not a record)."""

    def __init__(self, writer: RegistrySchema) -> None:
        from fastavro import parse_schema, schemaless_reader

        self._read = schemaless_reader
        self.writer_id = writer.id
        self._writer = parse_schema(plain_schema(json.loads(writer.text)), named_schemas={})
        self._convert = _union_converter(json.loads(writer.text), {})
        self.record = _is_record(json.loads(writer.text))

    def __call__(self, payload: bytes) -> Any:
        value = self._read(io.BytesIO(payload), self._writer, None)
        if self._convert is not None:
            value = self._convert(value)
        return value if self.record else {NOT_A_RECORD: value}


def _is_record(schema: Any) -> bool:
    if isinstance(schema, list):
        types = [t for t in schema if t != "null"]
        return len(types) == 1 and _is_record(types[0])
    return isinstance(schema, dict) and schema.get("type") in ("record", "error")


def time_units(schema: Any) -> dict[str, Any]:
    """Per record field: its date/timestamp logical type, or a nested dict/list of them (None: no time inside)."""
    fields = schema.get("fields", []) if isinstance(schema, dict) else []
    return {f["name"]: _unit(f["type"]) for f in fields}


def _unit(t: Any) -> Any:
    if isinstance(t, list):
        inner = [x for x in t if x != "null"]
        return _unit(inner[0]) if len(inner) == 1 else None
    if isinstance(t, dict):
        if t.get("logicalType") in ("date", "timestamp-millis", "timestamp-micros", "local-timestamp-millis",
                                    "local-timestamp-micros") and t.get("type") in ("int", "long"):
            return t["logicalType"]
        if t.get("type") in ("record", "error"):
            return time_units(t)
        if t.get("type") == "array":
            return ("items", _unit(t["items"]))
        if t.get("type") == "map":
            return ("values", _unit(t["values"]))
    return None


def cast_times(col: pa.Array, unit: Any, target: pa.DataType) -> pa.Array:
    """`col` (built with numbers for dates and timestamps) as `target`."""
    if col.type == target:
        return col
    if isinstance(unit, str):
        if unit == "date":
            return col.cast(pa.date32())
        tz = target.tz
        step = pa.timestamp("ms" if unit.endswith("millis") else "us", tz=tz)
        return col.cast(step).cast(target)
    # nested: Arrow casts a struct, list or map field by field only when every child's cast is allowed; int64 to
    # timestamp is, so a nested value is cast as a whole once its millisecond children are scaled
    return _scaled(col, unit).cast(target)


def _scaled(col: pa.Array, unit: Any) -> pa.Array:
    """`col` with every timestamp-millis number inside made microseconds (the unit Arrow's cast assumes)."""
    if unit is None:
        return col
    if isinstance(unit, str):
        return pc.multiply(col, 1000) if unit.endswith("millis") else col
    if isinstance(unit, dict) and pa.types.is_struct(col.type):
        children = [_scaled(col.field(i), unit.get(f.name)) for i, f in enumerate(col.type)]
        return pa.StructArray.from_arrays(children, fields=[f.with_type(c.type) for f, c in zip(col.type, children,
                                                                                                strict=True)],
                                          mask=col.is_null() if col.null_count else None)
    if isinstance(unit, tuple) and pa.types.is_list(col.type):
        return pa.ListArray.from_arrays(col.offsets, _scaled(col.values, unit[1]),
                                        mask=col.is_null() if col.null_count else None)
    return col
