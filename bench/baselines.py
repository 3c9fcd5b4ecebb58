"""The baselines every throughput figure is measured against, in one process: a bare consume of the topic (or of a
share of it) and the naive script (consume, write Parquet, PUT). bench/throughput.py runs them in its rounds,
bench/parallel.py runs N of them in parallel processes, each a share of the partitions."""

from __future__ import annotations

import io
import os
import time
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import Consumer, TopicPartition

from bench.under_test import KafkaResource

Pieces = list[tuple[int, int, int]]  # (partition, first offset, end offset): a contender's share of the topic


def all_pieces(ends: dict[int, int]) -> Pieces:
    return [(p, 0, end) for p, end in sorted(ends.items()) if end > 0]


def _consumer(kafka: KafkaResource, topic: str, pieces: Pieces, **extra) -> Consumer:
    c = Consumer(kafka.client_config(**{"group.id": f"bench-{os.urandom(4).hex()}", "enable.auto.commit": False,
                                        "fetch.max.bytes": 64 << 20, "max.partition.fetch.bytes": 16 << 20,
                                        "queued.max.messages.kbytes": 256 << 10, **extra}))
    c.assign([TopicPartition(topic, p, lo) for p, lo, _ in pieces])
    return c


def consume_pieces(c: Consumer, topic: str, pieces: Pieces, on_message=None, deadline_s: float = 1800) -> int:
    """Read the records of `pieces` with the assigned consumer `c` (each piece a partition of its own); a partition
    whose piece is read is paused. `on_message(m)` for each record of the pieces; how many."""
    end = {p: hi for p, _, hi in pieces}
    left = {p: hi - lo for p, lo, hi in pieces}
    want = sum(left.values())
    n = 0
    t = time.monotonic()
    while n < want:
        for m in c.consume(num_messages=10_000, timeout=0.1):
            if m.error() is not None:
                continue
            p = m.partition()
            if m.offset() >= end[p] or left[p] <= 0:
                continue
            left[p] -= 1
            n += 1
            if on_message is not None:
                on_message(m)
            if not left[p]:
                c.pause([TopicPartition(topic, p)])
        if time.monotonic() - t > deadline_s:
            raise TimeoutError(f"reading {topic!r}: {n} of {want} records after {deadline_s:.0f} s")
    return n


def time_bare_consume(kafka: KafkaResource, topic: str, pieces: Pieces | None = None) -> tuple[float, int]:
    """Read every record of `pieces` (default: the whole topic) with no processing; (seconds, records)."""
    pieces = pieces if pieces is not None else all_pieces(kafka.offsets(topic, "latest"))
    c = _consumer(kafka, topic, pieces)
    t = time.monotonic()
    try:
        n = consume_pieces(c, topic, pieces)
    finally:
        c.close()
    return time.monotonic() - t, n


_SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()),
    ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
    ("timestamp", pa.timestamp("ms", tz="UTC")), ("timestamp_type", pa.int32()),
])


@dataclass
class _Batch:
    key: list
    value: list
    headers: list
    offset: list
    timestamp: list
    ts_type: list

    @classmethod
    def new(cls) -> _Batch:
        return cls([], [], [], [], [], [])


def time_naive_archive(kafka: KafkaResource, s3, bucket: str, prefix: str, topic: str, batch_records: int,
                       pieces: Pieces | None = None) -> tuple[float, int, int]:
    """The naive baseline: one Python process consumes the topic (or its `pieces`) and writes each partition's
    records as Parquet objects of `batch_records` records (the same envelope as ours, snappy) with pyarrow + boto3.
    Returns (seconds, records, objects)."""
    pieces = pieces if pieces is not None else all_pieces(kafka.offsets(topic, "latest"))
    c = _consumer(kafka, topic, pieces)
    batches = {p: _Batch.new() for p, _, _ in pieces}
    objects = 0

    def flush(p: int) -> None:
        nonlocal objects
        b = batches[p]
        if not b.offset:
            return
        table = pa.table({"key": b.key, "value": b.value, "headers": b.headers, "topic": [topic] * len(b.offset),
                          "partition": [p] * len(b.offset), "offset": b.offset, "timestamp": b.timestamp,
                          "timestamp_type": b.ts_type}, schema=_SCHEMA)
        buf = io.BytesIO()
        pq.write_table(table, buf, compression="snappy")
        s3.put_object(Bucket=bucket, Key=f"{prefix}{topic}/partition={p}/{b.offset[0]:019d}.parquet",
                      Body=buf.getvalue())
        objects += 1
        batches[p] = _Batch.new()

    def add(m) -> None:
        p = m.partition()
        b = batches[p]
        b.key.append(m.key())
        b.value.append(m.value())
        b.headers.append([{"key": k, "value": v} for k, v in (m.headers() or [])])
        b.offset.append(m.offset())
        ts_type, ts = m.timestamp()
        b.timestamp.append(ts)
        b.ts_type.append(ts_type - 1)
        if len(b.offset) >= batch_records:
            flush(p)

    t = time.monotonic()
    try:
        n = consume_pieces(c, topic, pieces, add, deadline_s=3600)
        for p in list(batches):
            flush(p)
    finally:
        c.close()
    return time.monotonic() - t, n, objects
