"""The archive write path on its own: produce the bench workload once, archive it through the archive asset
(`dg.materialize`, commit included) per format, and print throughput, S3 requests and memory.

    .venv/bin/python -m bench.archive_window --mb 100 --formats parquet,jsonl --repeats 3
    .venv/bin/python -m bench.archive_window --mb 50 --memory 1,16      # fresh process per window size

Starts its own broker and moto server under a temporary directory and stops them at the end. Run it under
`flock /tmp/locks/heavy` so that nothing else heavy runs beside it.

S3 requests are counted from moto's request log (one line per HTTP request, whichever process sent it: the
driver's boto3, the executors' boto3, or Spark's s3a), so they include everything a run does against S3.

`archive_run(...)` is the importable way to run the write path for other benchmarks.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import dagster as dg

from bench.workload import PARTITIONS, create_topic, empty_prefix, produce, record_bytes, records_for_mb
from s3_archive.config.archive import ArchiveConfig
from s3_archive.defs.archive.assets import build_archive_asset
from s3_archive.defs.archive.partitions import window_partitions
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.s3_resource import S3Resource
from s3_archive.io.spark import SparkResource
from s3_archive.local.stack import LOCAL_AWS, local_s3_client, temporary_stack
from s3_archive.model.windows import OffsetWindow

BUCKET = "bench"
_REQUEST = re.compile(r'"(GET|PUT|POST|HEAD|DELETE) ')


def s3_resource(endpoint: str) -> S3Resource:
    return S3Resource(endpoint_url=endpoint, region_name=LOCAL_AWS["AWS_REGION"],
                      aws_access_key_id=LOCAL_AWS["AWS_ACCESS_KEY_ID"],
                      aws_secret_access_key=LOCAL_AWS["AWS_SECRET_ACCESS_KEY"], path_style=True)


def spark_resource(endpoint: str, master: str = "local[*]", **kw: Any) -> SparkResource:
    return SparkResource(master=master, s3_endpoint_url=endpoint, s3_access_key_id=LOCAL_AWS["AWS_ACCESS_KEY_ID"],
                         s3_secret_access_key=LOCAL_AWS["AWS_SECRET_ACCESS_KEY"], s3_path_style=True, **kw)


class RequestLog:
    """S3 requests moto served since the last `take()`, by method."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.pos = path.stat().st_size if path.exists() else 0

    def take(self) -> Counter:
        with open(self.path, "rb") as f:
            f.seek(self.pos)
            text = f.read().decode(errors="replace")
            self.pos = f.tell()
        return Counter(m.group(1) for m in _REQUEST.finditer(text))


def windows_of(ends: dict[int, int], per_partition: int) -> list[OffsetWindow]:
    out = []
    for p, end in sorted(ends.items()):
        step = -(-end // per_partition)
        out += [OffsetWindow(p, s, min(s + step, end)) for s in range(0, end, step)]
    return out


def mb_of(ends: dict[int, int]) -> float:
    return sum(ends.values()) * record_bytes() / 1e6


def archive_run(cfg: ArchiveConfig, topic: str, windows: list[OffsetWindow], resources: dict[str, Any]) -> dict:
    """One run of the archive asset over `windows` (a partition range, as a backfill does); per-window metadata."""
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(window_partitions(topic).name, [w.key for w in windows])
    keys = sorted(w.key for w in windows)
    tags = ({"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]}
            if len(keys) > 1 else {})
    result = dg.materialize([build_archive_asset(cfg, topic)], instance=instance, resources=resources,
                            partition_key=keys[0] if len(keys) == 1 else None, tags=tags)
    return {e.partition: {k: v.value for k, v in e.materialization.metadata.items()}
            for e in result.get_asset_materialization_events()}


class ProcessRss:
    """Peak resident set (sampled every 0.1 s) of this process's descendants, as JVM and Python workers."""

    def __init__(self) -> None:
        self.peak: dict[str, int] = {"jvm": 0, "python_workers": 0, "driver": 0}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _children(self) -> list[int]:
        out, todo = [], [os.getpid()]
        while todo:
            pid = todo.pop()
            try:
                kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            except OSError:
                continue
            out += [int(k) for k in kids]
            todo += [int(k) for k in kids]
        return out

    @staticmethod
    def _rss_kb(pid: int) -> int:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        except OSError:
            pass
        return 0

    def _run(self) -> None:
        while not self._stop.is_set():
            workers = 0
            for pid in self._children():
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    continue
                if b"java" in cmd.split(b"\0")[0]:
                    self.peak["jvm"] = max(self.peak["jvm"], self._rss_kb(pid))
                elif b"pyspark" in cmd or b"python" in cmd.split(b"\0")[0]:
                    workers += self._rss_kb(pid)
            self.peak["python_workers"] = max(self.peak["python_workers"], workers)
            self.peak["driver"] = max(self.peak["driver"], self._rss_kb(os.getpid()))
            self._stop.wait(0.1)

    def __enter__(self) -> ProcessRss:
        self._t.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._t.join()


def throughput(args: argparse.Namespace) -> None:
    with temporary_stack("s3a-bench-", BUCKET) as (broker, moto, root):
        kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers)
        n = records_for_mb(args.mb)
        mb = n * record_bytes() / 1e6
        create_topic(kafka, "bench")
        print(f"produced {n:,} records ({n * record_bytes() / 1e6:.0f} MB) in {produce(kafka, 'bench', n):.1f} s",
              flush=True)
        ends = kafka.offsets("bench", "latest")
        if args.only_partition is not None:
            ends = {args.only_partition: ends[args.only_partition]}
            mb = mb_of(ends)
        windows = windows_of(ends, args.windows_per_partition)
        res = {"kafka": kafka, "s3": s3_resource(moto.endpoint_url),
               "spark": spark_resource(moto.endpoint_url, args.master, kafka_min_partitions=args.min_partitions)}
        s3 = local_s3_client(moto.endpoint_url)
        requests = RequestLog(root / "moto" / "moto.log")
        out: dict[str, Any] = {}
        for fmt in args.formats.split(","):
            fmt, _, codec = fmt.partition(":")
            secs, reqs = [], []
            for r in range(args.repeats + 1):  # round 0 warms the JVM up and is not counted
                prefix = f"{fmt}-{codec}-{r}/"
                cfg = ArchiveConfig(name="bench", topics=["bench"], bucket=BUCKET, prefix=prefix, format=fmt,
                                    compression=codec or None, windows_per_run=500)
                requests.take()
                t = time.monotonic()
                meta = archive_run(cfg, "bench", windows, res)
                dt = time.monotonic() - t
                got = requests.take()
                assert sum(m["records"] for m in meta.values()) == sum(ends.values()), meta
                objects = sum(m["objects"] for m in meta.values())
                print(f"{fmt}{':' + codec if codec else ''} round {r}{' (warm-up)' if r == 0 else ''}: {dt:.2f} s, "
                      f"{mb / dt:.1f} MB/s, {objects} objects, S3 requests {sum(got.values())} {dict(got)}",
                      flush=True)
                if r:
                    secs.append(dt)
                    reqs.append(sum(got.values()) / len(windows))
                empty_prefix(s3, BUCKET, prefix)
            med = statistics.median(secs)
            out[fmt + (":" + codec if codec else "")] = {
                "seconds": [round(s, 2) for s in secs], "mb_per_s_median": round(mb / med, 1),
                "s3_requests_per_window": statistics.median(reqs), "objects_per_window": objects / len(windows)}
            print(f"== {fmt}: min/median/max {min(secs):.2f}/{med:.2f}/{max(secs):.2f} s -> {mb / med:.1f} MB/s; "
                  f"{statistics.median(reqs):.1f} S3 requests per window", flush=True)
        print("@@RESULT " + json.dumps({"mb": mb, "windows": len(windows), "formats": out}), flush=True)


def memory_child(args: argparse.Namespace) -> None:
    """In a fresh process: archive one window of `--records` records of partition 0; print peak RSS."""
    stack = json.loads(args.child)
    kafka = KafkaResource(bootstrap_servers=stack["bootstrap"])
    res = {"kafka": kafka, "s3": s3_resource(stack["s3"]), "spark": spark_resource(stack["s3"], args.master)}
    cfg = ArchiveConfig(name="bench", topics=["bench"], bucket=BUCKET, prefix=f"mem-{args.records}/",
                        format=args.formats.split(",")[0])
    with ProcessRss() as rss:
        t = time.monotonic()
        meta = archive_run(cfg, "bench", [OffsetWindow(0, 0, args.records)], res)
        dt = time.monotonic() - t
    [m] = meta.values()
    print("@@RESULT " + json.dumps({"records": m["records"], "seconds": round(dt, 2),
                                    **{k: v // 1024 for k, v in rss.peak.items()}}), flush=True)


def memory(args: argparse.Namespace) -> None:
    sizes = [int(s) for s in args.memory.split(",")]
    with temporary_stack("s3a-bench-", BUCKET) as (broker, moto, _):
        kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers)
        n = records_for_mb(args.mb)
        create_topic(kafka, "bench")
        produce(kafka, "bench", n)
        unit = (n // PARTITIONS) // max(sizes)
        stack = json.dumps({"bootstrap": broker.bootstrap_servers, "s3": moto.endpoint_url})
        for size in sizes:
            cmd = [sys.executable, "-m", "bench.archive_window", "--child", stack, "--records", str(unit * size),
                   "--formats", args.formats, "--master", args.master]
            out = subprocess.run(cmd, capture_output=True, text=True, check=False)
            line = [x for x in out.stdout.splitlines() if x.startswith("@@RESULT ")]
            if not line:
                print(out.stdout[-3000:], out.stderr[-3000:])
                raise SystemExit(f"memory run of {size}x failed")
            r = json.loads(line[0].removeprefix("@@RESULT "))
            print(f"{size}x window ({r['records']:,} records, {r['records'] * record_bytes() / 1e6:.0f} MB): "
                  f"{r['seconds']} s, peak RSS MB: JVM {r['jvm']}, Python workers {r['python_workers']}, "
                  f"driver {r['driver']}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=100, help="MB of keys + values + headers, over 4 partitions")
    ap.add_argument("--formats", default="parquet", help="comma-separated format[:codec]")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--windows-per-partition", type=int, default=1)
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--min-partitions", type=int, default=None, help="SparkResource.kafka_min_partitions")
    ap.add_argument("--only-partition", type=int, default=None, help="archive only this Kafka partition")
    ap.add_argument("--memory", help="window sizes (multiples of the smallest) to run in fresh processes")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--records", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        memory_child(args)
    elif args.memory:
        memory(args)
    else:
        throughput(args)


if __name__ == "__main__":
    main()
