"""Each format's bytes, written on the executors from the Arrow batches Spark hands a write task (task.py).

- parquet: pyarrow's writer (C++), row groups of about `row_group_bytes` of Arrow data, cut by the rows alone
  (`row_bytes`) and each written from the batches' own buffers re-cut at every `WRITE_BATCH_ROWS` rows of the row
  group (`aligned`), so the bytes do not depend on how the rows came in batches and the row group is never copied
  whole (pages follow the writer's 1,024-row steps within each chunk); `key`, `value` and the
  offsets are not dictionary-encoded (all distinct: trying costs half of the encoding time); one codec for every
  column but those the plan gives another (`column_codecs`: a Schema Registry decoded archive's raw value, zstd);
  the Spark schema is kept in the file's metadata as Spark's own writer does.
- avro: the schema Spark's avro writer derives (model/registry_types.py::avro_schema); records encoded a column
  at a time (avro_encoding.py) into fastavro's container, with a sync marker derived from the object key (a re-run
  writes the same bytes).
- jsonl, json, csv, text: Spark renders each record's line (to_json / to_csv / the value) in the same projection
  that reads Kafka, or the task does (read_path librdkafka: task_lines.py, each line with its end, `line_end`);
  here the lines are joined (`\\n`; json wraps each object's lines as one array `[a\\n,b]`; csv may start each
  object with a header row), or written as they lie when the task rendered their ends, and compressed as a stream
  (gzip, bzip2, zstd: one stream / frame per object, at the configured level).

Every encoder writes into a file-like sink (archive/executor/upload.py's ObjectUpload) and never holds more than a row
group (parquet: the batches' buffers it spans, plus a copy of its list and struct columns) or one Arrow batch (the
others).
"""

from __future__ import annotations

import bz2
import hashlib
import json
import zlib
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from s3_archive.archive.executor.avro_encoding import BlockWriter, encode_record, supported
from s3_archive.archive.protocol import FormatPlan

_PARQUET_CODECS = {"none": None, "lz4_raw": "lz4"}
_AVRO_CODECS = {"none": "null", "zstd": "zstandard"}
_SYNC_INTERVAL = 1 << 20  # Avro block size: uncompressed bytes of records per block
SPARK_ROW_METADATA = "org.apache.spark.sql.parquet.row.metadata"
WRITE_BATCH_ROWS = 1024  # pyarrow's write_batch_size: the writer's steps within each chunk of a column


def row_bytes(a: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Each row's Arrow bytes, about: a value's bytes plus its offset for binary and strings, the children's for
    lists and structs, the width for the others. A function of the row alone, so row groups cut by it are the same
    however the rows came in batches."""
    if isinstance(a, pa.ChunkedArray):
        return np.concatenate([row_bytes(c) for c in a.chunks]) if a.num_chunks else np.zeros(0, np.int64)
    t = a.type
    if pa.types.is_dictionary(t):
        return np.full(len(a), t.index_type.bit_width // 8, np.int64)
    if pa.types.is_binary(t) or pa.types.is_string(t) or pa.types.is_large_binary(t) or pa.types.is_large_string(t):
        return pc.fill_null(pc.binary_length(a), 0).to_numpy(zero_copy_only=False).astype(np.int64) + 4
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        inner = np.zeros(len(a.values) + 1, np.int64)
        np.cumsum(row_bytes(a.values), out=inner[1:])
        offsets = a.offsets.to_numpy()
        return inner[offsets[1:]] - inner[offsets[:-1]] + 4
    if pa.types.is_struct(t):
        out = np.zeros(len(a), np.int64)
        for i in range(t.num_fields):
            out += row_bytes(a.field(i))
        return out
    return np.full(len(a), max(1, t.bit_width // 8), np.int64)


def leaf_paths(field: pa.Field) -> list[str]:
    """The Parquet column paths of an Arrow field's leaves, as pyarrow's writer names them (lists `name.list.element`,
    maps `name.key_value.key` / `.value`, struct children `name.child`): per-column writer settings name leaves."""
    t = field.type
    if pa.types.is_struct(t):
        children = [t.field(i) for i in range(t.num_fields)]
    elif pa.types.is_map(t):
        children = [pa.field("key_value", pa.struct([t.key_field, t.item_field]))]
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        children = [pa.field("list", pa.struct([t.value_field.with_name("element")]))]
    else:
        return [field.name]
    return [f"{field.name}.{p}" for c in children for p in leaf_paths(c)]


def parquet_compression(fmt: FormatPlan, schema: pa.Schema) -> tuple[Any, Any]:
    """pyarrow's `compression` and `compression_level` for `schema`: the plan's codec and level, or per leaf column
    where `column_codecs` gives some top-level columns another codec (those at its default level)."""
    def per_column(k: str) -> str:  # _PARQUET_CODECS but "none", which is a name per column
        return "lz4" if k == "lz4_raw" else k

    other = {c: per_column(k) for c, k in fmt.column_codecs if c in schema.names}
    if not other:
        return _PARQUET_CODECS.get(fmt.codec, fmt.codec), fmt.level
    codec = per_column(fmt.codec)
    leaves = {p: other.get(f.name, codec) for f in schema for p in leaf_paths(f)}
    level = ({p: fmt.level for f in schema if f.name not in other for p in leaf_paths(f)}
             if fmt.level is not None else None)
    return leaves, level


def aligned(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A row group's column as the writer makes the same pages of it as of one contiguous array: chunks that start
    at multiples of WRITE_BATCH_ROWS rows (the writer's steps restart at each chunk), zero-copy slices of the
    batches' buffers but where a step straddles two batches (those rows copied). A list or struct column is copied
    whole: its steps count leaf values, not rows."""
    t = column.type
    if column.num_chunks <= 1 or pa.types.is_nested(t) or pa.types.is_dictionary(t):
        return pa.chunked_array([column.combine_chunks()], t) if column.num_chunks != 1 else column
    ends = np.cumsum([len(c) for c in column.chunks])
    n, pos, out = int(ends[-1]), 0, []
    while pos < n:  # pos: a multiple of WRITE_BATCH_ROWS
        end = int(ends[np.searchsorted(ends, pos, side="right")])  # the end of the batch holding row pos
        stop = end if end == n else end - end % WRITE_BATCH_ROWS
        if stop > pos:
            out += column.slice(pos, stop - pos).chunks  # within one batch: no copy
        else:
            stop = min(n, pos + WRITE_BATCH_ROWS)
            out.append(column.slice(pos, stop - pos).combine_chunks())
        pos = stop
    return pa.chunked_array(out, t)


class ParquetEncoder:
    """Row groups of about `row_group_bytes` (`row_bytes`), each written from chunks cut at the writer's steps
    (`aligned`): the row groups and pages depend on the rows only, not on the batches they came in (a layout's
    buckets, a reader's batch size), so both read paths write the same bytes, and a row group is held once (the
    batches' buffers), never copied whole."""

    def __init__(self, fmt: FormatPlan, sink: Any) -> None:
        self.fmt, self.sink = fmt, sink
        self._writer: Any = None
        self._buffered: list[pa.Table] = []
        self._bytes = 0

    def write(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        sizes = np.zeros(table.num_rows, np.int64)
        for column in table.columns:
            sizes += row_bytes(column)
        filled = np.cumsum(sizes) + self._bytes
        start = 0
        while start < table.num_rows:
            cut = int(np.searchsorted(filled, self.fmt.row_group_bytes, side="left"))  # first row reaching it
            if cut >= table.num_rows:
                self._buffered.append(table.slice(start))
                self._bytes = int(filled[-1])
                return
            self._buffered.append(table.slice(start, cut + 1 - start))
            self._flush()
            filled -= filled[cut]
            start = cut + 1

    def _flush(self) -> None:
        self._bytes = 0
        if not self._buffered:
            return
        import pyarrow.parquet as pq

        table = pa.concat_tables(self._buffered)
        self._buffered = []
        table = pa.Table.from_arrays([aligned(c) for c in table.columns], schema=table.schema)
        if self._writer is None:
            schema = table.schema.with_metadata({SPARK_ROW_METADATA: self.fmt.spark_schema})
            compression, level = parquet_compression(self.fmt, schema)
            self._writer = pq.ParquetWriter(
                self.sink, schema, compression=compression, compression_level=level,
                use_dictionary=[c for c in self.fmt.dictionary if c in schema.names] or False,
                write_statistics=True, store_schema=False)
        self._writer.write_table(table.replace_schema_metadata(self._writer.schema.metadata),
                                 row_group_size=max(1, table.num_rows))

    def close(self) -> None:
        self._flush()
        if self._writer is not None:
            self._writer.close()


def avro_container(schema: dict, sink: Any, codec: str, level: int | None, key: str) -> Any:
    """fastavro's container writer as every Avro object of the archive is written: `codec` by fastavro's name, blocks
    of `_SYNC_INTERVAL` bytes, the sync marker derived from the object key `key` (a re-run, or an erasure's rewrite
    of that object, writes the same bytes for the same records)."""
    from fastavro import parse_schema
    from fastavro.write import Writer

    return Writer(sink, parse_schema(schema), codec=codec, sync_interval=_SYNC_INTERVAL,
                  sync_marker=hashlib.md5(key.encode()).digest(), compression_level=level)


def _timestamps_as_micros(table: pa.Table) -> pa.Table:
    """Top-level timestamps as epoch microseconds (fastavro takes them as is for timestamp-micros)."""
    for i, f in enumerate(table.schema):
        if pa.types.is_timestamp(f.type):
            table = table.set_column(i, f.name, pc.cast(table.column(i), pa.timestamp("us")).cast(pa.int64()))
    return table


class AvroEncoder:
    """Columnar (avro_encoding.py) when the schema allows it, else fastavro record by record; the same bytes
    either way, in fastavro's container (header, codec, blocks of `_SYNC_INTERVAL` bytes, a sync marker derived
    from the object key: a re-run writes the same bytes)."""

    def __init__(self, fmt: FormatPlan, sink: Any, key: str) -> None:
        self._schema = json.loads(fmt.avro_schema)
        self._writer = avro_container(self._schema, sink, _AVRO_CODECS.get(fmt.codec, fmt.codec), fmt.level, key)
        self._blocks = BlockWriter(self._writer, _SYNC_INTERVAL) if supported(self._schema) else None

    def write(self, table: pa.Table) -> None:
        if self._blocks is not None:
            if table.num_rows:
                self._blocks.write(encode_record(self._schema, table.columns, table.column_names, table.num_rows))
            return
        for record in _timestamps_as_micros(table).to_pylist(maps_as_pydicts="strict"):
            self._writer.write(record)

    def close(self) -> None:
        if self._blocks is not None:
            self._blocks.close()
        else:
            self._writer.flush()


class _Compressor:
    """A streaming codec of the text formats: one gzip member / bzip2 stream / zstd frame per object."""

    def __init__(self, codec: str, sink: Any, level: int | None = None) -> None:
        self.sink = sink
        if codec == "gzip":
            # Hadoop's GzipCodec level unless one is given; 31: a gzip header
            self._c: Any = zlib.compressobj(6 if level is None else level, zlib.DEFLATED, 31)
        elif codec == "bzip2":
            self._c = bz2.BZ2Compressor(9)
        elif codec == "zstd":
            from backports import zstd

            self._c = zstd.ZstdCompressor(level)
        elif codec == "none":
            self._c = None
        else:
            raise ValueError(f"no text codec {codec!r}; supported: none, gzip, bzip2, zstd")

    def write(self, data: Any) -> None:
        out = data if self._c is None else self._c.compress(data)
        if out:
            self.sink.write(out)

    def close(self) -> None:
        if self._c is not None:
            self.sink.write(self._c.flush())


def line_end(fmt: str) -> bytes:
    """What follows each record's line in an object of `fmt`: `\\n,` in json (the last one's held back for `]`),
    `\\n` in the others."""
    return b"\n," if fmt == "json" else b"\n"


def _data(lines: pa.Array) -> memoryview:
    """The values of a binary array as one buffer, as they lie in it (no copy)."""
    width = 8 if pa.types.is_large_binary(lines.type) or pa.types.is_large_string(lines.type) else 4
    offsets = np.frombuffer(lines.buffers()[1], dtype=f"<i{width}", count=len(lines) + 1,
                            offset=lines.offset * width)
    data = lines.buffers()[2]
    return memoryview(data if data is not None else b"")[int(offsets[0]):int(offsets[-1])]


def joined(lines: pa.Array, sep: bytes) -> memoryview:
    """Every line followed by `sep`, as one buffer (Arrow joins them; no Python object per line)."""
    return _data(pc.binary_join_element_wise(lines, pa.scalar(b"", lines.type), pa.scalar(sep, lines.type)))


class LinesEncoder:
    """jsonl, csv, text: each record's line (`_line`, binary) then `\\n`; json: one array `[a\\n,b]\\n` per object.
    `ended`: each line already ends with its `line_end` (the task renders them so: task_lines.py), so the lines are
    written from the buffer they lie in, not joined into another."""

    def __init__(self, fmt: FormatPlan, sink: Any, ended: bool = False) -> None:
        self.array = fmt.name == "json"
        self.ended = ended
        self._end = line_end(fmt.name)
        self._out = _Compressor(fmt.codec, sink, fmt.level)
        self._started = False
        if fmt.header:  # csv with a header row: every object starts with it
            self._out.write(fmt.header + b"\n")

    def write(self, table: pa.Table) -> None:
        column = table.column("_line")  # one chunk as it is: combine_chunks would copy every line once more
        lines = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
        if len(lines) == 0:
            return
        data = _data(lines) if self.ended else joined(lines, self._end)
        if not self.array:
            self._out.write(data)
            return
        # each record then "\n,": the last one's "\n," is held back
        self._out.write(b"[" if not self._started else b"\n,")
        self._out.write(data[:-2])
        self._started = True

    def close(self) -> None:
        if self.array and self._started:
            self._out.write(b"]\n")
        self._out.close()


def open_encoder(fmt: FormatPlan, sink: Any, key: str, ended: bool = False,
                 ) -> ParquetEncoder | AvroEncoder | LinesEncoder:
    """The encoder of an object of `fmt` at `key` writing into `sink`; `ended`: the lines end with their `line_end`
    (LinesEncoder)."""
    if fmt.name == "parquet":
        return ParquetEncoder(fmt, sink)
    if fmt.name == "avro":
        return AvroEncoder(fmt, sink, key)
    return LinesEncoder(fmt, sink, ended)
