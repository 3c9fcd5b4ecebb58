"""Avro's binary encoding of Arrow columns, a whole column at a time (the avro format's encoder, encoders.py).

fastavro encodes one Python dict per record: at 200 MB that made avro the slowest format by three times. Here each
column of a batch becomes one Arrow binary array holding every row's encoding of that column (zig-zag varints
computed with numpy, strings and bytes prefixed with their length, unions with their branch), and a record is its
fields' encodings joined row by row (`binary_join_element_wise`, Arrow's C++). Lists and maps need no per-row work:
the encodings of their items lie one after another, so a row's items are one slice of the items' data.

The result is the same bytes fastavro writes record by record for the same schema (s3_archive_tests check it):
blocks are cut where fastavro's `Writer` cuts them (after the record that brings a block to `sync_interval` bytes),
and fastavro still writes the header, compresses each block and writes the sync markers (`Writer.write_block`).

Schemas are the ones `model/registry_types.py::avro_schema` derives from a Spark schema: records, arrays, maps,
unions of one type with "null", the primitive types, date, timestamp-micros, local-timestamp-micros and decimal as
fixed. `supported` says whether a schema is made only of those; anything else is encoded by fastavro record by
record.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

BINARY = pa.large_binary()
_EMPTY = pa.scalar(b"", BINARY)
_BRANCH_0 = pa.scalar(b"\x00", BINARY)  # a union's branch index, as a zig-zag varint
_BRANCH_1 = pa.scalar(b"\x02", BINARY)
_END_OF_BLOCKS = pa.scalar(b"\x00", BINARY)
_VARINT_LIMITS = [np.uint64(1 << (7 * k)) for k in range(1, 10)]
_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


def supported(schema: Any) -> bool:
    """Whether `encode_column` can encode values of this (JSON) Avro schema."""
    if isinstance(schema, str):
        return schema in _PRIMITIVES
    if isinstance(schema, list):
        types = [t for t in schema if t != "null"]
        return len(schema) == 2 and len(types) == 1 and supported(types[0])
    kind = schema.get("type")
    if kind == "record":
        return all(supported(f["type"]) for f in schema["fields"])
    if kind == "array":
        return supported(schema["items"])
    if kind == "map":
        return supported(schema["values"])
    if kind == "fixed":
        return schema.get("logicalType") == "decimal"
    return kind in ("int", "long") or kind in _PRIMITIVES


def _binary(offsets: np.ndarray, data: np.ndarray | pa.Buffer) -> pa.Array:
    """A binary array of len(offsets) - 1 values without nulls."""
    buf = data if isinstance(data, pa.Buffer) else pa.py_buffer(np.ascontiguousarray(data, dtype=np.uint8))
    return pa.Array.from_buffers(BINARY, len(offsets) - 1,
                                 [None, pa.py_buffer(np.ascontiguousarray(offsets, dtype=np.int64)), buf])


def _nothing(rows: int) -> pa.Array:
    """`rows` empty encodings (the null type, a record without fields)."""
    return _binary(np.zeros(rows + 1, dtype=np.int64), np.empty(0, dtype=np.uint8))


def _join(*parts: Any) -> pa.Array:
    return pc.binary_join_element_wise(*parts, _EMPTY)


def _parts(arr: pa.Array) -> tuple[np.ndarray, pa.Buffer]:
    """A large_binary array's offsets (len + 1, absolute into the data buffer) and its data buffer."""
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64, count=len(arr) + 1, offset=arr.offset * 8)
    return offsets, arr.buffers()[2] or pa.py_buffer(b"")


def varints(values: np.ndarray) -> pa.Array:
    """Each value as Avro's long: zig-zag, then 7 bits per byte, least significant first."""
    v = values.astype(np.int64, copy=False)
    z = ((v << 1) ^ (v >> 63)).view(np.uint64)
    sizes = np.ones(len(z), dtype=np.int64)
    for limit in _VARINT_LIMITS:
        sizes += z >= limit
    offsets = np.zeros(len(z) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    data = np.empty(int(offsets[-1]), dtype=np.uint8)
    rows, at = np.arange(len(z)), offsets[:-1]
    for j in range(int(sizes.max(initial=0))):
        if j:
            keep = sizes[rows] > j
            rows, at = rows[keep], at[keep] + 1
        part = z[rows] >> np.uint64(7 * j)
        more = (sizes[rows] > j + 1).astype(np.uint64) << np.uint64(7)
        data[at] = ((part & np.uint64(0x7F)) | more).astype(np.uint8)
    return _binary(offsets, data)


def _numbers(arr: pa.Array, dtype: Any) -> np.ndarray:
    if arr.null_count:
        arr = arr.fill_null(pa.scalar(0, arr.type) if not pa.types.is_boolean(arr.type) else False)
    return arr.to_numpy(zero_copy_only=False).astype(dtype, copy=False)


def _fixed_width(values: np.ndarray) -> pa.Array:
    width = values.dtype.itemsize
    return _binary(np.arange(len(values) + 1, dtype=np.int64) * width, values.view(np.uint8))


def _integers(arr: pa.Array) -> pa.Array:
    if pa.types.is_timestamp(arr.type):
        arr = arr.cast(pa.timestamp("us", arr.type.tz)).view(pa.int64())
    elif pa.types.is_date(arr.type):
        arr = arr.cast(pa.date32()).view(pa.int32())
    return varints(_numbers(arr, np.int64))


def _length_prefixed(arr: pa.Array) -> pa.Array:
    arr = arr.cast(BINARY)
    if arr.null_count:
        arr = arr.fill_null(_EMPTY)
    return _join(varints(pc.binary_length(arr).to_numpy(zero_copy_only=False)), arr)


def _decimal(schema: dict[str, Any], arr: pa.Array) -> pa.Array:
    """Avro's decimal as fixed: the unscaled value, two's complement, big-endian, in `size` bytes."""
    arr = arr.cast(pa.decimal128(schema["precision"], schema["scale"]))
    if arr.null_count:
        arr = arr.fill_null(pa.scalar(0, arr.type))
    size = schema["size"]
    little = np.frombuffer(arr.buffers()[1], dtype=np.uint8, count=16 * len(arr), offset=16 * arr.offset)
    big = little.reshape(len(arr), 16)[:, :size][:, ::-1]
    return _binary(np.arange(len(arr) + 1, dtype=np.int64) * size, big.reshape(-1))


def _items_of_rows(arr: pa.Array, items: pa.Array) -> pa.Array:
    """Avro's array/map blocks of each row of a list or map array: the count, the items' encodings (one slice of
    `items`, the encodings of `arr.values`), then 0."""
    list_offsets = arr.offsets.to_numpy().astype(np.int64)
    counts = np.diff(list_offsets)
    item_offsets, data = _parts(items)
    rows = _binary(item_offsets[list_offsets], data)
    count = pc.if_else(pa.array(counts > 0), varints(counts), _EMPTY)
    return _join(count, rows, _END_OF_BLOCKS)


def encode_column(schema: Any, arr: pa.Array) -> pa.Array:
    """Every row's Avro encoding of `arr` under `schema`, as a large_binary array. Rows where `arr` is null are
    encoded with a placeholder value unless the schema is a union with "null" (callers never keep those rows)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if isinstance(schema, list):  # [type, "null"] or ["null", type]: the branch's index, then the value
        null_first = schema[0] == "null"
        value = encode_column(schema[1 if null_first else 0], arr)
        tag = _BRANCH_1 if null_first else _BRANCH_0
        if not arr.null_count:
            return _join(tag, value)
        return pc.if_else(arr.is_valid(), _join(tag, value), _BRANCH_0 if null_first else _BRANCH_1)
    kind = schema if isinstance(schema, str) else schema["type"]
    if kind == "null":
        return _nothing(len(arr))
    if kind == "boolean":
        return _fixed_width(_numbers(arr, np.uint8))
    if kind in ("int", "long"):
        return _integers(arr)
    if kind == "float":
        return _fixed_width(_numbers(arr.cast(pa.float32()), np.dtype("<f4")))
    if kind == "double":
        return _fixed_width(_numbers(arr.cast(pa.float64()), np.dtype("<f8")))
    if kind in ("string", "bytes"):
        return _length_prefixed(arr)
    if kind == "fixed":
        return _decimal(schema, arr)
    if kind == "record":
        return encode_record(schema, arr.flatten(), [f.name for f in arr.type], len(arr))
    if kind == "array":
        return _items_of_rows(arr, encode_column(schema["items"], arr.values))
    if kind == "map":
        entries = _join(_length_prefixed(arr.values.field(0)), encode_column(schema["values"], arr.values.field(1)))
        return _items_of_rows(arr, entries)
    raise ValueError(f"no columnar Avro encoding for the schema {schema!r}")


def encode_record(schema: dict[str, Any], columns: list[Any], names: list[str], rows: int) -> pa.Array:
    """Each row's encoding of a record: its fields' encodings in the schema's order (columns matched by name)."""
    by_name = dict(zip(names, columns, strict=True))
    fields = [encode_column(f["type"], by_name[f["name"]]) for f in schema["fields"]]
    if not fields:
        return _nothing(rows)
    return fields[0] if len(fields) == 1 else _join(*fields)


class _Block:
    """What fastavro's `Writer.write_block` reads of a block."""

    def __init__(self, num_records: int, data: bytes) -> None:
        self.num_records, self._data = num_records, data

    @property
    def bytes_(self) -> _Block:
        return self

    def getvalue(self) -> bytes:
        return self._data


class BlockWriter:
    """Encoded records into a fastavro `Writer`'s blocks, cut where the writer would cut them record by record."""

    def __init__(self, writer: Any, sync_interval: int) -> None:
        self.writer, self.sync_interval = writer, sync_interval
        self._pending: list[Any] = []
        self._pending_bytes = 0
        self._pending_records = 0

    def write(self, records: pa.Array) -> None:
        offsets, data = _parts(records)
        view, n, start = memoryview(data), len(records), 0
        while start < n:
            # the block ends with the first record that brings it to sync_interval bytes
            need = self.sync_interval - self._pending_bytes + int(offsets[start])
            end = start + int(np.searchsorted(offsets[start + 1:], need, side="left")) + 1
            piece = view[int(offsets[start]):int(offsets[min(end, n)])]
            self._pending.append(piece)
            self._pending_bytes += len(piece)
            self._pending_records += min(end, n) - start
            if end > n:
                return
            self._dump()
            start = end

    def _dump(self) -> None:
        self.writer.write_block(_Block(self._pending_records, b"".join(self._pending)))
        self._pending, self._pending_bytes, self._pending_records = [], 0, 0

    def close(self) -> None:
        if self._pending_records:
            self._dump()
        self.writer.flush()
