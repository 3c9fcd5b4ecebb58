"""The offsets sensor's upkeep beside cutting windows (docs/sensors.md, "Upkeep"): which windows are still open (not
seen committed), the windows of failed runs requested again, committed windows whose manifests are gone archived
again, and the verdicts of the checks `manifests_present` and `archive_fresh` reported from the tick. The sweeps that
find lost manifests and records waiting too long are archive/sweep.py's; this is their Dagster side.

What it remembers is in the sensor's cursor (archive/cursor.py): per topic the open windows and the last
materialization read. A partition's committed offsets are then everything from its first window to the end of its
last one that is not open — known from the cursor and one incremental read of the instance per tick, not from every
window's status. A lost cursor rebuilds the open windows from every key once.
"""

# No `from __future__ import annotations`: Dagster reads annotations of the resources at definition time.

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import dagster as dg

from s3_archive.archive.cursor import Open, SensorCursor
from s3_archive.archive.failures import rerun_delay
from s3_archive.archive.health import Verdict
from s3_archive.archive.plan import PartitionState
from s3_archive.archive.sweep import sweep_freshness, sweep_manifests
from s3_archive.config.archive import ArchiveConfig
from s3_archive.defs.archive.checks import FRESH, MANIFESTS, check_result
from s3_archive.defs.archive.instance import TopicView, materialized_windows, read_windows
from s3_archive.defs.archive.partitions import (
    CUT_TAG,
    GAVE_UP_TAG,
    PARTITION_TAG,
    RANGE_END,
    RANGE_START,
    RERUN_OF_TAG,
    RUN_ATTEMPT_TAG,
    TOPIC_TAG,
    archive_asset_key,
    window_partitions,
)
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.s3 import S3Client
from s3_archive.model.windows import OffsetWindow

FAILURES_PER_TICK = 200  # run failures read per tick at most


@dataclass
class Requests:
    """What the upkeep asks of the tick: runs, and check results to report."""

    runs: list[dg.RunRequest] = field(default_factory=list)
    events: list[dg.AssetCheckEvaluation] = field(default_factory=list)


# --- open windows ----------------------------------------------------------------------------------------------

def latest_materializations(instance: dg.DagsterInstance, topics: list[str]) -> dict[str, int]:
    """Per topic with any, the storage id of its latest materialization: one read of the asset records."""
    out = {}
    for record in instance.get_asset_records([archive_asset_key(t) for t in topics]) if topics else []:
        last = record.asset_entry.last_materialization_record
        if last is not None:
            out[record.asset_entry.asset_key.path[-1]] = last.storage_id
    return out


def track(instance: dg.DagsterInstance, cursor: SensorCursor, read: dict[str, list[OffsetWindow]],
          full: set[str]) -> None:
    """Windows the tick read, per topic: for a topic in `full` (every key read: a lost cursor) or not tracked yet,
    the open windows are rebuilt, every window never materialized (one read of the asset records for all of them,
    and of the materialized partitions of each that has any); else the keys not open yet (added by someone else
    than this sensor) are open unless they were materialized."""
    rebuild = sorted(t for t in read if t in full or t not in cursor.open)
    latest = latest_materializations(instance, rebuild)  # first: a commit between two reads is read again, not lost
    for topic in rebuild:
        windows = read[topic] if topic in full else read_windows(instance, topic)[0]
        done = instance.get_materialized_partitions(archive_asset_key(topic)) if topic in latest else set()
        cursor.open[topic] = Open(latest.get(topic), sorted(w.key for w in windows if w.key not in done))
    for topic, windows in read.items():
        if topic in rebuild:
            continue
        o = cursor.open[topic]
        known = set(o.keys)
        new = [w.key for w in windows if w.key not in known]
        if new:
            done = materialized_windows(instance, topic, new)
            o.keys = sorted(known | {k for k in new if k not in done})


def open_cut(cursor: SensorCursor, topic: str, windows: Iterable[OffsetWindow]) -> None:
    o = cursor.open.setdefault(topic, Open())
    o.keys = sorted(set(o.keys) | {w.key for w in windows})


def close(instance: dg.DagsterInstance, cursor: SensorCursor, topics: list[str]) -> None:
    """Close the open windows materialized since each topic's last read: one read of the asset records for all
    topics, then one read of the new materializations of each topic that has any."""
    busy = [t for t in topics if t in cursor.open]
    if not busy:
        return
    for record in instance.get_asset_records([archive_asset_key(t) for t in busy]):
        topic = record.asset_entry.asset_key.path[-1]
        o = cursor.open.get(topic)
        last = record.asset_entry.last_materialization_record
        if o is None or last is None or (o.seen is not None and last.storage_id <= o.seen):
            continue
        done: set[str] = set()
        page_cursor = None
        while True:
            page = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=archive_asset_key(topic), after_storage_id=o.seen), limit=1000,
                cursor=page_cursor, ascending=True)
            for r in page.records:
                if r.partition_key is not None:
                    done.add(r.partition_key)
                o.seen = max(o.seen or 0, r.storage_id)
            if not page.has_more:
                break
            page_cursor = page.cursor
        o.keys = [k for k in o.keys if k not in done]
        o.lost = [k for k in o.lost if k not in done]


# --- failed runs -------------------------------------------------------------------------------------------------

def run_windows(instance: dg.DagsterInstance, run: dg.DagsterRun, topic: str) -> list[str]:
    """The window keys a run archived: its partition, or its range of the topic's keys."""
    tags = run.tags
    if PARTITION_TAG in tags:
        return [tags[PARTITION_TAG]]
    if RANGE_START in tags and RANGE_END in tags:
        keys = list(instance.get_dynamic_partitions(window_partitions(topic).name))
        if tags[RANGE_START] in keys and tags[RANGE_END] in keys:
            return keys[keys.index(tags[RANGE_START]):keys.index(tags[RANGE_END]) + 1]
    return []


def run_topic(run: dg.DagsterRun, topics: set[str]) -> str | None:
    """The topic of `topics` an archive run is for: its tag (sensor runs), or its only asset (UI runs)."""
    if run.tags.get(TOPIC_TAG) in topics:
        return run.tags[TOPIC_TAG]
    keys = run.asset_selection or set()
    if len(keys) == 1:
        (key,) = keys
        if key.path[:-1] == archive_asset_key("").path[:-1] and key.path[-1] in topics:
            return key.path[-1]
    return None


def reruns(context: dg.SensorEvaluationContext, cfg: ArchiveConfig, cursor: SensorCursor, now: float,
           ) -> list[dg.RunRequest]:
    """The failed runs of the archive's windows, each requested again (same windows, same run shape) once its
    backoff passed, at most `retries.reruns` times and never after an error no retry can fix. A run whose windows
    were all committed since is left alone. The first tick starts at the latest failure: older ones are not
    requested again."""
    instance = context.instance
    if cursor.failures is None:
        latest = instance.fetch_run_status_changes(dg.DagsterEventType.RUN_FAILURE, limit=1)
        cursor.failures = latest.records[0].storage_id if latest.records else 0
        return []
    page = instance.fetch_run_status_changes(
        dg.RunStatusChangeRecordsFilter(event_type=dg.DagsterEventType.RUN_FAILURE, after_storage_id=cursor.failures),
        limit=FAILURES_PER_TICK, ascending=True)
    topics = set(cfg.topics)
    out = []
    # The cursor stays before the oldest failure still waiting out its backoff; the failures after it are handled
    # now, and again at later ticks until it is due (the same run key: Dagster launches a request once).
    held = False
    for record in page.records:
        run = instance.get_run_by_id(record.event_log_entry.run_id)
        topic = None if run is None else run_topic(run, topics)
        if run is None or topic is None:
            if not held:
                cursor.failures = record.storage_id
            continue
        attempt = int(run.tags.get(RUN_ATTEMPT_TAG, "1"))
        if run.tags.get(GAVE_UP_TAG):
            context.log.warning(f"run {run.run_id} of {topic!r} failed on an error no retry can fix; not requested "
                                "again (its failure says why; launch it again once that is fixed)")
        elif attempt > cfg.retries.reruns:
            context.log.warning(f"run {run.run_id} of {topic!r} failed, the {attempt}th run of its windows; "
                                f"retries.reruns is {cfg.retries.reruns}, so they are not requested again")
        else:
            due = record.event_log_entry.timestamp + rerun_delay(cfg.retries, attempt)
            if now < due:
                held = True
                continue
            keys = run_windows(instance, run, topic)
            waiting = set(keys) & set(cursor.open.get(topic, Open()).keys)
            if waiting:
                context.log.info(f"run {run.run_id} of {topic!r} failed (run {attempt} of its windows); "
                                 f"requesting its {len(keys)} windows again ({len(waiting)} not committed)")
                out.append(rerun_request(run, topic, attempt + 1))
        if not held:
            cursor.failures = record.storage_id
    return out


def rerun_request(run: dg.DagsterRun, topic: str, attempt: int) -> dg.RunRequest:
    """The failed run's windows again: the same partition or range (committed ones end as `already_committed`)."""
    tags = {TOPIC_TAG: topic, RUN_ATTEMPT_TAG: str(attempt), RERUN_OF_TAG: run.run_id}
    tags |= {k: run.tags[k] for k in (RANGE_START, RANGE_END) if k in run.tags}
    return dg.RunRequest(run_key=f"{topic}/rerun/{run.run_id}", partition_key=run.tags.get(PARTITION_TAG),
                         asset_selection=[archive_asset_key(topic)], asset_check_keys=[], tags=tags)


def rearchive_requests(cursor: SensorCursor, topic: str, windows: list[OffsetWindow]) -> list[dg.RunRequest]:
    """One run per lost window (they are few, and not contiguous in the partitions' insertion order); the run key
    holds the last materialization read, so a re-evaluated tick launches nothing twice and a later loss of the same
    window is archived again."""
    seen = cursor.open.get(topic, Open()).seen
    open_cut(cursor, topic, windows)
    o = cursor.open[topic]
    o.lost = sorted(set(o.lost) | {w.key for w in windows})
    return [dg.RunRequest(run_key=f"{topic}/{w.key}#rearchive@{seen}", partition_key=w.key,
                          asset_selection=[archive_asset_key(topic)], asset_check_keys=[],
                          tags={TOPIC_TAG: topic, CUT_TAG: "rearchive"}) for w in windows]


# --- reporting ---------------------------------------------------------------------------------------------------

def report(cursor: SensorCursor, topic: str, check: str, v: Verdict, said: str) -> dg.AssetCheckEvaluation | None:
    """The check's result, when what it says differs from what was reported last (`said`: "ok", or which
    partitions or windows it fails for), so a lasting state is reported once, not at every tick."""
    last = cursor.verdicts.setdefault(topic, {}).get(check)
    cursor.verdicts[topic][check] = said
    if last == said:
        return None
    r = check_result(v)
    return dg.AssetCheckEvaluation(asset_key=archive_asset_key(topic), check_name=check, passed=r.passed,
                                   severity=r.severity, description=r.description, metadata=r.metadata)


def upkeep(context: dg.SensorEvaluationContext, kafka: KafkaResource, s3: S3Client, cfg: ArchiveConfig,
           cursor: SensorCursor, states: list[PartitionState], now: float | None = None) -> Requests:
    """The tick's upkeep after its windows were cut and opened (sensors.py)."""
    now = time.time() if now is None else now
    out = Requests()
    close(context.instance, cursor, cfg.topics)
    out.runs += reruns(context, cfg, cursor, now)
    for topic, v in sweep_freshness(kafka, cfg, cursor, states, now).items():
        said = "ok" if v.passed else "stale " + ",".join(sorted(v.metadata["stale_by_partition"]))
        if (e := report(cursor, topic, FRESH, v, said)) is not None:
            out.events.append(e)
    swept = sweep_manifests({t: TopicView(context.instance, t) for t in cfg.topics}, kafka, s3, cfg, cursor, now)
    if swept.unreadable is not None:
        # S3 down must not stop the cutting: the sweep goes on where it was at a later tick.
        context.log.warning(f"the manifest sweep could not read S3 ({swept.unreadable}); it goes on at a later tick")
    for topic, v in swept.verdicts.items():
        said = "ok" if v.passed else f"lost {len(v.problems)}: {v.problems[0][:200]}"
        if (e := report(cursor, topic, MANIFESTS, v, said)) is not None:
            out.events.append(e)
    for topic, windows in swept.rearchive.items():
        context.log.warning(f"topic {topic!r}: {len(windows)} committed windows lost their manifests; archiving "
                            "them again: " + ", ".join(w.key for w in windows[:10]))
        out.runs += rearchive_requests(cursor, topic, windows)
    return out
