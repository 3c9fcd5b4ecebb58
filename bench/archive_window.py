"""Throughput of one archive window: produce N records once, archive [0, N) with the real stack, print figures.

    .venv/bin/python bench/archive_window.py --records 100000 --value-bytes 500 --repeats 3

Starts its own broker and moto server under a temporary directory and stops them at the end.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time

from confluent_kafka.admin import NewTopic

from s3_archive.archive.window import archive_window
from s3_archive.config.archive import ArchiveConfig
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.spark import SparkResource
from s3_archive.local.stack import LOCAL_AWS, local_s3_client, temporary_stack
from s3_archive.model.windows import OffsetWindow


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--value-bytes", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--format", default="parquet")
    args = ap.parse_args()
    with temporary_stack("s3a-bench-", "bench") as (broker, moto, _):
        kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers)
        admin = kafka.admin()
        admin.create_topics([NewTopic("bench", 1, 1)])["bench"].result(30)
        producer = kafka.producer(**{"linger.ms": 50, "batch.size": 1 << 20, "compression.type": "lz4"})
        t = time.monotonic()
        for i in range(args.records):
            producer.produce("bench", key=str(i).encode(), value=os.urandom(args.value_bytes // 2).hex().encode(),
                             headers=[("a", b"1"), ("b", b"2")], partition=0)
            if i % 10_000 == 0:
                producer.poll(0)
        producer.flush(120)
        print(f"produced {args.records} records in {time.monotonic() - t:.1f}s")
        spark = SparkResource(s3_endpoint_url=moto.endpoint_url, s3_access_key_id=LOCAL_AWS["AWS_ACCESS_KEY_ID"],
                              s3_secret_access_key=LOCAL_AWS["AWS_SECRET_ACCESS_KEY"], s3_path_style=True).session()
        s3 = local_s3_client(moto.endpoint_url)
        secs = []
        for r in range(args.repeats + 1):  # the first run warms the JVM up and is not counted
            cfg = ArchiveConfig(name="bench", topics=["bench"], bucket="bench", prefix=f"run{r}/", format=args.format)
            t = time.monotonic()
            res = archive_window(spark, kafka, s3, cfg, "bench", OffsetWindow(0, 0, args.records),
                                 logging.getLogger("bench"))
            dt = time.monotonic() - t
            assert res.manifest.record_count == args.records
            print(f"run {r}{' (warm-up)' if r == 0 else ''}: {dt:.2f}s, {args.records / dt:,.0f} records/s, "
                  f"{res.manifest.bytes_read / dt / 1e6:.1f} MB/s read, {res.manifest.bytes_written:,} bytes "
                  "written")
            if r:
                secs.append(dt)
        print(f"{args.records} records x {args.value_bytes} B, {args.format}: min/median/max "
              f"{min(secs):.2f}/{statistics.median(secs):.2f}/{max(secs):.2f}s -> median "
              f"{args.records / statistics.median(secs):,.0f} records/s")
        spark.stop()


if __name__ == "__main__":
    main()
