"""Restore A/B: two source trees' `restore_windows` against a bare produce, interleaved, on one stack.

    PYTHONPATH=. .venv/bin/python -m bench.restore_ab --trees /path/a,/path/b --mb 200 --rounds 3

The make-bench shape (what `bench.run` restores): the workload's records (bench/workload.py: 4 partitions,
~500-byte JSON values, a key, two headers), archived as one Parquet window per partition (written here with
pyarrow in the archive's columns, so no Spark is needed), restored into a new 4-partition topic. Each round: a
bare produce of the same records (the restore's producer settings, in this process), then each tree's restore in
a fresh process with that tree first on PYTHONPATH (the tree order alternates per round). Figures: seconds, CPU
seconds of the restore process, the broker and moto, and the ratio restore / bare produce of each round.
`--py-spy DIR`: one more, uncounted, round per tree under `py-spy record` (raw collapsed stacks of every thread, once with
`--idle`, once with `--gil`).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench import workload as wl
from s3_archive.io.kafka import KafkaResource
from s3_archive.keys.objects import manifest_key, object_key
from s3_archive.local.stack import LOCAL_AWS, local_s3_client, temporary_stack
from s3_archive.model.manifest import MANIFEST_VERSION, Manifest, ManifestObject
from s3_archive.model.windows import OffsetWindow

TOPIC = "bench.ab"
BUCKET = "bench"
BASE_TS = (int(time.time()) - 3600) * 1000  # recent: the target's time retention must not delete them

_RESTORE = """
import json, logging, os, resource, sys, time
import boto3
from s3_archive.io.kafka import KafkaResource
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.request import RestoreRequest
from s3_archive.restore.run import restore_windows

a = json.loads(sys.argv[1])
if a.get("lanes"):  # a variant of a tree with lanes: fewer lanes side by side
    import s3_archive.restore.run as run_module
    run_module.LANES = a["lanes"]
s3 = boto3.client("s3", endpoint_url=a["endpoint"], **a["aws"])
kafka = KafkaResource(bootstrap_servers=a["bootstrap"], timeout_s=30)
windows = [OffsetWindow.parse(k) for k in a["windows"]]
r0 = resource.getrusage(resource.RUSAGE_SELF)
t = time.monotonic()
reps = list(restore_windows(kafka, s3, a["bucket"], a["prefix"], RestoreRequest(a["source"], a["target"]), windows,
                            logging.getLogger("bench.restore")))
dt = time.monotonic() - t
r1 = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"seconds": dt, "cpu_s": r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime,
                  "records": sum(r.restored for r in reps), "transactions": sum(r.transactions for r in reps)}))
"""


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def write_archive(s3: Any, prefix: str, n: int) -> list[OffsetWindow]:
    """The workload's `n` records as one Parquet window per partition, with committed manifests."""
    rows: dict[int, list] = {p: [] for p in range(wl.PARTITIONS)}
    for i, (p, k, v, h) in enumerate(wl.records(n)):
        rows[p].append((k, v, h, BASE_TS + i))
    header_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    windows = []
    for p, recs in rows.items():
        w = OffsetWindow(p, 0, len(recs))
        table = pa.table({
            "key": pa.array([r[0] for r in recs], pa.binary()),
            "value": pa.array([r[1] for r in recs], pa.binary()),
            "headers": pa.array([[{"key": a, "value": b} for a, b in r[2]] for r in recs], header_type),
            "topic": pa.array([TOPIC] * len(recs)),
            "partition": pa.array([p] * len(recs), pa.int32()),
            "offset": pa.array(range(len(recs)), pa.int64()),
            "timestamp": pa.array([r[3] * 1000 for r in recs], pa.timestamp("us")),
            "timestamp_type": pa.array([0] * len(recs), pa.int32()),
        })
        buf = io.BytesIO()
        pq.write_table(table, buf, compression="snappy")
        key = object_key(prefix, TOPIC, w, 0, ".parquet")
        etag = s3.put_object(Bucket=BUCKET, Key=key, Body=buf.getvalue())["ETag"].strip('"')
        obj = ManifestObject(key=key, size=buf.tell(), etag=etag)
        ts = [r[3] for r in recs]
        manifest = Manifest(
            manifest_version=MANIFEST_VERSION, writer="bench/restore_ab.py", topic=TOPIC, partition=p,
            start_offset=w.start, end_offset=w.end, window_key=w.key, format="parquet", compression="snappy",
            record_count=len(recs), bytes_read=len(recs) * wl.record_bytes(), bytes_written=obj.size,
            first_offset=w.start, last_offset=w.end - 1, min_timestamp_ms=min(ts), max_timestamp_ms=max(ts),
            min_timestamp=None, max_timestamp=None, absent_offsets=[], absent_offsets_truncated=False,
            absent_offset_count=0, lost_offsets=[], spark_schema="{}", attempt="bench",
            committed_at="2023-11-14T22:13:20+00:00", objects=[obj])
        s3.put_object(Bucket=BUCKET, Key=manifest_key(prefix, TOPIC, w), Body=manifest.dumps())
        windows.append(w)
    return windows


def restore_in(tree: str, args: dict[str, Any], py_spy: Path | None = None, spy_flag: str = "--idle",
               ) -> dict[str, Any]:
    tree, _, lanes = tree.partition(":")
    cmd = [sys.executable, "-c", _RESTORE, json.dumps(args | ({"lanes": int(lanes)} if lanes else {}))]
    if py_spy is not None:
        cmd = [str(Path(sys.executable).parent / "py-spy"), "record", "--threads", spy_flag, "--format", "raw",
               "-r", "200", "--nonblocking", "-o", str(py_spy), "--", *cmd]
    env = {**os.environ, "PYTHONPATH": tree}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, cwd=tree)
    if proc.returncode:
        raise RuntimeError(f"restore in {tree} failed: {proc.stderr[-3000:]}")
    return json.loads([line for line in proc.stdout.splitlines() if line.startswith("{")][-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trees", required=True, help="comma-separated source trees (A,B,...); TREE:N runs TREE with "
                                                   "at most N lanes (trees that have lanes)")
    ap.add_argument("--mb", type=float, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--py-spy", type=Path, help="also profile one uncounted restore per tree into this directory")
    a = ap.parse_args()
    trees = [str(Path(t.partition(":")[0]).resolve()) + t.partition(":")[1] + t.partition(":")[2]
             for t in a.trees.split(",")]
    n = wl.records_for_mb(a.mb)
    with temporary_stack("s3a-restore-ab-", BUCKET, remove=True) as (broker, moto, _):
        kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers, timeout_s=30)
        s3 = local_s3_client(moto.endpoint_url)
        prefix = f"ab-{uuid.uuid4().hex[:8]}/"
        windows = write_archive(s3, prefix, n)
        aws = {"region_name": LOCAL_AWS["AWS_REGION"], "aws_access_key_id": LOCAL_AWS["AWS_ACCESS_KEY_ID"],
               "aws_secret_access_key": LOCAL_AWS["AWS_SECRET_ACCESS_KEY"]}
        base = {"endpoint": moto.endpoint_url, "aws": aws, "bootstrap": broker.bootstrap_servers, "bucket": BUCKET,
                "prefix": prefix, "source": TOPIC, "windows": [w.key for w in windows]}
        pids = {"broker": broker.proc.pid, "moto": moto.proc.pid}
        out: dict[str, Any] = {"records": n, "mb": a.mb, "trees": trees, "rounds": []}
        print(f"{n:,} records, {len(windows)} windows; trees {trees}", flush=True)
        if a.py_spy is not None:
            a.py_spy.mkdir(parents=True, exist_ok=True)
            for i, tree in enumerate(trees):
                for flag in ("--idle", "--gil"):  # every thread's wall time; who holds the GIL
                    target = f"ab-spy-{i}-{uuid.uuid4().hex[:6]}"
                    wl.create_topic(kafka, target)
                    res = restore_in(tree, base | {"target": target}, a.py_spy / f"tree{i}{flag[1:]}.txt", flag)
                    wl.delete_topic(kafka, target)
                    print(f"py-spy {flag} tree {i}: {res}", flush=True)
        for r in range(a.rounds):
            row: dict[str, Any] = {}
            target = f"ab-bare-{r}-{uuid.uuid4().hex[:6]}"
            wl.create_topic(kafka, target)
            cpu0 = {k: _cpu_s(p) for k, p in pids.items()}
            row["bare"] = {"seconds": wl.produce(kafka, target, n)} | {
                f"{k}_cpu_s": round(_cpu_s(p) - cpu0[k], 2) for k, p in pids.items()}
            wl.delete_topic(kafka, target)
            order = list(enumerate(trees)) if r % 2 == 0 else list(reversed(list(enumerate(trees))))
            for i, tree in order:
                target = f"ab-restore-{r}-{i}-{uuid.uuid4().hex[:6]}"
                wl.create_topic(kafka, target)
                cpu0 = {k: _cpu_s(p) for k, p in pids.items()}
                res = restore_in(tree, base | {"target": target})
                res |= {f"{k}_cpu_s": round(_cpu_s(p) - cpu0[k], 2) for k, p in pids.items()}
                assert res["records"] == n, res
                ends = kafka.offsets(target, "latest")
                assert sum(ends.values()) >= n, ends
                wl.delete_topic(kafka, target)
                res["ratio"] = round(row["bare"]["seconds"] / res["seconds"], 3)
                row[f"tree{i}"] = res
            out["rounds"].append(row)
            print(f"round {r + 1}: " + json.dumps(row), flush=True)
            time.sleep(1)
        summary = {}
        for i, tree in enumerate(trees):
            ratios = sorted(row[f"tree{i}"]["ratio"] for row in out["rounds"])
            secs = sorted(row[f"tree{i}"]["seconds"] for row in out["rounds"])
            summary[f"tree{i}"] = {"tree": tree, "ratio_min_median_max": [ratios[0], statistics.median(ratios),
                                                                          ratios[-1]],
                                   "seconds_min_median_max": [round(secs[0], 3), round(statistics.median(secs), 3),
                                                              round(secs[-1], 3)],
                                   "records_per_s_median": round(n / statistics.median(secs))}
        bare = sorted(row["bare"]["seconds"] for row in out["rounds"])
        summary["bare_seconds_min_median_max"] = [round(bare[0], 3), round(statistics.median(bare), 3),
                                                  round(bare[-1], 3)]
        out["summary"] = summary
        print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
