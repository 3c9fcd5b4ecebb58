"""Avro payloads of a Schema Registry decoded into columns natively (registry_decode.py's default for Avro): native/'s
`s3_archive_native.AvroDecoder` (arrow-avro) decodes a batch of payloads into one struct array per writer schema,
and here each is made to fit the part's columns and put back in row order, with Arrow's kernels, no Python object
per record. The result is exactly what fastavro's path (avro_decoding.py) builds: the same columns, types, values
and nulls.

The native path decodes a part when every schema of the plan it is given fits it (`fits`, from the schemas alone);
the others go to fastavro: a top-level value that is not a record, maps, unions of several non-null types (JSON
text), decimals, the null type, logical types Spark does not map, and a field whose column widens its type beyond
int → long or float → double. A batch is decoded by fastavro whole when any payload is not one record of a schema
the native decoder knows (not framed, an id the plan lacks, a body that does not decode, bytes left over) or a
part's field is a bucket dimension: fastavro gives each bad record its reason, as it always does.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from s3_archive.archive.executor.avro_decoding import plain_schema
from s3_archive.archive.protocol import DecodedPart

log = logging.getLogger(__name__)

_PRIMITIVE = {"boolean": (pa.bool_(),), "int": (pa.int32(), pa.int64()), "long": (pa.int64(),),
              "float": (pa.float32(), pa.float64()), "double": (pa.float64(),), "string": (pa.string(),),
              "bytes": (pa.binary(),)}


def fits(writer_text: str, columns: pa.StructType) -> bool:
    """Whether payloads of this writer schema decode natively into `columns` (the part's struct, dates as int32
    and timestamps as int64 as fastavro's path builds them) exactly as fastavro's path decodes them."""
    schema = plain_schema(json.loads(writer_text))
    return _record(schema) and _fits(schema, columns, {})


def _record(schema: Any) -> bool:
    return isinstance(schema, dict) and schema.get("type") in ("record", "error")


def _fits(schema: Any, target: pa.DataType, named: dict[str, Any]) -> bool:
    if isinstance(schema, str):
        if schema in _PRIMITIVE:
            return target in _PRIMITIVE[schema]
        short = schema.rsplit(".", 1)[-1]
        found = [v for k, v in named.items() if k == schema or k.rsplit(".", 1)[-1] == short]
        return bool(found) and found[0] is not None and _named_fits(found[0], target, named)
    if isinstance(schema, list):
        types = [t for t in schema if t != "null"]
        return len(schema) == 2 and len(types) == 1 and _fits(types[0], target, named)
    if not isinstance(schema, dict) or "logicalType" in schema:
        return False
    kind = schema.get("type")
    if kind in ("record", "error", "enum", "fixed"):
        name = schema.get("name", "")
        ns = schema.get("namespace")
        full = f"{ns}.{name}" if ns and "." not in name else name
        if full in named:
            return False  # a redefinition, or a record inside itself: fastavro's concern
        named[full] = None  # being defined
        ok = _named_fits(schema, target, named)
        named[full] = schema
        return ok
    if kind == "array":
        return pa.types.is_list(target) and _fits(schema["items"], target.value_type, named)
    if isinstance(kind, str) and kind in _PRIMITIVE:  # {"type": "long", ...}: other attributes say nothing
        return _fits(kind, target, named)
    if isinstance(kind, list | dict):
        return _fits(kind, target, named)
    return False


def _named_fits(schema: dict[str, Any], target: pa.DataType, named: dict[str, Any]) -> bool:
    """A record, enum or fixed (its definition) against its column."""
    kind = schema["type"]
    if kind == "enum":
        return target == pa.string()
    if kind == "fixed":
        return target == pa.binary()
    if not pa.types.is_struct(target) or not schema.get("fields"):
        return False
    names = {f.name for f in target}
    return all(f["name"] in names and _fits(f["type"], target.field(f["name"]).type, named)
               for f in schema["fields"])


def conform(col: pa.Array, target: pa.DataType) -> pa.Array:
    """A decoded column (arrow-avro's types of its writer schema) as `target` (its field of the part's columns):
    enums as strings, fixed as binary, int and float widened, a record's fields matched by name (a field its writer
    lacks is null)."""
    if col.type == target:
        return col
    if pa.types.is_struct(target):
        present = {f.name for f in col.type}
        children = [conform(col.field(f.name), f.type) if f.name in present else pa.nulls(len(col), f.type)
                    for f in target]
        return pa.StructArray.from_arrays(children, fields=list(target),
                                          mask=col.is_null() if col.null_count else None)
    if pa.types.is_list(target):
        return pa.ListArray.from_arrays(col.offsets, conform(col.values, target.value_type), type=target,
                                        mask=col.is_null() if col.null_count else None)
    return col.cast(target)


class _Native:
    """The native decoder of one part's schemas (shared by a process's tasks; one batch at a time)."""

    def __init__(self, decoder: Any) -> None:
        self.decoder = decoder
        self.lock = threading.Lock()


_NATIVE: dict[tuple[str, tuple[tuple[int, str], ...]], _Native | None] = {}
_NATIVE_LOCK = threading.Lock()
_WARNED: list[bool] = []


def _native(part: DecodedPart, columns: pa.StructType) -> _Native | None:
    """The part's native decoder, or None when a schema of the plan does not fit it (or the native module is an
    older build without it: then fastavro decodes, and the log says so once)."""
    key = (part.struct_type, tuple((s.id, s.text) for s in part.schemas))
    with _NATIVE_LOCK:
        if key in _NATIVE:
            return _NATIVE[key]
    made: _Native | None = None
    if part.schemas and all(s.schema_type == "AVRO" and fits(s.text, columns) for s in part.schemas):
        module = _module()
        if module is not None:
            try:
                made = _Native(module.AvroDecoder([(s.id, json.dumps(plain_schema(json.loads(s.text))))
                                                   for s in part.schemas]))
            except ValueError as e:  # a schema arrow-avro does not read: fastavro decodes the part
                log.info("Schema Registry Avro schemas of %s decoded by fastavro: %s", part.subject, e)
    with _NATIVE_LOCK:
        _NATIVE.setdefault(key, made)
        return _NATIVE[key]


def _module() -> Any:
    try:
        import s3_archive_native
    except ImportError as e:
        found = None
        why = f"the module s3_archive_native is missing ({e})"
    else:
        found = s3_archive_native if hasattr(s3_archive_native, "AvroDecoder") else None
        why = f"the module s3_archive_native at {s3_archive_native.__file__} is an older build without AvroDecoder"
    if found is None and not _WARNED:
        _WARNED.append(True)
        log.warning("Schema Registry Avro payloads are decoded by fastavro, not natively: %s; run `make setup` to "
                    "build native/", why)
    return found


def decode_columns(part: DecodedPart, columns: pa.StructType, raw: pa.Array, skip: pa.Array | None,
                   ) -> tuple[pa.StructArray, pa.Array] | None:
    """The part's decoded struct (types as `columns`; null where the payload is null or `skip` is true) and each
    row's writer schema id (int32, null likewise), or None when fastavro must decode this batch."""
    native = _native(part, columns)
    if native is None:
        return None
    if skip is not None:
        raw = pc.if_else(skip, pa.nulls(len(raw), raw.type), raw)
    with native.lock:
        groups = native.decoder.decode(raw)
    if groups is None:
        return None
    n = len(raw)
    parts = [(schema_id, pa.record_batch(rows)) for schema_id, rows in groups]
    order = np.concatenate([b.column(0).to_numpy() for _, b in parts]) if parts else np.empty(0, np.int64)
    covered = np.zeros(n, dtype=bool)
    covered[order] = True
    position = np.full(n, len(order), dtype=np.int64)  # rows not decoded take the null after the decoded ones
    position[order] = np.arange(len(order), dtype=np.int64)
    take = pa.array(position)
    values = [b.column(1) for _, b in parts]
    in_order = len(order) == n and bool((order == np.arange(n)).all())  # one schema, no null: no reordering
    children = []
    for f in columns:
        pieces = [conform(v.field(f.name), f.type) if v.type.get_field_index(f.name) >= 0
                  else pa.nulls(len(v), f.type) for v in values]
        children.append(pieces[0] if in_order and len(pieces) == 1 else
                        pa.concat_arrays([*pieces, pa.nulls(1, f.type)]).take(take))
    null_rows = pa.array(~covered)
    built = pa.StructArray.from_arrays(children, fields=list(columns),
                                       mask=null_rows if not covered.all() else None)
    ids = np.zeros(n, dtype=np.int32)
    for (schema_id, b) in parts:
        ids[b.column(0).to_numpy()] = schema_id
    return built, pa.array(ids, pa.int32(), mask=~covered)
