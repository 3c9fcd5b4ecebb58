"""`make bench`: every benchmark of the suite in one command; writes the page docs/benchmarks.md and its figures as
JSON in bench/results/ (benchmarks.json, and benchmarks-<size>mb.json per size).

    .venv/bin/python -m bench.run [--mb 200] [--repeats 3] [--out DIR] [--peers connect_iceberg,flink,spark_streaming]

Per size (`--mb`): starts its own Kafka broker and moto server (s3_archive.local) under a temporary directory,
produces the workload once (bench/workload.py), and runs the areas of the suite in turn, each a file of its own:

- throughput (bench/throughput.py, the peers in its rounds: bench/peers/), with a warm Spark worker (bench/worker.py);
- every format (bench/formats.py), in the same warm worker;
- tamper evidence: the SHA-256's share of archive time and `verify`'s throughput (bench/integrity.py), same worker;
- run overhead per JVM flag and the whole workload in a fresh process (bench/run_overhead.py);
- memory as the window grows (bench/memory.py);
- catch-up of 100 windows and the sensor's tick with 100k windows (bench/sensors.py);
- the deployed shape: daemon, offsets sensor, run processes on PostgreSQL (bench/deployed.py; first on the page);
- a topic_pattern over 1,000 topics (bench/many_topics.py);
- years of windows (bench/windows_scale.py: its own broker, moto and PostgreSQL; first size only);
- a whole cluster's recovery beside a plain restore (bench/recovery.py: its own brokers and moto; first size only,
  `--recovery-mb`);

then stops everything it started and renders the page (bench/report.py). Progress goes to stdout. Run it under
`flock /tmp/locks/heavy` on a shared machine: the page says whether it held the lock. Defaults: bench/config.py.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import (
    deployed,
    formats,
    integrity,
    many_topics,
    memory,
    recovery,
    registry,
    run_overhead,
    sensors,
    throughput,
    windows_scale,
)
from bench import workload as wl
from bench.common import Setup, SparkWorker, machine, machine_at_end, say
from bench.config import (
    BUCKET,
    CATCHUP_WINDOW_RECORDS,
    DEFAULT_MB,
    DEFAULT_REPEATS,
    DEPLOYED_HOLD_S,
    DEPLOYED_ONE_RECORD_REPEATS,
    DEPLOYED_RATES_MB_S,
    OVERHEAD_REPEATS,
    PAGE,
    PEERS,
    RESULTS,
    ROOT,
    TOPIC,
    WINDOW_RECORDS,
    WINDOWS,
)
from bench.peers.rounds import Peers
from bench.report import SIZE_KEYS, report, sizes_section
from bench.stats import build_json, render_markdown
from bench.under_test import FORMATS, KafkaResource, SchemaRegistryServer, local_s3_client, temporary_stack


def years_of_windows(args: argparse.Namespace) -> dict[str, Any]:
    """The years-of-windows figures: bench/windows_scale.py (its own broker, moto and PostgreSQL) with `--windows`."""
    if args.skip_windows or not args.windows:
        return {"skipped": "--skip-windows" if args.skip_windows else "--windows 0"}
    say(f"years of windows: {args.windows:,} windows in a Postgres instance (bench/windows_scale.py)")
    try:
        return {"figures": windows_scale.run(args.windows, keep=args.keep)}
    except Exception as e:  # shown on the page; the rest of the benchmark stands
        say(f"years of windows FAILED: {type(e).__name__}: {str(e)[:1000]}")
        return {"error": f"{type(e).__name__}: {e}"}


def disaster_recovery(args: argparse.Namespace) -> dict[str, Any]:
    """The recovery's RTO beside a plain restore (bench/recovery.py: its own brokers and moto); first size only."""
    if args.skip_windows or not args.recovery_mb:  # like the years of windows, it does not depend on --mb
        return {"skipped": "--recovery-mb 0" if not args.recovery_mb else "first size only"}
    try:
        return recovery.run(args.recovery_mb)
    except Exception as e:  # shown on the page; the rest of the benchmark stands
        say(f"disaster recovery FAILED: {type(e).__name__}: {str(e)[:1000]}")
        return {"error": f"{type(e).__name__}: {e}"}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """One size: every area but the years of windows; what bench/report.py renders."""
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
        windows = wl.windows_for(ends, window_records)
        s = Setup(stack=stack, kafka=kafka, s3=s3, logs=logs,
                  kept=args.json_dir / f"failed-logs-{args.mb:g}mb",  # a failed worker's log is copied there
                  moto_log=root / "moto" / "moto.log", records=n, payload=payload, ends=ends, windows=windows,
                  per_partition=per_partition, window_records=window_records)
        x |= {"n": n, "payload": payload, "produce_s": produce_s, "windows": windows,
              "window_records": window_records, "per_partition": per_partition}

        # --- warm-up of the long-lived Spark workers (not counted) ---
        worker = SparkWorker(stack, logs / "spark-worker.log", s.kept / "spark-worker.log")
        say("Spark workers (jvm_profile short for the default read path, long where the records pass through the "
            "JVM: bench/common.py::warm_profile): warm-up archive of the whole workload on each (not counted)")
        worker.warm_up(TOPIC, "warmup/", s.wlist, ("librdkafka", "spark"))
        wl.empty_prefix(s3, BUCKET, "warmup/")

        # --- throughput: interleaved rounds of every contender and peer ---
        peers = Peers([p for p in args.peers.split(",") if p],
                      {"bootstrap_servers": broker.bootstrap_servers, "s3_endpoint_url": moto.endpoint_url, "s3": s3,
                       "records": n, "workdir": root / "peers"})
        x |= throughput.rounds(s, worker, peers, args.repeats) | {"peers": peers}

        # --- every format, once, in the warm session ---
        x["formats"] = formats.time_every_format(s, worker, [f for f in args.formats.split(",") if f])

        # --- tamper evidence: the hash's share of archive time, verify's throughput ---
        x["integrity"] = integrity.time_tamper_evidence(s, worker, args.repeats)

        # --- Schema Registry decoding: Avro decoded to parquet against raw parquet of the same records ---
        if args.registry:
            server = SchemaRegistryServer(root / "schema-registry")
            server.start()
            cleanup.callback(server.stop)
            say(f"Schema Registry decoding (Apicurio on {server.url})")
            x["registry"] = registry.time_registry_decoding(s, worker, server.url, args.repeats)
        worker.stop()
        worker = None
        wl.empty_prefix(s3, BUCKET, throughput.RESTORE_SOURCE)

        # --- fresh processes: run overhead, memory, the whole workload ---
        one = run_overhead.one_record_topic(s)
        x["overhead"] = run_overhead.time_run_overhead(s, args.overhead_repeats)
        if args.spark_remote:
            x["overhead_remote"] = run_overhead.time_run_overhead_connect(s, args.spark_remote,
                                                                         args.overhead_repeats)
        x["memory_base"], x["memory"] = memory.peakmem_by_window_size(s, one)
        x["fresh_full"] = run_overhead.time_fresh_whole_workload(s)

        # --- the deployed shape: daemon, sensor, run processes (its own PostgreSQL; page and JSON first) ---
        if args.deployed:
            say("deployed shape: dagster-daemon + code server, PostgreSQL instance, the offsets sensor on")
            x["deployed"] = deployed.run(s, root / "deployed", DEPLOYED_ONE_RECORD_REPEATS,
                                         [float(r) for r in args.deployed_rates.split(",") if r],
                                         args.deployed_hold_s)
        else:
            x["deployed"] = {"skipped": "--no-deployed"}

        # --- the sensor side ---
        x["catchup"] = sensors.time_catchup(s, args.catchup_window_records)
        x["tick"] = sensors.time_sensor_tick(kafka, moto.endpoint_url)
        try:
            x["many_topics"] = many_topics.run(kafka, moto.endpoint_url)
        except Exception as e:  # shown on the page; the rest of the benchmark stands
            say(f"many topics FAILED: {type(e).__name__}: {str(e)[:1000]}")
            x["many_topics"] = {"error": f"{type(e).__name__}: {e}"}

        machine_at_end(mach)
        return x


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", default=str(DEFAULT_MB), help="workload size: MB of keys + values + headers; a comma-"
                                                          "separated list runs each size in turn (e.g. 200,1000)")
    ap.add_argument("--repeats", default=str(DEFAULT_REPEATS),
                    help="rounds; one value, or one per --mb size (e.g. 3,1)")
    ap.add_argument("--window-records", type=int, default=WINDOW_RECORDS, help="records per window of the archive "
                                                                               "run (and per object of the naive "
                                                                               "baseline)")
    ap.add_argument("--catchup-window-records", type=int, default=CATCHUP_WINDOW_RECORDS)
    ap.add_argument("--peers", default=",".join(PEERS), help=f"comma-separated, of {', '.join(PEERS)}; '' for none")
    ap.add_argument("--formats", default=",".join(FORMATS), help="archive formats measured once each; '' for none")
    ap.add_argument("--registry", action=argparse.BooleanOptionalAction, default=True,
                    help="Avro (Schema Registry) decoded to parquet against raw parquet (bench/registry.py)")
    ap.add_argument("--deployed", action=argparse.BooleanOptionalAction, default=True,
                    help="the deployed shape: catch-up, one-record runs, the sustained search (bench/deployed.py)")
    ap.add_argument("--deployed-rates", default=",".join(f"{r:g}" for r in DEPLOYED_RATES_MB_S),
                    help="MB/s of the sustained search, rising ('' skips it; first size only)")
    ap.add_argument("--deployed-hold-s", type=float, default=DEPLOYED_HOLD_S,
                    help="seconds each rate of the sustained search is held (600: the 10-minute hold)")
    ap.add_argument("--overhead-repeats", type=int, default=OVERHEAD_REPEATS, help="fresh processes per JVM variant")
    ap.add_argument("--spark-remote", default=None, help="a running Spark Connect server (sc://host:port): adds "
                                                         "the run overhead over Connect")
    ap.add_argument("--windows", type=int, default=WINDOWS, help="archived windows of the years-of-windows "
                    "section (bench/windows_scale.py, about 17 min at 1M here); 0 skips it")
    ap.add_argument("--skip-windows", action="store_true", help="skip the years-of-windows section")
    ap.add_argument("--recovery-mb", type=float, default=1000, help="MB of the disaster-recovery figures "
                    "(bench/recovery.py: 10 topics, 20 groups, RTO beside a plain restore); 0 skips them")
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
        a.deployed_rates = args.deployed_rates if i == 0 else ""  # nor does the sustained rate
        t = time.monotonic()
        say(f"=== {mb:g} MB, {reps} repeat(s) ===")
        x = run(a)
        x["windows_figures"] = years_of_windows(a)  # after run(): its broker and moto have stopped
        x["recovery"] = disaster_recovery(a)
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


if __name__ == "__main__":
    main()
