"""The offsets sensor: per archive, cut new offset windows from Kafka's offsets and request the runs that archive them.

It is the one path that cuts windows: full windows (and rests older than flush.interval_seconds) at every tick and,
with `schedule_cron`, every partition's rest at the first tick after each cron tick.

The existing dynamic partition keys (and the retired ranges, instance.py) are the only record of which offsets
have windows. The cursor (archive/cursor.py) holds the last cron tick handled, the `start_position: latest`
anchors, and per topic where each partition's windows end as of the last key it read, so a tick reads only the keys
added since, not all of them. A restarted sensor, a lost cursor, or a tick evaluated twice therefore plans the same
windows from the same keys, and never cuts a window overlapping one that exists. Kafka's side is archive/scan.py;
planning is pure (archive/plan.py).
"""

# No `from __future__ import annotations`: Dagster reads the context and resource annotations at definition time.

import time
from datetime import UTC, datetime

import dagster as dg

from s3_archive.archive.cursor import SensorCursor, Tail, cron_due
from s3_archive.archive.plan import MAX_WINDOWS_PER_TICK, Cut, PartitionState, plan_windows, run_chunks
from s3_archive.archive.plan import bytes_per_record as estimate_bytes_per_record
from s3_archive.archive.scan import scan_topics
from s3_archive.config.archive import ArchiveConfig
from s3_archive.defs.archive.instance import read_keys, read_retired
from s3_archive.defs.archive.partitions import (
    CUT_TAG,
    RANGE_END,
    RANGE_START,
    TOPIC_TAG,
    archive_asset_key,
    window_partitions,
)
from s3_archive.defs.archive.upkeep import open_cut, track, upkeep
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.s3 import S3Client
from s3_archive.io.s3_resource import S3Resource
from s3_archive.model.windows import OffsetWindow

RECENT_WINDOWS = 20  # materializations averaged for the bytes/record estimate


def sensor_name(cfg: ArchiveConfig) -> str:
    return f"archive_{cfg.name}_offsets"


def run_key(topic: str, window: OffsetWindow) -> str:
    # Run keys are de-duplicated per sensor, and two topics of one archive have the same window keys: the topic
    # must be part of the key, or the second topic's window would be skipped as already requested.
    return f"{topic}/{window.key}"


def read_tail(instance: dg.DagsterInstance, topic: str, tail: Tail | None, log: dg.DagsterLogManager,
              ) -> tuple[Tail, list[OffsetWindow]]:
    """Per Kafka partition, where its windows end and start: `tail` (the cursor's summary) updated with the keys
    added since its position; with no summary (a new or lost cursor), from every key and the retired ranges. Also
    the windows read. A key that is not a window covers no offsets: skipped here, and failed by the contiguity
    check."""
    if tail is None:
        read = read_keys(instance, topic)
        # Retirement never removes a partition's last window; the retired ranges make that hold for a cursor too.
        retired = read_retired(instance, topic).ranges
        nxt = {p: r.end for p, r in retired.items()}
        first = {p: r.start for p, r in retired.items()}
    else:
        read = read_keys(instance, topic, tail.after)
        nxt, first = dict(tail.next), dict(tail.first)
    for w in read.windows:
        nxt[w.partition] = max(nxt.get(w.partition, 0), w.end)
        first[w.partition] = min(first.get(w.partition, w.start), w.start)
    for key in read.bad:
        log.warning(f"topic {topic!r}: ignoring partition key {key!r}: not a window key")
    return Tail(read.after, nxt, first), read.windows


def window_ends(instance: dg.DagsterInstance, topic: str, tail: Tail | None, log: dg.DagsterLogManager) -> Tail:
    """`read_tail` without the windows read."""
    return read_tail(instance, topic, tail, log)[0]


def recent_bytes_per_record(instance: dg.DagsterInstance, topic: str) -> float | None:
    """Input bytes per record of the topic's latest materialized windows (metadata `bytes_read` / `records`)."""
    records = instance.fetch_materializations(archive_asset_key(topic), limit=RECENT_WINDOWS).records
    samples = []
    for r in records:
        m = r.asset_materialization.metadata if r.asset_materialization else {}
        if "bytes_read" in m and "records" in m:
            samples.append((int(m["bytes_read"].value), int(m["records"].value)))
    return estimate_bytes_per_record(samples)


def bytes_per_record_by_topic(instance: dg.DagsterInstance, topics: list[str]) -> dict[str, float | None]:
    """`recent_bytes_per_record` of each topic; one query for all of them first, so that topics with no
    materialization yet (most of a large `topic_pattern` before its first runs) cost no query of their own."""
    latest = instance.get_latest_materialization_events([archive_asset_key(t) for t in topics])
    return {t: recent_bytes_per_record(instance, t) if latest.get(archive_asset_key(t)) is not None else None
            for t in topics}


def run_requests(topic: str, cuts: list[Cut], windows_per_run: int, bytes_per_run: int | None = None,
                 bytes_per_record: float | None = None) -> list[dg.RunRequest]:
    """One run per chunk of consecutive cuts of a topic (`run_chunks`: at most `windows_per_run` windows and
    `bytes_per_run` estimated bytes): a backlog is caught up in a few runs, not one per window. The cuts are added
    as dynamic partitions in this same order, so each chunk is a contiguous slice of the insertion order, which is
    what a dynamic partition range means."""
    out = []
    for chunk in run_chunks(cuts, windows_per_run, bytes_per_run, bytes_per_record):
        first, last = chunk[0].window.key, chunk[-1].window.key
        tags = {TOPIC_TAG: topic, CUT_TAG: ",".join(sorted({c.reason for c in chunk}))}
        if len(chunk) > 1:
            tags |= {RANGE_START: first, RANGE_END: last}
        out.append(dg.RunRequest(
            run_key=run_key(topic, chunk[0].window) + ("" if len(chunk) == 1 else f"..{last}"),
            partition_key=first if len(chunk) == 1 else None,
            asset_selection=[archive_asset_key(topic)],
            # The checks scan every window of the topic: run them daily (schedules.py), not after every run.
            asset_check_keys=[],
            tags=tags,
        ))
    return out


NO_WINDOWS = ("no new windows: no partition has a full window of new records, nor a rest older than "
              "flush.interval_seconds")
NO_WINDOWS_REST = "no new windows: every partition's windows reach its last stable offset"


def read_cursor(context: dg.SensorEvaluationContext) -> SensorCursor:
    try:
        return SensorCursor.parse(context.cursor)
    except ValueError as e:
        context.log.warning(f"{e}; starting from an empty cursor (the partition keys still tell which offsets have "
                            "windows)")
        return SensorCursor()


def evaluate(context: dg.SensorEvaluationContext, kafka: KafkaResource, cfg: ArchiveConfig,
             max_windows: int = MAX_WINDOWS_PER_TICK, now: float | None = None,
             s3: S3Client | None = None) -> dg.SensorResult:
    """One tick for one archive: the windows to add, one run request per `windows_per_run` windows, and the cursor.
    With `s3`, also the upkeep (upkeep.py): failed runs requested again, lost manifests archived again, and the
    results of the checks manifests_present and archive_fresh.

    With `schedule_cron`, the first tick after each cron tick also cuts every partition's partial rest up to its
    last stable offset ("cut at the high watermark on a fixed cadence")."""
    now = time.time() if now is None else now
    cursor = read_cursor(context)
    cut_rest, cron_tick = (False, None) if cfg.schedule_cron is None else \
        cron_due(cfg.schedule_cron, cursor.cron_tick, now)
    read: dict[str, list[OffsetWindow]] = {}
    full: set[str] = set()
    for topic in cfg.topics:
        tail = cursor.tails.get(topic)
        # A summary without where the partitions' windows start (a cursor of an earlier version): read them all once.
        if tail is None or set(tail.next) - set(tail.first):
            full.add(topic)
        cursor.tails[topic], read[topic] = read_tail(context.instance, topic, None if topic in full else tail,
                                                     context.log)
    if s3 is not None:
        track(context.instance, cursor, read, full)
    sized = cfg.flush.bytes is not None or cfg.bytes_per_run is not None
    bpr = bytes_per_record_by_topic(context.instance, cfg.topics) if sized else {t: None for t in cfg.topics}
    scan = scan_topics(kafka, cfg, {t: cursor.tails[t].next for t in cfg.topics}, bpr, int(now * 1000),
                       cursor.starts)
    for topic in scan.missing:
        # The other topics of the archive still get their windows; this one waits until it exists.
        context.log.warning(f"topic {topic!r} does not exist on {kafka.bootstrap_servers}; no window cut")
    for topic, why in scan.refused.items():
        # This topic waits until the consumer group it takes over from is stopped (or named right).
        context.log.warning(f"topic {topic!r}: {why}")
    states: list[PartitionState] = []
    for topic, ts in scan.topics.items():
        for msg in ts.behind:
            context.log.warning(f"topic {topic!r} {msg} (was the topic deleted and recreated?); no window cut")
        states += ts.states
    # A continuous archive's long-lived runs cut their topics' windows (continuous_job.py): the sensor keeps the upkeep.
    cuts = [] if cfg.continuous is not None else plan_windows(states, max_windows, cut_rest)
    # A cron tick whose cut hit the per-tick limit is not done: the next evaluation cuts the remaining rests.
    if cron_tick is not None and not (cut_rest and len(cuts) >= max_windows):
        cursor.cron_tick = cron_tick
    if cut_rest:
        context.log.info(f"cron tick {datetime.fromtimestamp(cron_tick, UTC).isoformat()} of schedule_cron "
                         f"{cfg.schedule_cron!r}: cutting every partition's rest too")
    cuts_by_topic: dict[str, list[Cut]] = {}
    for c in cuts:
        cuts_by_topic.setdefault(c.topic, []).append(c)
    requests = [r for t, cs in cuts_by_topic.items()
                for r in run_requests(t, cs, cfg.windows_per_run, cfg.bytes_per_run, bpr.get(t))]
    events: list[dg.AssetCheckEvaluation] = []
    if s3 is not None:
        for t, cs in cuts_by_topic.items():
            open_cut(cursor, t, [c.window for c in cs])
        kept = upkeep(context, kafka, s3, cfg, cursor, states, now)
        requests += kept.runs
        events = kept.events
    if cuts:
        context.log.info(f"cutting {len(cuts)} windows: "
                         + ", ".join(f"{t}: {len(c)}" for t, c in cuts_by_topic.items()))
    if not requests:
        return dg.SensorResult(skip_reason=NO_WINDOWS_REST if cut_rest else NO_WINDOWS, cursor=cursor.dump(),
                               asset_events=events)
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[window_partitions(t).build_add_request([c.window.key for c in cs])
                                     for t, cs in cuts_by_topic.items()],
        cursor=cursor.dump(),
        asset_events=events,
    )


def build_offsets_sensor(cfg: ArchiveConfig, max_windows: int = MAX_WINDOWS_PER_TICK,
                         ) -> dg.SensorDefinition:
    cron = "" if cfg.schedule_cron is None else \
        f"; at each tick of {cfg.schedule_cron!r} (UTC) also every partition's rest up to its last stable offset"

    @dg.sensor(
        name=sensor_name(cfg),
        asset_selection=[archive_asset_key(t) for t in cfg.topics],
        minimum_interval_seconds=cfg.sensor_interval_seconds,
        default_status=dg.DefaultSensorStatus.RUNNING if cfg.sensor_default == "running"
        else dg.DefaultSensorStatus.STOPPED,
        description=f"Cuts offset windows of {', '.join(cfg.topics)} (flush.count {cfg.flush.count}, flush.bytes "
                    f"{cfg.flush.bytes}, flush.interval_seconds {cfg.flush.interval_seconds}{cron}) and archives "
                    f"them, {cfg.windows_per_run} windows and {cfg.bytes_per_run} estimated bytes per run at "
                    f"most, at most {max_windows} windows per tick.",
    )
    def _offsets_sensor(context: dg.SensorEvaluationContext, kafka: KafkaResource,
                        s3: S3Resource) -> dg.SensorResult:
        return evaluate(context, kafka, cfg, max_windows, s3=s3.get_client())

    return _offsets_sensor
