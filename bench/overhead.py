"""The run-overhead and memory figures of `make bench` on their own, for iterating on them: a temporary broker and
moto, then `--repeats` fresh processes of each asked figure, min / median / max.

    flock /tmp/locks/heavy .venv/bin/python -m bench.overhead --repeats 5            # one-record fresh runs
    flock /tmp/locks/heavy .venv/bin/python -m bench.overhead --repeats 0 --memory 1,16
    flock /tmp/locks/heavy .venv/bin/python -m bench.overhead --repeats 0 --imports 0 --memory 1,16 \
        --memory-repeats 3 --trees /tmp/a,/tmp/b          # an A/B of two checkouts, interleaved

Also times a bare `import s3_archive.definitions` in fresh processes (what a run worker imports to load the code
location). Same commands as bench/run.py (`bench.worker --once`); prints JSON lines. `--trees A,B`: source trees
(checkouts) run in turn, round by round, each with its own `bench.worker` (a before/after on the same machine
state; the default is this checkout).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import workload as wl
from bench.run import BUCKET, ROOT, TOPIC, _checked
from bench.stats import Summary
from bench.worker import RESULT
from s3_archive.io import paths
from s3_archive.io.jvm import driver_java_options
from s3_archive.io.kafka import KafkaResource
from s3_archive.local.stack import temporary_stack


def _env(tree: Path) -> dict[str, str]:
    return os.environ | {"PYTHONPATH": str(tree), "S3_ARCHIVE_STATE_DIR": tempfile.mkdtemp(prefix="bench-overhead-")}


def import_seconds(tree: Path) -> float:
    """Wall seconds of `python -c "import s3_archive.definitions"` (the demo config) in a fresh process."""
    t = time.monotonic()
    subprocess.run([sys.executable, "-c", "import s3_archive.definitions"], cwd=tree, check=True, env=_env(tree))
    return time.monotonic() - t


PY_SPY: list[str] = []  # --py-spy: the command prefix that profiles each worker process (and its Python children)


def once(tree: Path, stack: dict, log: Path, **cmd) -> dict:
    """bench/run.py's `once` in the source tree `tree`."""
    t = time.monotonic()
    prefix = [a.replace("{n}", f"{cmd['cmd']}-{tree.name}-{time.time():.0f}") for a in PY_SPY]
    with log.open("ab") as err:
        p = subprocess.run([*prefix, sys.executable, "-m", "bench.worker", json.dumps(stack), "--once",
                            json.dumps(cmd)],
                           cwd=tree, env=_env(tree), stdout=subprocess.PIPE, stderr=err, text=True, timeout=3600)
    with log.with_suffix(".out").open("a") as out:  # the JVM's own stdout too (e.g. -XX:+PrintNMTStatistics)
        out.write(f"=== {tree} {json.dumps(cmd)}\n{p.stdout}")
    for line in p.stdout.splitlines():
        if line.startswith(RESULT):
            return _checked(json.loads(line[len(RESULT):]), cmd) | {"process_s": time.monotonic() - t}
    raise RuntimeError(f"the Spark worker for {cmd['cmd']} in {tree} exited with {p.returncode} (see {log})")


def summaries(rows: list[dict], keys: tuple[str, ...]) -> dict[str, str]:
    return {k: Summary.of([r[k] for r in rows]).fmt(2) for k in keys}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="fresh one-record runs (0: none)")
    ap.add_argument("--imports", type=int, default=5, help="fresh `import s3_archive.definitions` processes")
    ap.add_argument("--memory", default="", help="window sizes (multiples of --base records) in fresh processes")
    ap.add_argument("--memory-repeats", type=int, default=1, help="rounds of --memory, trees interleaved")
    ap.add_argument("--steps", action="store_true", help="--memory: every size in one process per round, the "
                    "JVM's peak reset before each (bench.worker cmd_fresh_steps; cheaper, a proxy)")
    ap.add_argument("--base", type=int, default=5733, help="records of the 1x window (make bench's default)")
    ap.add_argument("--trees", default=str(ROOT), help="source trees to compare, comma-separated")
    ap.add_argument("--jvm-extra", default="", help="driver JVM options added to the default (jvm_profile short), "
                    "e.g. NMT or GC logging; `{log}` is replaced by the log directory")
    ap.add_argument("--py-spy", help="directory: record every worker process with py-spy (raw stacks, idle "
                    "included, Python children too), one file each")
    args = ap.parse_args()
    if args.py_spy:
        PY_SPY[:] = ["py-spy", "record", "-f", "raw", "--idle", "--subprocesses", "-o",
                     f"{args.py_spy}/{{n}}.txt", "--"]
    trees = [Path(t).resolve() for t in args.trees.split(",")]
    if args.imports:
        secs: dict[Path, list[float]] = {t: [] for t in trees}
        for _ in range(args.imports):
            for t in trees:
                secs[t].append(import_seconds(t))
        for t in trees:
            print(json.dumps({"tree": str(t), "import_definitions_s": secs[t],
                              "summary": Summary.of(secs[t]).fmt(2)}), flush=True)
    if not args.repeats and not args.memory:
        return
    logs = Path(tempfile.mkdtemp(prefix="bench-overhead-"))
    keys = ("seconds", "import_s", "process_to_done_s", "process_s")
    with temporary_stack("bench-overhead-", BUCKET, remove=True) as (broker, moto, _root):
        kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers)
        stack = {"bootstrap_servers": broker.bootstrap_servers, "s3_endpoint_url": moto.endpoint_url,
                 "bucket": BUCKET, "jvm_profile": "short"}
        if args.jvm_extra:
            default = driver_java_options("short", [str(j) for j in paths.jars("spark")])
            stack["spark_conf"] = {"spark.driver.extraJavaOptions":
                                   f"{default} {args.jvm_extra.replace('{log}', str(logs))}".strip()}
        wl.create_topic(kafka, "one")
        wl.produce(kafka, "one", 2 * wl.PARTITIONS)
        runs: dict[Path, list[dict]] = {t: [] for t in trees}
        for i in range(args.repeats):
            for t in trees:
                out = once(t, stack, logs / "fresh.log", cmd="one", one_topic="one", prefix=f"one-{i}-{t.name}/")
                runs[t].append(out)
                print(json.dumps({"tree": str(t)} | {k: round(out[k], 2) for k in keys}), flush=True)
        for t in trees:
            if runs[t]:
                print(json.dumps({"tree": str(t)} | summaries(runs[t], keys)), flush=True)
        if args.memory:
            wl.create_topic(kafka, TOPIC)
            sizes = [int(m) for m in args.memory.split(",")]
            wl.produce(kafka, TOPIC, max(sizes) * args.base * wl.PARTITIONS)
            peaks: dict[Path, dict[int, list[float]]] = {t: {m: [] for m in sizes} for t in trees}
            cold: dict[Path, list[float]] = {t: [] for t in trees}
            for i in range(args.memory_repeats):
                if args.steps:  # one process per tree and round, every size in it (worker.cmd_fresh_steps)
                    for t in trees:
                        out = once(t, stack, logs / "fresh.log", cmd="fresh_steps", one_topic="one",
                                   prefix=f"steps-{i}-{t.name}/", topic=TOPIC, partition=1,
                                   sizes=[args.base * m for m in sizes])
                        cold[t].append(out["cold_s"])
                        for m in sizes:
                            peaks[t][m].append(out["steps"][str(args.base * m)]["jvm_peak_mb"])
                        print(json.dumps({"tree": str(t), "round": i, "cold_s": round(out["cold_s"], 2),
                                          "process_s": round(out["process_s"], 1)} | {
                            f"{m}x": {k: round(v, 1) for k, v in out["steps"][str(args.base * m)].items()}
                            for m in sizes}), flush=True)
                    continue
                for mult in sizes:
                    for t in trees:
                        out = once(t, stack, logs / "fresh.log", cmd="fresh", one_topic="one",
                                   prefix=f"fresh-{i}-{mult}x-{t.name}/", topic=TOPIC, partition=1,
                                   records=args.base * mult)
                        cold[t].append(out["cold_s"])
                        peaks[t][mult].append(out["jvm_peak_mb"])
                        print(json.dumps({"tree": str(t), "round": i, "mult": mult} | {k: round(out[k], 1) for k in (
                            "records", "seconds", "cold_s", "jvm_peak_before_mb", "jvm_peak_mb", "jvm_rss_max_mb",
                            "python_peak_mb", "process_s")}), flush=True)
            for t in trees:  # the JVM peak of each size over the smallest's, of the medians (as make bench has it)
                med = {m: Summary.of(v).median for m, v in peaks[t].items()}
                print(json.dumps({"tree": str(t), "jvm_peak_mb": {f"{m}x": Summary.of(v).fmt(0)
                                                                  for m, v in peaks[t].items()},
                                  "growth_of_medians": {f"{m}x": round(med[m] / med[sizes[0]], 3) for m in sizes},
                                  "cold_one_record_s": Summary.of(cold[t]).fmt(2)}), flush=True)
    print(f"logs: {logs}", flush=True)


if __name__ == "__main__":
    main()
