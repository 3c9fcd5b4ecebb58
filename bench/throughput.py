"""Throughput, the page's first table and most of its ratios: every contender moves the same workload once per round,
rounds interleaved (round i runs every contender once), so that each ratio pairs figures taken minutes apart at most.

In a round, in this order: the limits (a bare consume, once and in N parallel processes, N = the cores and twice as
many; a bare PUT of the same bytes, in threads and in N processes: bench/parallel.py), the write task's two readers
alone (native and python: each window's range read into envelope batches in this process, nothing written), Spark's
own read (a batch count of the same offset ranges, in the warm worker), the naive consumer (one Python process
writing Parquet, and N of them), s3-archive (the archive asset in the warm worker, its S3 requests counted),
s3-archive with task_reader python, s3-archive with read_path spark, restore (what round 1 archived, into a new
topic; with its default `producers` and the other counts), a bare produce of the same records (once and in N
processes), then the peers (bench/peers/rounds.py). The limit and the naive baseline of a round are the best of their
variants.
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench import workload as wl
from bench.baselines import time_bare_consume, time_naive_archive
from bench.common import Setup, SparkWorker, moto_requests, say
from bench.config import BUCKET, TOPIC
from bench.parallel import put_shares, run_parallel, shares
from bench.peers.rounds import Peers
from bench.stats import Measure, best_of, slower_of
from bench.under_test import (
    DEFAULT_PRODUCER,
    DEFAULT_PRODUCERS,
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


def time_restore(kafka: KafkaResource, s3: Any, bucket: str, prefix: str, source_topic: str, target_topic: str,
                 windows: list[OffsetWindow], **settings: Any) -> dict[str, Any]:
    """Restore `windows` of the archive under `prefix` into `target_topic` (an existing, empty topic) with
    `restore_windows` (`settings`: RestoreRequest's, e.g. producers or producer; none given, the restore's
    defaults); seconds until the last transaction is committed."""
    request = RestoreRequest(source_topic, target_topic, **settings)
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
        "read_native": Measure("read_native", "the write task's native reader alone: the windows' ranges into "
                                               "envelope batches", records=n, bytes=payload,
                               note="task_reader native, one range after another in one process; nothing written"),
        "read_python": Measure("read_python", "the write task's python reader alone (confluent-kafka's messages)",
                               records=n, bytes=payload, note="task_reader python, as read_native"),
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
        "archive_python": Measure("archive_python", "s3-archive, task_reader python (confluent-kafka's messages)",
                                  records=n, bytes=payload, note="the same run and windows, right after"),
        "archive_spark": Measure("archive_spark", "s3-archive, read_path spark (Spark's Kafka source)",
                                 records=n, bytes=payload, note="the same run and windows, right after"),
        "restore": Measure("restore", "restore: restore_windows from the archive into a new topic", records=n,
                           bytes=payload, note=f"transactional, exactly once (ledger); producers {DEFAULT_PRODUCERS}, "
                                               f"producer {DEFAULT_PRODUCER} (the defaults)"),
        **{f"restore_p{k}": Measure(f"restore_p{k}", f"restore with producers: {k}", records=n, bytes=payload,
                                    note="the same restore, another `producers`") for k in restore_producers()},
        "restore_python": Measure("restore_python", "restore with producer: python (confluent-kafka, a call per "
                                  "record)", records=n, bytes=payload,
                                  note=f"the same restore, producers {DEFAULT_PRODUCERS}"),
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
        for k in restore_producers():
            target = f"restored-r{r}-p{k}"
            wl.create_topic(kafka, target)
            res = time_restore(kafka, s3, BUCKET, RESTORE_SOURCE, TOPIC, target, s.windows, producers=k)
            assert res["records"] == n, res
            m[f"restore_p{k}"].seconds.append(res["seconds"])
            wl.delete_topic(kafka, target)
            say(f"  restore, producers {k}: {res['seconds']:.2f}s, {n / res['seconds']:,.0f} rec/s")
        target = f"restored-r{r}-python"
        wl.create_topic(kafka, target)
        res = time_restore(kafka, s3, BUCKET, RESTORE_SOURCE, TOPIC, target, s.windows, producer="python")
        assert res["records"] == n, res
        m["restore_python"].seconds.append(res["seconds"])
        wl.delete_topic(kafka, target)
        say(f"  restore, producer python: {res['seconds']:.2f}s, {n / res['seconds']:,.0f} rec/s")
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
