"""A whole cluster's recovery time (the page's "Disaster recovery"): `--mb` of the workload's records over
`RECOVERY_TOPICS` topics of 4 partitions with `RECOVERY_GROUPS` consumer groups committed mid-partition, archived
in a Spark worker and captured on the bench's broker; then, on a second, empty broker, the plain restore of the same
windows (`restore_windows` per topic, into topics made beforehand) and the recovery (`Recovery`, mode recover:
topics created, windows restored with the offset map, every group's offsets translated and set), rounds
interleaved. RTO: the recovery's seconds; its ratio to the plain restore is what the map and the groups cost.

    .venv/bin/python -m bench.recovery [--mb 1000] [--rounds 1] [--json FILE]   # its own brokers and moto
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import time
from pathlib import Path
from typing import Any

from bench import workload as wl
from bench.common import SparkWorker, say
from bench.config import BUCKET, PARTITIONS
from bench.under_test import (
    ArchiveConfig,
    ArchiveSource,
    KafkaBroker,
    KafkaResource,
    Recovery,
    RecoveryOptions,
    RestoreContext,
    RestoreRequest,
    archived_windows,
    capture,
    local_s3_client,
    restore_windows,
    temporary_stack,
)

RECOVERY_TOPICS, RECOVERY_GROUPS = 10, 20
PREFIX = "dr/"
LOG = logging.getLogger("bench.recovery")


def topic_names() -> list[str]:
    return [f"dr.{i:02d}" for i in range(RECOVERY_TOPICS)]


def lost_cluster(kafka: KafkaResource, stack: dict[str, Any], root: Path, mb: float) -> ArchiveConfig:
    """The topics produced, archived (one run per topic in a warm Spark worker), the groups committed, captured."""
    per_topic = wl.records_for_mb(mb / RECOVERY_TOPICS)
    for t in topic_names():
        wl.create_topic(kafka, t)
        wl.produce(kafka, t, per_topic)
    rnd = random.Random(7)
    for g in range(RECOVERY_GROUPS):
        for t in rnd.sample(topic_names(), 3):
            kafka.set_group_offsets(f"bench-group-{g:02d}", t, {p: rnd.randrange(per_topic // PARTITIONS)
                                                               for p in range(PARTITIONS)})
    worker = SparkWorker(stack, root / "recovery-worker.log")
    try:
        for t in topic_names():
            ends = kafka.offsets(t, "latest")
            worker.call(cmd="archive", topic=t, prefix=PREFIX,
                        windows=[[w.partition, w.start, w.end] for w in wl.windows_for(ends, 100_000)])
    finally:
        worker.stop()
    cfg = ArchiveConfig(name="bench", topics=topic_names(), bucket=BUCKET, prefix=PREFIX)
    return cfg


def plain_restore(target: KafkaResource, s3: Any, cfg: ArchiveConfig, suffix: str) -> tuple[float, int]:
    """Every topic's windows restored into topics made beforehand: seconds (topics excluded), bytes."""
    for t in cfg.topics:
        wl.create_topic(target, t + suffix)
    t0, nbytes = time.monotonic(), 0
    for t in cfg.topics:
        reports = restore_windows(RestoreContext(target, s3, LOG), ArchiveSource(BUCKET, PREFIX),
                                  RestoreRequest(t, t + suffix), archived_windows(s3, BUCKET, PREFIX, t))
        nbytes += sum(r.bytes for r in reports)
    return time.monotonic() - t0, nbytes


def recover(target: KafkaResource, s3: Any, cfg: ArchiveConfig) -> tuple[float, dict[str, Any]]:
    t0 = time.monotonic()
    rep = Recovery([cfg], target, s3, LOG, RecoveryOptions(apply=True)).run()
    dt = time.monotonic() - t0
    return dt, {"created": len(rep.created), "records": rep.records_restored, "groups_set": len(rep.groups_set),
                "groups_skipped": sum(bool(g.skipped) for g in rep.groups)}


def run(mb: float, rounds: int = 1) -> dict[str, Any]:
    out: dict[str, Any] = {"mb": mb, "topics": RECOVERY_TOPICS, "groups": RECOVERY_GROUPS, "rounds": []}
    with temporary_stack("s3a-bench-dr-", BUCKET, remove=True) as (broker, moto, root):
        kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers)
        s3 = local_s3_client(moto.endpoint_url)
        stack = {"bootstrap_servers": broker.bootstrap_servers, "s3_endpoint_url": moto.endpoint_url,
                 "bucket": BUCKET}
        say(f"disaster recovery: {mb:g} MB over {RECOVERY_TOPICS} topics, {RECOVERY_GROUPS} groups (archiving)")
        t0 = time.monotonic()
        cfg = lost_cluster(kafka, stack, root, mb)
        capture(kafka, s3, cfg, int(time.time() * 1000), groups_due=True)
        out["archive_s"] = round(time.monotonic() - t0, 1)
        kafka.close()
        for i in range(rounds):
            b = KafkaBroker(root / f"kafka-b{i}")  # an empty cluster per round: the recovery creates the topics
            b.start()
            target = KafkaResource(bootstrap_servers=b.bootstrap_servers)
            try:
                plain_s, nbytes = plain_restore(target, s3, cfg, ".plain")
                rto_s, rep = recover(target, s3, cfg)
            finally:
                target.close()
                b.stop()
            row = {"plain_restore_s": round(plain_s, 2), "recovery_s": round(rto_s, 2), "bytes": nbytes,
                   "ratio": round(rto_s / plain_s, 3)} | rep
            say(f"  round {i + 1}: plain restore {plain_s:.1f}s, recovery (RTO) {rto_s:.1f}s "
                f"({rto_s / plain_s:.2f}x); {rep}")
            out["rounds"].append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=1000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    result = run(args.mb, args.rounds)
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
