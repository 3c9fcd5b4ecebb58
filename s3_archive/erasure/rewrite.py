"""One archived object read and written again without the records an erasure matched (`drop`), or with them nulled
(`null`), in its own format and with the archive's own encoders (archive/executor/encoders.py): the records left are
written byte for byte as the archive wrote them, so an object rewritten without any record removed is the object it
was (tested per format).

- parquet (data and dead letters): the table as stored; written by `ParquetEncoder` with the object's codecs (a
  column of another codec than the others, as a decoded archive's raw value, keeps its own), the Spark
  schema kept in its metadata and the archive's dictionary columns (none for dead letters), so row groups and pages
  follow the rows alone.
- avro: the records as fastavro reads them; written by the archive's container writer with the writer schema, codec
  and sync marker of the original object (the marker is derived from the original object's name, not the new one's).
- jsonl, json, csv: the lines as stored (read through the restore's decompression); the records kept are not
  rendered again, the nulled ones are (JSON with compact separators; csv with empty fields), and the lines written
  by `LinesEncoder` with the archive's codec and level.
- text and bytes keep neither key nor offset: no record of theirs can be found or named (erasure.refusal).

An object left without records is not written again: the window's next generation lists one object fewer.
"""

from __future__ import annotations

import base64
import io
import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from s3_archive.archive.protocol import PARQUET_DICTIONARY, FormatPlan
from s3_archive.config.archive import ArchiveConfig
from s3_archive.erasure.erasure import EraseRequest
from s3_archive.model.errors import ErasureRefused
from s3_archive.restore.readers import text_stream

ENVELOPE_KEPT = ("topic", "partition", "offset", "timestamp", "timestamp_type")  # `null` mode keeps these
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# The Parquet codec a file's column chunks name -> the archive's codec name
_PARQUET_CODEC_NAMES = {"UNCOMPRESSED": "none", "SNAPPY": "snappy", "GZIP": "gzip", "BROTLI": "brotli",
                        "ZSTD": "zstd", "LZ4_RAW": "lz4_raw", "LZ4": "lz4_raw"}


@dataclass(frozen=True)
class ObjectFormat:
    """How one object of a window is read and written: the archive's format (`parquet` for dead letters), its codec
    and level, and (csv) the fields of a line and the header row."""

    name: str
    codec: str
    level: int | None = None
    csv_fields: tuple[str, ...] = ()
    header: bytes = b""
    dead_letter: bool = False
    column_codecs: tuple[tuple[str, str], ...] = ()  # parquet: columns of another codec (FormatPlan.column_codecs)

    @classmethod
    def of(cls, cfg: ArchiveConfig, dead_letter: bool = False) -> ObjectFormat:
        if dead_letter:  # the raw envelope, written as archive/executor/task.py writes dead letters
            return cls("parquet", "snappy", dead_letter=True)
        if cfg.format == "iceberg":  # the table's data files, written by Iceberg: read here, committed again by
            return cls("parquet", cfg.codec)  # erasure/iceberg_erase.py
        return cls(cfg.format, cfg.codec, cfg.compression_level, tuple(cfg.csv_fields) if cfg.format == "csv" else (),
                   ",".join(cfg.csv_fields).encode() if cfg.format == "csv" and cfg.sink_output.csv_header else b"")


@dataclass
class Decoded:
    """One object's records as stored: `rows` (an Arrow table, Avro records, or lines), their offsets, and the
    columns a request matches on (None where the object has no such column)."""

    fmt: ObjectFormat
    key: str  # the object's name (Avro's sync marker is derived from it)
    rows: Any
    offsets: list[int]
    columns: dict[str, list[Any] | None] = field(default_factory=dict)
    timestamps: list[int | None] | None = None  # epoch ms per row; None: the object stores no timestamp
    extra: dict[str, Any] = field(default_factory=dict)  # parquet: the Spark schema; avro: schema, codec

    def __len__(self) -> int:
        return len(self.offsets)


def decode(data: bytes, key: str, fmt: ObjectFormat, request: EraseRequest) -> Decoded:
    """The object's records, with the columns `request` matches on."""
    if fmt.name == "parquet":
        return _parquet(data, key, fmt, request)
    if fmt.name == "avro":
        return _avro(data, key, fmt, request)
    if fmt.name in ("jsonl", "json", "csv"):
        return _lines(data, key, fmt, request)
    raise ErasureRefused(f"{key}: format {fmt.name!r} keeps no key or offset of its records; erasure cannot "
                         "find them")


def matching(d: Decoded, request: EraseRequest) -> list[int]:
    """The row numbers of `d` that `request` matches; [] when the object lacks a column it matches on (a dead
    letter has no decoded fields). A data object without the column is refused: the request cannot be answered."""
    missing = [c for c in request.columns() if d.columns.get(c) is None]
    if missing and not d.fmt.dead_letter:
        raise ErasureRefused(f"{d.key} has no {missing[0]!r} (format {d.fmt.name}); an erasure matches records by "
                             "their key (stored when envelope.key is on; csv_fields 'key') or by a decoded field's "
                             "column, and names them by their offset")
    if missing:
        return []
    return request.matching({c: d.columns[c] for c in request.columns()})  # type: ignore[misc]


def rewritten(d: Decoded, rows: Sequence[int], mode: str, origin: str | None = None) -> bytes | None:
    """The object's bytes without `rows` (`drop`) or with them nulled (`null`); None when no record is left.
    `origin`: the object's name as the archive wrote it (generation 1; default: its name), from which the archive
    derives Avro's sync marker."""
    if mode == "drop" and len(set(rows)) == len(d):
        return None
    from s3_archive.archive.executor.encoders import LinesEncoder, ParquetEncoder, avro_container  # not at load

    sink = io.BytesIO()
    if d.fmt.name == "parquet":
        enc = ParquetEncoder(FormatPlan("parquet", d.fmt.codec, "", spark_schema=d.extra["spark_schema"],
                                        dictionary=() if d.fmt.dead_letter else PARQUET_DICTIONARY,
                                        level=d.fmt.level, column_codecs=d.fmt.column_codecs), sink)
        enc.write(_table_without(d.rows, rows, mode))
        enc.close()
    elif d.fmt.name == "avro":
        writer = avro_container(json.loads(d.extra["schema"]), sink, d.extra["codec"], d.fmt.level, origin or d.key)
        for record in _records_without(d.rows, rows, mode, d.extra["nullable"], d.key):
            writer.write(record)
        writer.flush()
    else:
        import pyarrow as pa

        enc = LinesEncoder(FormatPlan(d.fmt.name, d.fmt.codec, "", level=d.fmt.level, header=d.fmt.header), sink)
        enc.write(pa.table({"_line": pa.array(_lines_without(d, rows, mode), pa.binary())}))
        enc.close()
    return sink.getvalue()


def _parquet(data: bytes, key: str, fmt: ObjectFormat, request: EraseRequest) -> Decoded:
    import pyarrow.parquet as pq

    from s3_archive.archive.executor.encoders import SPARK_ROW_METADATA

    pf = pq.ParquetFile(io.BytesIO(data))
    table = pf.read()
    meta = pf.metadata
    if meta.num_row_groups and meta.row_group(0).num_columns:  # the object's own codecs (the config may differ now)
        group = meta.row_group(0)
        by_column = {group.column(i).path_in_schema.split(".")[0]: _PARQUET_CODEC_NAMES.get(
            group.column(i).compression, fmt.codec) for i in range(group.num_columns)}
        codec = Counter(by_column.values()).most_common(1)[0][0]
        fmt = ObjectFormat(fmt.name, codec, fmt.level, dead_letter=fmt.dead_letter,
                           column_codecs=tuple((c, k) for c, k in by_column.items() if k != codec))
    spark_schema = (table.schema.metadata or {}).get(SPARK_ROW_METADATA.encode(), b"").decode()
    table = table.replace_schema_metadata(None)
    if "offset" not in table.column_names:
        raise ErasureRefused(f"{key} stores no offset (envelope.metadata is off): an erasure names the records it "
                             "erased by their offsets")
    cols = {c: table.column(c).to_pylist() if c in table.column_names else None for c in request.columns()}
    return Decoded(fmt, key, table, table.column("offset").to_pylist(), cols,
                   _parquet_ms(table.column("timestamp")) if "timestamp" in table.column_names else None,
                   {"spark_schema": spark_schema})


def _parquet_ms(col: Any) -> list[int | None]:
    import pyarrow as pa

    div = {"s": 1, "ms": 1, "us": 1000, "ns": 1_000_000}[col.type.unit] if pa.types.is_timestamp(col.type) else 1
    ints = col.cast(pa.int64()).to_pylist()
    if pa.types.is_timestamp(col.type) and col.type.unit == "s":
        return [None if v is None else v * 1000 for v in ints]
    return [None if v is None else v // div for v in ints]


def _table_without(table: Any, rows: Sequence[int], mode: str) -> Any:
    """`table` without the rows (`drop`), or with everything in them but the envelope's position nulled."""
    import pyarrow as pa
    import pyarrow.compute as pc

    mask = [False] * table.num_rows
    for i in rows:
        mask[i] = True
    hit = pa.array(mask, pa.bool_())
    if mode == "drop":
        return table.filter(pc.invert(hit))
    cols = [c if name in ENVELOPE_KEPT else pc.if_else(hit, pa.nulls(table.num_rows, c.type), c)
            for name, c in zip(table.column_names, table.columns, strict=True)]
    return pa.Table.from_arrays(cols, schema=table.schema)


def _avro(data: bytes, key: str, fmt: ObjectFormat, request: EraseRequest) -> Decoded:
    import fastavro

    reader = fastavro.reader(io.BytesIO(data))
    records = list(reader)
    schema = reader.metadata["avro.schema"]
    fields = json.loads(schema).get("fields", [])
    if "offset" not in {f["name"] for f in fields}:
        raise ErasureRefused(f"{key} stores no offset (envelope.metadata is off): an erasure names the records it "
                             "erased by their offsets")
    nullable = {f["name"] for f in fields if isinstance(f["type"], list) and "null" in f["type"]}
    names = {f["name"] for f in fields}
    cols = {c: [r[c] for r in records] if c in names else None for c in request.columns()}
    ts = [_avro_ms(r["timestamp"]) for r in records] if "timestamp" in names else None
    return Decoded(fmt, key, records, [r["offset"] for r in records], cols, ts,
                   {"schema": schema, "codec": reader.codec, "nullable": nullable})


def _avro_ms(ts: Any) -> int | None:
    """Spark's avro writer: timestamp-micros, read as an aware datetime (or the micros)."""
    if ts is None:
        return None
    return (ts - _EPOCH) // timedelta(milliseconds=1) if isinstance(ts, datetime) else int(ts) // 1000


def _records_without(records: list[dict], rows: Sequence[int], mode: str, nullable: set[str],
                     key: str) -> list[dict]:
    hit = set(rows)
    if mode == "drop":
        return [r for i, r in enumerate(records) if i not in hit]
    out = []
    for i, r in enumerate(records):
        if i in hit:
            fixed = [n for n in r if n not in ENVELOPE_KEPT and n not in nullable]
            if fixed:
                raise ErasureRefused(f"{key}: field {fixed[0]!r} cannot be null in the object's Avro schema; erase "
                                     "with erasure.mode drop")
            r = {n: (v if n in ENVELOPE_KEPT else None) for n, v in r.items()}
        out.append(r)
    return out


def _lines(data: bytes, key: str, fmt: ObjectFormat, request: EraseRequest) -> Decoded:
    with text_stream(io.BytesIO(data), key, fmt.codec) as stream:
        text = stream.read()
    lines = text.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if fmt.header and lines and lines[0] == fmt.header:
        lines.pop(0)
    if fmt.name == "json":  # `[a`, `,b`, ..., `,z]` (archive/executor/encoders.py::LinesEncoder)
        lines = [ln[1:] if ln[:1] in (b"[", b",") else ln for ln in lines]
        if lines and lines[-1].endswith(b"]"):
            lines[-1] = lines[-1][:-1]
    if fmt.name == "csv":
        return _csv(lines, key, fmt, request)
    parsed = [json.loads(ln) for ln in lines]
    if parsed and "offset" not in parsed[0]:
        raise ErasureRefused(f"{key} stores no offset (envelope.metadata is off): an erasure names the records it "
                             "erased by their offsets")
    cols: dict[str, list[Any] | None] = {}
    for c in request.columns():
        if parsed and c not in parsed[0]:
            cols[c] = None
        elif c == "key":
            cols[c] = [None if p.get("key") is None else base64.b64decode(p["key"]) for p in parsed]
        else:
            cols[c] = [p.get(c) for p in parsed]
    ts = [None if p.get("timestamp") is None else (datetime.fromisoformat(p["timestamp"]) - _EPOCH)
          // timedelta(milliseconds=1) for p in parsed] if not parsed or "timestamp" in parsed[0] else None
    return Decoded(fmt, key, lines, [p["offset"] for p in parsed], cols, ts, {"parsed": parsed})


def _csv(lines: list[bytes], key: str, fmt: ObjectFormat, request: EraseRequest) -> Decoded:
    names = fmt.csv_fields
    if "offset" not in names:
        raise ErasureRefused(f"{key}: csv_fields {list(names)} has no 'offset': an erasure names the records it "
                             "erased by their offsets")
    # key, offset, timestamp and headers hold no comma (base64, digits, ISO time); a raw value is the last field
    cells = [ln.split(b",", len(names) - 1) for ln in lines]
    at = {n: i for i, n in enumerate(names)}
    cols: dict[str, list[Any] | None] = {c: None for c in request.columns()}
    if "key" in at and "key" in cols:
        cols["key"] = [None if not c[at["key"]] else b"" if c[at["key"]] == b'""' else base64.b64decode(c[at["key"]])
                       for c in cells]
    if "offset" in cols:
        cols["offset"] = [int(c[at["offset"]]) for c in cells]
    ts = [int(c[at["timestamp"]]) if c[at["timestamp"]] else None for c in cells] if "timestamp" in at else None
    return Decoded(fmt, key, lines, [int(c[at["offset"]]) for c in cells], cols, ts, {"cells": cells})


def _lines_without(d: Decoded, rows: Sequence[int], mode: str) -> list[bytes]:
    hit = set(rows)
    if mode == "drop":
        return [ln for i, ln in enumerate(d.rows) if i not in hit]
    out = []
    for i, ln in enumerate(d.rows):
        if i in hit and d.fmt.name == "csv":
            ln = b",".join(c if n in ENVELOPE_KEPT else b"" for n, c in zip(d.fmt.csv_fields, d.extra["cells"][i],
                                                                             strict=True))
        elif i in hit:
            record = {n: (v if n in ENVELOPE_KEPT else None) for n, v in d.extra["parsed"][i].items()}
            ln = json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode()
        out.append(ln)
    return out


def kept_records(decoded: list[Decoded], erased: Callable[[int], bool]) -> list[tuple[int, int | None]] | None:
    """(offset, timestamp ms) of every record of a window's objects that is not `erased`; None when an object stores
    no timestamp (the bounds cannot be known)."""
    if any(d.timestamps is None for d in decoded):
        return None
    return [(o, t) for d in decoded for o, t in zip(d.offsets, d.timestamps or [], strict=True) if not erased(o)]
