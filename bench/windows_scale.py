"""Years of windows: a Dagster instance on PostgreSQL holding 1M archived windows of a 32-partition
topic (~7 months of 10-minute windows), measured as the deployed shape sees it.

    .venv/bin/python -m bench.windows_scale [--windows 1000000] [--partitions 32] [--live-days 7] [--json FILE]

`run()` returns a dict of figures (for `make bench`). It starts its own Kafka broker, moto server and PostgreSQL
(s3_archive.local), fills the instance, and measures two states of the same 1M windows:

- `retired` (the default, `retire_after_days: 7`): the last 7 days of windows are dynamic partitions and have their
  materializations in the event log; the older ones are retired (one range per Kafka partition in the retirement
  record), and the runs that materialized them deleted, as the daily retirement leaves it;
- `all_live` (`retire_after_days: null`, the shape before retirement): all 1M windows are dynamic partitions with
  their materializations.

In each: the offsets sensor's tick (with no cursor, i.e. a lost one, which reads every key; with the cursor of the
previous tick; and the tick after the daemon added that tick's windows), the four checks in one step, the UI's
partition-status query (the asset page's `PartitionHealthQuery`, over HTTP from a `dagster-webserver` on the
instance: the first query after a change of the partition set, then a repeat), and a fresh process loading the
definitions. Windows are 1 offset long here (1M records in Kafka instead of billions): the sensor's and the
checks' costs depend on how many windows there are, not on their size.

Filling: partition keys through the public `add_dynamic_partitions` in chunks of 10 000; materializations through
the event log storage's batch write (`store_event_batch`, the path Dagster's own batched event writes take), built
with `dagster._core.events.StepMaterializationData` (bench only: the product imports no private Dagster API). The S3
side of the checks and of retirement (one GET per manifest, one HEAD per object) is not filled: moto holds no
manifest, so the objects check reports every live materialized window as "no manifest"; its instance side is what
is measured here.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import shlex
import shutil
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.common import machine, machine_at_end
from bench.config import BUCKET, ROOT, WINDOW_MINUTES, WINDOWS, WINDOWS_LIVE_DAYS, WINDOWS_PARTITIONS
from bench.config import WINDOWS_TOPIC as TOPIC
from bench.under_test import (
    LOCAL_AWS,
    ArchiveConfig,
    KafkaResource,
    OffsetWindow,
    PostgresServer,
    Retired,
    TopicView,
    archive_asset_key,
    contiguity_result,
    evaluate,
    free_port,
    headroom_result,
    local_s3_client,
    objects_result,
    record_retired,
    retention_result,
    spawn,
    stop_pid,
    temporary_stack,
    wait_until,
    window_partitions,
)

CHUNK = 10_000
EVENT_BATCH = 2_000

PARTITION_HEALTH_QUERY = """
query PartitionHealthQuery($assetKey: AssetKeyInput!) {
  assetNodeOrError(assetKey: $assetKey) {
    ... on AssetNode {
      id
      partitionKeysByDimension { name type partitionKeys }
      assetPartitionStatuses {
        ... on TimePartitionStatuses { ranges { status startTime endTime startKey endKey } }
        ... on DefaultPartitionStatuses { materializedPartitions materializingPartitions failedPartitions }
      }
    }
  }
}"""


def say(msg: str) -> None:
    print(f"[windows {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _keys_in_time_order(per: int, partitions: int, first: int = 0, last: int | None = None) -> Iterator[OffsetWindow]:
    """Windows i = first..last-1 of every partition, tick by tick (the order the sensor adds them)."""
    for i in range(first, per if last is None else last):
        for p in range(partitions):
            yield OffsetWindow(p, i, i + 1)


def _metadata(w: OffsetWindow) -> dict[str, Any]:
    """A window's materialization metadata as the archive asset writes it (archive/window.py)."""
    return {"outcome": "committed", "records": 1, "bytes_read": 1200, "bytes_written": 900, "objects": 1,
            "first_offset": w.start, "last_offset": w.start, "min_timestamp": "2026-01-01T00:00:00.000+00:00",
            "max_timestamp": "2026-01-01T00:00:00.000+00:00", "absent_offsets": 0, "lost_offsets": 0,
            "undecodable_records": 0, "seconds": 1.234, "records_per_second": 0.8,
            "manifest": f"s3://{BUCKET}/_manifests/{TOPIC}/{w.key}.json"}


def _store_materializations(home: str, windows: list[OffsetWindow], start: datetime) -> None:
    """One materialization per window, timestamped every 10 minutes per partition from `start` (a worker)."""
    import dagster as dg
    from dagster._core.events import StepMaterializationData

    key = archive_asset_key(TOPIC)
    t = time.monotonic()
    run_id = str(uuid.uuid4())
    instance = dg.DagsterInstance.from_config(home)
    for i in range(0, len(windows), EVENT_BATCH):
        batch = []
        for j, w in enumerate(windows[i:i + EVENT_BATCH]):
            if (i + j) % 8 == 0:  # windows_per_run 8: a run per 8 windows
                run_id = str(uuid.uuid4())
            ts = (start + timedelta(minutes=WINDOW_MINUTES * w.start)).timestamp()
            event = dg.DagsterEvent(
                event_type_value=dg.DagsterEventType.ASSET_MATERIALIZATION.value, job_name="__ASSET_JOB",
                step_key="kafka_archive__bench_windows",
                event_specific_data=StepMaterializationData(
                    dg.AssetMaterialization(asset_key=key, partition=w.key, metadata=_metadata(w))))
            batch.append(dg.EventLogEntry(user_message="", level=logging.INFO, job_name="__ASSET_JOB", run_id=run_id,
                                          error_info=None, timestamp=ts, step_key=event.step_key,
                                          dagster_event=event))
        instance.event_log_storage.store_event_batch(batch)
        if (i // EVENT_BATCH) % 50 == 0:
            say(f"  {i + len(batch)} of {len(windows)} materializations ({time.monotonic() - t:.0f}s)")
    instance.dispose()


def fill_materializations(home: Path, windows: list[OffsetWindow], start: datetime, workers: int = 2) -> float:
    """The materializations of `windows`, written by `workers` processes (serializing events is CPU-bound)."""
    from concurrent.futures import ProcessPoolExecutor

    t = time.monotonic()
    # Whole runs per worker: windows_per_run 8 keeps a run's windows in one worker.
    step = -(-len(windows) // workers // 8) * 8
    # spawn, not fork: the parent's instance holds open database connections.
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        for f in [pool.submit(_store_materializations, str(home), windows[i:i + step], start)
                  for i in range(0, len(windows), step)]:
            f.result()
    return time.monotonic() - t


def add_partitions(instance: Any, windows: list[OffsetWindow]) -> float:
    t = time.monotonic()
    keys = [w.key for w in windows]
    for i in range(0, len(keys), CHUNK):
        instance.add_dynamic_partitions(window_partitions(TOPIC).name, keys[i:i + CHUNK])
    return time.monotonic() - t


def produce(kafka: Any, partitions: int, per: int) -> None:
    from confluent_kafka.admin import NewTopic

    admin = kafka.admin()
    for f in admin.create_topics([NewTopic(TOPIC, partitions, 1)]).values():
        f.result(timeout=60)
    producer = kafka.producer(**{"linger.ms": 50, "batch.size": 1 << 20})
    for p in range(partitions):
        for i in range(per):
            while True:
                try:
                    producer.produce(TOPIC, value=b"x", partition=p)
                    break
                except BufferError:
                    producer.poll(0.1)
            if i % 20_000 == 0:
                producer.poll(0)
    producer.flush(300)


def produce_more(kafka: Any, partitions: int, n: int) -> None:
    producer = kafka.producer()
    for p in range(partitions):
        for _ in range(n):
            producer.produce(TOPIC, value=b"x", partition=p)
    producer.flush(60)


def sensor_ticks(instance: Any, kafka: Any, cfg: Any) -> dict[str, Any]:
    """Three ticks: no cursor (a lost one), the same cursor again, and after the daemon added the first tick's
    windows (the steady state: the keys read are the previous tick's)."""
    import dagster as dg

    out: dict[str, Any] = {}

    def tick(cursor: str | None) -> tuple[float, Any]:
        ctx = dg.build_sensor_context(instance=instance, resources={"kafka": kafka}, cursor=cursor)
        t = time.monotonic()
        r = evaluate(ctx, kafka, cfg)
        return time.monotonic() - t, r

    out["lost_cursor_s"], first = tick(None)
    out["cut_windows"] = sum(len(r.partition_keys) for r in first.dynamic_partitions_requests or [])
    out["same_cursor_s"], _ = tick(first.cursor)
    for req in first.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
    out["next_tick_s"], nxt = tick(first.cursor)
    out["next_tick_cut"] = sum(len(r.partition_keys) for r in nxt.dynamic_partitions_requests or [])
    out["next_tick_profile"] = profiled(lambda: tick(first.cursor))  # the same tick again, under cProfile
    return out


def profiled(fn: Any, top: int = 12) -> str:
    """cProfile of `fn()`, the top entries by cumulative time."""
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    prof.runcall(fn)
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def checks(instance: Any, kafka: Any, s3: Any, cfg: Any) -> dict[str, Any]:
    """The four checks of the topic as its one step runs them (one TopicView)."""
    view = TopicView(instance, TOPIC)
    out: dict[str, Any] = {}
    t0 = time.monotonic()
    for name, fn in (("windows_contiguous", lambda: contiguity_result(instance, TOPIC, view)),
                     ("objects_match_manifests", lambda: objects_result(instance, s3, cfg, TOPIC, view=view)),
                     ("nothing_lost_to_retention", lambda: retention_result(instance, kafka, TOPIC, view)),
                     ("retention_headroom", lambda: headroom_result(instance, kafka, cfg, TOPIC, view))):
        t = time.monotonic()
        r = fn()
        out[f"{name}_s"] = round(time.monotonic() - t, 3)
        out[f"{name}_passed"] = r.passed
    out["total_s"] = round(time.monotonic() - t0, 3)
    return out


@contextmanager
def webserver(env: dict[str, str], log: Path) -> Iterator[str]:
    port = free_port()
    proc = spawn([sys.executable, "-m", "dagster_webserver", "-h", "127.0.0.1", "-p", str(port),
                  "-m", "s3_archive.definitions"], log, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        def ready() -> bool:
            with urllib.request.urlopen(f"{url}/server_info", timeout=2):
                return True
        wait_until(ready, 180, proc, "dagster-webserver", log)
        yield url
    finally:
        stop_pid(proc.pid)


def status_query(url: str) -> tuple[float, int, int]:
    """Seconds, response bytes, and partition keys of one PartitionHealthQuery."""
    body = json.dumps({"query": PARTITION_HEALTH_QUERY, "variables": {"assetKey": {"path": ["kafka_archive", TOPIC]}}})
    req = urllib.request.Request(f"{url}/graphql", data=body.encode(), headers={"Content-Type": "application/json"})
    t = time.monotonic()
    with urllib.request.urlopen(req, timeout=600) as r:
        raw = r.read()
    secs = time.monotonic() - t
    data = json.loads(raw)
    assert "errors" not in data, str(data)[:500]
    node = data["data"]["assetNodeOrError"]
    return secs, len(raw), len(node["partitionKeysByDimension"][0]["partitionKeys"])


def ui_queries(url: str, instance: Any) -> dict[str, Any]:
    """The asset page's partition query: after a change of the partition set (the status cache is rebuilt), again
    (cached), and after one more tick's worth of windows."""
    out: dict[str, Any] = {}
    out["first_s"], out["bytes"], out["partition_keys"] = status_query(url)
    out["repeat_s"], _, _ = status_query(url)
    name = window_partitions(TOPIC).name
    extra = [f"bench-extra-{uuid.uuid4().hex[:8]}"]  # not a window; only to change the partition set, then removed
    instance.add_dynamic_partitions(name, extra)
    out["after_new_partition_s"], _, _ = status_query(url)
    instance.delete_dynamic_partition(name, extra[0])
    return out


def status_cache_profile(instance: Any) -> str:
    """cProfile of the asset's partition status cache being rebuilt after a change of its partition set (what the
    first UI query after a tick pays), the top entries by cumulative time."""
    from dagster._core.storage.partition_status_cache import get_and_update_asset_status_cache_value

    name = window_partitions(TOPIC).name
    extra = f"bench-profile-{uuid.uuid4().hex[:8]}"
    instance.add_dynamic_partitions(name, [extra])
    try:
        return profiled(lambda: get_and_update_asset_status_cache_value(instance, archive_asset_key(TOPIC),
                                                                        window_partitions(TOPIC)))
    finally:
        instance.delete_dynamic_partition(name, extra)


def range_run_keys(instance: Any) -> dict[str, Any]:
    """What a range run (the sensor's runs of windows_per_run windows, a backfill's runs) pays to resolve its keys:
    Dagster reads the whole partition set to slice the range from it."""
    import dagster as dg
    from dagster._core.definitions.partitions.context import partition_loading_context

    pdef = window_partitions(TOPIC)
    page = instance.get_paginated_dynamic_partitions(pdef.name, limit=8, ascending=False)
    last, first = page.results[0], page.results[-1]
    t = time.monotonic()
    with partition_loading_context(dynamic_partitions_store=instance):  # how a run worker resolves its range
        keys = pdef.get_partition_keys_in_range(dg.PartitionKeyRange(first, last))
    return {"seconds": round(time.monotonic() - t, 3), "keys": len(keys)}


def definitions_load(env: dict[str, str]) -> float:
    code = "import time; t = time.monotonic(); import s3_archive.definitions; print(time.monotonic() - t)"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return float(done.stdout.strip().splitlines()[-1])


def measure(label: str, instance: Any, kafka: Any, s3: Any, cfg: Any, env: dict[str, str], root: Path
            ) -> dict[str, Any]:
    say(f"{label}: sensor ticks")
    out: dict[str, Any] = {"sensor": sensor_ticks(instance, kafka, cfg)}
    say(f"{label}: checks")
    out["checks"] = checks(instance, kafka, s3, cfg)
    out["range_run_keys"] = range_run_keys(instance)
    say(f"{label}: the UI's partition status query")
    with webserver(env, root / f"webserver-{label}.log") as url:
        out["ui_query"] = ui_queries(url, instance)
    out["definitions_load_s"] = definitions_load(env)
    say(f"{label}: {json.dumps(out)}")
    out["status_cache_profile"] = status_cache_profile(instance)
    return out


def run(windows: int = WINDOWS, partitions: int = WINDOWS_PARTITIONS, live_days: float = WINDOWS_LIVE_DAYS,
        keep: bool = False) -> dict[str, Any]:
    import dagster as dg

    t0 = time.monotonic()
    per = windows // partitions
    if per < 2:
        raise ValueError(f"--windows must be at least 2 per partition ({2 * partitions}), got {windows}")
    live_per = min(per - 1, int(live_days * 24 * 60 / WINDOW_MINUTES))
    out: dict[str, Any] = {"windows": per * partitions, "partitions": partitions, "window_minutes": WINDOW_MINUTES,
                           "live_days": live_days, "live_windows": live_per * partitions}
    with ExitStack() as stack:
        broker, moto, root = stack.enter_context(temporary_stack("s3a-bench-windows-", BUCKET, remove=not keep))
        pg = PostgresServer(root / "postgres")
        pg.start()
        stack.callback(pg.stop)
        kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers)
        say(f"producing {per * partitions + 2 * partitions} one-byte records ({per} windows + 2 per partition)")
        produce(kafka, partitions, per + 2)
        home = root / "dagster_home"
        home.mkdir()
        shutil.copyfile(ROOT / "deploy" / "dagster.postgres.yaml", home / "dagster.yaml")
        config = root / "archives.yaml"
        config.write_text(json.dumps({"archives": [{"name": "bench", "topics": [TOPIC], "bucket": BUCKET,
                                                    "flush": {"count": 1, "interval_seconds": None}}]}))
        env = {**os.environ, **pg.env(), **LOCAL_AWS, "DAGSTER_HOME": str(home), "S3_ARCHIVE_CONFIG": str(config),
               "S3_ARCHIVE_ENV": "local", "S3_ARCHIVE_KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap_servers,
               "S3_ARCHIVE_S3_ENDPOINT_URL": moto.endpoint_url, "S3_ARCHIVE_STATE_DIR": str(root / "state")}
        os.environ.update({k: env[k] for k in pg.env()})
        cfg = ArchiveConfig(name="bench", topics=[TOPIC], bucket=BUCKET, flush={"count": 1, "interval_seconds": None})
        s3 = local_s3_client(moto.endpoint_url)
        instance = stack.enter_context(dg.DagsterInstance.from_config(str(home)))
        every = list(_keys_in_time_order(per, partitions))
        start = datetime.now(UTC) - timedelta(minutes=WINDOW_MINUTES * per)
        old, live = every[:(per - live_per) * partitions], every[(per - live_per) * partitions:]
        say(f"retired state: {len(live)} live windows and their materializations; {len(old)} retired")
        out["fill_live_materializations_s"] = round(fill_materializations(home, live, start), 1)
        out["fill_live_partitions_s"] = round(add_partitions(instance, live), 1)
        record_retired(instance, TOPIC, Retired({p: OffsetWindow(p, 0, per - live_per) for p in range(partitions)},
                                                len(old)), "bench: windows before the horizon retired")
        out["retired"] = measure("retired", instance, kafka, s3, cfg, env, root)

        say(f"all-live state: the {len(old)} older windows and their materializations back (retirement off)")
        out["fill_old_materializations_s"] = round(fill_materializations(home, old, start), 1)
        out["fill_old_partitions_s"] = round(add_partitions(instance, old), 1)
        record_retired(instance, TOPIC, Retired({}, 0), "bench: retirement off")
        produce_more(kafka, partitions, 2)  # so that this state's first tick cuts windows too
        # What retirement's instance side costs per window (the S3 side is a GET and a HEAD per window).
        sample = old[:2000]
        t = time.monotonic()
        for w in sample:
            instance.delete_dynamic_partition(window_partitions(TOPIC).name, w.key)
        out["delete_partition_ms"] = round((time.monotonic() - t) / len(sample) * 1000, 3)
        add_partitions(instance, sample)
        out["all_live"] = measure("all_live", instance, kafka, s3, cfg, env, root)
        with pg.connect(pg.database) as conn, conn.cursor() as cur:
            cur.execute("SELECT pg_database_size(current_database())")
            out["postgres_mib"] = round(cur.fetchone()[0] / 2**20, 1)
    out["seconds"] = round(time.monotonic() - t0, 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--windows", type=int, default=WINDOWS)
    ap.add_argument("--partitions", type=int, default=WINDOWS_PARTITIONS)
    ap.add_argument("--live-days", type=float, default=WINDOWS_LIVE_DAYS)
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, data)")
    ap.add_argument("--json", type=Path, help="also write the figures (with the machine) to this file")
    args = ap.parse_args()
    mach = machine()
    fig = run(args.windows, args.partitions, args.live_days, args.keep)
    machine_at_end(mach)
    fig |= {"machine": mach, "command": shlex.join(["python", "-m", "bench.windows_scale", *sys.argv[1:]])}
    if args.json:
        args.json.write_text(json.dumps(fig, indent=2) + "\n")
    print(json.dumps(fig, indent=2))


if __name__ == "__main__":
    main()
