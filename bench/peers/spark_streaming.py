"""Peer: Spark Structured Streaming ("just write a streaming job"), Kafka → Parquet on s3a:// with its checkpoint on
s3a://, `trigger(availableNow=True)` over the whole topic in 4 micro-batches, in the benchmark's warm Spark worker
(the query itself is bench/worker.py's `streaming` command). Each batch is a commit: it commits when it ends, at
its start plus its duration."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from bench.peers.common import PeerResult, steady_rate


def run(worker: Any, *, topic: str, records: int, tag: str) -> PeerResult:
    """Archive the whole `topic` (`records` records) with a streaming query of the warm `worker` (a
    bench.common.SparkWorker) into s3://bucket/streaming-<tag>/."""
    out = worker.call(cmd="streaming", topic=topic, prefix=f"streaming-{tag}/")
    if out["records"] != records:
        raise RuntimeError(f"the streaming query wrote {out['records']} rows, expected {records}")
    # a batch commits when it ends: its start (`at`) plus its duration; times from the first start
    commits, acc = [], 0
    starts = [datetime.fromisoformat(b["at"].replace("Z", "+00:00")).timestamp() for b in out["batches"]]
    for b, start in zip(out["batches"], starts):
        acc += b["rows"]
        commits.append((start - starts[0] + b["ms"] / 1000, acc))
    return PeerResult(records=out["records"], visible_s=out["seconds"], commits=commits,
                      steady_records_per_s=steady_rate(commits), extra={"batches": len(out["batches"])})
