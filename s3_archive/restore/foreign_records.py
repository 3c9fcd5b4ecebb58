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
from s3_archive.model.errors import InvalidForeignObject
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
        except (ValueError, KeyError, TypeError, IndexError, OSError) as e:
            raise InvalidForeignObject(f"{what} is not a {s.layout} {fmt} object with fields {list(self.fields)}: "
                                       f"{type(e).__name__}: {e}") from None

    def _row(self, r: Any) -> Decoded:
        """An avro/parquet row: the envelope's fields, or (confluent, envelope false) the value itself."""
        if self.source.layout == "confluent" or not self.source.envelope:
            if isinstance(r, dict) and len(r) == 1 and self.source.layout == "aiven":
                r = next(iter(r.values()))
            return None, None, _bytes(r), [], -1
        return (r.get("offset"), _bytes(r.get("key")), self._value(r.get("value")), _headers(r.get("headers")),
                _ts_ms(r.get("timestamp")))

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
        if self.source.layout == "confluent":
            # One JSON value per line; the line is the value as the sink's converter wrote it.
            for line in data.split(b"\n"):
                if line.strip():
                    yield None, None, line.rstrip(b"\r"), [], -1
            return
        rows: Iterable[Any]
        if fmt == "json":
            rows = json.loads(data)
        else:
            rows = (json.loads(line) for line in data.split(b"\n") if line.strip())
        for r in rows:
            if not self.source.envelope:
                yield None, None, self._value(r), [], -1
                continue
            h = r.get("headers")
            headers = [(x["key"], _b64(x.get("value")) if isinstance(x.get("value"), str) else _bytes(x.get("value")))
                       for x in h or ()]
            key = r.get("key")
            yield (r.get("offset"), _b64(key) if isinstance(key, str) else _bytes(key), self._value(r.get("value")),
                   headers, _ts_ms(r.get("timestamp")))


def with_keys(values: Iterator[Decoded], keys: Iterator[Decoded] | None, what: str) -> Iterator[Decoded]:
    """Confluent: pair each value with the key at the same position of the `.keys` sibling."""
    if keys is None:
        yield from values
        return
    sentinel = object()
    while True:
        v, k = next(values, sentinel), next(keys, sentinel)
        if v is sentinel and k is sentinel:
            return
        if v is sentinel or k is sentinel:
            raise InvalidForeignObject(f"{what}: the values object and its .keys sibling hold different numbers of "
                                       "records")
        off, _, value, headers, ts = v  # type: ignore[misc]
        yield off, k[2], value, headers, ts  # type: ignore[index]


def numbered(decoded: Iterable[Decoded], window: OffsetWindow, what: str,
             record: Callable[..., Any]) -> Iterator[Any]:
    """Records with offsets: the stored one (Aiven `offset` field), else start offset + position. Offsets must
    increase and start at the window's start or later."""
    last = window.start - 1
    p = window.partition
    for i, (off, key, value, headers, ts) in enumerate(decoded):
        o = window.start + i if off is None else off
        if o <= last:
            raise InvalidForeignObject(f"{what}: record {i} has offset {o}, not above {last} (the object's start "
                                       f"offset {window.start} or the record before); the object does not fit "
                                       "its name")
        last = o
        yield record(p, o, key, value, headers, ts)
