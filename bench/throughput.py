"""Throughput, the page's first table and most of its ratios: every contender moves the same workload once per round,
rounds interleaved (round i runs every contender once), so that each ratio pairs figures taken minutes apart at most.

In a round, in this order: the limits (a bare consume; a bare PUT of the same bytes), the write task's two readers
alone (native and python: each window's range read into envelope batches in this process, nothing written), Spark's
own read (a batch count of the same offset ranges, in the warm worker), the naive consumer (one Python process
writing Parquet), s3-archive (the archive asset in the warm worker, its S3 requests counted), s3-archive with
task_reader python, s3-archive with read_path spark, restore (what round 1 archived, into a new topic), a bare
produce of the same records, then the peers (bench/peers/rounds.py).
"""

from __future__ import annotations

import io
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import Consumer, TopicPartition

from bench import workload as wl
from bench.common import Setup, SparkWorker, moto_requests, say
from bench.config import BUCKET, TOPIC
from bench.peers.rounds import Peers
from bench.stats import Measure, slower_of
from bench.under_test import (
    ArchiveSource,
    KafkaConnection,
    KafkaResource,
    OffsetWindow,
    RestoreContext,
    RestoreRequest,
    kafka_read,
    native_read,
    restore_windows,
)

RESTORE_SOURCE = "archive-r0/"  # round 1's archive, restored in every round


def _consumer(kafka: KafkaResource, topic: str, ends: dict[int, int], **extra) -> Consumer:
    c = Consumer(kafka.client_config(**{"group.id": f"bench-{os.urandom(4).hex()}", "enable.auto.commit": False,
                                        "fetch.max.bytes": 64 << 20, "max.partition.fetch.bytes": 16 << 20,
                                        "queued.max.messages.kbytes": 256 << 10, **extra}))
    c.assign([TopicPartition(topic, p, 0) for p in ends if ends[p] > 0])
    return c


def time_bare_consume(kafka: KafkaResource, topic: str) -> tuple[float, int]:
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


TASK_READERS = {"native": native_read.read_range, "python": kafka_read.read_range}


def time_task_read(kafka: KafkaResource, topic: str, windows: list[list[int]], reader: str) -> tuple[float, int]:
    """Each window's range [start, end) of `topic` read by the write task's `reader` (ArchiveConfig.task_reader)
    into envelope batches, one after another in this process, nothing written; (seconds, records)."""
    conn, read = KafkaConnection.of_config(kafka.client_config()), TASK_READERS[reader]
    n = 0
    t = time.monotonic()
    for partition, start, end in windows:
        n += sum(b.num_rows for b in read(conn, topic, partition, start, end))
    return time.monotonic() - t, n


def time_bare_put(s3, bucket: str, prefix: str, total_bytes: int, object_bytes: int, threads: int = 4) -> float:
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


def time_naive_archive(kafka: KafkaResource, s3, bucket: str, prefix: str, topic: str, batch_records: int,
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


def time_restore(kafka: KafkaResource, s3: Any, bucket: str, prefix: str, source_topic: str, target_topic: str,
                 windows: list[OffsetWindow]) -> dict[str, Any]:
    """Restore `windows` of the archive under `prefix` into `target_topic` (an existing, empty topic) with
    `restore_windows`; seconds until the last transaction is committed."""
    t = time.monotonic()
    reports = list(restore_windows(RestoreContext(kafka, s3, logging.getLogger("bench.restore")),
                                   ArchiveSource(bucket, prefix), RestoreRequest(source_topic, target_topic), windows))
    dt = time.monotonic() - t
    return {"seconds": dt, "records": sum(r.restored for r in reports), "bytes": sum(r.bytes for r in reports),
            "transactions": sum(r.transactions for r in reports)}


def contenders(s: Setup) -> dict[str, Measure]:
    """The rows of the throughput table, empty (their seconds are appended round by round)."""
    n, payload, window_records = s.records, s.payload, s.window_records
    object_bytes = payload // len(s.windows)
    return {
        "consume": Measure("consume", "limit: bare consume (confluent-kafka, no processing)", records=n,
                           bytes=payload),
        "put": Measure("put", f"limit: bare PUT of the same bytes (boto3, {len(s.windows)} objects of "
                              f"{object_bytes / 1e6:.1f} MB, 4 threads)", records=n, bytes=payload),
        "limit": Measure("limit", "limit: the slower of the two, per round", records=n, bytes=payload),
        "read_native": Measure("read_native", "the write task's native reader alone: the windows' ranges into "
                                               "envelope batches", records=n, bytes=payload,
                               note="task_reader native, one range after another in one process; nothing written"),
        "read_python": Measure("read_python", "the write task's python reader alone (confluent-kafka's messages)",
                               records=n, bytes=payload, note="task_reader python, as read_native"),
        "spark_read": Measure("spark_read", "Spark's own read: a batch count of the same offset ranges",
                              records=n, bytes=payload, note="warm session; no write"),
        "naive": Measure("naive", "naive: one Python process, confluent-kafka + pyarrow + boto3 → Parquet",
                         records=n, bytes=payload, note=f"objects of ≤ {window_records:,} records"),
        "archive": Measure("archive", "s3-archive: dg.materialize of the archive asset, commit included",
                           records=n, bytes=payload,
                           note=f"{len(s.windows)} windows of ≤ {window_records:,} records in one run, parquet/"
                                "snappy, warm Spark session, read_path librdkafka (the default)"),
        "archive_python": Measure("archive_python", "s3-archive, task_reader python (confluent-kafka's messages)",
                                  records=n, bytes=payload, note="the same run and windows, right after"),
        "archive_spark": Measure("archive_spark", "s3-archive, read_path spark (Spark's Kafka source)",
                                 records=n, bytes=payload, note="the same run and windows, right after"),
        "restore": Measure("restore", "restore: restore_windows from the archive into a new topic", records=n,
                           bytes=payload, note="transactional, exactly once (ledger)"),
        "produce": Measure("produce", "bare produce of the same records (idempotent, acks=all)", records=n,
                           bytes=payload, note="the restore's producer settings, no transaction"),
    }


def rounds(s: Setup, worker: SparkWorker, peers: Peers, repeats: int) -> dict[str, Any]:
    """`repeats` interleaved rounds of every contender and peer. Leaves round 1's archive (`RESTORE_SOURCE`) in the
    bucket: the restore of every round reads it."""
    n, payload, kafka, s3, wlist = s.records, s.payload, s.kafka, s.s3, s.wlist
    object_bytes = payload // len(s.windows)
    m = contenders(s)
    profile: list[dict[str, Any]] = []
    requests: list[dict[str, int]] = []
    for r in range(repeats):
        say(f"round {r + 1}/{repeats}")
        secs, got = time_bare_consume(kafka, TOPIC)
        assert got == n, (got, n)
        m["consume"].seconds.append(secs)
        say(f"  bare consume: {secs:.2f}s, {n / secs:,.0f} rec/s, {payload / secs / 1e6:.1f} MB/s")
        secs = time_bare_put(s3, BUCKET, f"put-r{r}/", payload, object_bytes)
        m["put"].seconds.append(secs)
        wl.empty_prefix(s3, BUCKET, f"put-r{r}/")
        say(f"  bare PUT: {secs:.2f}s, {payload / secs / 1e6:.1f} MB/s")
        for reader in TASK_READERS:
            secs, got = time_task_read(kafka, TOPIC, wlist, reader)
            assert got == n, (reader, got, n)
            m[f"read_{reader}"].seconds.append(secs)
            say(f"  task reader {reader}: {secs:.2f}s, {n / secs:,.0f} rec/s, {payload / secs / 1e6:.1f} MB/s")
        out = worker.call(cmd="spark_read", topic=TOPIC, windows=wlist)
        assert out["records"] == n, out
        m["spark_read"].seconds.append(out["seconds"])
        say(f"  Spark's own read (count): {out['seconds']:.2f}s, {n / out['seconds']:,.0f} rec/s")
        secs, got, objs = time_naive_archive(kafka, s3, BUCKET, f"naive-r{r}/", TOPIC, s.window_records)
        assert got == n, (got, n)
        m["naive"].seconds.append(secs)
        wl.empty_prefix(s3, BUCKET, f"naive-r{r}/")
        say(f"  naive: {secs:.2f}s, {n / secs:,.0f} rec/s, {objs} objects")
        before = moto_requests(s.moto_log)
        out = worker.call(cmd="archive", topic=TOPIC, prefix=f"archive-r{r}/", windows=wlist)
        requests.append({"requests": moto_requests(s.moto_log) - before, "objects": out["objects"],
                         "windows": out["windows"]})
        assert out["records"] == n and out["windows"] == len(s.windows), out
        m["archive"].seconds.append(out["seconds"])
        profile.append(out)
        if r:
            wl.empty_prefix(s3, BUCKET, f"archive-r{r}/")
        say(f"  s3-archive: {out['seconds']:.2f}s, {n / out['seconds']:,.0f} rec/s ({out['objects']} objects, "
            f"{out['bytes_written'] / 1e6:.0f} MB written, {requests[-1]['requests']} S3 requests; Spark jobs "
            f"{out['stage_s']:.1f}s, commits {out['commit_s']:.1f}s summed over windows)")
        py = worker.call(cmd="archive", topic=TOPIC, prefix=f"archive-python-r{r}/", windows=wlist,
                         task_reader="python")
        assert py["records"] == n and py["windows"] == len(s.windows), py
        m["archive_python"].seconds.append(py["seconds"])
        wl.empty_prefix(s3, BUCKET, f"archive-python-r{r}/")
        say(f"  s3-archive, task_reader python: {py['seconds']:.2f}s, {n / py['seconds']:,.0f} rec/s "
            f"({py['objects']} objects)")
        old = worker.call(cmd="archive", topic=TOPIC, prefix=f"archive-spark-r{r}/", windows=wlist,
                          read_path="spark")
        assert old["records"] == n and old["windows"] == len(s.windows), old
        m["archive_spark"].seconds.append(old["seconds"])
        wl.empty_prefix(s3, BUCKET, f"archive-spark-r{r}/")
        say(f"  s3-archive, read_path spark: {old['seconds']:.2f}s, {n / old['seconds']:,.0f} rec/s "
            f"({old['objects']} objects)")
        target = f"restored-r{r}"
        wl.create_topic(kafka, target)
        res = time_restore(kafka, s3, BUCKET, RESTORE_SOURCE, TOPIC, target, s.windows)
        assert res["records"] == n, res
        m["restore"].seconds.append(res["seconds"])
        wl.delete_topic(kafka, target)
        say(f"  restore: {res['seconds']:.2f}s, {n / res['seconds']:,.0f} rec/s ({res['transactions']} "
            "transactions)")
        target = f"produced-r{r}"
        wl.create_topic(kafka, target)
        secs = wl.produce(kafka, target, n)
        m["produce"].seconds.append(secs)
        wl.delete_topic(kafka, target)
        say(f"  bare produce: {secs:.2f}s, {n / secs:,.0f} rec/s")
        peers.run_round(r, worker)
    m["limit"].seconds = slower_of(m["consume"].seconds, m["put"].seconds)
    return {"measures": m, "profile": profile, "requests": requests}
