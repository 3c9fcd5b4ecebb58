"""The workload (deterministic records) and the contenders that need no Spark: bare consume, bare PUT, the naive
consumer writing Parquet, and a bare produce. Each returns the seconds it took for the work it was given."""

from __future__ import annotations

import io
import os
import random
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import NewTopic

from s3_archive.io.kafka import KafkaResource
from s3_archive.io.s3 import delete_keys, list_objects

PARTITIONS = 4
VALUE_BYTES = 500

# The restore's producer settings (s3_archive/restore.py `_Producer`) minus the transaction: the bare produce, and
# the producer of the workload itself, run with them so that restore vs produce compares like with like.
PRODUCER_CONF = {"enable.idempotence": True, "acks": "all", "linger.ms": 20, "message.max.bytes": 64 << 20,
                 "queue.buffering.max.messages": 200_000}


def _pads(n: int = 256, seed: int = 7) -> list[str]:
    rnd = random.Random(seed)
    return [rnd.randbytes(VALUE_BYTES).hex() for _ in range(n)]


def records(count: int, seed: int = 7) -> Iterator[tuple[int, bytes, bytes, list[tuple[str, bytes]]]]:
    """(partition, key, value, headers): ≈500-byte JSON values, a key, two headers; partitions round robin."""
    pads = _pads(seed=seed)
    t0 = 1_700_000_000_000
    for i in range(count):
        head = (f'{{"id":{i},"user":"user-{i % 9973:05d}","event":"{("view", "click", "buy")[i % 3]}",'
                f'"ts":{t0 + i},"amount":{(i * 37) % 10000 / 100:.2f},"pad":"')
        value = (head + pads[i % len(pads)][: VALUE_BYTES - len(head) - 2] + '"}').encode()
        yield i % PARTITIONS, f"user-{i % 9973:05d}".encode(), value, [("trace-id", f"{i:016x}".encode()),
                                                                      ("source", b"bench")]


def record_bytes() -> int:
    """Key + value + header bytes of one record (all records have the same size)."""
    _, k, v, h = next(records(1))
    return len(k) + len(v) + sum(len(a) + len(b) for a, b in h)


def records_for_mb(mb: float) -> int:
    return max(PARTITIONS * 16, int(mb * 1e6 / record_bytes()) // PARTITIONS * PARTITIONS)


def create_topic(kafka: KafkaResource, name: str, partitions: int = PARTITIONS) -> None:
    admin = kafka.admin()
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)


def delete_topic(kafka: KafkaResource, name: str) -> None:
    admin = kafka.admin()
    admin.delete_topics([name])[name].result(timeout=30)


def produce(kafka: KafkaResource, topic: str, count: int) -> float:
    """Bare produce of the workload's `count` records; seconds until every record is acknowledged."""
    producer = kafka.producer(**PRODUCER_CONF, **{"delivery.report.only.error": True})
    failed: list[str] = []

    def report(err, _msg) -> None:
        if err is not None:
            failed.append(str(err))

    t = time.monotonic()
    for i, (p, k, v, h) in enumerate(records(count)):
        while True:
            try:
                producer.produce(topic, value=v, key=k, headers=h, partition=p, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 5000 == 0:
            producer.poll(0)
    left = producer.flush(300)
    dt = time.monotonic() - t
    if left or failed:
        raise RuntimeError(f"producing to {topic!r}: {left} records undelivered, {len(failed)} failed "
                           f"({failed[:3]})")
    return dt


def _consumer(kafka: KafkaResource, topic: str, ends: dict[int, int], **extra) -> Consumer:
    c = Consumer(kafka.client_config(**{"group.id": f"bench-{os.urandom(4).hex()}", "enable.auto.commit": False,
                                        "fetch.max.bytes": 64 << 20, "max.partition.fetch.bytes": 16 << 20,
                                        "queued.max.messages.kbytes": 256 << 10, **extra}))
    c.assign([TopicPartition(topic, p, 0) for p in ends if ends[p] > 0])
    return c


def bare_consume(kafka: KafkaResource, topic: str) -> tuple[float, int]:
    """Read every record of the topic with no processing; (seconds, records)."""
    ends = kafka.offsets(topic, "latest")
    want = sum(ends.values())
    c = _consumer(kafka, topic, ends)
    n = 0
    t = time.monotonic()
    try:
        while n < want:
            for m in c.consume(num_messages=10_000, timeout=0.1):
                if m.error() is None:
                    n += 1
            if time.monotonic() - t > 1800:
                raise TimeoutError(f"bare consume of {topic!r}: {n} of {want} records after 30 min")
    finally:
        c.close()
    return time.monotonic() - t, n


def bare_put(s3, bucket: str, prefix: str, total_bytes: int, object_bytes: int, threads: int = 4) -> float:
    """PUT `total_bytes` of incompressible bytes as objects of `object_bytes`, `threads` at a time; seconds."""
    blob = os.urandom(min(object_bytes, total_bytes))
    sizes = [object_bytes] * (total_bytes // object_bytes) + ([total_bytes % object_bytes] if total_bytes %
                                                              object_bytes else [])

    def put(i: int) -> None:
        body = blob if sizes[i] == len(blob) else blob[: sizes[i]]
        s3.put_object(Bucket=bucket, Key=f"{prefix}part-{i:05d}.bin", Body=body)

    t = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(put, range(len(sizes))))
    return time.monotonic() - t


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


def naive_archive(kafka: KafkaResource, s3, bucket: str, prefix: str, topic: str, batch_records: int,
                  ) -> tuple[float, int, int]:
    """The naive baseline: one Python process consumes the topic and writes each partition's records as Parquet
    objects of `batch_records` records (the same envelope as ours, snappy) with pyarrow + boto3.
    Returns (seconds, records, objects)."""
    ends = kafka.offsets(topic, "latest")
    want = sum(ends.values())
    c = _consumer(kafka, topic, ends)
    batches = {p: _Batch.new() for p in ends}
    n = objects = 0

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

    t = time.monotonic()
    try:
        while n < want:
            for m in c.consume(num_messages=10_000, timeout=0.1):
                if m.error() is not None:
                    continue
                p = m.partition()
                b = batches[p]
                b.key.append(m.key())
                b.value.append(m.value())
                b.headers.append([{"key": k, "value": v} for k, v in (m.headers() or [])])
                b.offset.append(m.offset())
                ts_type, ts = m.timestamp()
                b.timestamp.append(ts)
                b.ts_type.append(ts_type - 1)
                n += 1
                if len(b.offset) >= batch_records:
                    flush(p)
            if time.monotonic() - t > 3600:
                raise TimeoutError(f"naive archive of {topic!r}: {n} of {want} records after 60 min")
        for p in list(batches):
            flush(p)
    finally:
        c.close()
    return time.monotonic() - t, n, objects


def empty_prefix(s3, bucket: str, prefix: str) -> int:
    """Delete every object under `prefix` (keeps moto's memory bounded between repeats); how many."""
    keys = [o["Key"] for o in list_objects(s3, bucket, prefix)]
    delete_keys(s3, bucket, keys)
    return len(keys)
