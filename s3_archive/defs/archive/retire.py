"""Window retirement: per archive, a daily job that takes windows older than `retire_after_days` out of the
Dagster instance's partition set once their manifests are verified (docs/windows.md).

The manifests in S3 stay the record of every window; the instance keeps the retired offsets per Kafka partition as
one range (windows.py), written before the partitions are deleted. Then the runs whose every materialization is of
a retired window are deleted (their events with them): Dagster reads an asset's materializations whole whenever its
partition set changes, so the event log must stay the horizon's size too, not only the partition set.

The job reads every live key once, and for the windows it may retire one manifest GET and one HEAD per object (8 at
a time), so a day's windows cost a day's requests.
"""

# No `from __future__ import annotations`: Dagster reads the context and resource annotations at definition time.

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import dagster as dg

from s3_archive.archive.retire import extend, retire_candidates
from s3_archive.config.archive import ArchiveConfig
from s3_archive.defs.archive.partitions import archive_asset_key, window_partitions
from s3_archive.defs.archive.windows import Retired, read_retired, read_windows, record_retired
from s3_archive.io.s3 import read_manifest, verify_manifest
from s3_archive.io.s3_resource import S3Resource
from s3_archive.keys.objects import manifest_key
from s3_archive.model.errors import InvalidManifest
from s3_archive.model.windows import InvalidWindow, OffsetWindow

RETIRE_CRON = "30 5 * * *"  # daily, before the checks (06:00 UTC), which then see the retired ranges
READERS = 8  # manifests read (and objects HEADed) at once
BATCH = 1000  # windows per retirement record + deletes: a run cut short keeps what it did
# Windows retired per topic and run: a day's windows are far fewer; an instance with a long history (retirement
# turned on late) catches up over a few daily runs instead of one run of hours.
MAX_PER_RUN = 50_000


def retire_job_name(cfg: ArchiveConfig) -> str:
    return f"archive_{cfg.name}_retire_windows"


@dataclass
class Retirement:
    retired: int  # windows retired by this run
    kept: dict[int, str]  # per Kafka partition with candidates left: why the next one stays
    runs_deleted: int = 0


def retired_runs(instance: dg.DagsterInstance, topic: str, retired: Retired, keys: list[str]) -> list[str]:
    """The finished runs that materialized any of `keys` and nothing but windows of `topic` now retired."""
    asset_key = archive_asset_key(topic)
    run_ids: set[str] = set()
    for i in range(0, len(keys), 500):
        cursor = None
        while True:
            page = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=asset_key,
                                                                         asset_partitions=keys[i:i + 500]),
                                                   limit=1000, cursor=cursor)
            run_ids |= {r.run_id for r in page.records if r.run_id}
            if not page.has_more:
                break
            cursor = page.cursor
    out = []
    for run_id in sorted(run_ids):
        run = instance.get_run_by_id(run_id)
        if run is None or not run.is_finished:
            continue
        records = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION,
                                               limit=10_000).records
        if all(r.asset_key == asset_key and r.partition_key is not None and _retired_key(retired, r.partition_key)
               for r in records):
            out.append(run_id)
    return out


def _retired_key(retired: Retired, key: str) -> bool:
    try:
        return retired.covers(OffsetWindow.parse(key))
    except InvalidWindow:
        return False


def _verdict(s3: Any, cfg: ArchiveConfig, topic: str, w: OffsetWindow, horizon: datetime) -> str | None:
    """None when w may be retired, else why not."""
    try:
        m = read_manifest(s3, cfg.bucket, manifest_key(cfg.prefix, topic, w))
    except InvalidManifest as e:
        return str(e)
    if m is None:
        return f"window {w.key} has no manifest (not committed)"
    if m.committed_time > horizon:
        return f"window {w.key} was committed at {m.committed_at}, within retire_after_days"
    problems = verify_manifest(s3, cfg.bucket, m)
    return f"window {w.key}: {problems[0]}" if problems else None


def retire_topic(instance: dg.DagsterInstance, s3: Any, cfg: ArchiveConfig, topic: str, now: datetime,
                 log: Any) -> Retirement:
    """Retire the topic's windows committed before now - retire_after_days whose objects are intact."""
    assert cfg.retire_after_days is not None
    horizon = now - timedelta(days=cfg.retire_after_days)
    windows, _ = read_windows(instance, topic)
    retired = read_retired(instance, topic)
    accepted: list[OffsetWindow] = []
    kept: dict[int, str] = {}
    with ThreadPoolExecutor(max_workers=READERS) as pool:
        def verdicts(ws: list[OffsetWindow]) -> list[str | None]:
            return list(pool.map(lambda w: _verdict(s3, cfg, topic, w, horizon), ws))

        for p, (inside, run) in retire_candidates(windows, retired.ranges).items():
            room = MAX_PER_RUN - len(accepted)
            if len(inside) + len(run) > room:
                kept[p] = f"at most {MAX_PER_RUN} windows are retired per run and topic; the next run goes on"
                inside, run = inside[:room], run[:max(0, room - len(inside))]
            accepted += [w for w, v in zip(inside, verdicts(inside)) if v is None]
            # The continuing windows in offset order, a page at a time: stop at the first that must stay.
            for i in range(0, len(run), 4 * READERS):
                page = run[i:i + 4 * READERS]
                vs = verdicts(page)
                stop = next((j for j, v in enumerate(vs) if v is not None), None)
                accepted += page[:stop]
                if stop is not None:
                    kept[p] = vs[stop]
                    break
    name = window_partitions(topic).name
    ranges = dict(retired.ranges)
    count = retired.windows
    for i in range(0, len(accepted), BATCH):
        chunk = accepted[i:i + BATCH]
        count += sum(not Retired(ranges).covers(w) for w in chunk)  # a window added back was counted already
        for w in chunk:
            ranges[w.partition] = extend(ranges.get(w.partition), w)
        # The record first: a run cut short between the two leaves windows retired and live, never a hole.
        record_retired(instance, topic, Retired(ranges, count),
                       f"{len(chunk)} windows committed before {horizon.isoformat()} retired from the partition set "
                       "(their manifests stay the record)")
        for w in chunk:
            instance.delete_dynamic_partition(name, w.key)
        log.info(f"topic {topic!r}: retired {i + len(chunk)} of {len(accepted)} windows")
    runs = retired_runs(instance, topic, Retired(ranges, count), [w.key for w in accepted]) if accepted else []
    for run_id in runs:
        instance.delete_run(run_id)
    if runs:
        log.info(f"topic {topic!r}: deleted {len(runs)} runs that materialized only retired windows")
    return Retirement(len(accepted), kept, len(runs))


def build_retire_schedule(cfg: ArchiveConfig) -> tuple[dg.JobDefinition, dg.ScheduleDefinition]:
    """The archive's retirement job (one op over its topics) and its daily schedule (running by default: it is what
    keeps the partition set bounded)."""

    @dg.op(name=f"archive_{cfg.name}_retire", description=f"Retire windows of {', '.join(cfg.topics)} committed more "
                                                           f"than {cfg.retire_after_days:g} days ago.")
    def _retire(context: dg.OpExecutionContext, s3: S3Resource) -> None:
        client = s3.get_client()
        now = datetime.now(UTC)
        for topic in cfg.topics:
            r = retire_topic(context.instance, client, cfg, topic, now, context.log)
            context.log.info(f"topic {topic!r}: {r.retired} windows retired, {r.runs_deleted} runs deleted"
                             + "".join(f"; partition {p} keeps the rest: {why}" for p, why in sorted(r.kept.items())))

    @dg.job(name=retire_job_name(cfg), description=f"Window retirement of archive {cfg.name!r} (docs/windows.md).")
    def _job() -> None:
        _retire()

    schedule = dg.ScheduleDefinition(name=f"{retire_job_name(cfg)}_daily", cron_schedule=RETIRE_CRON, job=_job,
                                     execution_timezone="UTC", default_status=dg.DefaultScheduleStatus.RUNNING)
    return _job, schedule
