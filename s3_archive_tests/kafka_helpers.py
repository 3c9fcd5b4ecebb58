"""Test helpers for producing records to the real broker and reading archived objects back."""

from __future__ import annotations

import base64
import gzip
import io
import json
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pyarrow.parquet as pq
from confluent_kafka import OFFSET_BEGINNING, OFFSET_STORED, Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import NewTopic

from s3_archive.io.kafka import KafkaResource

Headers = list[tuple[str, bytes | None]]

# (key, value, headers) that break careless archivers: binary and empty keys, null keys, tombstones (null values),
# empty values, duplicate and null headers, an empty header name, non-ASCII, and a 1 MiB value.
NASTY: list[tuple[bytes | None, bytes | None, Headers]] = [
    (b"\x00\xff\x10binary-key", b"\x00\x01\x02\xfe\xff", [("dup", b"1"), ("dup", b"2"), ("nul", None)]),
    (None, b"null key", []),
    (b"tombstone", None, [("h", b"")]),
    (b"empty", b"", []),
    (b"big", os.urandom(1024 * 1024), [("size", b"1MiB")]),
    (b"", b"empty key", [("", b"empty header name")]),
    ("ключ".encode(), "значение ✓".encode(), [("ü", "ö".encode())]),
    (None, None, [("only", None), ("only", None)]),
]


@dataclass(frozen=True)
class Rec:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp_ms: int


@contextmanager
def open_producer(kafka: KafkaResource, **conf: Any) -> Iterator[Any]:
    """A producer of `kafka`, destroyed on leaving; what is still queued after a 60 s flush is dropped (the
    producer's own `with` flushes without a bound: a test whose broker went away would never leave it)."""
    producer = kafka.producer(**conf)
    try:
        yield producer
    finally:
        producer.flush(60)
        producer.purge()
        producer.close()


def create_topic(kafka: KafkaResource, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> str:
    admin = kafka.admin()
    admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(timeout=30)
    return name


def produce(kafka: KafkaResource, topic: str, records: list[tuple[int, bytes | None, bytes | None, Headers]],
            timestamps: list[int] | None = None, **conf) -> list[Rec]:
    """Produce (partition, key, value, headers) in order, with the given CreateTime timestamps (epoch ms) or
    the producer's clock; returns what the broker stored, with offsets."""
    out: list[Rec] = []
    errors: list[str] = []

    def done(headers: Headers):
        # Delivery reports do not carry headers back: keep the ones we sent.
        def report(err, msg) -> None:
            if err is not None:
                errors.append(str(err))
                return
            out.append(Rec(msg.partition(), msg.offset(), msg.key(), msg.value(), tuple(headers),
                           msg.timestamp()[1]))
        return report

    with open_producer(kafka, **{"enable.idempotence": True, "linger.ms": 5, "message.max.bytes": 8 << 20,
                                 **conf}) as producer:
        for i, (partition, key, value, headers) in enumerate(records):
            while True:
                try:
                    producer.produce(topic, key=key, value=value, partition=partition, headers=headers or None,
                                     on_delivery=done(headers), timestamp=timestamps[i] if timestamps else 0)
                    break
                except BufferError:  # the producer's queue is full (a broker still starting): let it drain
                    producer.poll(0.5)
            producer.poll(0)
    assert not errors, errors  # open_producer flushed on leaving: every delivery report is in
    return sorted(out, key=lambda r: (r.partition, r.offset))


def parquet_records(data: bytes) -> list[Rec]:
    table = pq.read_table(io.BytesIO(data))
    return [_rec(row) for row in table.to_pylist()]


def parquet_codecs(data: bytes) -> dict[str, str]:
    """Each column's codec in a Parquet object's first row group (path in schema -> SNAPPY, ZSTD, ...)."""
    group = pq.ParquetFile(io.BytesIO(data)).metadata.row_group(0)
    return {group.column(i).path_in_schema: group.column(i).compression for i in range(group.num_columns)}


def jsonl_records(data: bytes, gzipped: bool = False) -> list[Rec]:
    if gzipped:
        data = gzip.decompress(data)
    rows = [json.loads(line) for line in data.decode().splitlines() if line]
    b64 = lambda v: None if v is None else base64.b64decode(v)  # noqa: E731
    for r in rows:
        r["key"], r["value"] = b64(r["key"]), b64(r["value"])
        r["headers"] = [{"key": h["key"], "value": b64(h.get("value"))} for h in r["headers"] or []]
        r["timestamp"] = _parse_ts(r["timestamp"])
    return [_rec(r) for r in rows]


def _parse_ts(text: str):
    from datetime import datetime

    return datetime.fromisoformat(text)


def _rec(row: dict) -> Rec:
    ts = row["timestamp"]
    ts_ms = round(ts.timestamp() * 1000) if ts.tzinfo else round(ts.replace(tzinfo=__import__("datetime").UTC)
                                                                   .timestamp() * 1000)
    return Rec(row["partition"], row["offset"], row["key"], row["value"],
               tuple((h["key"], h["value"]) for h in (row["headers"] or [])), ts_ms)


@dataclass(frozen=True)
class Got:
    """A record read back from a topic."""
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple
    timestamp_ms: int

    @property
    def body(self) -> tuple:
        return self.key, self.value, self.headers, self.timestamp_ms

    def header(self, name: str) -> bytes | None:
        return dict(self.headers).get(name)


def consume_all(kafka: KafkaResource, topic: str, group: str | None = None) -> dict[int, list[Got]]:
    """Every committed record of every partition (read_committed), in offset order; with `group`, from the
    group's committed offsets (earliest where it has none), as the group's next consumer reads."""
    parts = kafka.partitions(topic)
    ends = kafka.offsets(topic, "latest", parts)
    out: dict[int, list[Got]] = {p: [] for p in parts}
    c = Consumer(kafka.client_config(**{
        "group.id": group or f"verify-{uuid.uuid4().hex}", "enable.auto.commit": False,
        "isolation.level": "read_committed", "enable.partition.eof": True, "auto.offset.reset": "earliest"}))
    pending = set(parts)
    try:
        c.assign([TopicPartition(topic, p, OFFSET_STORED if group else OFFSET_BEGINNING) for p in parts])
        deadline = time.monotonic() + 60
        while pending:
            assert time.monotonic() < deadline, f"timed out reading {topic}; waiting for {pending} (ends {ends})"
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                pending.discard(msg.partition())
                continue
            out[msg.partition()].append(Got(msg.partition(), msg.offset(), msg.key(), msg.value(),
                                            tuple(msg.headers() or ()), msg.timestamp()[1]))
    finally:
        c.close()
    return out


def produce_transactions(kafka: KafkaResource, topic: str, batches: int = 4,
                         size: int = 5) -> tuple[list[list[bytes]], int]:
    """`batches` transactions of `size` values into partition 0, the even ones committed and the odd ones aborted:
    the committed batches' values, and the partition's end once every control marker is written (one per
    transaction, so `batches * (size + 1)`)."""
    committed: list[list[bytes]] = []
    with open_producer(kafka, **{"transactional.id": f"{topic}-txn"}) as producer:
        producer.init_transactions(30)
        for batch in range(batches):
            producer.begin_transaction()
            values = [f"b{batch}-{i}".encode() for i in range(size)]
            for v in values:
                producer.produce(topic, value=v, partition=0)
            producer.flush(30)  # abort purges what is still queued: get the records into the log first
            if batch % 2 == 0:
                producer.commit_transaction(30)
                committed.append(values)
            else:
                producer.abort_transaction(30)
    want, deadline = batches * (size + 1), time.monotonic() + 10
    while (end := kafka.offsets(topic, "latest")[0]) < want and time.monotonic() < deadline:
        time.sleep(0.05)  # the coordinator writes the last marker after abort_transaction returns
    assert end == want, f"{topic}: end {end}, expected {batches * size} records + {batches} control markers"
    return committed, end
