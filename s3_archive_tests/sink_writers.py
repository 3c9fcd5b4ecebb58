"""Objects as the Kafka Connect S3 sinks write them, built from the sinks' documentation, not from s3_archive's
readers: names by the documented patterns, contents with fastavro, pyarrow, json and csv.

- Lenses (stream-reactor S3 sink docs): default keys `<prefix>/<topic>/<partition>/<offset>.<ext>`, PARTITIONBY
  keys `<prefix>/<k>=<v>/…/<topic>(<partition>_<offset>).<ext>` (`partition.include.keys`), the offset the
  object's last record's, left-padded with '0' (`padding.length.offset` 12, `padding.length.partition` 0); the
  envelope (`store.envelope`) `{key, value, headers: {name: value}, metadata: {offset, partition, timestamp,
  topic}}`; JSON values as the JsonConverter writes them (bytes as base64 strings), CSV rows as opencsv writes
  them (every field quoted, `"\n"` after each row, a header row with `CSV_WITHHEADERS`), TEXT one value per line,
  BYTES one value per object.
- Confluent (S3 sink docs): `<topics.dir>/<topic>/<encoded partition>/<topic>+<p>+<start, 10 digits>.<ext>`,
  the encoded partition `partition=<p>`, a time partitioner's `path.format` or a field partitioner's
  `<field>=<value>`; `.keys.<ext>` holds the keys, `.headers.<ext>` the headers as a list of `{key, value}`
  (strings) per record, Parquet wrapping each in a one-field record.
"""

from __future__ import annotations

import base64
import csv
import io
import json
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq

# offset, key, value, headers, timestamp (epoch ms)
SinkRecord = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]], int]


def b64(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(b).decode()


# --------------------------------------------------------------------------------------------------------------
# Lenses


def lenses_key(prefix: str, topic: str, partition: int, offset: int, ext: str, *,
               partition_by: list[tuple[str, str]] | None = None, include_keys: bool = True, offset_pad: int = 12,
               partition_pad: int = 0, key_suffix: str = "", timestamps: tuple[int, int] | None = None) -> str:
    p, o = str(partition).rjust(partition_pad, "0"), str(offset).rjust(offset_pad, "0")
    head = f"{prefix.rstrip('/')}/" if prefix else ""
    if partition_by is None:
        ts = f"_{timestamps[0]}_{timestamps[1]}" if timestamps else ""
        return f"{head}{topic}/{p}/{o}{ts}{key_suffix}.{ext}"
    dirs = "/".join(f"{k}={v}" if include_keys else v for k, v in partition_by)
    return f"{head}{dirs}/{topic}({p}_{o}){key_suffix}.{ext}"


def _header_text(v: bytes | None) -> str | None:
    return None if v is None else v.decode()  # the header converter's string


def lenses_envelope(r: SinkRecord, topic: str, partition: int, json_bytes: bool) -> dict[str, Any]:
    off, k, v, hs, ts = r
    enc = b64 if json_bytes else (lambda b: b)
    return {"key": enc(k), "value": enc(v), "headers": {n: _header_text(x) for n, x in hs},
            "metadata": {"offset": off, "partition": partition, "timestamp": ts, "topic": topic}}


def lenses_json(recs: list[SinkRecord], topic: str, partition: int, envelope: bool,
                value: str = "bytes") -> bytes:
    """One JSON document per line (JsonConverter, schemas off): bytes as base64 strings, strings as strings."""
    lines = []
    for r in recs:
        if envelope:
            lines.append(json.dumps(lenses_envelope(r, topic, partition, True)))
        elif value == "bytes":
            lines.append(json.dumps(b64(r[2])))
        elif value == "string":
            lines.append(json.dumps(None if r[2] is None else r[2].decode()))
        else:  # a JSON value, as the JsonConverter re-serializes it
            lines.append("null" if r[2] is None else json.dumps(json.loads(r[2]), separators=(",", ":")))
    return "".join(line + "\n" for line in lines).encode()


_LENSES_ENVELOPE_AVRO = {
    "type": "record", "name": "envelope", "fields": [
        {"name": "key", "type": ["null", "bytes"]},
        {"name": "value", "type": ["null", "bytes"]},
        {"name": "headers", "type": {"type": "map", "values": ["null", "string"]}},
        {"name": "metadata", "type": {"type": "record", "name": "metadata", "fields": [
            {"name": "offset", "type": "long"}, {"name": "partition", "type": "int"},
            {"name": "timestamp", "type": "long"}, {"name": "topic", "type": "string"}]}},
    ]}


def lenses_avro(recs: list[SinkRecord], topic: str, partition: int, envelope: bool) -> bytes:
    buf = io.BytesIO()
    if envelope:
        fastavro.writer(buf, fastavro.parse_schema(_LENSES_ENVELOPE_AVRO),
                        [lenses_envelope(r, topic, partition, False) for r in recs])
    else:
        fastavro.writer(buf, fastavro.parse_schema(["null", "bytes"]), [r[2] for r in recs])
    return buf.getvalue()


def lenses_parquet(recs: list[SinkRecord], topic: str, partition: int, envelope: bool) -> bytes:
    if envelope:
        rows = [lenses_envelope(r, topic, partition, False) for r in recs]
        table = pa.table({
            "key": pa.array([r["key"] for r in rows], pa.binary()),
            "value": pa.array([r["value"] for r in rows], pa.binary()),
            "headers": pa.array([list(r["headers"].items()) for r in rows], pa.map_(pa.string(), pa.string())),
            "metadata": pa.array([r["metadata"] for r in rows], pa.struct([
                ("offset", pa.int64()), ("partition", pa.int32()), ("timestamp", pa.int64()),
                ("topic", pa.string())])),
        })
    else:  # a primitive value is a one-field record in Parquet
        table = pa.table({"value": pa.array([r[2] for r in recs], pa.binary())})
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()


def lenses_text(values: list[str]) -> bytes:
    return "".join(v + "\n" for v in values).encode()


def lenses_csv(rows: list[dict[str, str]], header: bool) -> bytes:
    """opencsv's CSVWriter defaults: every field quoted, quotes doubled, "\n" after every row."""
    out = io.StringIO()
    w = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    if header:
        w.writerow(list(rows[0]))
    for r in rows:
        w.writerow(list(r.values()))
    return out.getvalue().encode()


# --------------------------------------------------------------------------------------------------------------
# Confluent


def confluent_key(topics_dir: str, topic: str, encoded: str, partition: int, start: int, ext: str,
                  sidecar: str = "") -> str:
    return f"{topics_dir.rstrip('/')}/{topic}/{encoded}/{topic}+{partition}+{start:010d}{sidecar}{ext}"


def confluent_avro(items: list[Any], schema: Any = ("null", "bytes")) -> bytes:
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(list(schema) if isinstance(schema, tuple) else schema), items)
    return buf.getvalue()


_HEADER = {"type": "record", "name": "header", "fields": [{"name": "key", "type": "string"},
                                                          {"name": "value", "type": ["null", "string"]}]}


def confluent_headers_avro(headers: list[list[tuple[str, bytes | None]]]) -> bytes:
    return confluent_avro([[{"key": n, "value": _header_text(v)} for n, v in hs] for hs in headers],
                          {"type": "array", "items": _HEADER})


def confluent_headers_json(headers: list[list[tuple[str, bytes | None]]]) -> bytes:
    return "".join(json.dumps([{"key": n, "value": _header_text(v)} for n, v in hs]) + "\n"
                   for hs in headers).encode()


def confluent_parquet(column: str, items: list[Any], typ: pa.DataType) -> bytes:
    out = io.BytesIO()
    pq.write_table(pa.table({column: pa.array(items, typ)}), out)
    return out.getvalue()


def confluent_headers_parquet(headers: list[list[tuple[str, bytes | None]]]) -> bytes:
    typ = pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())]))
    return confluent_parquet("headers", [[{"key": n, "value": _header_text(v)} for n, v in hs] for hs in headers],
                             typ)


def confluent_json(items: list[Any]) -> bytes:
    """JsonFormat: one JSON value per line; bytes (ByteArrayConverter) as base64 strings."""
    return "".join(json.dumps(b64(i) if isinstance(i, bytes) else i) + "\n" for i in items).encode()
