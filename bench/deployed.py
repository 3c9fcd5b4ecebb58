"""The deployed shape (the page's first section): the archive run as a deployment runs it, not as the bench's warm
worker does. `dagster-daemon run -w workspace.yaml` (which starts the code server of workspace.yaml) on the shipped
instance settings (deploy/dagster.postgres.yaml: PostgreSQL, the queued run coordinator, DefaultRunLauncher), the
archive's offsets sensor turned on, every archive setting at its default; each run is a process the launcher starts.
One deployment per arm, one after the other: `local` (each run starts its own Spark session, SparkResource's default),
`connect` (a Spark Connect server the deployment keeps; `S3_ARCHIVE_SPARK_REMOTE`, runs are thin clients) and
`continuous` (the archives' `continuous: {}`: one long-lived run per topic, launched by its continuous sensor, cuts
and archives the windows in a loop; a Spark session per run, as `local`).

Measured, beside the warm archive of the same bytes in the same run (bench/worker.py, a warm session):
- catch-up: the workload's records produced an hour old (a backlog: older than flush.interval_seconds, so every
  partition's rest is cut too), the sensor turned on (arm `continuous`: the backlog archive's continuous sensor,
  which launches the topic's run); from the first run's launch (its RUN_STARTING event, when the daemon hands it to
  the launcher) until the archive's consumer group has every offset (lag 0);
- a one-record window through the daemon's launcher (the sensor cuts it), timed as the run's process (from its
  start in /proc to its exit) and split by the run's events; and through `dagster asset materialize` (the whole
  command, a fresh process). Arm `continuous`: from the record's produce to its window's materialization (the
  manifest committed before it), the topic's long-lived run already up;
- sustained: records produced at a fixed rate for `hold_s` seconds per rate, rates rising until the lag grows; the
  highest rate kept. The lag is a sawtooth (it rises until a window is cut and committed, then drops), so "grows"
  is the slope of its troughs (the lowest lag after each drop), above `LAG_SLOPE_SHARE` of the produce rate; with
  fewer than two troughs, or none in the hold's second half, the slope of the second half's samples (`lag_trend`).

    .venv/bin/python -m bench.deployed [--mb 200] [--arms local,connect,continuous] [--rates 10,25,50,75] [--hold-s 90]
        [--repeats 2] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import Any

from bench import workload as wl
from bench.common import Setup, SparkWorker, read_text, say
from bench.config import BUCKET, DEPLOYED_HOLD_S, DEPLOYED_RATES_MB_S, ROOT
from bench.deployed_procs import RunProcesses
from bench.under_test import (
    LOCAL_AWS,
    KafkaResource,
    KafkaUnavailable,
    OffsetWindow,
    PostgresServer,
    SparkConnectServer,
    archive_asset_key,
    local_s3_client,
    spawn,
    stop_pid,
    temporary_stack,
    window_partitions,
)

# Spark in each run's process (SparkResource's default) / a kept Spark Connect server / one long-lived run per topic
ARMS = ("local", "connect", "continuous")
AGE_MS = 3_600_000  # the backlog's records are an hour old: past flush.interval_seconds (600 s by default)
LAG_SLOPE_SHARE = 0.1  # kept up: the lag's troughs grow by less than this share of the produce rate (lag_trend)
RUN_TIMEOUT_S = 900
TOPIC_TAG = "s3_archive/topic"
STREAM_TAG = "s3_archive/continuous"  # a continuous run's topic


class Deployment:
    """PostgreSQL, $DAGSTER_HOME with the shipped deploy/dagster.postgres.yaml, and `dagster-daemon run -w
    workspace.yaml` (its code server is the daemon's child), with the archives of this area at their defaults.
    `arm` "connect": a Spark Connect server the deployment keeps, which every run uses as a thin client
    (`S3_ARCHIVE_SPARK_REMOTE`); "local": each run starts its own Spark session (the default)."""

    def __init__(self, root: Path, stack: dict[str, Any], cleanup: ExitStack, arm: str = "local") -> None:
        self.root, self.arm = root, arm
        self.archive, self.cli_archive = f"deployed_{arm}", f"deployed_{arm}_cli"
        self.backlog, self.one, self.live, self.cli = (f"dep_{arm}_{t}" for t in ("backlog", "one", "live", "cli"))
        self.group = f"s3-archive.{self.archive}"  # the archive's default consumer group: its committed ends
        self.continuous = arm == "continuous"
        # arm continuous: the backlog in an archive of its own, whose continuous sensor starts after the backlog
        self.backlog_archive = f"{self.archive}_backlog" if self.continuous else self.archive
        root.mkdir(parents=True, exist_ok=True)
        self.pg = PostgresServer(root / "postgres", settings={"fsync": "off"})
        self.pg.start()
        cleanup.callback(self.pg.stop)
        self.home = root / "dagster_home"
        self.home.mkdir()
        shutil.copyfile(ROOT / "deploy" / "dagster.postgres.yaml", self.home / "dagster.yaml")
        config = root / "archives.yaml"
        # Every setting at its default but the topics (and the bucket, which has none).
        archives: list[dict[str, Any]] = [
            {"name": self.archive, "topics": [self.backlog, self.one, self.live], "bucket": BUCKET,
             "prefix": f"deployed-{arm}/"},
            {"name": self.cli_archive, "topics": [self.cli], "bucket": BUCKET, "prefix": f"deployed-{arm}-cli/"}]
        if self.continuous:  # the continuous mode on, every other setting at its default
            archives = [{"name": self.archive, "topics": [self.one, self.live], "bucket": BUCKET,
                         "prefix": f"deployed-{arm}/", "continuous": {}},
                        {"name": self.backlog_archive, "topics": [self.backlog], "bucket": BUCKET,
                         "prefix": f"deployed-{arm}-backlog/", "continuous": {}, "sensor_default": "stopped"}]
        config.write_text(json.dumps({"archives": archives}))
        spark: dict[str, str] = {}
        if arm == "connect":
            server = SparkConnectServer(root / "spark-connect", s3_endpoint_url=stack["s3_endpoint_url"],
                                        s3_path_style=True, env=dict(LOCAL_AWS))
            server.start()
            cleanup.callback(server.stop)
            spark = {"S3_ARCHIVE_SPARK_REMOTE": server.url}
        self.env = {**os.environ, **self.pg.env(), **LOCAL_AWS, "DAGSTER_HOME": str(self.home),
                    "S3_ARCHIVE_CONFIG": str(config),
                    "S3_ARCHIVE_KAFKA_BOOTSTRAP_SERVERS": stack["bootstrap_servers"],
                    "S3_ARCHIVE_S3_ENDPOINT_URL": stack["s3_endpoint_url"], "S3_ARCHIVE_BUCKET": BUCKET,
                    "S3_ARCHIVE_STATE_DIR": str(root / "state"), **spark}
        os.environ.update(self.pg.env())  # this process opens the same instance
        self.bin = Path(sys.executable).parent
        self.daemon = spawn([str(self.bin / "dagster-daemon"), "run", "-w", str(ROOT / "workspace.yaml")],
                            root / "daemon.log", env=self.env)
        cleanup.callback(self._stop_daemon)
        import dagster as dg

        self.instance = cleanup.enter_context(dg.DagsterInstance.from_config(str(self.home)))

    def _stop_daemon(self) -> None:
        """The daemon, then what is left of its process group: its code server waits for the runs it started
        (a continuous run does not end by itself), so it outlives the daemon's SIGTERM."""
        stop_pid(self.daemon.pid)
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self.daemon.pid, signal.SIGKILL)

    def dagster(self, *args: str, log: str) -> float:
        """`dagster ARGS` as a fresh process with the deployment's environment; its wall seconds."""
        t = time.monotonic()
        with (self.root / log).open("ab") as out:
            subprocess.run([str(self.bin / "dagster"), *args], cwd=ROOT, env=self.env, stdout=out,
                           stderr=subprocess.STDOUT, check=True, timeout=RUN_TIMEOUT_S)
        return time.monotonic() - t

    def sensor(self, action: str, name: str | None = None) -> None:
        """`dagster sensor start|stop` of the archive's offsets sensor (or the sensor `name`)."""
        self.dagster("sensor", action, name or f"archive_{self.archive}_offsets", "-w", str(ROOT / "workspace.yaml"),
                     log="cli.log")

    def backlog_sensor(self, action: str) -> None:
        """Start or stop what archives the backlog: the offsets sensor, or (arm continuous) the backlog archive's
        continuous sensor."""
        self.sensor(action, f"archive_{self.backlog_archive}_continuous" if self.continuous else None)

    def group_of(self, topic: str) -> str:
        return f"s3-archive.{self.backlog_archive if topic == self.backlog else self.archive}"

    def runs(self, topic: str) -> list[Any]:
        import dagster as dg

        tag = STREAM_TAG if self.continuous else TOPIC_TAG
        return list(self.instance.get_run_records(filters=dg.RunsFilter(tags={tag: topic})))

    def events(self, run_id: str) -> dict[str, float]:
        """The run's first event of each type: type name → wall time."""
        out: dict[str, float] = {}
        for e in self.instance.all_logs(run_id):
            if e.dagster_event is not None:
                out.setdefault(e.dagster_event.event_type_value, e.timestamp)
        return out

    def timeline(self, run_id: str) -> list[tuple[float, str, str]]:
        """Every event of the run: seconds after its first, type, message (cut to 160 characters)."""
        logs = self.instance.all_logs(run_id)
        t0 = logs[0].timestamp if logs else 0.0
        return [(round(e.timestamp - t0, 3), e.dagster_event.event_type_value if e.dagster_event else "log",
                 (e.user_message or "")[:160]) for e in logs]

    def alive(self) -> None:
        if self.daemon.poll() is not None:
            raise RuntimeError("dagster-daemon exited: " + read_text(self.root / "daemon.log")[-3000:])


def produce_aged(kafka: KafkaResource, topic: str, count: int, start: int = 0, age_ms: int = AGE_MS,
                 partitions: int = wl.PARTITIONS) -> float:
    """The workload's records `start`..`start + count` with timestamps `age_ms` in the past, round robin over
    `partitions`; seconds taken."""
    producer = kafka.producer(**wl.PRODUCER_CONF)
    ts = int(time.time() * 1000) - age_ms
    t = time.monotonic()
    for i, (p, k, v, h) in enumerate(wl.records(start + count)):
        if i < start:
            continue
        while True:
            try:
                producer.produce(topic, value=v, key=k, headers=h, partition=i % partitions, timestamp=ts)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 5000 == 0:
            producer.poll(0)
    if producer.flush(300):
        raise RuntimeError(f"producing to {topic!r}: records left undelivered")
    return time.monotonic() - t


def lag(kafka: KafkaResource, group: str, topic: str, ends: dict[int, int]) -> int:
    """Offsets of `ends` the archive's consumer group has not committed; -1 while the broker cannot say (its group
    coordinator still loading, right after the group's first commit)."""
    try:
        done = kafka.group_offsets(group, topic, sorted(ends))
    except KafkaUnavailable:
        return -1
    return sum(max(0, e - done.get(p, 0)) for p, e in ends.items())


def catch_up(dep: Deployment, kafka: KafkaResource, n: int) -> dict[str, Any]:
    """The backlog's `n` records, an hour old, then the offsets sensor on: the first run's launch → lag 0."""
    if not dep.continuous:  # no tick while the backlog is produced (arm continuous: its sensor starts stopped)
        dep.backlog_sensor("stop")
    wl.create_topic(kafka, dep.backlog)
    produce_s = produce_aged(kafka, dep.backlog, n)
    ends = kafka.offsets(dep.backlog, "latest")
    say(f"deployed: backlog of {n:,} records produced in {produce_s:.1f}s; turning the "
        f"{'continuous' if dep.continuous else 'offsets'} sensor on")
    t_on = time.time()
    dep.backlog_sensor("start")
    group = dep.group_of(dep.backlog)
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while lag(kafka, group, dep.backlog, ends) != 0:
        dep.alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"deployed catch-up: lag {lag(kafka, group, dep.backlog, ends)} after {RUN_TIMEOUT_S}s")
        time.sleep(0.2)
    t_zero = time.time()
    runs = dep.runs(dep.backlog)
    # a continuous run does not end: it goes on waiting for records
    while not dep.continuous and any(r.dagster_run.status.value not in ("SUCCESS", "FAILURE", "CANCELED")
                                     for r in runs):
        time.sleep(0.5)  # the last run ends a moment after its last commit
        runs = dep.runs(dep.backlog)
    events = {r.dagster_run.run_id: dep.events(r.dagster_run.run_id) for r in runs}
    launched = min(e["PIPELINE_STARTING"] for e in events.values() if "PIPELINE_STARTING" in e)
    created = min(r.create_timestamp.timestamp() for r in runs)
    ordered = sorted(runs, key=lambda r: r.create_timestamp)
    out = {"records": n, "produce_s": produce_s, "seconds": t_zero - launched, "runs": len(runs),
           "statuses": sorted({r.dagster_run.status.value for r in runs}), "sensor_start_to_first_run_s":
           created - t_on, "queued_to_launch_s": launched - created,
           "partitions": len(dep.instance.get_dynamic_partitions(window_partitions(dep.backlog).name)),
           "runs_detail": [_split(events[r.dagster_run.run_id]) for r in ordered],
           # each run's events up to lag 0 (a continuous run's step does not end: its split stops at the step start)
           "timelines": [dep.timeline(r.dagster_run.run_id) for r in ordered]}
    say(f"deployed catch-up: {out['seconds']:.1f}s from the first run's launch to lag 0; {len(runs)} runs, "
        f"{out['partitions']} windows")
    return out


STEPS = (("launch → run start (process, imports, definitions, run set-up)", "PIPELINE_STARTING", "PIPELINE_START"),
         ("run start → step start (executor)", "PIPELINE_START", "STEP_START"),
         ("step (resources, Spark session, the job, commits)", "STEP_START", "STEP_SUCCESS"),
         ("step end → run end", "STEP_SUCCESS", "PIPELINE_SUCCESS"))


def _split(events: dict[str, float]) -> dict[str, float | None]:
    return {label: (round(events[b] - events[a], 3) if a in events and b in events else None)
            for label, a, b in STEPS}


def one_record_runs(dep: Deployment, kafka: KafkaResource, procs: RunProcesses, repeats: int) -> list[dict]:
    """A one-record window, `repeats` times: produced an hour old, cut by the running sensor, launched by the
    daemon. The run's process from its start to its exit, and its events' split."""
    wl.create_topic(kafka, dep.one, partitions=1)
    out = []
    for i in range(repeats + 1):  # the first is a warm-up (a kept Spark Connect server's first job): not counted
        before = {r.dagster_run.run_id for r in dep.runs(dep.one)}
        produce_aged(kafka, dep.one, 1, start=i, partitions=1)
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while True:
            dep.alive()
            new = [r for r in dep.runs(dep.one) if r.dagster_run.run_id not in before]
            if new and new[0].dagster_run.status.value in ("SUCCESS", "FAILURE", "CANCELED"):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("deployed one-record run: no run ended")
            time.sleep(0.2)
        time.sleep(1.5)  # the process exits after its last event
        run = new[0]
        ev = dep.events(run.dagster_run.run_id)
        proc = procs.around(ev.get("PIPELINE_STARTING", 0), ev.get("PIPELINE_SUCCESS", time.time()))
        r = {"status": run.dagster_run.status.value, "launch_to_end_s": ev["PIPELINE_SUCCESS"] -
             ev["PIPELINE_STARTING"], "process_s": None if proc is None else proc[1] - proc[0],
             "launch_to_process_start_s": None if proc is None else proc[0] - ev["PIPELINE_STARTING"],
             "split": _split(ev), "timeline": dep.timeline(run.dagster_run.run_id)}
        say(f"deployed one-record run through the launcher{' (warm-up)' if i == 0 else ''}: process "
            f"{r['process_s']}, launch → end {r['launch_to_end_s']:.1f}s; {r['split']}")
        out.append(r)
    return out[1:]


def one_record_continuous(dep: Deployment, kafka: KafkaResource, repeats: int) -> list[dict]:
    """Arm continuous: a one-record window `repeats` times, produced an hour old into the topic whose long-lived run
    is up: from the produce call to its window's materialization event (written after the manifest's commit)."""
    import dagster as dg

    wl.create_topic(kafka, dep.one, partitions=1)
    key = archive_asset_key(dep.one)
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not any(r.dagster_run.status == dg.DagsterRunStatus.STARTED for r in dep.runs(dep.one)):
        dep.alive()
        if time.monotonic() > deadline:
            raise RuntimeError("deployed continuous: the topic's run did not start")
        time.sleep(0.2)
    out = []
    for i in range(repeats + 1):  # the first is a warm-up (the run's first job: its JVM's class loading and JIT)
        window = OffsetWindow(0, i, i + 1).key
        t0 = time.time()
        produce_aged(kafka, dep.one, 1, start=i, partitions=1)
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while True:
            dep.alive()
            got = dep.instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key, asset_partitions=[window]),
                                                      limit=1).records
            if got:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"deployed continuous: window {window} not materialized")
            time.sleep(0.05)
        meta = got[0].asset_materialization.metadata if got[0].asset_materialization else {}
        r = {"produce_to_materialized_s": got[0].timestamp - t0,
             "window_seconds": meta["seconds"].value if "seconds" in meta else None}
        say(f"deployed continuous one-record window{' (warm-up)' if i == 0 else ''}: produce → materialized "
            f"{r['produce_to_materialized_s']:.2f}s (the window's write and commit {r['window_seconds']}s)")
        out.append(r)
    return out[1:]


def cli_runs(dep: Deployment, kafka: KafkaResource, repeats: int) -> list[dict]:
    """A one-record window `repeats` times through `dagster asset materialize` (the whole command)."""
    wl.create_topic(kafka, dep.cli, partitions=1)
    out = []
    for i in range(repeats):
        produce_aged(kafka, dep.cli, 1, start=i, partitions=1)
        key = OffsetWindow(0, i, i + 1).key
        dep.instance.add_dynamic_partitions(window_partitions(dep.cli).name, [key])
        s = dep.dagster("asset", "materialize", "-m", "s3_archive.definitions", "--select", f"kafka_archive/{dep.cli}",
                        "--partition", key, log="materialize.log")
        out.append({"seconds": s})
        say(f"deployed one-record run through `dagster asset materialize`: {s:.1f}s")
    return out


def sustained(dep: Deployment, kafka: KafkaResource, rates: list[float], hold_s: float) -> dict[str, Any]:
    """Each rate (MB/s) for `hold_s` s into dep.live, lag sampled each second, until one is not kept up with."""
    wl.create_topic(kafka, dep.live)
    pool = list(wl.records(4096))
    size = wl.record_bytes()
    producer = kafka.producer(**wl.PRODUCER_CONF)
    steps, produced, best = [], 0, None
    for rate in rates:
        per_s = rate * 1e6 / size
        t0 = time.monotonic()
        samples: list[tuple[float, int]] = []
        next_sample = t0
        sent_at_start = produced
        while (now := time.monotonic()) < t0 + hold_s:
            due = int((now - t0) * per_s) - (produced - sent_at_start)
            for _ in range(min(due, 20_000)):
                p, k, v, h = pool[produced % len(pool)]
                while True:
                    try:
                        producer.produce(dep.live, value=v, key=k, headers=h, partition=produced % wl.PARTITIONS)
                        break
                    except BufferError:
                        producer.poll(0.01)
                produced += 1
            producer.poll(0)
            if now >= next_sample:
                ends = kafka.offsets(dep.live, "latest")
                samples.append((now - t0, lag(kafka, dep.group_of(dep.live), dep.live, ends) * size))
                next_sample += 1.0
                dep.alive()
            elif due <= 0:
                time.sleep(0.005)
        producer.flush(60)
        achieved = (produced - sent_at_start) * size / 1e6 / hold_s
        slope = lag_trend(samples, hold_s)
        kept = achieved >= 0.9 * rate and slope < LAG_SLOPE_SHARE * rate * 1e6
        step = {"rate_mb_s": rate, "produced_mb_s": round(achieved, 1), "lag_slope_mb_s": round(slope / 1e6, 2),
                "lag_max_mb": round(max(b for _, b in samples) / 1e6, 1), "lag_end_mb": round(samples[-1][1] / 1e6, 1),
                "kept": kept, "lag_mb": [(round(t, 1), round(b / 1e6, 1)) for t, b in samples]}
        steps.append(step)
        say(f"deployed sustained {rate} MB/s (produced {achieved:.1f}): lag slope {step['lag_slope_mb_s']} MB/s, "
            f"max {step['lag_max_mb']} MB: {'kept' if kept else 'NOT kept'}")
        if not kept:
            break
        best = rate
    return {"hold_s": hold_s, "best_mb_s": best, "steps": steps}


def troughs(samples: list[tuple[float, int]]) -> list[tuple[float, int]]:
    """The lowest lag after each drop of a sawtooth: each sample below the one before and not above the one after."""
    return [samples[i] for i in range(1, len(samples))
            if samples[i][1] < samples[i - 1][1] and (i + 1 == len(samples) or samples[i + 1][1] >= samples[i][1])]


def lag_trend(samples: list[tuple[float, int]], hold_s: float) -> float:
    """How fast the lag grows (bytes per second) over a hold: the slope of its troughs, which a slope of all the
    samples over part of a sawtooth misreads by where in its period the part begins; with fewer than two troughs,
    or none in the hold's second half (no window committed since), the slope of the second half's samples."""
    low = troughs(samples)
    if len(low) >= 2 and low[-1][0] >= hold_s / 2:
        return _slope(low)
    return _slope([s for s in samples if s[0] >= hold_s / 2])


def _slope(points: list[tuple[float, int]]) -> float:
    """Least-squares slope of (t, bytes) in bytes per second (0 with fewer than two points)."""
    if len(points) < 2:
        return 0.0
    mt = sum(t for t, _ in points) / len(points)
    mb = sum(b for _, b in points) / len(points)
    den = sum((t - mt) ** 2 for t, _ in points)
    return sum((t - mt) * (b - mb) for t, b in points) / den if den else 0.0


def warm_archive(s: Setup, topic: str, window_records: int) -> dict[str, Any]:
    """The same bytes archived by the warm worker (after one archive of the same windows, not counted): the page's
    warm figure, same run."""
    ends = s.kafka.offsets(topic, "latest")
    windows = [[w.partition, w.start, w.end] for w in wl.windows_for(ends, window_records)]
    worker = SparkWorker(s.stack, s.logs / "deployed-warm.log",
                         s.kept / "deployed-warm.log")
    try:
        worker.warm_up(topic, "deployed-warmup/", windows, ("librdkafka",))
        out = worker.call(cmd="archive", topic=topic, prefix="deployed-warm/", windows=windows)
    finally:
        worker.stop()
    wl.empty_prefix(s.s3, BUCKET, "deployed-warm/")
    wl.empty_prefix(s.s3, BUCKET, "deployed-warmup/")
    say(f"deployed: the warm archive of the same {out['records']:,} records: {out['seconds']:.1f}s")
    return out


def run(s: Setup, root: Path, repeats: int = 2, rates: list[float] | None = None, hold_s: float = DEPLOYED_HOLD_S,
        arms: tuple[str, ...] = ARMS) -> dict[str, Any]:
    """The deployed figures at the Setup's size (its broker and moto; the backlog is its record count), per arm
    (a deployment of its own each, one after the other), and the warm archive of the first arm's backlog."""
    out: dict[str, Any] = {"arms": {}}
    for arm in arms:
        fig: dict[str, Any] = {}
        out["arms"][arm] = fig
        with ExitStack() as cleanup:
            try:
                dep = Deployment(root / arm, s.stack, cleanup, arm)
                procs = cleanup.enter_context(RunProcesses())
                dep.sensor("start")
                # One-record runs first: the first (not counted) is what a kept Spark Connect server's first job
                # costs, which a deployment pays once, not per catch-up.
                if dep.continuous:  # no run per window: the topic's run is up; no CLI run (arm local has it)
                    fig["one_continuous"] = one_record_continuous(dep, s.kafka, repeats)
                else:
                    fig["one_launcher"] = one_record_runs(dep, s.kafka, procs, repeats)
                    fig["one_cli"] = cli_runs(dep, s.kafka, repeats)
                fig["catch_up"] = catch_up(dep, s.kafka, s.records)
                if "warm" not in out:
                    out["warm"] = warm_archive(s, dep.backlog, s.window_records)
                if rates:
                    fig["sustained"] = sustained(dep, s.kafka, rates, hold_s)
            except Exception as e:  # shown on the page; the rest of the benchmark stands
                say(f"deployed ({arm}) FAILED: {type(e).__name__}: {str(e)[:2000]}")
                fig["error"] = f"{type(e).__name__}: {e}"
                fig["daemon_log_tail"] = read_text(root / arm / "daemon.log")[-4000:]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=200)
    ap.add_argument("--repeats", type=int, default=2, help="one-record runs per path")
    ap.add_argument("--rates", default=",".join(map(str, DEPLOYED_RATES_MB_S)), help="MB/s, rising; '' skips sustained")
    ap.add_argument("--hold-s", type=float, default=DEPLOYED_HOLD_S)
    ap.add_argument("--arms", default=",".join(ARMS), help=f"of {', '.join(ARMS)}")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    with temporary_stack("s3a-bench-deployed-", BUCKET, remove=not args.keep) as (broker, moto, root):
        kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers, timeout_s=30)
        logs = root / "logs"
        logs.mkdir()
        n = wl.records_for_mb(args.mb)
        s = Setup(stack={"bootstrap_servers": broker.bootstrap_servers, "s3_endpoint_url": moto.endpoint_url,
                         "bucket": BUCKET, "remote": None}, kafka=kafka, s3=local_s3_client(moto.endpoint_url),
                  logs=logs, kept=root / "kept", moto_log=root / "moto" / "moto.log", records=n,
                  payload=n * wl.record_bytes(), ends={}, windows=[], per_partition=n // wl.PARTITIONS,
                  window_records=min(100_000, n // wl.PARTITIONS))
        rates = [float(r) for r in args.rates.split(",") if r]
        out = run(s, root / "deployed", args.repeats, rates, args.hold_s, tuple(args.arms.split(",")))
    text = json.dumps(out, indent=2, default=str)
    if args.json:
        args.json.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
