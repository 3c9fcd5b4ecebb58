"""Contents of a Kafka Connect S3 sink's object → (offset or None, key, value, headers, timestamp) per record. Pure.
Formats csv, jsonl, json, avro, parquet and bytes; whole-object gzip, zstd and snappy (both stream framings).
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import struct
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from s3_archive.config.foreign import COMPRESSIONS, ForeignSource
from s3_archive.model.errors import ForeignObjectsOverlap, InvalidForeignObject
from s3_archive.model.windows import OffsetWindow


def decompress(data: bytes, compression: str) -> bytes:
    if compression == "none":
        return data
    if compression == "gzip":
        return gzip.decompress(data)
    if compression == "zstd":
        from backports import zstd  # as restore/readers.py and archive/driver/commit.py

        return zstd.decompress(data)
    if compression == "snappy":
        return snappy_stream_decompress(data)
    raise ValueError(f"unknown compression {compression!r}; allowed: {', '.join(COMPRESSIONS)}")


_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_FRAMED_MAGIC = b"\xff\x06\x00\x00sNaPpY"


def snappy_stream_decompress(data: bytes) -> bytes:
    """A snappy *stream*: xerial's SnappyOutputStream (Java; magic, then [int32 length][raw block]...) or the
    snappy framing format."""
    import cramjam

    if data.startswith(_FRAMED_MAGIC):
        return bytes(cramjam.snappy.decompress(data))
    if not data.startswith(_XERIAL_MAGIC):
        raise InvalidForeignObject("not a snappy stream: neither xerial's SnappyOutputStream header nor the snappy "
                                   "framing format")
    out, pos = [], 16  # magic (8), version (4), compatible version (4)
    while pos < len(data):
        if pos + 4 > len(data):
            raise InvalidForeignObject("truncated snappy stream")
        (n,) = struct.unpack(">i", data[pos:pos + 4])
        block = data[pos + 4:pos + 4 + n]
        if len(block) != n:
            raise InvalidForeignObject("truncated snappy stream")
        out.append(bytes(cramjam.snappy.decompress_raw(block)))
        pos += 4 + n
    return b"".join(out)


# --------------------------------------------------------------------------------------------------------------
# Decoding: object bytes -> (offset or None, key, value, headers, timestamp ms or -1)

Decoded = tuple[int | None, bytes | None, bytes | None, list[tuple[str, bytes | None]], int]


def _b64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text, validate=True)


def _bytes(v: Any) -> bytes | None:
    """A key/value/header as stored by avro/parquet/json: bytes, text (utf-8), or a structure (compact JSON)."""
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, bytearray | memoryview):
        return bytes(v)
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False, default=str).encode()


def _ts_ms(v: Any) -> int:
    if v is None:
        return -1
    if isinstance(v, datetime):
        td = v - datetime(1970, 1, 1, tzinfo=UTC) if v.tzinfo else v - datetime(1970, 1, 1)
        return (td.days * 86_400 + td.seconds) * 1000 + td.microseconds // 1000
    if isinstance(v, int | float):
        return int(v)
    return _ts_ms(datetime.fromisoformat(str(v).replace("Z", "+00:00")))


def _headers(v: Any) -> list[tuple[str, bytes | None]]:
    """Headers as avro/parquet maps (dict or pyarrow's list of (k, v)) or JSON lists of {key, value}."""
    if not v:
        return []
    items = v.items() if isinstance(v, dict) else v
    out = []
    for h in items:
        k, val = (h["key"], h.get("value")) if isinstance(h, dict) else h
        out.append((k, _bytes(val)))
    return out


def _text_value(v: Any, encoding: str) -> bytes | None:
    """A key or value a converter wrote into JSON: a string is base64 of the bytes (ByteArrayConverter) or the text
    itself (StringConverter); anything else is a structure (JsonConverter etc.), kept as compact JSON."""
    if isinstance(v, str):
        return _b64(v) if encoding == "base64" else v.encode()
    return _bytes(v)


def _json_line(line: bytes, encoding: str) -> bytes | None:
    """One JSON value per line (Confluent's JsonFormat): a string or null is decoded, a structure kept as written."""
    s = line.strip()
    if s == b"null":
        return None
    if s.startswith(b'"'):
        return _text_value(json.loads(s), encoding)
    return line.rstrip(b"\r")


def _lines(data: bytes) -> list[bytes]:
    """Records that each end with a newline (the last one may not)."""
    parts = data.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()
    return parts


def csv_records(data: bytes) -> Iterator[bytes]:
    """The rows of a csv object as written (without their newline); a quoted field may hold newlines, and a quote
    inside one is doubled, so a row ends at a newline after an even number of quotes."""
    row: list[bytes] = []
    quotes = 0
    for line in _lines(data):
        row.append(line)
        quotes += line.count(b'"')
        if quotes % 2 == 0:
            yield b"\n".join(row).rstrip(b"\r")
            row, quotes = [], 0
    if row:
        rest = b"\n".join(row)
        raise InvalidForeignObject(f"a quoted csv field is not closed: {rest[:200]!r}")


class Decoder:
    """Decodes one foreign object's bytes. Fields absent from the format are None / -1 / []."""

    def __init__(self, source: ForeignSource) -> None:
        self.source = source
        self.fields = tuple(source.fields) if source.layout == "aiven" else ("value",)

    def decode(self, data: bytes, what: str) -> Iterator[Decoded]:
        s, fmt = self.source, self.source.format
        try:
            if fmt == "bytes":
                sep = s.separator
                if sep is None:
                    yield None, None, data, [], -1
                    return
                parts = data.split(sep)
                if parts and parts[-1] == b"":  # the separator ends every value, the last one included
                    parts.pop()
                for v in parts:
                    yield None, None, v, [], -1
            elif s.layout == "lenses" and fmt in ("csv", "text"):
                rows = csv_records(data) if fmt == "csv" else iter(_lines(data))
                if fmt == "csv" and s.csv_header:
                    next(rows, None)
                for line in rows:  # the row as the sink wrote it, as Lenses' own source connector reads it
                    yield None, None, line, [], -1
            elif fmt == "csv":
                yield from self._csv(data)
            elif fmt in ("jsonl", "json"):
                yield from self._json(data, fmt)
            elif fmt == "avro":
                import fastavro

                for r in fastavro.reader(io.BytesIO(data)):
                    yield self._row(r)
            elif fmt == "parquet":
                import pyarrow.parquet as pq

                for batch in pq.ParquetFile(io.BytesIO(data)).iter_batches(batch_size=2048):
                    for r in batch.to_pylist():
                        yield self._row(r)
        except InvalidForeignObject:
            raise
        except (ValueError, KeyError, TypeError, IndexError, AttributeError, OSError) as e:
            raise InvalidForeignObject(f"{what} is not a {s.layout} {fmt} object"
                                       + (f" with fields {list(self.fields)}" if s.layout == "aiven" else "")
                                       + f": {type(e).__name__}: {e}") from None

    def _row(self, r: Any) -> Decoded:
        """An avro/parquet row: the envelope's fields, or the value itself."""
        s = self.source
        if s.layout == "confluent" or not s.stores_envelope:
            if isinstance(r, dict) and len(r) == 1 and (s.layout == "aiven" or s.format == "parquet"):
                r = next(iter(r.values()))  # Parquet rows are records: a primitive value is a one-field row
            return None, None, _bytes(r), [], -1
        if s.layout == "lenses":
            return self._lenses_envelope(r, typed=True)
        return (r.get("offset"), _bytes(r.get("key")), self._value(r.get("value")), _headers(r.get("headers")),
                _ts_ms(r.get("timestamp")))

    def _lenses_envelope(self, r: dict, typed: bool) -> Decoded:
        """{key, value, headers: {name: value}, metadata: {offset, partition, timestamp, topic}}; a part the sink
        did not store (store.envelope.fields.*) is absent. Header values are the header converter's text."""
        s = self.source
        meta = r.get("metadata") or {}
        key, value = r.get("key"), r.get("value")
        if not typed:
            key, value = _text_value(key, s.key_encoding), _text_value(value, s.value_encoding)
        h = r.get("headers") or {}
        headers = [(k, v.encode() if isinstance(v, str) else _bytes(v))
                   for k, v in (h.items() if isinstance(h, dict) else h)]  # a Parquet map: (name, value) pairs
        return (meta.get("offset"), _bytes(key), _bytes(value), headers,
                _ts_ms(meta["timestamp"]) if meta.get("timestamp") is not None else -1)

    def _value(self, v: Any) -> bytes | None:
        if isinstance(v, str) and self.source.value_encoding == "base64" and self.source.format in ("jsonl", "json"):
            return _b64(v)
        return _bytes(v)

    def _csv(self, data: bytes) -> Iterator[Decoded]:
        fields, raw = self.fields, self.source.value_encoding == "none"
        # Aiven separates records with "\n" and ends the object without one, so every line is a record, an empty
        # one too (a null or empty value alone).
        for line in data.split(b"\n"):
            cols = line.split(b",", len(fields) - 1) if raw else line.split(b",")
            if len(cols) != len(fields):
                raise InvalidForeignObject(f"csv line has {len(cols)} fields, expected {len(fields)} "
                                           f"({','.join(fields)}): {line[:200]!r}")
            rec: dict[str, Any] = dict(zip(fields, cols))
            key = base64.b64decode(rec["key"], validate=True) if rec.get("key") else None
            v = rec.get("value", b"")
            value = (v if raw else base64.b64decode(v, validate=True)) if v else None
            headers = []
            for h in (rec.get("headers") or b"").split(b";"):
                if h:
                    k, _, hv = h.partition(b":")
                    headers.append((base64.b64decode(k, validate=True).decode(), base64.b64decode(hv, validate=True)))
            off = int(rec["offset"]) if "offset" in rec else None
            ts = int(rec["timestamp"]) if rec.get("timestamp") else -1
            yield off, key, value, headers, ts

    def _json(self, data: bytes, fmt: str) -> Iterator[Decoded]:
        s = self.source
        if s.layout == "confluent":
            # One JSON value per line, as the sink's converter gave it.
            for line in data.split(b"\n"):
                if line.strip():
                    yield None, None, _json_line(line, s.value_encoding), [], -1
            return
        rows: Iterable[Any]
        if fmt == "json" and s.layout == "aiven":
            rows = json.loads(data)
        else:
            rows = (json.loads(line) for line in data.split(b"\n") if line.strip())
        for r in rows:
            if s.layout == "lenses":
                yield (self._lenses_envelope(r, typed=False) if s.stores_envelope
                       else (None, None, _text_value(r, s.value_encoding), [], -1))
                continue
            if not s.stores_envelope:
                yield None, None, self._value(r), [], -1
                continue
            h = r.get("headers")
            headers = [(x["key"], _b64(x.get("value")) if isinstance(x.get("value"), str) else _bytes(x.get("value")))
                       for x in h or ()]
            key = r.get("key")
            yield (r.get("offset"), _b64(key) if isinstance(key, str) else _bytes(key), self._value(r.get("value")),
                   headers, _ts_ms(r.get("timestamp")))


# --------------------------------------------------------------------------------------------------------------
# Confluent's sidecar objects (store.kafka.keys / store.kafka.headers), each in its own format


def sidecar_rows(data: bytes, fmt: str, separator: bytes | None) -> Iterator[Any]:
    """The rows of a `.keys.<ext>` / `.headers.<ext>` object: avro datums, parquet rows (a record wrapping the key
    or the headers: Parquet has no top-level primitive), one JSON value per line, or separated raw keys."""
    if fmt == "avro":
        import fastavro

        yield from fastavro.reader(io.BytesIO(data))
    elif fmt == "parquet":
        import pyarrow.parquet as pq

        for batch in pq.ParquetFile(io.BytesIO(data)).iter_batches(batch_size=2048):
            for r in batch.to_pylist():
                yield next(iter(r.values())) if len(r) == 1 else r
    elif fmt == "json":
        for line in data.split(b"\n"):
            if line.strip():
                yield json.loads(line)
    else:
        parts = data.split(separator or b"\n")
        if parts and parts[-1] == b"":
            parts.pop()
        yield from parts


def sidecar_keys(rows: Iterator[Any], fmt: str, encoding: str) -> Iterator[bytes | None]:
    for r in rows:
        yield _text_value(r, encoding) if fmt == "json" else _bytes(r)


def sidecar_headers(rows: Iterator[Any]) -> Iterator[list[tuple[str, bytes | None]]]:
    """Each record's headers as the sink writes them: a list of {key, value} in order (duplicates kept), the value
    as the header's text (`Values.convertToString`)."""
    for r in rows:
        if isinstance(r, dict) and "headers" in r:
            r = r["headers"]
        yield [(h["key"], None if h.get("value") is None else str(h["value"]).encode()) for h in r or ()]


def with_sidecars(values: Iterator[Decoded], keys: Iterator[bytes | None] | None,
                  headers: Iterator[list[tuple[str, bytes | None]]] | None, what: str) -> Iterator[Decoded]:
    """Confluent: pair each value with the key and the headers at the same position of the sidecar objects."""
    if keys is None and headers is None:
        yield from values
        return
    sentinel: Any = object()
    for v in values:
        k = next(keys, sentinel) if keys is not None else None
        h = next(headers, sentinel) if headers is not None else []
        if k is sentinel or h is sentinel:
            raise InvalidForeignObject(f"{what}: its .keys/.headers sibling holds fewer records than the values "
                                       "object")
        off, key, value, hs, ts = v
        yield off, key if keys is None else k, value, hs if headers is None else h, ts
    for rest, name in ((keys, "keys"), (headers, "headers")):
        if rest is not None and next(rest, sentinel) is not sentinel:
            raise InvalidForeignObject(f"{what}: its .{name} sibling holds more records than the values object")


def numbered(decoded: Iterable[Decoded], window: OffsetWindow, what: str, record: Callable[..., Any], *,
             from_end: bool = False, strict: bool = False, spread: bool = False) -> Iterator[Any]:
    """Records with offsets: the stored one (Aiven `offset`, Lenses `metadata.offset`), else derived from the
    position: start offset + position, or (`from_end`: Lenses names an object by its last record) the window's end
    - the records after it. Offsets must increase inside [window.start, window.end); a record at or past the end is
    an error when `strict` (the end is the name's own, or the next object of the partition is in another directory),
    else left to the next object. `spread`: the partition's objects are in several directories (the error says
    they interleave)."""
    rows = list(decoded) if from_end else decoded
    base = window.end - len(rows) if from_end else window.start  # type: ignore[arg-type]
    last = window.start - 1
    p = window.partition
    why = (" The partition's objects are spread over several directories (a time or field partitioner) and their "
           "records interleave: they cannot be put in offset order from names and positions." if spread else "")
    for i, (off, key, value, headers, ts) in enumerate(rows):
        o = base + i if off is None else off
        if o <= last:
            raise ForeignObjectsOverlap(
                f"{what}: holds {len(rows)} records, more than the offsets [{window.start}, {window.end}) its name "
                "and the partition's previous object leave for it; the objects overlap." + why
                if off is None else
                f"{what}: record {i} has offset {o}, not above {last} (the record before it, or below offset "
                f"{window.start} where the object starts by its name and the partition's objects); the object does "
                "not fit its name." + why)
        if strict and o >= window.end:
            raise ForeignObjectsOverlap(
                f"{what}: record {i} has offset {o}, at or past {window.end}, where the partition's next object "
                "starts (or, for a name giving the last offset, past it); the objects overlap." + why)
        last = o
        yield record(p, o, key, value, headers, ts)
