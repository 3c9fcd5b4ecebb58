"""`make bench`: every benchmark of issues #8, #14 and #16 in one command; writes the page docs/benchmarks.md and its
figures as JSON in bench/results/ (benchmarks.json, and benchmarks-<size>mb.json per size).

    .venv/bin/python -m bench.run [--mb 200] [--repeats 3] [--out DIR] [--peers connect_iceberg,flink,spark_streaming]

Starts its own Kafka broker and moto server (s3_archive.local) under a temporary directory, produces the workload
once, runs the contenders in interleaved rounds (the limits, the naive consumer, Spark's own read, s3-archive,
restore, bare produce, and the peers: Kafka Connect + Iceberg sink, Flink SQL, Spark Structured Streaming), then the
one-off figures (per format, run overhead per JVM flag, memory, catch-up, a whole-workload run in a fresh process,
the years-of-windows figures of `bench/windows_*.py`), and stops everything it started. Progress goes to stdout.
Run it under `flock /tmp/locks/heavy` on a shared machine: the page says whether it held the lock.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import traceback
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import windows_scale
from bench import workload as wl
from bench.machine import _read, machine, other_work
from bench.oneoff import catchup_topic, sensor_tick
from bench.peers import connect_iceberg, flink
from bench.peers.common import PeerResult, steady_rate
from bench.report import BYTES_FORMAT_RECORDS, report
from bench.restore_bench import restore_throughput
from bench.stats import Measure, Summary, build_json, render_markdown, slower_of
from bench.worker import RESULT
from s3_archive.io.kafka import KafkaResource
from s3_archive.local.stack import local_s3_client, temporary_stack
from s3_archive.model.formats import FORMATS
from s3_archive.model.windows import OffsetWindow

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"  # the JSON
PAGE = ROOT / "docs" / "benchmarks.md"
BUCKET = "bench"
TOPIC = "bench"
T0 = time.monotonic()
PEERS = ("connect_iceberg", "flink", "spark_streaming")
# Run-overhead variants: the driver's JVM flags, one step at a time (s3_archive/io/jvm.py).
JVM_VARIANTS = {
    "tiered JIT, no AppCDS (before)": {"jvm_profile": "long", "cds": False},
    "C1 only + serial GC": {"jvm_profile": "short", "cds": False},
    "tiered JIT + AppCDS": {"jvm_profile": "long", "cds": True},
    "C1 only + serial GC + AppCDS (default)": {"jvm_profile": "short", "cds": True},
}


def say(msg: str) -> None:
    print(f"[bench {time.monotonic() - T0:7.1f}s] {msg}", flush=True)


# --------------------------------------------------------------------------------------------------------------
# the Spark worker


LOG_TAIL_LINES = 40


def keep_log(log: Path, kept: Path | None) -> None:
    """A worker's log (its stderr: the JVM's log included) copied to `kept` and its tail printed, so that a failure
    stays readable after the run's temporary directory is removed."""
    if kept is None:
        return
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(log, kept)
        tail = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
    except OSError as e:
        say(f"could not keep the worker's log {log}: {e}")
        return
    say(f"the worker's log is kept at {kept}; its last {len(tail)} lines:\n" + "\n".join(tail))


class SparkWorker:
    """A long-lived `bench.worker` process: its Spark session stays warm between rounds. `kept_log`: where its log
    is copied when a command fails or it exits (None: not kept)."""

    def __init__(self, stack: dict[str, Any], log: Path, kept_log: Path | None = None) -> None:
        self.log_path, self.kept_log = log, kept_log
        self.log = log.open("ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.worker", json.dumps(stack)], cwd=ROOT,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True)

    def call(self, **cmd: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps(cmd) + "\n")
            self.proc.stdin.flush()
            for line in self.proc.stdout:
                if line.startswith(RESULT):
                    return _checked(json.loads(line[len(RESULT):]), cmd)
            raise RuntimeError(f"the Spark worker exited during {cmd['cmd']} (see {self.kept_log or self.log.name})")
        except Exception:
            self.log.flush()
            keep_log(self.log_path, self.kept_log)
            raise

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"cmd": "stop"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(120)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def _checked(out: dict[str, Any], cmd: dict[str, Any]) -> dict[str, Any]:
    if not out.get("ok"):
        raise RuntimeError(f"worker command {cmd['cmd']} failed: {out.get('error')}\n{out.get('traceback', '')}")
    return out


def once(stack: dict[str, Any], log: Path, kept_log: Path | None = None, **cmd: Any) -> dict[str, Any]:
    """One command in a fresh worker process; adds the process's wall time (Python start to exit). On a failure
    the log is copied to `kept_log` (see keep_log)."""
    t = time.monotonic()
    with log.open("ab") as err:
        p = subprocess.run([sys.executable, "-m", "bench.worker", json.dumps(stack), "--once", json.dumps(cmd)],
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True, timeout=3600)
    wall = time.monotonic() - t
    try:
        for line in p.stdout.splitlines():
            if line.startswith(RESULT):
                return _checked(json.loads(line[len(RESULT):]), cmd) | {"process_s": wall}
        raise RuntimeError(f"the Spark worker for {cmd['cmd']} exited with {p.returncode} and no result (see "
                           f"{kept_log or log})")
    except Exception:
        keep_log(log, kept_log)
        raise


def moto_requests(log: Path) -> int:
    """HTTP requests moto has logged so far (one line each)."""
    try:
        return sum("HTTP/1.1" in ln for ln in log.read_text(errors="replace").splitlines())
    except OSError:
        return 0


# --------------------------------------------------------------------------------------------------------------
# the peers


class Peers:
    """Runs each selected peer once per round; a peer that fails is reported with its error and not run again."""

    def __init__(self, names: list[str], ctx: dict[str, Any]) -> None:
        self.names = names
        self.ctx = ctx
        self.results: dict[str, list[PeerResult]] = {n: [] for n in names}
        self.failed: dict[str, str] = {}

    def run_round(self, r: int, worker: SparkWorker) -> None:
        c = self.ctx
        for name in self.names:
            if name in self.failed:
                continue
            tag = f"r{r}"
            try:
                if name == "spark_streaming":
                    out = worker.call(cmd="streaming", topic=TOPIC, prefix=f"streaming-{tag}/")
                    if out["records"] != c["records"]:
                        raise RuntimeError(f"the streaming query wrote {out['records']} rows, expected "
                                           f"{c['records']}")
                    # a batch commits when it ends: its start (`at`) plus its duration; times from the first start
                    commits, acc = [], 0
                    starts = [datetime.fromisoformat(b["at"].replace("Z", "+00:00")).timestamp()
                              for b in out["batches"]]
                    for b, start in zip(out["batches"], starts):
                        acc += b["rows"]
                        commits.append((start - starts[0] + b["ms"] / 1000, acc))
                    res = PeerResult(records=out["records"], visible_s=out["seconds"], commits=commits,
                                     steady_records_per_s=steady_rate(commits),
                                     extra={"batches": len(out["batches"])})
                else:
                    mod = {"connect_iceberg": connect_iceberg, "flink": flink}[name]
                    res = mod.run(bootstrap_servers=c["bootstrap_servers"], s3_endpoint_url=c["s3_endpoint_url"],
                                  s3=c["s3"], bucket=BUCKET, topic=TOPIC, records=c["records"],
                                  workdir=c["workdir"] / name, tag=tag)
                self.results[name].append(res)
                steady = (f"{res.steady_records_per_s:,.0f} rec/s steady"
                          if res.steady_records_per_s else "steady rate: fewer than two commits")
                say(f"  peer {name}: every record visible after {res.visible_s:.1f}s; {steady}; "
                    f"{len(res.commits)} commits")
            except Exception as e:  # reported on the page with its error, never replaced by a guess
                self.failed[name] = f"{type(e).__name__}: {e}"
                say(f"  peer {name} FAILED (not run again): {self.failed[name][:2000]}")
                c["workdir"].mkdir(parents=True, exist_ok=True)
                (c["workdir"] / f"{name}-error.txt").write_text(traceback.format_exc())
            finally:
                if name != "spark_streaming":
                    wl.empty_prefix(c["s3"], BUCKET, f"{'iceberg' if name == 'connect_iceberg' else name}-{tag}/")
                else:
                    wl.empty_prefix(c["s3"], BUCKET, f"streaming-{tag}/")


# --------------------------------------------------------------------------------------------------------------
# the run


def windows_for(ends: dict[int, int], window_records: int) -> list[OffsetWindow]:
    return [OffsetWindow(p, s, min(s + window_records, end)) for p, end in sorted(ends.items())
            for s in range(0, end, window_records)]


def years_of_windows(args: argparse.Namespace) -> dict[str, Any]:
    """Issue #16's figures: bench/windows_scale.py (its own broker, moto and PostgreSQL) with `--windows`."""
    if args.skip_windows or not args.windows:
        return {"skipped": "--skip-windows" if args.skip_windows else "--windows 0"}
    say(f"years of windows: {args.windows:,} windows in a Postgres instance (bench/windows_scale.py)")
    try:
        return {"figures": windows_scale.run(args.windows, keep=args.keep)}
    except Exception as e:  # shown on the page; the rest of the benchmark stands
        say(f"years of windows FAILED: {type(e).__name__}: {str(e)[:1000]}")
        return {"error": f"{type(e).__name__}: {e}"}


def run(args: argparse.Namespace) -> dict[str, Any]:
    started = datetime.now(UTC).isoformat(timespec="seconds")
    mach = machine()
    say(f"machine: {mach['cpu']}, nproc {mach['nproc']}, load {mach['load_start']}; {mach['other_work']}; "
        f"{mach['heavy_lock']}")
    worker: SparkWorker | None = None
    x: dict[str, Any] = {"started": started, "machine": mach}
    with ExitStack() as cleanup:
        broker, moto, root = cleanup.enter_context(temporary_stack("s3a-bench-", BUCKET, remove=not args.keep))
        cleanup.callback(lambda: worker.stop() if worker is not None else None)  # before the stack stops
        logs = root / "logs"
        logs.mkdir()
        kept = args.json_dir / f"failed-logs-{args.mb:g}mb"  # a failed worker's log is copied there (keep_log)
        moto_log = root / "moto" / "moto.log"
        say(f"stack up: broker {broker.bootstrap_servers}, moto {moto.endpoint_url} (logs under {root})")
        stack = {"bootstrap_servers": broker.bootstrap_servers, "s3_endpoint_url": moto.endpoint_url,
                 "bucket": BUCKET, "remote": args.spark_remote}
        kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers, timeout_s=30)
        s3 = local_s3_client(moto.endpoint_url)

        # --- workload ---
        n = wl.records_for_mb(args.mb)
        payload = n * wl.record_bytes()
        wl.create_topic(kafka, TOPIC)
        say(f"producing the workload: {n:,} records, {payload / 1e6:,.0f} MB into {TOPIC!r} (4 partitions)")
        produce_s = wl.produce(kafka, TOPIC, n)
        say(f"produced in {produce_s:.1f}s")
        ends = kafka.offsets(TOPIC, "latest")
        assert sum(ends.values()) == n, ends
        per_partition = n // wl.PARTITIONS
        window_records = min(args.window_records, per_partition)
        windows = windows_for(ends, window_records)
        wlist = [[w.partition, w.start, w.end] for w in windows]
        object_bytes = payload // len(windows)
        x |= {"n": n, "payload": payload, "produce_s": produce_s, "windows": windows,
              "window_records": window_records, "per_partition": per_partition}

        # --- warm-up of the long-lived Spark worker (not counted) ---
        worker = SparkWorker(stack | {"jvm_profile": "long"}, logs / "spark-worker.log", kept / "spark-worker.log")
        say("Spark worker (jvm_profile long): warm-up archive of one small window (not counted)")
        worker.call(cmd="archive", topic=TOPIC, prefix="warmup/", windows=[[0, 0, min(10_000, per_partition)]])
        wl.empty_prefix(s3, BUCKET, "warmup/")

        m = {
            "consume": Measure("consume", "limit: bare consume (confluent-kafka, no processing)", records=n,
                               bytes=payload),
            "put": Measure("put", f"limit: bare PUT of the same bytes (boto3, {len(windows)} objects of "
                                  f"{object_bytes / 1e6:.1f} MB, 4 threads)", records=n, bytes=payload),
            "limit": Measure("limit", "limit: the slower of the two, per round", records=n, bytes=payload),
            "spark_read": Measure("spark_read", "Spark's own read: a batch count of the same offset ranges",
                                  records=n, bytes=payload, note="warm session; no write"),
            "naive": Measure("naive", "naive: one Python process, confluent-kafka + pyarrow + boto3 → Parquet",
                             records=n, bytes=payload, note=f"objects of ≤ {window_records:,} records"),
            "archive": Measure("archive", "s3-archive: dg.materialize of the archive asset, commit included",
                               records=n, bytes=payload,
                               note=f"{len(windows)} windows of ≤ {window_records:,} records in one run, parquet/"
                                    "snappy, warm Spark session"),
            "restore": Measure("restore", "restore: restore_windows from the archive into a new topic", records=n,
                               bytes=payload, note="transactional, exactly once (ledger)"),
            "produce": Measure("produce", "bare produce of the same records (idempotent, acks=all)", records=n,
                               bytes=payload, note="the restore's producer settings, no transaction"),
        }
        peers = Peers([p for p in args.peers.split(",") if p],
                      {"bootstrap_servers": broker.bootstrap_servers, "s3_endpoint_url": moto.endpoint_url, "s3": s3,
                       "records": n, "workdir": root / "peers"})
        profile: list[dict[str, Any]] = []
        requests: list[dict[str, int]] = []
        restore_src = "archive-r0/"
        for r in range(args.repeats):
            say(f"round {r + 1}/{args.repeats}")
            s, got = wl.bare_consume(kafka, TOPIC)
            assert got == n, (got, n)
            m["consume"].seconds.append(s)
            say(f"  bare consume: {s:.2f}s, {n / s:,.0f} rec/s, {payload / s / 1e6:.1f} MB/s")
            s = wl.bare_put(s3, BUCKET, f"put-r{r}/", payload, object_bytes)
            m["put"].seconds.append(s)
            wl.empty_prefix(s3, BUCKET, f"put-r{r}/")
            say(f"  bare PUT: {s:.2f}s, {payload / s / 1e6:.1f} MB/s")
            out = worker.call(cmd="spark_read", topic=TOPIC, windows=wlist)
            assert out["records"] == n, out
            m["spark_read"].seconds.append(out["seconds"])
            say(f"  Spark's own read (count): {out['seconds']:.2f}s, {n / out['seconds']:,.0f} rec/s")
            s, got, objs = wl.naive_archive(kafka, s3, BUCKET, f"naive-r{r}/", TOPIC, window_records)
            assert got == n, (got, n)
            m["naive"].seconds.append(s)
            wl.empty_prefix(s3, BUCKET, f"naive-r{r}/")
            say(f"  naive: {s:.2f}s, {n / s:,.0f} rec/s, {objs} objects")
            before = moto_requests(moto_log)
            out = worker.call(cmd="archive", topic=TOPIC, prefix=f"archive-r{r}/", windows=wlist)
            requests.append({"requests": moto_requests(moto_log) - before, "objects": out["objects"],
                             "windows": out["windows"]})
            assert out["records"] == n and out["windows"] == len(windows), out
            m["archive"].seconds.append(out["seconds"])
            profile.append(out)
            if r:
                wl.empty_prefix(s3, BUCKET, f"archive-r{r}/")
            say(f"  s3-archive: {out['seconds']:.2f}s, {n / out['seconds']:,.0f} rec/s ({out['objects']} objects, "
                f"{out['bytes_written'] / 1e6:.0f} MB written, {requests[-1]['requests']} S3 requests; Spark jobs "
                f"{out['stage_s']:.1f}s, commits {out['commit_s']:.1f}s summed over windows)")
            target = f"restored-r{r}"
            wl.create_topic(kafka, target)
            res = restore_throughput(kafka, s3, BUCKET, restore_src, TOPIC, target, windows)
            assert res["records"] == n, res
            m["restore"].seconds.append(res["seconds"])
            wl.delete_topic(kafka, target)
            say(f"  restore: {res['seconds']:.2f}s, {n / res['seconds']:,.0f} rec/s ({res['transactions']} "
                "transactions)")
            target = f"produced-r{r}"
            wl.create_topic(kafka, target)
            s = wl.produce(kafka, target, n)
            m["produce"].seconds.append(s)
            wl.delete_topic(kafka, target)
            say(f"  bare produce: {s:.2f}s, {n / s:,.0f} rec/s")
            peers.run_round(r, worker)
        m["limit"].seconds = slower_of(m["consume"].seconds, m["put"].seconds)
        x |= {"measures": m, "profile": profile, "requests": requests, "peers": peers}

        # --- every format, once, in the warm session ---
        formats: dict[str, dict[str, Any]] = {}
        for fmt in [f for f in args.formats.split(",") if f]:
            ws = wlist if fmt != "bytes" else [[p, 0, min(BYTES_FORMAT_RECORDS, e)] for p, e in sorted(ends.items())]
            recs = sum(e - s for _, s, e in ws)
            before = moto_requests(moto_log)
            try:
                out = worker.call(cmd="format", topic=TOPIC, prefix=f"fmt-{fmt}/", windows=ws, format=fmt)
                assert out["records"] == recs, out
                out |= {"requests": moto_requests(moto_log) - before, "payload": recs * wl.record_bytes()}
                say(f"format {fmt}: {out['seconds']:.2f}s, {recs / out['seconds']:,.0f} rec/s, {out['objects']} "
                    f"objects, {out['bytes_written'] / 1e6:.1f} MB written")
            except Exception as e:  # shown on the page
                out = {"error": f"{type(e).__name__}: {e}"[:2000]}
                say(f"format {fmt} FAILED: {out['error']}")
            formats[fmt] = out
            wl.empty_prefix(s3, BUCKET, f"fmt-{fmt}/")
        x["formats"] = formats
        worker.stop()
        worker = None
        wl.empty_prefix(s3, BUCKET, restore_src)

        # --- run overhead per JVM variant: a one-record window first thing in a fresh process ---
        one = "one"
        wl.create_topic(kafka, one)
        wl.produce(kafka, one, 2 * wl.PARTITIONS)  # round robin: offsets 0 and 1 of partition 0
        overhead: dict[str, list[dict[str, Any]]] = {v: [] for v in JVM_VARIANTS}
        for i in range(args.overhead_repeats):
            for variant, spec in JVM_VARIANTS.items():
                conf = {} if spec["cds"] else {"spark.driver.extraJavaOptions":
                                               "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
                                               if spec["jvm_profile"] == "short" else
                                               "-Xshare:auto"}  # the JVM's default: a no-op
                out = once(stack | {"jvm_profile": spec["jvm_profile"], "spark_conf": conf}, logs / "fresh.log",
                           kept / "fresh.log", cmd="one", one_topic=one, prefix=f"one-{i}/")
                overhead[variant].append(out)
                wl.empty_prefix(s3, BUCKET, f"one-{i}/")
                say(f"run overhead, {variant}: {out['seconds']:.1f}s in the run (session start included); process "
                    f"start to done {out['process_to_done_s']:.1f}s (imports {out['import_s']:.1f}s); JVM options "
                    f"{out['java_options']!r}")
        x["overhead"] = overhead
        if args.spark_remote:
            remote = [once(stack | {"remote": args.spark_remote}, logs / "fresh.log", kept / "fresh.log", cmd="one",
                           one_topic=one, prefix=f"one-remote-{i}/") for i in range(args.overhead_repeats)]
            x["overhead_remote"] = remote
            say(f"run overhead over Spark Connect ({args.spark_remote}): "
                f"{Summary.of([o['seconds'] for o in remote]).fmt(1)}s")

        # --- memory: one window per size (1x, 4x, 16x), each in a fresh process (default JVM flags) ---
        base = per_partition // 16
        memory: dict[int, dict[str, Any]] = {}
        for mult in (1, 4, 16):
            out = once(stack | {"jvm_profile": "short"}, logs / "fresh.log", kept / "fresh.log", cmd="fresh",
                       one_topic=one, prefix=f"fresh-{mult}x/", topic=TOPIC, partition=1, records=base * mult)
            memory[mult] = out
            wl.empty_prefix(s3, BUCKET, f"fresh-{mult}x/")
            say(f"memory {mult}x: window of {base * mult:,} records ({base * mult * wl.record_bytes() / 1e6:.0f} MB)"
                f": JVM peak RSS {out['jvm_peak_mb']:.0f} MB (sampled max {out['jvm_rss_max_mb']:.0f} MB), Python "
                f"driver peak {out['python_peak_mb']:.0f} MB, {out['seconds']:.1f}s")
        x |= {"memory": memory, "memory_base": base}

        # --- the whole workload in one fresh process, per JVM profile (what a deployed run of it costs) ---
        fresh_full: dict[str, dict[str, Any]] = {}
        for prof in ("short", "long"):
            out = once(stack | {"jvm_profile": prof}, logs / "fresh.log", kept / "fresh.log", cmd="archive",
                       topic=TOPIC, prefix=f"full-{prof}/", windows=wlist)
            assert out["records"] == n, out
            fresh_full[prof] = out
            wl.empty_prefix(s3, BUCKET, f"full-{prof}/")
            say(f"whole workload in a fresh process, jvm_profile {prof}: run {out['seconds']:.1f}s, process "
                f"{out['process_s']:.1f}s")
        x["fresh_full"] = fresh_full

        # --- catch-up of 100 windows ---
        ct = catchup_topic(kafka, args.catchup_window_records)
        catchup = once(stack, logs / "catchup.log", kept / "catchup.log", cmd="catchup", topic=ct, prefix="catchup/",
                       window_records=args.catchup_window_records)
        assert catchup["windows"] == 100, catchup
        say(f"catch-up of 100 windows: {catchup['seconds']:.1f}s, {catchup['runs']} runs, {catchup['spark_sessions']}"
            " Spark sessions")
        x["catchup"] = catchup

        # --- sensor tick with 100k windows (sqlite) ---
        tick = sensor_tick(kafka)
        say(f"sensor tick with {tick['windows']:,} windows: {Summary.of(tick['tick_s']).fmt(2)}s "
            f"(adding them took {tick['add_partitions_s']:.1f}s)")
        x["tick"] = tick

        mach["load_end"] = " ".join(_read("/proc/loadavg").split()[:3])
        mach["other_work_end"] = other_work()
        return x


SIZE_KEYS = ("archive_vs_limit", "archive_vs_spark_read", "archive_vs_naive", "archive_vs_connect_iceberg",
             "archive_vs_flink", "archive_vs_spark_streaming", "restore_vs_produce", "run_overhead_s",
             "s3_requests_per_window", "jvm_peak_16x_over_1x")


def sizes_section(runs: list[tuple[argparse.Namespace, dict[str, Any]]], json_dir: str) -> dict[str, str]:
    """The headline figures of every size run by this command, side by side; `json_dir`: where the JSON went."""
    head = "| figure | " + " | ".join(f"{a.mb:g} MB ({a.repeats} repeat{'s' * (a.repeats > 1)})" for a, _ in runs)
    rows = [head + " |", "|" + " --- |" * (len(runs) + 1)]
    for k in SIZE_KEYS:
        vals = [r["json"].get(k) for _, r in runs]
        rows.append(f"| `{k}` | " + " | ".join("—" if v is None else f"{v:g}" for v in vals) + " |")
    rows.append("| minutes | " + " | ".join(f"{r['wall_s'] / 60:.1f}" for _, r in runs) + " |")
    return {"title": "Sizes side by side", "body": (
        "Every size of this command (`--mb`), each a full run of its own (its own broker, moto and workload); the "
        f"page above is the {runs[0][0].mb:g} MB run, `{json_dir}/benchmarks-<size>mb.json` has each run's "
        "figures.\n\n" + "\n".join(rows))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", default=str(DEFAULT_MB), help="workload size: MB of keys + values + headers; a comma-"
                                                          "separated list runs each size in turn (e.g. 200,1000)")
    ap.add_argument("--repeats", default="3", help="rounds; one value, or one per --mb size (e.g. 3,1)")
    ap.add_argument("--window-records", type=int, default=100_000, help="records per window of the archive run "
                                                                       "(and per object of the naive baseline)")
    ap.add_argument("--catchup-window-records", type=int, default=200)
    ap.add_argument("--peers", default=",".join(PEERS), help=f"comma-separated, of {', '.join(PEERS)}; '' for none")
    ap.add_argument("--formats", default=",".join(FORMATS), help="archive formats measured once each; '' for none")
    ap.add_argument("--overhead-repeats", type=int, default=2, help="fresh processes per JVM variant")
    ap.add_argument("--spark-remote", default=None, help="a running Spark Connect server (sc://host:port): adds "
                                                         "the run overhead over Connect")
    ap.add_argument("--windows", type=int, default=1_000_000, help="archived windows of the years-of-windows "
                    "section (bench/windows_scale.py, about 17 min at 1M here); 0 skips it")
    ap.add_argument("--skip-windows", action="store_true", help="skip the years-of-windows section")
    ap.add_argument("--out", type=Path, default=None, help="write the page (benchmarks.md) and the JSON into this "
                    f"directory instead (default: the page to {PAGE.relative_to(ROOT)}, the JSON to "
                    f"{RESULTS.relative_to(ROOT)}/); for a trial run that must not replace the published figures")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, broker data)")
    args = ap.parse_args()
    try:
        sizes = [float(v) for v in args.mb.split(",")]
        repeats = [int(v) for v in args.repeats.split(",")]
    except ValueError:
        ap.error(f"--mb and --repeats take numbers, comma-separated; got {args.mb!r} and {args.repeats!r}")
    if len(repeats) == 1:
        repeats *= len(sizes)
    if len(repeats) != len(sizes) or min(repeats) < 1 or min(sizes) <= 0:
        ap.error(f"--repeats needs one value >= 1, or one per --mb size ({len(sizes)}); got {args.repeats!r}")
    unknown = set(p for p in args.peers.split(",") if p) - set(PEERS)
    if unknown:
        ap.error(f"--peers: unknown {', '.join(sorted(unknown))}; allowed: {', '.join(PEERS)}")
    target = os.environ.get("BENCH_FROM_MAKE")  # the make target that ran this, if any
    command = f"make {target}" if target else shlex.join(["python", "-m", "bench.run", *sys.argv[1:]])
    if target == "bench" and len(sys.argv) > 1:
        command += f" BENCH_ARGS={shlex.quote(shlex.join(sys.argv[1:]))}"
    args.json_dir = args.out or RESULTS
    page = args.out / "benchmarks.md" if args.out else PAGE
    args.json_dir.mkdir(parents=True, exist_ok=True)
    page.parent.mkdir(parents=True, exist_ok=True)
    runs: list[tuple[argparse.Namespace, dict[str, Any]]] = []
    for i, (mb, reps) in enumerate(zip(sizes, repeats)):
        a = argparse.Namespace(**{**vars(args), "mb": mb, "repeats": reps})
        a.skip_windows = args.skip_windows or i > 0  # the years-of-windows figures do not depend on --mb
        t = time.monotonic()
        say(f"=== {mb:g} MB, {reps} repeat(s) ===")
        x = run(a)
        x["windows_figures"] = years_of_windows(a)  # after run(): its broker and moto have stopped
        r = report(a, x, command, wall_s=time.monotonic() - t)
        runs.append((a, r))
        (args.json_dir / f"benchmarks-{mb:g}mb.json").write_text(json.dumps(build_json(r), indent=2) + "\n")
    first = runs[0][1]
    if len(runs) > 1:
        first["sections"].insert(0, sizes_section(runs, _shown(args.json_dir)))
        first["json"]["sizes"] = {f"{a.mb:g}mb": {k: r["json"].get(k) for k in SIZE_KEYS} for a, r in runs}
    page.write_text(render_markdown(first))
    (args.json_dir / "benchmarks.json").write_text(json.dumps(build_json(first), indent=2) + "\n")
    say(f"wrote {page} and {args.json_dir / 'benchmarks.json'}")
    print(json.dumps(first["json"], indent=2, default=str))


def _shown(path: Path) -> str:
    """A path as the page names it: from the repository's root when inside it."""
    path = path.resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


DEFAULT_MB = 200

if __name__ == "__main__":
    main()
