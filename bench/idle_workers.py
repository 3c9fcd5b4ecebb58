"""Archives after Spark has stopped its idle Python workers, per source tree (issue #14, wave 7).

Spark's `PythonWorkerFactory` stops every pooled Python worker after one minute without a task (hard-coded), so
a run that comes minutes after the last one, as a sensor's runs and `make bench`'s rounds do (its peers run for
minutes between two archives), forks new workers from the daemon. This measures make bench's archive (the
workload of `--mb` in 4 partitions, one window per partition, parquet) in each round twice per arm: after
`--idle` seconds without a task ("idle") and right after that ("warm"). Arms as in bench/cpu_accounting.py
(`NAME=TREE[,KEY=VALUE...]`, a warm worker each, warmed up by one whole archive); their order alternates by round.

    flock /tmp/locks/heavy .venv/bin/python -m bench.idle_workers --rounds 4 --arm base=/tmp/old --arm new=.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bench import workload as wl
from bench.cpu_accounting import Arm
from bench.run import BUCKET, TOPIC, windows_for
from bench.stats import Summary
from s3_archive.io.kafka import KafkaResource
from s3_archive.local.stack import local_s3_client, temporary_stack


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=200)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--idle", type=float, default=70, help="seconds without a task before each round (> 60)")
    ap.add_argument("--arm", action="append", required=True, help="NAME=TREE[,KEY=VALUE...]")
    args = ap.parse_args()
    logs = Path(tempfile.mkdtemp(prefix="idle-workers-"))
    with temporary_stack("s3a-idle-", BUCKET, remove=True) as (broker, moto, _root):
        stack = {"bootstrap_servers": broker.bootstrap_servers, "s3_endpoint_url": moto.endpoint_url,
                 "bucket": BUCKET, "remote": None}
        kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers, timeout_s=30)
        s3 = local_s3_client(moto.endpoint_url)
        n = wl.records_for_mb(args.mb)
        wl.create_topic(kafka, TOPIC)
        wl.produce(kafka, TOPIC, n)
        per = n // wl.PARTITIONS
        wlist = [[w.partition, w.start, w.end] for w in windows_for(kafka.offsets(TOPIC, "latest"),
                                                                   min(100_000, per))]
        arms = [Arm(spec, stack, logs / f"{spec.partition('=')[0]}.log") for spec in args.arm]
        try:
            for a in arms:
                a.archive(wlist, "warm-up/")
                wl.empty_prefix(s3, BUCKET, "warm-up/")
            seconds: dict[tuple[str, str], list[float]] = {}
            k = 0
            for r in range(args.rounds):
                time.sleep(args.idle)
                for kind in ("idle", "warm"):
                    for a in arms if r % 2 == 0 else arms[::-1]:
                        out = a.archive(wlist, f"x{k}/")
                        wl.empty_prefix(s3, BUCKET, f"x{k}/")
                        k += 1
                        seconds.setdefault((a.name, kind), []).append(out["seconds"])
                        print(f"round {r + 1} {kind:4s} {a.name}: {out['seconds']:.2f} s (Spark job "
                              f"{out['stage_s']:.2f} s)", flush=True)
            for (name, kind), v in seconds.items():
                print(f"{name} {kind}: {Summary.of(v).fmt()} s (min / median / max)")
        finally:
            for a in arms:
                a.stop()
    print(f"worker logs: {logs}")


if __name__ == "__main__":
    main()
