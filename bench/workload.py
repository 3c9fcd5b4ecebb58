"""The workload: deterministic records (≈500-byte JSON values, a key, two headers) in a 4-partition topic, produced
once per size and read by every contender; its windows; and the topic and bucket chores around it. `produce` is
also the bare-produce contender (the restore's producer settings, no transaction)."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator

from confluent_kafka.admin import NewTopic

from bench.config import PARTITIONS, PRODUCER_CONF, VALUE_BYTES
from bench.under_test import KafkaResource, OffsetWindow, delete_keys, list_objects


def _pads(n: int = 256, seed: int = 7) -> list[str]:
    rnd = random.Random(seed)
    return [rnd.randbytes(VALUE_BYTES).hex() for _ in range(n)]


def records(count: int, seed: int = 7,
            pieces: list[tuple[int, int, int]] | None = None) -> Iterator[tuple[int, bytes, bytes, list[tuple[str, bytes]]]]:
    """(partition, key, value, headers): ≈500-byte JSON values, a key, two headers; partitions round robin.
    `pieces` [(partition, lo, hi)]: only record i = j × PARTITIONS + partition for j in [lo, hi) of each (a
    parallel producer's share: those records land at offsets [lo, hi) of an empty topic)."""
    pads = _pads(seed=seed)
    t0 = 1_700_000_000_000
    indices = (range(count) if pieces is None else
               (j * PARTITIONS + p for p, lo, hi in pieces for j in range(lo, hi) if j * PARTITIONS + p < count))
    for i in indices:
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


def produce(kafka: KafkaResource, topic: str, count: int, pieces: list[tuple[int, int, int]] | None = None,
            producer=None) -> float:
    """Bare produce of the workload's `count` records (or of its `pieces`, see `records`); seconds until every
    record is acknowledged. `producer`: one made beforehand (its creation then is not timed)."""
    producer = producer or make_producer(kafka)
    failed: list[str] = []

    def report(err, _msg) -> None:
        if err is not None:
            failed.append(str(err))

    t = time.monotonic()
    for i, (p, k, v, h) in enumerate(records(count, pieces=pieces)):
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


def make_producer(kafka: KafkaResource):
    return kafka.producer(**PRODUCER_CONF, **{"delivery.report.only.error": True})


def empty_prefix(s3, bucket: str, prefix: str) -> int:
    """Delete every object under `prefix` (keeps moto's memory bounded between repeats); how many."""
    keys = [o["Key"] for o in list_objects(s3, bucket, prefix)]
    delete_keys(s3, bucket, keys)
    return len(keys)


def windows_for(ends: dict[int, int], window_records: int) -> list[OffsetWindow]:
    """The topic's windows of at most `window_records` records, partition by partition."""
    return [OffsetWindow(p, s, min(s + window_records, end)) for p, end in sorted(ends.items())
            for s in range(0, end, window_records)]
