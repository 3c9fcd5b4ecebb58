"""The reliability matrix: N seeded archive+restore rounds through the S3 fault proxy (s3_archive/local/fault_proxy.py)
on a temporary stack of its own, each checked for lost and duplicated records, stray objects and open uploads
(s3_archive_tests/reliability.py, the same round as the `reliability` tests). Writes bench/results/reliability.json
(every round) and prints the summary, which docs/reliability.md quotes.

    flock /tmp/locks/heavy python -m bench.reliability --runs 100 --minutes 10
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections import Counter
from pathlib import Path

from bench.common import machine
from bench.config import RELIABILITY_BUCKET as BUCKET
from bench.config import RELIABILITY_MINUTES, RELIABILITY_RUNS, RELIABILITY_SHARE, RESULTS
from bench.under_test import LOCAL_AWS, FaultProxy, KafkaResource, SparkResource, local_s3_client, temporary_stack
from s3_archive_tests.reliability import fault_round


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=RELIABILITY_RUNS)
    p.add_argument("--minutes", type=float, default=RELIABILITY_MINUTES, help="start no new round after this long")
    p.add_argument("--share", type=float, default=RELIABILITY_SHARE,
                   help="share of S3 requests faulted (mixed kinds)")
    p.add_argument("--seed", type=int, default=1, help="the first round's seed (round i: seed + i)")
    p.add_argument("--out", type=Path, default=RESULTS / "reliability.json", help="the JSON of every round")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    host = machine()
    rounds: list[dict] = []
    t0 = time.monotonic()
    with temporary_stack("reliability-", BUCKET, broker_heap="512m", remove=True) as (broker, moto, root):
        proxy = FaultProxy(root / "fault-proxy", moto.endpoint_url)
        proxy.start()
        spark = SparkResource(master="local[2]", s3_endpoint_url=proxy.endpoint_url,
                              s3_access_key_id=LOCAL_AWS["AWS_ACCESS_KEY_ID"],
                              s3_secret_access_key=LOCAL_AWS["AWS_SECRET_ACCESS_KEY"], s3_path_style=True).session()
        try:
            kafka, direct = KafkaResource(bootstrap_servers=broker.bootstrap_servers), local_s3_client(moto.endpoint_url)
            for i in range(args.runs):
                if time.monotonic() - t0 > args.minutes * 60:
                    break
                r = fault_round(spark, kafka, direct, proxy, BUCKET, seed=args.seed + i, share=args.share,
                                partitions=2, windows_per_partition=2, records=40,
                                fmt=("parquet", "jsonl", "avro")[i % 3])
                rounds.append(r)
                print(json.dumps({k: r[k] for k in ("seed", "seconds", "requests", "faults", "lost", "duplicated",
                                                    "archive_runs", "restore_runs")}), flush=True)
        finally:
            spark.stop()
            proxy.stop()
    faults: Counter = Counter()
    for r in rounds:
        faults.update(r["faults"])
    summary = {
        "rounds": len(rounds), "share": args.share, "seconds": round(time.monotonic() - t0, 1),
        "requests": sum(r["requests"] for r in rounds), "faults": dict(faults),
        "archive_runs": sum(r["archive_runs"] for r in rounds), "restore_runs": sum(r["restore_runs"] for r in rounds),
        "windows": sum(r["windows"] for r in rounds), "records": sum(r["records"] for r in rounds),
        "lost": sum(r["lost"] for r in rounds), "duplicated": sum(r["duplicated"] for r in rounds),
        "not_byte_exact": sum(not r["byte_exact"] for r in rounds),
        "stray_objects": sum(len(r["stray_objects"]) for r in rounds),
        "open_uploads": sum(r["open_uploads"] for r in rounds),
        "uncommitted_windows": sum(r["uncommitted_windows"] for r in rounds),
        "machine": host,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"summary": summary, "rounds": rounds}, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
