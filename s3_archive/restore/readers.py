"""Readers of our archive formats: one object's records in file order, as Arrow columns where the format allows
(parquet), else as plain tuples (ArchivedRecord's fields). Pure: they read a file object.
"""

from __future__ import annotations

import base64
import bz2
import gzip
import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from backports import zstd

from s3_archive.model.errors import ArchiveIntegrityError
from s3_archive.restore.batch import Records, header_lists
from s3_archive.restore.request import ArchivedRecord

if TYPE_CHECKING:
    import pyarrow as pa

PARQUET_BATCH = 2048


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _b64(v: str | None) -> bytes | None:
    return None if v is None else base64.b64decode(v)


def _iso_ms(text: str) -> int:
    # Exact integer arithmetic: float seconds would round some milliseconds.
    td = datetime.fromisoformat(text) - _EPOCH
    return (td.days * 86_400 + td.seconds) * 1000 + td.microseconds // 1000


def _ts_divisor(t: pa.DataType) -> int:
    import pyarrow as pa  # pyarrow is imported by the first Parquet object read, not at load

    return {"s": 1, "ms": 1, "us": 1000, "ns": 1_000_000}[t.unit] if pa.types.is_timestamp(t) else 1


def _ms(col: pa.Array) -> pa.Array:
    """A timestamp (or integer epoch-ms) column as int64 epoch milliseconds, floored like Python's //."""
    import pyarrow as pa  # pyarrow is imported by the first Parquet object read, not at load
    import pyarrow.compute as pc

    t = col.type
    div = _ts_divisor(t)
    ints = col.cast(pa.int64())
    if pa.types.is_timestamp(t) and t.unit == "s":
        return pc.multiply(ints, 1000)
    if div == 1:
        return ints
    q = pc.divide(ints, div)  # truncates toward 0: one less where a negative value has a remainder
    return pc.subtract(q, pc.cast(pc.and_(pc.less(ints, 0), pc.not_equal(pc.multiply(q, div), ints)), pa.int64()))


def _lengths(col: pa.Array) -> pa.Array:
    """Byte length of each binary/string value, 0 for null, as int64."""
    import pyarrow as pa  # pyarrow is imported by the first Parquet object read, not at load
    import pyarrow.compute as pc

    return pc.fill_null(pc.binary_length(col), 0).cast(pa.int64())


def _sizes(batch: pa.RecordBatch) -> pa.Array:
    """Per row: key + value + header bytes (int64), column-wise."""
    import pyarrow as pa  # pyarrow is imported by the first Parquet object read, not at load
    import pyarrow.compute as pc

    col = batch.column("headers")
    n = len(col)
    offsets = col.offsets  # absolute positions in col.values (the list array's slice offset included)
    names, values = col.values.flatten()  # the struct's fields, its own offset applied
    # Header bytes per row: differences of the running sum of name + value lengths at the list offsets.
    each = pc.add(_lengths(names), _lengths(values))
    running = pa.concat_arrays([pa.array([0], pa.int64()), pc.cumulative_sum(each)]) if len(each) else \
        pa.array([0], pa.int64())
    at = pc.take(running, offsets)
    per_row = pc.subtract(at.slice(1), at.slice(0, n))
    if col.null_count:
        per_row = pc.if_else(col.is_valid(), per_row, 0)
    return pc.add(pc.add(_lengths(batch.column("key")), _lengths(batch.column("value"))), per_row)


def _headers_and_sizes(batch: pa.RecordBatch) -> tuple[list[list[tuple[str, bytes | None]]], list[int]]:
    """Per row: the headers as (name, value) pairs, and key + value + header bytes."""
    return header_lists(batch.column("headers")), _sizes(batch).to_pylist()


_COLUMNS = ["key", "value", "headers", "partition", "offset", "timestamp"]


def parquet_batches(f: Any, batch_size: int = PARQUET_BATCH) -> Iterator[Records]:
    """Records of one Parquet object, in file order, a batch at a time, as Arrow columns (no Python object per
    record until a column is read as a list: restore/batch.py). Columns other than the envelope's (decoded value
    fields) are not read."""
    import pyarrow.parquet as pq  # not at load

    pf = pq.ParquetFile(f)
    for batch in pf.iter_batches(batch_size=batch_size, columns=_COLUMNS):
        yield Records(batch.column("partition"), batch.column("offset"), batch.column("key"), batch.column("value"),
                      batch.column("headers"), _ms(batch.column("timestamp")), _sizes(batch))


def parquet_records(f: Any) -> Iterator[ArchivedRecord]:
    """Records of one Parquet object, in file order."""
    for batch in parquet_batches(f):
        yield from batch.records()


def avro_records(f: Any) -> Iterator[ArchivedRecord]:
    """Records of one Avro object container file (Spark's writer: timestamp is timestamp-micros)."""
    import fastavro

    for r in fastavro.reader(f):
        ts = r["timestamp"]
        ms = (ts - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1) if isinstance(ts, datetime) \
            else int(ts) // 1000
        yield ArchivedRecord(r["partition"], r["offset"], r["key"], r["value"],
                             [(h["key"], h["value"]) for h in r["headers"] or ()], ms)


def _lines(stream: Any, chunk: int = 1 << 20) -> Iterator[bytes]:
    rest = b""
    while True:
        data = stream.read(chunk)
        if not data:
            break
        lines = (rest + data).split(b"\n")
        rest = lines.pop()
        yield from lines
    if rest:
        yield rest


def _json_record(r: dict) -> ArchivedRecord:
    return ArchivedRecord(r["partition"], r["offset"], _b64(r.get("key")), _b64(r.get("value")),
                          [(h["key"], _b64(h.get("value"))) for h in r.get("headers") or ()], _iso_ms(r["timestamp"]))


def jsonl_records(stream: Any) -> Iterator[ArchivedRecord]:
    """Records of one (decompressed) JSON-lines stream: binary fields are base64, timestamps ISO-8601. Fields
    other than the envelope's (decoded value fields) are ignored."""
    for line in _lines(stream):
        if not line.strip():
            continue
        yield _json_record(json.loads(line))


def json_array_records(stream: Any, what: str) -> Iterator[ArchivedRecord]:
    """Records of one (decompressed) `json` object: a JSON array of jsonl's records, as the archive writes it
    (archive/executor/encoders.py), one record per line: `[rec`, `,rec`, ..., `,rec]` (also `[rec]` and `[]`)."""
    state = "start"  # start -> open (after '[') -> closed (after ']')
    first = True  # no record read yet: the next one has no leading ','
    for raw in _lines(stream):
        line = raw.strip()
        if not line:
            continue
        if state == "closed":
            raise ArchiveIntegrityError(f"{what}: text after the closing ']' of the JSON array")
        if state == "start":
            if line[:1] != b"[":
                raise ArchiveIntegrityError(f"{what}: a json object must be a JSON array; it starts with "
                                            f"{raw[:20]!r}")
            line, state = line[1:].lstrip(), "open"
        elif line[:1] == b"," and not first:
            line = line[1:].lstrip()
        elif line != b"]" and not first:
            raise ArchiveIntegrityError(f"{what}: not a JSON array of records written one per line (a line "
                                        f"starts with {raw[:20]!r})")
        if line.endswith(b"]"):  # a record is a JSON object: it ends with '}', so ']' closes the array
            line, state = line[:-1].rstrip(), "closed"
        if line:
            yield _json_record(json.loads(line))
            first = False
    if state != "closed":
        raise ArchiveIntegrityError(f"{what}: the JSON array is not closed (a truncated object?)")


_DECOMPRESS_BY_CODEC = {"gzip": ".gz", "bzip2": ".bz2", "zstd": ".zst"}


def text_stream(f: Any, key: str, codec: str | None) -> Any:
    """The decompressed stream of a text object: by the manifest's codec, else by the key's suffix (objects of
    other writers)."""
    suffix = _DECOMPRESS_BY_CODEC.get(codec or "") or next(
        (s for s in _DECOMPRESS_BY_CODEC.values() if key.endswith(s)), "")
    if suffix == ".gz":
        return gzip.GzipFile(fileobj=f)
    if suffix == ".bz2":
        return bz2.BZ2File(f)
    if suffix == ".zst":
        return zstd.ZstdFile(f)  # the library the commit compresses with (commit.publish_compressed)
    return io.BufferedReader(f)
