"""The machine's limit and the baselines in parallel processes: N bare consumers, N PUT processes, N naive archivers,
N bare producers, each process a share of the work (bench/throughput.py's `shares`), all started together.

    python -m bench.parallel ROLE '{"stack": {...}, "share": ...}'   (a child; the parent is `run_parallel`)

Each child sets itself up (imports, its client and, for the PUT, a connection to moto), says READY, waits for the
parent's "go", does its share and prints its result. The figure is the parent's time from "go" to the last result:
as for the contenders in one process, the processes' start and imports are not counted, and no child reads ahead
before "go" (a consumer is assigned only then)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

from bench.baselines import Pieces
from bench.common import RESULT
from bench.config import BUCKET, ROOT

READY = "@@READY"
ROLES = ("consume", "put", "naive", "produce")


def shares(ends: dict[int, int], n: int) -> list[Pieces]:
    """The topic cut into `n` shares for `n` parallel processes: whole partitions dealt round robin, or, with more
    processes than partitions, each partition cut into equal offset ranges first (no share holds two ranges of
    one partition)."""
    parts = [p for p, end in sorted(ends.items()) if end > 0]
    k = -(-n // len(parts))  # ranges per partition
    pieces = [(p, ends[p] * c // k, ends[p] * (c + 1) // k) for c in range(k) for p in parts]
    out: list[Pieces] = [[] for _ in range(n)]
    for i, piece in enumerate(pieces):
        out[i % n].append(piece)
    for share in out:
        if len({p for p, _, _ in share}) != len(share):
            raise ValueError(f"{n} shares of {len(parts)} partitions: a share would hold two ranges of one partition")
    return out


def put_shares(total_bytes: int, object_bytes: int, k: int, prefix: str, bucket: str = BUCKET) -> list[dict[str, Any]]:
    """The bare PUT's objects (`time_bare_put`'s) dealt round robin to `k` processes."""
    sizes = [object_bytes] * (total_bytes // object_bytes) + ([total_bytes % object_bytes] if total_bytes %
                                                              object_bytes else [])
    return [{"bucket": bucket, "prefix": prefix, "indices": list(range(i, len(sizes), k)), "sizes": sizes[i::k]}
            for i in range(min(k, len(sizes)))]


def run_parallel(role: str, stack: dict[str, Any], shares: list[Any], timeout_s: float = 3600) -> dict[str, Any]:
    """`len(shares)` children of `role`, one share each; {"seconds": go → last result, "records", "objects"}."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; allowed: {', '.join(ROLES)}")
    procs = [subprocess.Popen([sys.executable, "-m", "bench.parallel", role,
                               json.dumps({"stack": stack, "share": share})], cwd=ROOT, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) for share in shares]
    try:
        for p in procs:
            _expect(p, READY, role)
        t = time.monotonic()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        outs = [json.loads(_expect(p, RESULT, role)[len(RESULT):]) for p in procs]
        secs = time.monotonic() - t
        for p in procs:
            p.wait(timeout_s)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return {"seconds": secs, "records": sum(o.get("records", 0) for o in outs),
            "objects": sum(o.get("objects", 0) for o in outs), "processes": len(procs)}


def _expect(p: subprocess.Popen, prefix: str, role: str) -> str:
    for line in p.stdout:
        if line.startswith(prefix):
            return line.strip()
    raise RuntimeError(f"a parallel {role} process exited with {p.wait()} before {prefix}")


# --------------------------------------------------------------------------------------------------------------
# the children


def _child(role: str, a: dict[str, Any]) -> dict[str, Any]:
    from bench import baselines as tp
    from bench import workload as wl
    from bench.under_test import KafkaResource, local_s3_client

    stack, share = a["stack"], a["share"]
    kafka = KafkaResource(bootstrap_servers=stack["bootstrap_servers"], timeout_s=30)
    s3 = local_s3_client(stack["s3_endpoint_url"]) if role in ("put", "naive") else None
    if s3 is not None:
        s3.head_bucket(Bucket=share["bucket"])  # the connection is open before "go", as the in-process PUT's
    producer = wl.make_producer(kafka) if role == "produce" else None
    if producer is not None:
        producer.list_topics(share["topic"], timeout=30)
    pieces = [tuple(x) for x in share.get("pieces", [])]
    print(READY, flush=True)
    if sys.stdin.readline().strip() != "go":
        raise SystemExit(2)
    if role == "consume":
        _, n = tp.time_bare_consume(kafka, share["topic"], pieces)
        return {"records": n}
    if role == "put":
        blob = os.urandom(max(share["sizes"]))
        for i, size in zip(share["indices"], share["sizes"]):
            s3.put_object(Bucket=share["bucket"], Key=f"{share['prefix']}part-{i:05d}.bin", Body=blob[:size])
        return {"objects": len(share["sizes"])}
    if role == "naive":
        _, n, objects = tp.time_naive_archive(kafka, s3, share["bucket"], share["prefix"], share["topic"],
                                              share["batch_records"], pieces)
        return {"records": n, "objects": objects}
    wl.produce(kafka, share["topic"], share["count"], pieces, producer)
    return {"records": sum(hi - lo for _, lo, hi in pieces)}


if __name__ == "__main__":
    out = _child(sys.argv[1], json.loads(sys.argv[2]))
    print(RESULT + json.dumps(out), flush=True)
