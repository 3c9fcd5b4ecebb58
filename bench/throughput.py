"""Throughput, the page's first table and most of its ratios: every contender moves the same workload once per round,
rounds interleaved (round i runs every contender once), so that each ratio pairs figures taken minutes apart at most.

In a round, in this order: the limits (a bare consume, once and in N parallel processes, N = the cores and twice as
many; a bare PUT of the same bytes, in threads and in N processes: bench/parallel.py), Spark's own read (a batch count
of the same offset ranges, in the warm worker), the naive consumer (one Python process writing Parquet, and N of
them), s3-archive (the archive asset in the warm worker, its S3 requests counted), s3-archive with read_path spark,
restore (what round 1 archived, into a new topic; with its default `producers` and the other counts), a bare produce
of the same records (once and in N processes), then the peers (bench/peers/rounds.py). The limit and the naive
baseline of a round are the best of their variants.
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
from bench.parallel import Pieces, put_shares, run_parallel, shares
from bench.peers.rounds import Peers
from bench.stats import Measure, best_of, slower_of
from bench.under_test import (
    DEFAULT_PRODUCERS,
    ArchiveSource,
    KafkaResource,
    OffsetWindow,
    RestoreContext,
    RestoreRequest,
    restore_windows,
)

RESTORE_SOURCE = "archive-r0/"  # round 1's archive, restored in every round


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


def time_restore(kafka: KafkaResource, s3: Any, bucket: str, prefix: str, source_topic: str, target_topic: str,
                 windows: list[OffsetWindow], producers: int | None = None) -> dict[str, Any]:
    """Restore `windows` of the archive under `prefix` into `target_topic` (an existing, empty topic) with
    `restore_windows` (`producers`: None, the restore's default); seconds until the last transaction is
    committed."""
    request = RestoreRequest(source_topic, target_topic, **({} if producers is None else {"producers": producers}))
    t = time.monotonic()
    reports = list(restore_windows(RestoreContext(kafka, s3, logging.getLogger("bench.restore")),
                                   ArchiveSource(bucket, prefix), request, windows))
    dt = time.monotonic() - t
    return {"seconds": dt, "records": sum(r.restored for r in reports), "bytes": sum(r.bytes for r in reports),
            "transactions": sum(r.transactions for r in reports)}


def parallel_counts() -> tuple[int, ...]:
    """N of the parallel contenders: the machine's cores and twice as many."""
    cores = os.cpu_count() or 1
    return (cores, 2 * cores)


def contenders(s: Setup) -> dict[str, Measure]:
    """The rows of the throughput table, empty (their seconds are appended round by round)."""
    n, payload, window_records = s.records, s.payload, s.window_records
    object_bytes = payload // len(s.windows)
    ns = parallel_counts()
    return {
        "consume": Measure("consume", "limit: one bare consumer (confluent-kafka, no processing)", records=n,
                           bytes=payload),
        **{f"consume_x{k}": Measure(f"consume_x{k}", f"limit: {k} bare consumers, parallel processes", records=n,
                                    bytes=payload, note="each a share of the partitions (bench/parallel.py)")
           for k in ns},
        "put": Measure("put", f"limit: bare PUT of the same bytes (boto3, {len(s.windows)} objects of "
                              f"{object_bytes / 1e6:.1f} MB, 4 threads)", records=n, bytes=payload),
        **{f"put_x{k}": Measure(f"put_x{k}", f"limit: bare PUT of the same bytes, {k} parallel processes",
                                records=n, bytes=payload, note="the same objects, each process a share")
           for k in ns},
        "limit": Measure("limit", "limit: the slower of the best consume and the best PUT, per round", records=n,
                         bytes=payload, note="best of one and " + " and ".join(map(str, ns)) + " processes"),
        "spark_read": Measure("spark_read", "Spark's own read: a batch count of the same offset ranges",
                              records=n, bytes=payload, note="warm session; no write"),
        "naive": Measure("naive", "naive: one Python process, confluent-kafka + pyarrow + boto3 → Parquet",
                         records=n, bytes=payload, note=f"objects of ≤ {window_records:,} records"),
        **{f"naive_x{k}": Measure(f"naive_x{k}", f"naive: {k} parallel processes", records=n, bytes=payload,
                                  note="each a share of the partitions") for k in ns},
        "archive": Measure("archive", "s3-archive: dg.materialize of the archive asset, commit included",
                           records=n, bytes=payload,
                           note=f"{len(s.windows)} windows of ≤ {window_records:,} records in one run, parquet/"
                                "snappy, warm Spark session, read_path librdkafka (the default)"),
        "archive_spark": Measure("archive_spark", "s3-archive, read_path spark (Spark's Kafka source)",
                                 records=n, bytes=payload, note="the same run and windows, right after"),
        "restore": Measure("restore", "restore: restore_windows from the archive into a new topic", records=n,
                           bytes=payload, note=f"transactional, exactly once (ledger); producers {DEFAULT_PRODUCERS} "
                                               "(the default)"),
        **{f"restore_p{k}": Measure(f"restore_p{k}", f"restore with producers: {k}", records=n, bytes=payload,
                                    note="the same restore, another `producers`") for k in restore_producers()},
        "produce": Measure("produce", "bare produce of the same records (idempotent, acks=all)", records=n,
                           bytes=payload, note="the restore's producer settings, no transaction"),
        **{f"produce_x{k}": Measure(f"produce_x{k}", f"bare produce, {k} parallel processes", records=n,
                                    bytes=payload, note="each a share of the partitions") for k in ns},
    }


def restore_producers() -> list[int]:
    """The restore's `producers` measured beside the default: 1, the cores and twice as many."""
    return [k for k in sorted({1, *parallel_counts()}) if k != DEFAULT_PRODUCERS]


def rounds(s: Setup, worker: SparkWorker, peers: Peers, repeats: int) -> dict[str, Any]:
    """`repeats` interleaved rounds of every contender and peer. Leaves round 1's archive (`RESTORE_SOURCE`) in the
    bucket: the restore of every round reads it."""
    n, payload, kafka, s3, wlist = s.records, s.payload, s.kafka, s.s3, s.wlist
    object_bytes = payload // len(s.windows)
    m = contenders(s)
    ns = parallel_counts()
    profile: list[dict[str, Any]] = []
    requests: list[dict[str, int]] = []
    for r in range(repeats):
        say(f"round {r + 1}/{repeats}")
        secs, got = time_bare_consume(kafka, TOPIC)
        assert got == n, (got, n)
        m["consume"].seconds.append(secs)
        say(f"  bare consume: {secs:.2f}s, {n / secs:,.0f} rec/s, {payload / secs / 1e6:.1f} MB/s")
        for k in ns:
            out = run_parallel("consume", s.stack, [{"topic": TOPIC, "pieces": sh} for sh in shares(s.ends, k)])
            assert out["records"] == n, out
            m[f"consume_x{k}"].seconds.append(out["seconds"])
            say(f"  {k} bare consumers: {out['seconds']:.2f}s, {payload / out['seconds'] / 1e6:.1f} MB/s")
        secs = time_bare_put(s3, BUCKET, f"put-r{r}/", payload, object_bytes)
        m["put"].seconds.append(secs)
        wl.empty_prefix(s3, BUCKET, f"put-r{r}/")
        say(f"  bare PUT: {secs:.2f}s, {payload / secs / 1e6:.1f} MB/s")
        for k in ns:
            out = run_parallel("put", s.stack, put_shares(payload, object_bytes, k, f"put-r{r}-x{k}/"))
            m[f"put_x{k}"].seconds.append(out["seconds"])
            wl.empty_prefix(s3, BUCKET, f"put-r{r}-x{k}/")
            say(f"  bare PUT, {k} processes: {out['seconds']:.2f}s, {payload / out['seconds'] / 1e6:.1f} MB/s")
        out = worker.call(cmd="spark_read", topic=TOPIC, windows=wlist)
        assert out["records"] == n, out
        m["spark_read"].seconds.append(out["seconds"])
        say(f"  Spark's own read (count): {out['seconds']:.2f}s, {n / out['seconds']:,.0f} rec/s")
        secs, got, objs = time_naive_archive(kafka, s3, BUCKET, f"naive-r{r}/", TOPIC, s.window_records)
        assert got == n, (got, n)
        m["naive"].seconds.append(secs)
        wl.empty_prefix(s3, BUCKET, f"naive-r{r}/")
        say(f"  naive: {secs:.2f}s, {n / secs:,.0f} rec/s, {objs} objects")
        for k in ns:
            out = run_parallel("naive", s.stack, [{"topic": TOPIC, "pieces": sh, "bucket": BUCKET,
                                                   "prefix": f"naive-r{r}-x{k}/", "batch_records": s.window_records}
                                                  for sh in shares(s.ends, k)])
            assert out["records"] == n, out
            m[f"naive_x{k}"].seconds.append(out["seconds"])
            wl.empty_prefix(s3, BUCKET, f"naive-r{r}-x{k}/")
            say(f"  naive, {k} processes: {out['seconds']:.2f}s, {n / out['seconds']:,.0f} rec/s, "
                f"{out['objects']} objects")
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
        for k in restore_producers():
            target = f"restored-r{r}-p{k}"
            wl.create_topic(kafka, target)
            res = time_restore(kafka, s3, BUCKET, RESTORE_SOURCE, TOPIC, target, s.windows, producers=k)
            assert res["records"] == n, res
            m[f"restore_p{k}"].seconds.append(res["seconds"])
            wl.delete_topic(kafka, target)
            say(f"  restore, producers {k}: {res['seconds']:.2f}s, {n / res['seconds']:,.0f} rec/s")
        target = f"produced-r{r}"
        wl.create_topic(kafka, target)
        secs = wl.produce(kafka, target, n)
        m["produce"].seconds.append(secs)
        wl.delete_topic(kafka, target)
        say(f"  bare produce: {secs:.2f}s, {n / secs:,.0f} rec/s")
        for k in ns:
            target = f"produced-r{r}-x{k}"
            wl.create_topic(kafka, target)
            out = run_parallel("produce", s.stack, [{"topic": target, "count": n, "pieces": sh}
                                                    for sh in shares(s.ends, k)])
            assert out["records"] == n, out
            m[f"produce_x{k}"].seconds.append(out["seconds"])
            wl.delete_topic(kafka, target)
            say(f"  bare produce, {k} processes: {out['seconds']:.2f}s, {n / out['seconds']:,.0f} rec/s")
        peers.run_round(r, worker)
    m["limit"].seconds = slower_of(best_of(m, "consume"), best_of(m, "put"))
    return {"measures": m, "profile": profile, "requests": requests}
