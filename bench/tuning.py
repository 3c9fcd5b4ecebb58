"""Variants of the archive path side by side in one warm Spark session, with S3 request and Spark job counts.

    PYTHONPATH=. .venv/bin/python -m bench.tuning --mb 200 --rounds 3 file magic mp2 blk128

Starts its own broker and moto server, produces the workload of `make bench` (4 partitions), then per round runs
`archive_window` on every partition's whole range (4 windows at once, as the archive asset does) for each variant,
and finally a one-record window per variant. A variant is `+`-joined parts set on the running session:
`file` (the default committer) | `magic` (SparkResource.s3_committer = "magic") | `mp<N>`
(kafka_min_partitions = N) | `blk<MB>` (parquet_block_size_mb). Prints one JSON line per run: seconds, objects,
S3 requests seen by moto (s3a's plus boto3's), boto3 calls by operation, Spark jobs.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench import workload as wl
from s3_archive.archive.window import archive_window
from s3_archive.config.archive import ArchiveConfig
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.spark import KAFKA_MIN_PARTITIONS_CONF, MAGIC_COMMITTER_CONF, SparkResource
from s3_archive.local.stack import LOCAL_AWS, local_s3_client, temporary_stack
from s3_archive.model.windows import OffsetWindow

BUCKET = "tuning"
MAGIC_RUNTIME = {k.removeprefix("spark.hadoop."): v for k, v in MAGIC_COMMITTER_CONF.items()}


def apply(spark: Any, variant: str, saved: dict[str, str | None]) -> None:
    for k, v in saved.items():
        spark.conf.unset(k) if v is None else spark.conf.set(k, v)
    for part in variant.split("+"):
        if part == "magic":
            for k, v in MAGIC_RUNTIME.items():
                spark.conf.set(k, v)
        elif part.startswith("mp"):
            spark.conf.set(KAFKA_MIN_PARTITIONS_CONF, part[2:])
        elif part.startswith("blk"):
            spark.conf.set("parquet.block.size", str(int(part[3:]) << 20))
        elif part != "file":
            raise SystemExit(f"unknown variant part {part!r}; allowed: file, magic, mp<N>, blk<MB>")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("variants", nargs="+")
    args = ap.parse_args()
    with temporary_stack("s3a-tuning-", BUCKET, remove=True) as (broker, moto, root):
        moto_log = root / "moto" / "moto.log"
        kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers, timeout_s=30)
        n = wl.records_for_mb(args.mb)
        wl.create_topic(kafka, "t")
        wl.produce(kafka, "t", n)
        ends = kafka.offsets("t", "latest")
        spark = SparkResource(s3_endpoint_url=moto.endpoint_url, s3_access_key_id=LOCAL_AWS["AWS_ACCESS_KEY_ID"],
                              s3_secret_access_key=LOCAL_AWS["AWS_SECRET_ACCESS_KEY"], s3_path_style=True).session()
        sc = spark.sparkContext
        s3 = local_s3_client(moto.endpoint_url)
        calls: dict[str, int] = {}
        s3.meta.events.register("before-call.s3.*",
                                lambda event_name, **_: calls.update({event_name.split(".")[-1]:
                                                                      calls.get(event_name.split(".")[-1], 0) + 1}))
        saved = {k: spark.conf.get(k, None) for k in
                 [*MAGIC_RUNTIME, KAFKA_MIN_PARTITIONS_CONF, "parquet.block.size"]}

        def run(variant: str, tag: str, windows: list[OffsetWindow]) -> None:
            apply(spark, variant, saved)
            cfg = ArchiveConfig(name="tuning", topics=["t"], bucket=BUCKET, prefix=f"{tag}-{variant}/")
            calls.clear()
            lines0 = len(moto_log.read_text().splitlines())
            jobs0 = len(sc.statusTracker().getJobIdsForGroup(None))
            t = time.monotonic()
            with ThreadPoolExecutor(4) as pool:
                out = list(pool.map(lambda w: archive_window(spark, kafka, s3, cfg, "t", w,
                                                             logging.getLogger("tuning")), windows))
            dt = time.monotonic() - t
            requests = sum("HTTP/1.1" in ln for ln in moto_log.read_text().splitlines()[lines0:])
            boto3_calls = dict(sorted(calls.items()))
            wl.empty_prefix(s3, BUCKET, cfg.prefix)
            print(json.dumps({"run": tag, "variant": variant, "seconds": round(dt, 2), "windows": len(windows),
                              "records": sum(o.manifest.record_count for o in out),
                              "objects": sum(len(o.manifest.objects) for o in out), "s3_requests": requests,
                              "boto3_calls": boto3_calls,
                              "spark_jobs": len(sc.statusTracker().getJobIdsForGroup(None)) - jobs0}), flush=True)

        whole = [OffsetWindow(p, 0, e) for p, e in sorted(ends.items())]
        run("file", "warm-up", whole)
        for r in range(args.rounds):
            for v in args.variants:
                run(v, f"round{r}", whole)
        for v in args.variants:
            run(v, "one-record", [OffsetWindow(0, 0, 1)])
        spark.stop()


if __name__ == "__main__":
    main()
