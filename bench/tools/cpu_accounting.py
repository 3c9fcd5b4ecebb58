"""CPU accounting of the archive's warm throughput (issue #14): who spends the CPU, and whether the cores are full.

For the bench shape (`make bench`'s workload: `--mb` of records in 4 partitions, one window per partition), each
contender runs once per round, and for each run the CPU seconds (utime + stime from /proc, before and after) of
every process are taken with the wall time: the broker's JVM, moto, the Spark JVM (per thread group too), the
PySpark workers (daemon and forked workers, summed, reaped ones included), the driver Python (`bench.worker`,
where `dg.materialize` runs) and this process (where the bare consume and the naive consumer run). The machine's
busy CPU over the same interval tells whether the 2 cores were saturated; what no process of ours spent is "other".

    flock /tmp/locks/heavy .venv/bin/python -m bench.tools.cpu_accounting --mb 200 --rounds 3
    flock /tmp/locks/heavy .venv/bin/python -m bench.tools.cpu_accounting --contenders archive --rounds 5 \
        --arm base=/tmp/w5-base --arm new=. --arm big=.,spark.sql.execution.arrow.maxRecordsPerBatch=40000
    ... --jfr /tmp/jfr     # then one more archive (and count) per arm under a JFR recording (bench/tools/jfr_top.py)

An arm is `NAME=TREE[,KEY=VALUE...]`: a source tree (its own `bench.worker`, a warm Spark session of the
`jvm_profile` make bench's warm worker gives its read path and format, bench/common.py::warm_profile, warmed up by
one archive of the whole workload) and Spark settings for its session (`min_partitions=N` sets
SparkResource.kafka_min_partitions instead, `read_path=spark` the archive's read path, `task_reader=python` the
write task's reader, `format=jsonl` the archive's format: bench.worker's
`format` command, as bench/formats.py runs it). Contenders `read_native` and `read_python` are the write
task's readers alone in this process (bench/throughput.py::time_task_read). Arms run interleaved, their order
alternating by round. Starts its own broker and moto (`temporary_stack`) and stops them at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import workload as wl
from bench.baselines import time_bare_consume, time_naive_archive
from bench.common import WorkerProcess, warm_profile
from bench.config import BUCKET, TOPIC
from bench.stats import Summary
from bench.throughput import time_task_read
from bench.tools import jfr_top
from bench.tools.procstat import Snapshot, cpu_delta, descendants, snapshot, thread_deltas, thread_group
from bench.under_test import KafkaResource, local_s3_client, temporary_stack


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Arm(WorkerProcess):
    """A warm `bench.worker` of one source tree, with its own Spark settings."""

    def __init__(self, spec: str, stack: dict[str, Any], log: Path) -> None:
        self.name, _, rest = spec.partition("=")
        tree, *opts = rest.split(",")
        self.tree = Path(tree or ".").resolve()
        conf = dict(o.split("=", 1) for o in opts)
        self.min_partitions = int(conf.pop("min_partitions")) if "min_partitions" in conf else None
        self.read_path = conf.pop("read_path", "librdkafka")
        self.task_reader = conf.pop("task_reader", "native")
        self.format = conf.pop("format", None)
        self.conf = conf
        self.log_path, self.kept_log = log, None
        self.log = log.open("ab")
        profile = warm_profile({"read_path": self.read_path, "format": self.format})
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.worker", json.dumps(stack | {"jvm_profile": profile, "spark_conf": conf})],
            cwd=self.tree, env=os.environ | {"PYTHONPATH": str(self.tree)}, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.jvm = 0

    def find_jvm(self) -> int:
        procs = snapshot().procs
        kids = [s.pid for s in procs.values() if s.ppid == self.proc.pid and s.comm == "java"]
        if len(kids) != 1:
            raise RuntimeError(f"arm {self.name}: expected one JVM under the worker, found {kids}")
        self.jvm = kids[0]
        return self.jvm

    def archive(self, windows: list[list[int]], prefix: str) -> dict[str, Any]:
        if self.format is not None:
            return self.call(cmd="format", topic=TOPIC, prefix=prefix, windows=windows, format=self.format,
                             read_path=self.read_path)
        return self.call(cmd="archive", topic=TOPIC, prefix=prefix, windows=windows,
                         min_partitions=self.min_partitions, read_path=self.read_path,
                         task_reader=self.task_reader)


class Accountant:
    """Per-process CPU seconds of one measured call."""

    def __init__(self, broker: int, moto: int, arms: list[Arm]) -> None:
        self.broker, self.moto, self.arms = broker, moto, arms
        self.me = os.getpid()

    def _snap(self) -> Snapshot:
        return snapshot([self.broker, *(a.jvm for a in self.arms)])

    def measure(self, contender: str, active: Arm | None, fn: Callable[[], Any]) -> dict[str, Any]:
        b = self._snap()
        t = time.monotonic()
        result = fn()
        wall = time.monotonic() - t
        a = self._snap()

        def one(pid: int, reaped: bool = True) -> float:
            return cpu_delta(b.procs, a.procs, lambda P: {pid} & P.keys(), reaped)

        cpu = {"broker JVM": one(self.broker), "moto": one(self.moto), "bench (this process)": one(self.me, False)}
        idle = 0.0
        for arm in self.arms:
            parts = {"Spark JVM": one(arm.jvm), "driver Python": one(arm.proc.pid),
                     "PySpark workers": cpu_delta(b.procs, a.procs, lambda P, j=arm.jvm: descendants(P, j) - {j})}
            if arm is active:
                cpu |= parts
            else:
                idle += sum(parts.values())
        if len(self.arms) > 1 or active is None:
            cpu["idle arms (their driver, JVM, workers)"] = idle
        busy = a.machine_busy - b.machine_busy
        ours = sum(cpu.values())
        out: dict[str, Any] = {
            "contender": contender, "arm": active.name if active else None, "wall_s": wall, "cpu_s": cpu,
            "ours_cpu_s": ours, "machine_busy_s": busy, "other_cpu_s": busy - ours,
            "capacity_s": (a.machine_total - b.machine_total), "result": result}
        jvm = active.jvm if active else None
        for pid, key in ((jvm, "spark_jvm_threads"), (self.broker, "broker_threads")):
            if pid:
                groups: Counter = Counter()
                for name, secs in thread_deltas(b.threads, a.threads, pid).values():
                    groups[thread_group(name)] += secs
                out[key] = dict(groups.most_common())
        return out


def line(m: dict[str, Any]) -> str:
    cpu = ", ".join(f"{k} {v:.2f}" for k, v in m["cpu_s"].items() if abs(v) >= 0.005)
    jvm = m.get("spark_jvm_threads")
    threads = ("; Spark JVM threads: " + ", ".join(f"{k} {v:.2f}" for k, v in list(jvm.items())[:8])) if jvm else ""
    return (f"{m['contender']}{' [' + m['arm'] + ']' if m['arm'] else ''}: wall {m['wall_s']:.2f} s; CPU-s {cpu}; "
            f"ours {m['ours_cpu_s']:.2f}, machine busy {m['machine_busy_s']:.2f} of {m['capacity_s']:.2f} "
            f"({100 * m['machine_busy_s'] / max(m['capacity_s'], 1e-9):.0f} %), other {m['other_cpu_s']:.2f}"
            + threads)


def table(runs: list[dict[str, Any]]) -> str:
    """Markdown: one column per contender (and arm), one row per process; min / median / max over rounds."""
    cols: dict[str, list[dict[str, Any]]] = {}
    for m in runs:
        cols.setdefault(m["contender"] + (f" [{m['arm']}]" if m["arm"] else ""), []).append(m)
    roles: list[str] = []
    for m in runs:
        roles += [r for r in m["cpu_s"] if r not in roles]

    def cell(ms: list[dict[str, Any]], get: Callable[[dict[str, Any]], float | None]) -> str:
        vals = [v for v in map(get, ms) if v is not None]
        return Summary.of(vals).fmt(2) if vals else ""

    head = "| CPU-s (min / median / max) | " + " | ".join(cols) + " |"
    rows = [head, "| --- |" + " --- |" * len(cols)]
    rows.append("| wall s | " + " | ".join(cell(ms, lambda m: m["wall_s"]) for ms in cols.values()) + " |")
    for r in roles:
        rows.append(f"| {r} | " + " | ".join(cell(ms, lambda m, r=r: m["cpu_s"].get(r)) for ms in cols.values())
                    + " |")
    rows.append("| sum of ours | " + " | ".join(cell(ms, lambda m: m["ours_cpu_s"]) for ms in cols.values()) + " |")
    rows.append("| machine busy | " + " | ".join(cell(ms, lambda m: m["machine_busy_s"]) for ms in cols.values())
                + " |")
    rows.append("| machine busy / (wall × cores) | "
                + " | ".join(cell(ms, lambda m: m["machine_busy_s"] / m["capacity_s"]) for ms in cols.values())
                + " |")
    rows.append("| other (not ours) | " + " | ".join(cell(ms, lambda m: m["other_cpu_s"]) for ms in cols.values())
                + " |")
    return "\n".join(rows)


def thread_table(runs: list[dict[str, Any]], top: int = 12) -> str:
    """Spark JVM thread groups of the archive runs (median CPU-s per arm)."""
    by_arm: dict[str, list[dict[str, float]]] = {}
    for m in runs:
        if m["contender"] in ("archive", "count") and m.get("spark_jvm_threads"):
            by_arm.setdefault(f"{m['contender']} [{m['arm']}]", []).append(m["spark_jvm_threads"])
    out = []
    for arm, rs in by_arm.items():
        total: Counter = Counter()
        for r in rs:
            total.update(r)
        names = [n for n, _ in total.most_common(top)]
        out.append(f"{arm}, Spark JVM thread groups, CPU-s min / median / max: "
                   + "; ".join(f"{n} {Summary.of([r.get(n, 0.0) for r in rs]).fmt(2)}" for n in names))
    return "\n".join(out)


def jcmd(pid: int, *args: str) -> str:
    exe = shutil.which("jcmd") or "jcmd"
    p = subprocess.run([exe, str(pid), *args], capture_output=True, text=True, timeout=120)
    return (p.stdout + p.stderr).strip()


def recorded(arm: Arm, path: Path, fn: Callable[[], Any]) -> Any:
    """`fn` under a JFR recording of the arm's JVM (settings `profile`: execution samples every 10 ms)."""
    jcmd(arm.jvm, "JFR.configure", "stackdepth=256")  # only before the JVM's first recording; harmless after
    say(f"  JFR.start: {jcmd(arm.jvm, 'JFR.start', 'name=acct', 'settings=profile')[-200:]}")
    try:
        return fn()
    finally:
        say(f"  JFR.stop: {jcmd(arm.jvm, 'JFR.stop', 'name=acct', f'filename={path}')[-200:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--arm", action="append", default=[], help="NAME=TREE[,KEY=VALUE...] (default: this=.)")
    ap.add_argument("--contenders", default="consume,count,naive,archive")
    ap.add_argument("--jfr", help="directory: after the rounds, one archive (and count) per arm under JFR")
    ap.add_argument("--out", help="JSON file for every measurement")
    args = ap.parse_args()
    contenders = args.contenders.split(",")
    say(f"load average {os.getloadavg()}")
    runs: list[dict[str, Any]] = []
    with temporary_stack("s3a-acct-", BUCKET, remove=True) as (broker, moto, root):
        stack = {"bootstrap_servers": broker.bootstrap_servers, "s3_endpoint_url": moto.endpoint_url, "bucket": BUCKET}
        kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers, timeout_s=30)
        s3 = local_s3_client(moto.endpoint_url)
        n = wl.records_for_mb(args.mb)
        wl.create_topic(kafka, TOPIC)
        say(f"producing {n:,} records ({n * wl.record_bytes() / 1e6:.0f} MB): {wl.produce(kafka, TOPIC, n):.1f} s")
        ends = kafka.offsets(TOPIC, "latest")
        per_partition = n // wl.PARTITIONS
        wlist = [[w.partition, w.start, w.end] for w in wl.windows_for(ends, per_partition)]
        arms = [Arm(spec, stack, root / f"worker-{i}.log") for i, spec in enumerate(args.arm or ["this=."])]
        try:
            for arm in arms:  # warm-up: one whole archive per arm (C2 has compiled the hot loops after it)
                out = arm.archive(wlist, f"warmup-{arm.name}/")
                arm.find_jvm()
                say(f"arm {arm.name} ({arm.tree}, {arm.conf or 'default conf'}"
                    f"{', min_partitions ' + str(arm.min_partitions) if arm.min_partitions else ''}): warm-up "
                    f"archive {out['seconds']:.2f} s, JVM pid {arm.jvm}")
                wl.empty_prefix(s3, BUCKET, f"warmup-{arm.name}/")
            if "count" in contenders:
                arms[0].call(cmd="spark_read", topic=TOPIC, windows=wlist)  # its own code paths warm too
            acct = Accountant(broker.pid or 0, moto.proc.pid if moto.proc else 0, arms)
            for r in range(args.rounds):
                say(f"round {r + 1}/{args.rounds}, load average {os.getloadavg()}")
                order = arms if r % 2 == 0 else arms[::-1]
                for c in contenders:
                    if c == "consume":
                        m = acct.measure(c, None, lambda: time_bare_consume(kafka, TOPIC))
                    elif c in ("read_native", "read_python"):
                        m = acct.measure(c, None, lambda c=c: time_task_read(kafka, TOPIC, wlist, c[len("read_"):]))
                    elif c == "count":
                        m = acct.measure(c, arms[0], lambda: arms[0].call(cmd="spark_read", topic=TOPIC,
                                                                          windows=wlist))
                    elif c == "naive":
                        m = acct.measure(c, None, lambda: time_naive_archive(kafka, s3, BUCKET, "naive/", TOPIC,
                                                                           per_partition))
                        wl.empty_prefix(s3, BUCKET, "naive/")
                    elif c == "archive":
                        for arm in order:
                            m = acct.measure(c, arm, lambda arm=arm: arm.archive(wlist, f"a-{arm.name}/"))
                            wl.empty_prefix(s3, BUCKET, f"a-{arm.name}/")
                            res = m["result"]
                            assert res["records"] == n, res
                            m["result"] = {k: res[k] for k in ("seconds", "stage_s", "commit_s", "objects") if k in res}
                            runs.append(m | {"round": r})
                            say("  " + line(m))
                        continue
                    else:
                        raise SystemExit(f"unknown contender {c!r}; allowed: consume, read_native, read_python, count, "
                                         "naive, archive")
                    m["result"] = m["result"] if isinstance(m["result"], dict) else list(m["result"])
                    runs.append(m | {"round": r})
                    say("  " + line(m))
            if args.jfr:
                jdir = Path(args.jfr)
                jdir.mkdir(parents=True, exist_ok=True)
                for arm in arms:
                    for c in ("count", "archive"):
                        if c not in contenders:
                            continue
                        path = jdir / f"{c}-{arm.name}.jfr"
                        say(f"JFR of {c} [{arm.name}] -> {path}")
                        fn = ((lambda arm=arm: arm.archive(wlist, f"jfr-{arm.name}/")) if c == "archive" else
                              (lambda arm=arm: arm.call(cmd="spark_read", topic=TOPIC, windows=wlist)))
                        m = acct.measure(c + " (JFR)", arm, lambda fn=fn, arm=arm, path=path: recorded(arm, path, fn))
                        wl.empty_prefix(s3, BUCKET, f"jfr-{arm.name}/")
                        say("  " + line(m))
                        print(jfr_top.profile(jfr_top.read_recording(str(path))).render(), flush=True)
        finally:
            for arm in arms:
                arm.stop()
    print("\n" + table(runs) + "\n\n" + thread_table(runs), flush=True)
    say(f"load average {os.getloadavg()}")
    if args.out:
        Path(args.out).write_text(json.dumps(runs, indent=1, default=str))


if __name__ == "__main__":
    main()
