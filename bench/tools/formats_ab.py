"""Each format's warm archive time against parquet's, per source tree (arm), rounds interleaved: the bench's
"Every format" area (bench/formats.py, the same `format` command of `bench.worker`) without the rest of the suite,
and optionally Schema Registry Avro decoded against raw (bench/registry.py's `decoded` command).

    flock -o /tmp/locks/heavy .venv/bin/python -m bench.tools.formats_ab --mb 200 --rounds 3 \
        --arm base=/tmp/base-tree --arm new=. [--formats parquet,csv,jsonl,json,text,avro] [--registry]

An arm is `NAME=TREE`: a source tree's own `bench.worker` (a warm Spark session of the `jvm_profile` make bench's
warm worker gives the default read path, bench/common.py::warm_profile: short; TREE/.native first on its path when
it holds an unpacked wheel of the tree's native/, else the venv's module), warmed up by one archive of a small
window in every measured format. Per round, every format and arm runs once (the arms' order alternating by
round); each run archives all the workload's windows in one run (read_path librdkafka). Prints the seconds and
parquet's time over each format's (≥ 0.8 is the issue's target), per arm; `--json` writes them. Parquet, the reference of every ratio, is measured whether `--formats` names it or not,
except with `--formats none` (the registry kinds alone, against raw). `--registry-value-off` adds the decoded archive
with `envelope: {value: false}` (not restorable; the raw value is not stored beside the decoded columns). `--cpu`: each
run's CPU seconds per process (the arm's driver, Spark JVM and PySpark workers, moto, the broker, the registry) and
the machine's busy seconds, from /proc (bench/tools/procstat.py), with their medians at the end. Starts its own
broker, moto (and Apicurio with `--registry`) and stops them at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import workload as wl
from bench.common import WorkerProcess, warm_profile
from bench.config import BUCKET, TOPIC
from bench.formats import empty_archive
from bench.registry import AVRO_TOPIC, produce_avro
from bench.tools.procstat import Snapshot, cpu_delta, descendants, snapshot
from bench.under_test import FORMATS as ARCHIVE_FORMATS
from bench.under_test import KafkaResource, SchemaRegistryServer, local_s3_client, temporary_stack

FORMATS = ("parquet", "avro", "text", "csv", "jsonl", "json")


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def python_path(tree: Path) -> str:
    """The tree, and first its own native module when one is unpacked in `TREE/.native` (a wheel of its native/
    built with `maturin build`), so that each arm runs its own build; without one, the venv's."""
    native = tree / ".native"
    return f"{native}:{tree}" if (native / "s3_archive_native").is_dir() else str(tree)


class Arm(WorkerProcess):
    """A warm `bench.worker` of one source tree."""

    def __init__(self, spec: str, stack: dict[str, Any], log: Path) -> None:
        self.name, _, tree = spec.partition("=")
        self.tree = Path(tree or ".").resolve()
        self.log_path, self.kept_log = log, None
        self.log = log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.worker",
             json.dumps(stack | {"jvm_profile": warm_profile({"cmd": "format"})})],
            cwd=self.tree, env=os.environ | {"PYTHONPATH": python_path(self.tree)}, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self.log, text=True)


def measured_formats(spec: str) -> list[str]:
    """The formats a `--formats` value measures: those named, parquet (the reference) first when it is not; none for
    `none`."""
    if spec == "none":
        return []
    formats = [f for f in spec.split(",") if f]
    unknown = [f for f in formats if f not in ARCHIVE_FORMATS]
    if unknown:
        raise SystemExit(f"--formats {spec!r}: unknown format {unknown[0]!r}; allowed: {', '.join(ARCHIVE_FORMATS)}")
    return formats if "parquet" in formats else ["parquet", *formats]


# The registry kinds: (key, value_decoding type, envelope.value)
REGISTRY_KINDS = {"registry-raw": ("bytes", True), "registry-decoded": ("avro", True),
                  "registry-decoded-novalue": ("avro", False)}


class CpuMeter:
    """CPU seconds per process of one measured run (`--cpu`): the active arm's driver, Spark JVM and PySpark workers,
    moto, the broker and the registry, and what the whole machine spent busy."""

    def __init__(self, services: dict[str, int]) -> None:
        self.services = {k: v for k, v in services.items() if v}

    def start(self) -> Snapshot:
        return snapshot()

    def stop(self, before: Snapshot, arm: Arm) -> dict[str, float]:
        after = snapshot()
        jvm = next((s.pid for s in after.procs.values() if s.ppid == arm.proc.pid and s.comm == "java"), 0)
        out = {"driver Python": cpu_delta(before.procs, after.procs, lambda P: {arm.proc.pid} & P.keys(), False),
               "Spark JVM": cpu_delta(before.procs, after.procs, lambda P: {jvm} & P.keys(), False),
               "PySpark workers": cpu_delta(before.procs, after.procs, lambda P: descendants(P, jvm) - {jvm})}
        for name, pid in self.services.items():
            out[name] = cpu_delta(before.procs, after.procs, lambda P, pid=pid: {pid} & P.keys())
        out["machine busy"] = after.machine_busy - before.machine_busy
        return out


def cpu_summary(cpu: dict[str, list[dict[str, float]]]) -> list[str]:
    """Per arm and kind, the median CPU seconds of each process over the rounds."""
    return [f"{key} CPU-s median: " + ", ".join(f"{p} {statistics.median(r[p] for r in runs):.2f}" for p in runs[0])
            for key, runs in cpu.items()]


def summary(seconds: dict[str, list[float]]) -> list[str]:
    """One line per kind of an arm: median, min, max, and the reference's median over this one's (parquet for a
    format, raw for a registry decoding; no ratio when the reference was not measured)."""
    med = {k: statistics.median(v) for k, v in seconds.items()}
    lines = []
    for k, v in med.items():
        ref = "raw" if k.startswith("registry") else "parquet"
        base = med.get("registry-raw" if ref == "raw" else "parquet")
        ratio = f"; {ref} / this = {base / v:.2f}" if base is not None and v > 0 else ""
        lines.append(f"{k}: median {v:.2f}s (min {min(seconds[k]):.2f}, max {max(seconds[k]):.2f}){ratio}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--arm", action="append", default=[], help="NAME=TREE (default: this=.)")
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--registry", action="store_true", help="also Avro decoded vs raw (parquet)")
    ap.add_argument("--registry-value-off", action="store_true",
                    help="with --registry, also Avro decoded with envelope.value off")
    ap.add_argument("--cpu", action="store_true", help="CPU seconds per process of every measured run")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    formats = measured_formats(args.formats)
    out: dict[str, Any] = {"mb": args.mb, "rounds": args.rounds, "seconds": {}, "load": [], "cpu": {}}
    with temporary_stack("s3a-formats-ab-", BUCKET, remove=True) as (broker, moto, root):
        stack = {"bootstrap_servers": broker.bootstrap_servers, "s3_endpoint_url": moto.endpoint_url,
                 "bucket": BUCKET, "remote": None}
        kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers, timeout_s=30)
        s3 = local_s3_client(moto.endpoint_url)
        n = wl.records_for_mb(args.mb)
        windows: list[list[int]] = []
        if formats:
            wl.create_topic(kafka, TOPIC)
            say(f"producing {n:,} records ({n * wl.record_bytes() / 1e6:,.0f} MB)")
            wl.produce(kafka, TOPIC, n)
            windows = [[p, 0, e] for p, e in sorted(kafka.offsets(TOPIC, "latest").items())]
        small = [[p, 0, min(2000, e)] for p, _, e in windows]
        registry = None
        if args.registry:
            registry = SchemaRegistryServer(root / "registry")
            registry.start()
            say(f"producing {n:,} Avro records")
            produce_avro(kafka, registry.url, n)
            avro_windows = [[p, 0, e] for p, e in sorted(kafka.offsets(AVRO_TOPIC, "latest").items())]
            avro_small = [[p, 0, min(2000, e)] for p, _, e in avro_windows]
        registry_kinds = [k for k in REGISTRY_KINDS if registry is not None
                          and (k != "registry-decoded-novalue" or args.registry_value_off)]
        meter = CpuMeter({"moto": moto.proc.pid if moto.proc else 0, "broker": broker.pid or 0,
                          "registry": registry.proc.pid if registry is not None and registry.proc else 0})
        arms = [Arm(spec, stack, root / f"arm-{i}.log") for i, spec in enumerate(args.arm or ["this=."])]
        try:
            for arm in arms:  # warm-up, not counted
                for fmt in formats:
                    arm.call(cmd="format", topic=TOPIC, prefix="warmup/", windows=small, format=fmt)
                    if fmt == "iceberg":  # the table is dropped with its prefix (bench/formats.py)
                        arm.call(cmd="drop_table", topic=TOPIC, prefix="warmup/", format=fmt)
                for key in registry_kinds:
                    decoding, value = REGISTRY_KINDS[key]
                    arm.call(cmd="decoded", topic=AVRO_TOPIC, prefix="warmup/", windows=avro_small,
                             decoding=decoding, registry_url=registry.url, value=value)  # type: ignore[union-attr]
                wl.empty_prefix(s3, BUCKET, "warmup/")
            kinds = [("format", f) for f in formats] + [("decoded", k) for k in registry_kinds]
            for r in range(args.rounds):
                out["load"].append(os.getloadavg()[0])
                for arm in arms if r % 2 == 0 else arms[::-1]:
                    for cmd, what in kinds:
                        prefix = f"ab-{arm.name}-{what}-r{r}/"
                        before = meter.start()
                        if cmd == "format":
                            got = arm.call(cmd="format", topic=TOPIC, prefix=prefix, windows=windows, format=what)
                            assert got["records"] == n, got
                            key = what
                        else:
                            decoding, value = REGISTRY_KINDS[what]
                            got = arm.call(cmd="decoded", topic=AVRO_TOPIC, prefix=prefix, windows=avro_windows,
                                           decoding=decoding, registry_url=registry.url,  # type: ignore[union-attr]
                                           value=value)
                            assert got["records"] == n, got
                            key = what
                        out["seconds"].setdefault(arm.name, {}).setdefault(key, []).append(got["seconds"])
                        cpu = ""
                        if args.cpu:
                            used = meter.stop(before, arm)
                            out["cpu"].setdefault(f"{arm.name} {key}", []).append(used)
                            cpu = "; CPU-s " + ", ".join(f"{p} {v:.2f}" for p, v in used.items())
                        say(f"round {r + 1} {arm.name} {key}: {got['seconds']:.2f}s, "
                            f"{got.get('bytes_written', 0) / 1e6:.0f} MB written{cpu}")
                        empty_archive(s3, arm, what if cmd == "format" else "parquet", prefix)
        finally:
            for arm in arms:
                arm.stop()
            if registry is not None:
                registry.stop()
    for name, by_kind in out["seconds"].items():
        for line in summary(by_kind):
            say(f"{name} {line}")
    for line in cpu_summary(out["cpu"]):
        say(line)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
