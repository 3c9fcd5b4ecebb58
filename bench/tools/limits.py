"""make bench's throughput rounds alone (bench/throughput.py: the limits once and in parallel processes, Spark's read,
the naive script once and in N processes, the archive on both read paths, the restore with each `producers`, the bare
produce once and in N processes), no peers, with the page's ratios printed: what answers "how far is the archive and
the restore from the machine's limit" in minutes, not the whole suite's half hour.

    flock -o /tmp/locks/heavy .venv/bin/python -m bench.tools.limits --mb 200 --rounds 3 [--json FILE]

Starts its own broker and moto (as make bench), stops them at the end.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from bench import throughput
from bench import workload as wl
from bench.common import Setup, SparkWorker, machine, machine_at_end, say
from bench.config import BUCKET, TARGETS, TOPIC, WINDOW_RECORDS
from bench.peers.rounds import Peers
from bench.stats import Measure, Summary, best_of, paired_ratios
from bench.under_test import KafkaResource, local_s3_client, temporary_stack


def ratios(m: dict[str, Measure]) -> dict[str, dict[str, Any]]:
    """The page's throughput ratios (bench/report.py), paired per round, with their targets."""
    arch = m["archive"].seconds
    out = {
        "archive_vs_limit": (paired_ratios(arch, m["limit"].seconds), TARGETS["archive_vs_limit"]),
        "archive_vs_one_consumer": (paired_ratios(arch, m["consume"].seconds), None),
        "archive_vs_naive": (paired_ratios(arch, best_of(m, "naive")), TARGETS["archive_vs_naive"]),
        "archive_vs_one_naive": (paired_ratios(arch, m["naive"].seconds), None),
        "restore_vs_produce": (paired_ratios(m["restore"].seconds, m["produce"].seconds),
                               TARGETS["restore_vs_produce"]),
        "restore_vs_parallel_produce": (paired_ratios(m["restore"].seconds, best_of(m, "produce", True)),
                                        TARGETS["restore_vs_parallel_produce"]),
    }
    for k in throughput.restore_producers():
        out[f"restore_p{k}_vs_produce"] = (paired_ratios(m[f"restore_p{k}"].seconds, m["produce"].seconds), None)
    return {k: {"min_median_max": v.as_dict(), "target": t} for k, (v, t) in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    mach = machine()
    say(f"machine: nproc {mach['nproc']}, load {mach['load_start']}; {mach['other_work']}; {mach['heavy_lock']}")
    worker = None
    with temporary_stack("s3a-limits-", BUCKET, remove=True) as (broker, moto, root):
        logs = root / "logs"
        logs.mkdir()
        stack = {"bootstrap_servers": broker.bootstrap_servers, "s3_endpoint_url": moto.endpoint_url,
                 "bucket": BUCKET, "remote": None}
        kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers, timeout_s=30)
        s3 = local_s3_client(moto.endpoint_url)
        n = wl.records_for_mb(args.mb)
        wl.create_topic(kafka, TOPIC)
        say(f"producing {n:,} records ({n * wl.record_bytes() / 1e6:,.0f} MB)")
        wl.produce(kafka, TOPIC, n)
        ends = kafka.offsets(TOPIC, "latest")
        per_partition = n // wl.PARTITIONS
        window_records = min(WINDOW_RECORDS, per_partition)
        s = Setup(stack=stack, kafka=kafka, s3=s3, logs=logs, kept=logs / "kept", moto_log=root / "moto" / "moto.log",
                  records=n, payload=n * wl.record_bytes(), ends=ends, windows=wl.windows_for(ends, window_records),
                  per_partition=per_partition, window_records=window_records)
        try:
            worker = SparkWorker(stack, logs / "spark-worker.log",
                                 Path(tempfile.gettempdir()) / "s3a-limits-failed-worker.log")
            worker.warm_up(TOPIC, "warmup/", s.wlist, ("librdkafka", "spark"))
            wl.empty_prefix(s3, BUCKET, "warmup/")
            x = throughput.rounds(s, worker, Peers([], {}), args.rounds)
        finally:
            if worker is not None:
                worker.stop()
    machine_at_end(mach)
    m: dict[str, Measure] = x["measures"]
    for k, v in m.items():
        say(f"{k:>16}: {Summary.of(v.seconds).fmt(2)} s  ({v.mb_per_s().fmt(1)} MB/s)  {v.label}")
    r = ratios(m)
    for k, v in r.items():
        d = v["min_median_max"]
        say(f"{k}: {d['min']:.2f} / {d['median']:.2f} / {d['max']:.2f}"
            + (f" (target ≥ {v['target']})" if v["target"] else ""))
    say(f"machine at the end: load {mach['load_end']}; {mach['other_work_end']}")
    if args.json:
        args.json.write_text(json.dumps({"mb": args.mb, "rounds": args.rounds, "machine": mach, "ratios": r,
                                         "seconds": {k: v.seconds for k, v in m.items()}}, indent=2) + "\n")


if __name__ == "__main__":
    main()
