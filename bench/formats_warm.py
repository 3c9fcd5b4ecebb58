"""`make bench`'s per-format section alone: the workload once, then each format archived by one warm Spark worker
(`bench.worker`, jvm_profile long, as bench/run.py runs it), with the worker's log kept and its memory sampled.

    .venv/bin/python -m bench.formats_warm --mb 1000 --formats parquet,avro,jsonl --out /tmp/formats-warm

Writes into `--out`: `spark-worker.log` (the worker's stderr: the JVM's log included), `memory.tsv` (every 0.5 s:
the JVM's resident set, its heap as `jstat -gc` reports it, the Python workers' resident set) and one
`histo-<format>-<n>.txt` per `--histo-every` seconds (`jcmd GC.class_histogram`: what fills the heap). Starts its
own broker and moto server; run it under `flock /tmp/locks/heavy`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from bench import workload as wl
from bench.procstat import descendants, snapshot
from bench.run import BUCKET, TOPIC, SparkWorker, windows_for
from bench.worker import status_kb
from s3_archive.io import paths
from s3_archive.io.jvm import driver_java_options
from s3_archive.io.kafka import KafkaResource
from s3_archive.local.stack import local_s3_client, temporary_stack


def is_java(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].endswith(b"java")
    except OSError:
        return False


class Sampler:
    """Every 0.5 s: the worker's JVM resident set and heap (jstat), and its Python workers' summed resident set."""

    def __init__(self, worker_pid: int, out: Path, histo_every: float) -> None:
        self.worker_pid, self.out, self.histo_every = worker_pid, out, histo_every
        self.label = "start"
        self.peaks: dict[str, dict[str, float]] = {}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _heap_mb(self, jvm: int) -> tuple[float, float]:
        """(used, committed) heap MB from `jstat -gc` (young + old)."""
        try:
            out = subprocess.run(["jstat", "-gc", str(jvm)], capture_output=True, text=True, timeout=5).stdout
            head, vals = out.split("\n")[:2]
            f = dict(zip(head.split(), (float(v) for v in vals.split()), strict=False))
            used = f["S0U"] + f["S1U"] + f["EU"] + f["OU"]
            committed = f["S0C"] + f["S1C"] + f["EC"] + f["OC"]
            return used / 1024, committed / 1024
        except (OSError, ValueError, KeyError, subprocess.TimeoutExpired):
            return 0.0, 0.0

    def _run(self) -> None:
        last_histo = 0.0
        n = 0
        with (self.out / "memory.tsv").open("w") as f:
            f.write("t\tphase\tjvm_rss_mb\theap_used_mb\theap_committed_mb\tpy_workers_rss_mb\tpy_workers\n")
            t0 = time.monotonic()
            while not self._stop.is_set():
                # every process below the worker, by parent pid: the JVM forks PySpark's daemon from a thread other
                # than its main one, so /proc/<pid>/task/<pid>/children would not list it
                kids = sorted(descendants(snapshot().procs, self.worker_pid) - {self.worker_pid})
                jvm = next((k for k in kids if is_java(k)), None)
                workers = [k for k in kids if not is_java(k)]
                rss = status_kb(jvm, "VmRSS") / 1024 if jvm else 0.0
                used, committed = self._heap_mb(jvm) if jvm else (0.0, 0.0)
                py = sum(status_kb(k, "VmRSS") for k in workers) / 1024
                f.write(f"{time.monotonic() - t0:.1f}\t{self.label}\t{rss:.0f}\t{used:.0f}\t{committed:.0f}\t"
                        f"{py:.0f}\t{len(workers)}\n")
                f.flush()
                p = self.peaks.setdefault(self.label, {"jvm_rss_mb": 0, "heap_used_mb": 0, "py_workers_mb": 0})
                p["jvm_rss_mb"] = max(p["jvm_rss_mb"], rss)
                p["heap_used_mb"] = max(p["heap_used_mb"], used)
                p["py_workers_mb"] = max(p["py_workers_mb"], py)
                if jvm and self.histo_every and time.monotonic() - last_histo >= self.histo_every:
                    last_histo = time.monotonic()
                    n += 1
                    histo = subprocess.run(["jcmd", str(jvm), "GC.class_histogram"], capture_output=True,
                                           text=True, timeout=60).stdout
                    (self.out / f"histo-{self.label}-{n:03d}.txt").write_text("\n".join(histo.splitlines()[:40]))
                self._stop.wait(0.5)

    def __enter__(self) -> Sampler:
        self._t.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._t.join()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=1000)
    ap.add_argument("--formats", default="parquet,avro,jsonl")
    ap.add_argument("--window-records", type=int, default=100_000)
    ap.add_argument("--histo-every", type=float, default=0, help="seconds between class histograms; 0: none")
    ap.add_argument("--spark-conf", default="{}", help="JSON: extra Spark settings of the worker's session")
    ap.add_argument("--gc-log", action="store_true", help="the JVM's GC log (-Xlog:gc) into --out")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    conf = json.loads(args.spark_conf)
    if args.gc_log:
        opts = driver_java_options("long", [str(p) for p in paths.spark_jars()])
        conf["spark.driver.extraJavaOptions"] = f"{opts} -Xlog:gc*:file={args.out.resolve()}/gc.log".strip()
    with temporary_stack("s3a-formats-", BUCKET, remove=True) as (broker, moto, root):
        kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers, timeout_s=30)
        s3 = local_s3_client(moto.endpoint_url)
        n = wl.records_for_mb(args.mb)
        wl.create_topic(kafka, TOPIC)
        print(f"produced {n:,} records in {wl.produce(kafka, TOPIC, n):.1f}s", flush=True)
        ends = kafka.offsets(TOPIC, "latest")
        wlist = [[w.partition, w.start, w.end] for w in windows_for(ends, min(args.window_records, n // 4))]
        stack = {"bootstrap_servers": broker.bootstrap_servers, "s3_endpoint_url": moto.endpoint_url,
                 "bucket": BUCKET, "jvm_profile": "long", "spark_conf": conf}
        log = root / "spark-worker.log"
        worker = SparkWorker(stack, log)
        try:
            with Sampler(worker.proc.pid, args.out, args.histo_every) as sampler:
                sampler.label = "warmup"
                worker.call(cmd="archive", topic=TOPIC, prefix="warmup/", windows=[[0, 0, 10_000]])
                for fmt in args.formats.split(","):
                    sampler.label = fmt
                    t = time.monotonic()
                    try:
                        out = worker.call(cmd="format", topic=TOPIC, prefix=f"fmt-{fmt}/", windows=wlist,
                                          format=fmt)
                        print(f"{fmt}: {out['seconds']:.2f}s, {out['objects']} objects, "
                              f"{out['bytes_written'] / 1e6:.1f} MB; peaks {sampler.peaks.get(fmt)}", flush=True)
                    except Exception as e:  # noqa: BLE001 (reported, then the next format)
                        print(f"{fmt} FAILED after {time.monotonic() - t:.1f}s: {str(e)[:300]}; peaks "
                              f"{sampler.peaks.get(fmt)}", flush=True)
                    wl.empty_prefix(s3, BUCKET, f"fmt-{fmt}/")
        finally:
            worker.stop()
            shutil.copy(log, args.out / "spark-worker.log")
            print(f"worker exit code {worker.proc.returncode}; log and memory in {args.out}", flush=True)


if __name__ == "__main__":
    main()
