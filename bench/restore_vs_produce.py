"""Restore throughput next to a bare confluent-kafka producer on the same machine.

    PYTHONPATH=. .venv/bin/python bench/restore_vs_produce.py --records 200000 --repeats 3

Both send the same records (keys, ~500-byte values, two headers) with the same producer settings (acks=all,
idempotent, linger.ms=20); the restore reads them from a Parquet archive in S3 (moto) through `restore_windows`
(transactions, ledger, parsing, routing included). `run()` returns the figures as a dict (for `make bench`).
Starts its own broker and moto server unless given `bootstrap_servers` and `s3_endpoint_url`.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import resource
import statistics
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka.admin import NewTopic

from s3_archive.io.kafka import KafkaResource
from s3_archive.keys.objects import manifest_key, object_key
from s3_archive.local.stack import local_s3_client, temporary_stack
from s3_archive.model.manifest import MANIFEST_VERSION, Manifest, ManifestObject
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.request import RestoreRequest, record_bytes
from s3_archive.restore.run import restore_windows

TOPIC = "bench.source"
BASE_TS = 1_700_000_000_000
WINDOW = 10_000  # records per archived window (flush.count); keeps objects under moto's 16 MiB read limit here


def _records(n: int, value_bytes: int) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    return [(f"key-{i}".encode(), os.urandom(value_bytes // 2).hex().encode(),
             [("trace", f"{i:016x}".encode()), ("source", b"bench")]) for i in range(n)]


def _write_archive(s3: Any, bucket: str, prefix: str, recs: list) -> list[OffsetWindow]:
    """A Parquet archive in our layout (what the archive asset writes), written directly with pyarrow."""
    windows = []
    header_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    for start in range(0, len(recs), WINDOW):
        chunk = recs[start:start + WINDOW]
        w = OffsetWindow(0, start, start + len(chunk))
        table = pa.table({
            "key": pa.array([k for k, _, _ in chunk], pa.binary()),
            "value": pa.array([v for _, v, _ in chunk], pa.binary()),
            "headers": pa.array([[{"key": a, "value": b} for a, b in hs] for _, _, hs in chunk], header_type),
            "topic": pa.array([TOPIC] * len(chunk)),
            "partition": pa.array([0] * len(chunk), pa.int32()),
            "offset": pa.array(range(start, start + len(chunk)), pa.int64()),
            "timestamp": pa.array([(BASE_TS + start + i) * 1000 for i in range(len(chunk))], pa.timestamp("us")),
        })
        buf = io.BytesIO()
        pq.write_table(table, buf, compression="snappy")
        key = object_key(prefix, TOPIC, w, 0, ".parquet")
        etag = s3.put_object(Bucket=bucket, Key=key, Body=buf.getvalue())["ETag"].strip('"')
        obj = ManifestObject(key=key, size=buf.tell(), etag=etag)
        manifest = Manifest(
            manifest_version=MANIFEST_VERSION, writer="bench/restore_vs_produce.py", topic=TOPIC, partition=0,
            start_offset=w.start, end_offset=w.end, window_key=w.key, format="parquet", compression="snappy",
            record_count=len(chunk), bytes_read=sum(record_bytes(*r) for r in chunk), bytes_written=obj.size,
            first_offset=w.start, last_offset=w.end - 1, min_timestamp_ms=BASE_TS + start,
            max_timestamp_ms=BASE_TS + start + len(chunk) - 1, min_timestamp=None, max_timestamp=None,
            absent_offsets=[], absent_offsets_truncated=False, absent_offset_count=0, lost_offsets=[],
            spark_schema="{}", attempt="bench", committed_at="2023-11-14T22:13:20+00:00", objects=[obj])
        s3.put_object(Bucket=bucket, Key=manifest_key(prefix, TOPIC, w), Body=manifest.dumps())
        windows.append(w)
    return windows


def _produce_bare(kafka: KafkaResource, topic: str, recs: list) -> None:
    p = kafka.producer(**{"enable.idempotence": True, "acks": "all", "linger.ms": 20,
                          "queue.buffering.max.messages": 200_000, "delivery.report.only.error": True})
    for i, (k, v, hs) in enumerate(recs):
        while True:
            try:
                p.produce(topic, key=k, value=v, headers=hs, partition=0, timestamp=BASE_TS + i)
                break
            except BufferError:
                p.poll(0.05)
    remaining = p.flush(120)
    assert remaining == 0, f"{remaining} records not delivered"


def _cpu_s(pid: int | None = None) -> float:
    """CPU seconds (user + system) used so far by this process (all its threads) or by process `pid`."""
    if pid is None:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _Clock:
    """Wall seconds, this process's CPU seconds and the broker's (when the bench started it) of one timed step."""

    def __init__(self, broker_pid: int | None) -> None:
        self.broker_pid = broker_pid

    def __enter__(self) -> _Clock:
        self.t, self.cpu = time.monotonic(), _cpu_s()
        self.broker = _cpu_s(self.broker_pid) if self.broker_pid else 0.0
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds, self.cpu = time.monotonic() - self.t, _cpu_s() - self.cpu
        self.broker = _cpu_s(self.broker_pid) - self.broker if self.broker_pid else None


def _stats(seconds: list[float], n: int, nbytes: int, clocks: list[_Clock]) -> dict[str, Any]:
    rps = sorted(n / s for s in seconds)
    broker = [c.broker for c in clocks if c.broker is not None]
    return {"seconds": [round(s, 3) for s in seconds],
            "cpu_s_median": round(statistics.median(c.cpu for c in clocks), 3),
            "broker_cpu_s_median": round(statistics.median(broker), 3) if broker else None,
            "records_per_s": {"min": round(rps[0]), "median": round(statistics.median(rps)), "max": round(rps[-1])},
            "mb_per_s": {"min": round(nbytes / (n / rps[0]) / 1e6, 2),
                         "median": round(nbytes * statistics.median(rps) / n / 1e6, 2),
                         "max": round(nbytes * rps[-1] / n / 1e6, 2)}}


def run(records: int = 200_000, repeats: int = 3, value_bytes: int = 500, bootstrap_servers: str | None = None,
        s3_endpoint_url: str | None = None, bucket: str = "bench", profile: Path | None = None) -> dict[str, Any]:
    """Produce `records` with a bare producer and restore as many from S3, `repeats` times each (a new topic per
    run); figures per side (with the CPU seconds of this process and of the broker, when it started the broker)
    and the median ratio restore / producer. `profile`: write a cProfile of the last (warm) restore."""
    with ExitStack() as stack:
        broker_pid = None
        if bootstrap_servers is None or s3_endpoint_url is None:
            broker, moto, _ = stack.enter_context(temporary_stack("s3a-bench-restore-", bucket))
            bootstrap_servers, s3_endpoint_url = broker.bootstrap_servers, moto.endpoint_url
            broker_pid = broker.proc.pid
        kafka = KafkaResource(bootstrap_servers=bootstrap_servers)
        s3 = local_s3_client(s3_endpoint_url)
        recs = _records(records, value_bytes)
        nbytes = sum(len(k) + len(v) + sum(len(a) + len(b) for a, b in hs) for k, v, hs in recs)
        run_id = uuid.uuid4().hex[:8]
        windows = _write_archive(s3, bucket, f"bench-{run_id}/", recs)
        admin = kafka.admin()
        log = logging.getLogger("bench")
        produce_c: list[_Clock] = []
        restore_c: list[_Clock] = []
        for r in range(repeats):
            topics = [f"bench-bare-{run_id}-{r}", f"bench-restore-{run_id}-{r}"]
            for f in admin.create_topics([NewTopic(t, 1, 1, config={"retention.ms": "-1"}) for t in topics]).values():
                f.result(30)
            with _Clock(broker_pid) as c:
                _produce_bare(kafka, topics[0], recs)
            produce_c.append(c)
            request = RestoreRequest(TOPIC, topics[1])
            if profile is not None and r == repeats - 1:  # a warm run: the broker's first transactions are slower
                import cProfile

                with cProfile.Profile() as prof, _Clock(broker_pid) as c:
                    reps = list(restore_windows(kafka, s3, bucket, f"bench-{run_id}/", request, windows, log))
                prof.dump_stats(str(profile))
            else:
                with _Clock(broker_pid) as c:
                    reps = list(restore_windows(kafka, s3, bucket, f"bench-{run_id}/", request, windows, log))
            restore_c.append(c)
            assert sum(x.restored for x in reps) == records
            end = kafka.offsets(topics[1], "latest")[0]
            assert end >= records, f"restore target holds {end} offsets, expected >= {records}"
            admin.delete_topics(topics)
        producer = _stats([c.seconds for c in produce_c], records, nbytes, produce_c)
        restore = _stats([c.seconds for c in restore_c], records, nbytes, restore_c)
        return {"records": records, "value_bytes": value_bytes, "record_bytes": nbytes, "repeats": repeats,
                "producer": producer, "restore": restore,
                "ratio_median": round(restore["records_per_s"]["median"] / producer["records_per_s"]["median"], 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--value-bytes", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--profile", type=Path, help="write a cProfile of the last restore here")
    args = ap.parse_args()
    out = run(args.records, args.repeats, args.value_bytes, profile=args.profile)
    for side in ("producer", "restore"):
        s = out[side]
        print(f"{side:8s}: records/s min/median/max {s['records_per_s']['min']:,}/{s['records_per_s']['median']:,}/"
              f"{s['records_per_s']['max']:,}  MB/s {s['mb_per_s']['min']}/{s['mb_per_s']['median']}/"
              f"{s['mb_per_s']['max']}  CPU s median: this process {s['cpu_s_median']}, broker "
              f"{s['broker_cpu_s_median']}")
    print(f"restore / producer (median records/s): {out['ratio_median']}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
