"""The offsets sensor: per archive, cut new offset windows from Kafka's offsets and request one run per window.

The existing dynamic partition keys are the only record of which offsets have windows; the cursor holds nothing.
A restarted sensor, a lost cursor, or a tick evaluated twice therefore plans the same windows from the same keys,
and never cuts a window overlapping one that exists. Planning itself is pure (s3_archive/archive/plan.py).
"""

# No `from __future__ import annotations`: Dagster reads the context and resource annotations at definition time.

import time
from collections.abc import Sequence
from dataclasses import dataclass

import dagster as dg
from confluent_kafka.admin import OffsetSpec
from dagster._core.definitions.assets.job.asset_job import IMPLICIT_ASSET_JOB_NAME

from s3_archive.archive.plan import MAX_WINDOWS_PER_TICK, Cut, PartitionState, plan_windows, window_size
from s3_archive.archive.plan import bytes_per_record as estimate_bytes_per_record
from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.settings import Settings
from s3_archive.defs.archive.checks import build_archive_checks, read_windows
from s3_archive.defs.archive.partitions import archive_asset_key, window_partitions
from s3_archive.defs.archive.schedules import build_checks_schedule
from s3_archive.io.kafka import KafkaResource
from s3_archive.model.errors import UnknownTopic
from s3_archive.model.windows import OffsetWindow, next_offsets

MINIMUM_INTERVAL_SECONDS = 30
RECENT_WINDOWS = 20  # materializations averaged for the bytes/record estimate
TOPIC_TAG = "s3_archive/topic"
CUT_TAG = "s3_archive/cut"


def sensor_name(cfg: ArchiveConfig) -> str:
    return f"archive_{cfg.name}_offsets"


def run_key(topic: str, window: OffsetWindow) -> str:
    # Run keys are de-duplicated per sensor, and two topics of one archive have the same window keys: the topic
    # must be part of the key, or the second topic's window would be skipped as already requested.
    return f"{topic}/{window.key}"


def list_offsets(kafka: KafkaResource, topic: str, specs: dict[int, OffsetSpec]) -> dict[int, int]:
    """read_committed, so `latest` is the last stable offset (see `partition_states`)."""
    return kafka.list_offsets(topic, specs, read_committed=True)


def existing_windows(instance: dg.DagsterInstance, topic: str, log: dg.DagsterLogManager) -> list[OffsetWindow]:
    """The topic's windows: its dynamic partition keys. A key that is not a window covers no offsets: skipped
    here, and failed by the contiguity check."""
    windows, bad = read_windows(instance, topic)
    for key in bad:
        log.warning(f"topic {topic!r}: ignoring partition key {key!r}: not a window key")
    return windows


def recent_bytes_per_record(instance: dg.DagsterInstance, topic: str) -> float | None:
    """Input bytes per record of the topic's latest materialized windows (metadata `bytes_read` / `records`)."""
    records = instance.fetch_materializations(archive_asset_key(topic), limit=RECENT_WINDOWS).records
    samples = []
    for r in records:
        m = r.asset_materialization.metadata if r.asset_materialization else {}
        if "bytes_read" in m and "records" in m:
            samples.append((int(m["bytes_read"].value), int(m["records"].value)))
    return estimate_bytes_per_record(samples)


@dataclass(frozen=True)
class TopicScan:
    states: list[PartitionState]
    behind: list[str]  # partitions whose windows reach past what Kafka has: reported, never cut


def start_anchor_key(topic: str, partition: int) -> str:
    return f"s3_archive/start/{topic}/{partition}"


def start_offsets(kafka: KafkaResource, cfg: ArchiveConfig, topic: str, parts: Sequence[int], end: dict[int, int],
                  instance: dg.DagsterInstance | None) -> dict[int, int]:
    """Where the first window of each partition in `parts` (partitions with no window yet) starts, per
    `cfg.start_position`: the log start offset; the last stable offset when the partition was first seen
    ("latest", kept in the instance's key-value store so that records produced before its first window are not
    skipped by later ticks); or the first offset at/after an epoch-ms timestamp (none that new: the end)."""
    if not parts:
        return {}
    pos = cfg.start_position
    if pos == "earliest":
        return list_offsets(kafka, topic, {p: OffsetSpec.earliest() for p in parts})
    if isinstance(pos, int) and pos >= 0:
        found = list_offsets(kafka, topic, {p: OffsetSpec.for_timestamp(pos) for p in parts})
        return {p: end[p] if o < 0 else o for p, o in found.items()}
    # "latest" (or -1): the end at the first tick that saw the partition, remembered until it has a window.
    if instance is None:
        raise ValueError("start_position 'latest' needs the Dagster instance to remember where partitions start")
    keys = {p: start_anchor_key(topic, p) for p in parts}
    stored = instance.run_storage.get_cursor_values(set(keys.values()))
    out = {p: int(stored[k]) for p, k in keys.items() if k in stored}
    new = {p: end[p] for p in parts if p not in out}
    if new:
        instance.run_storage.set_cursor_values({keys[p]: str(o) for p, o in new.items()})
    return out | new


def partition_states(kafka: KafkaResource, cfg: ArchiveConfig, topic: str, windows: Sequence[OffsetWindow],
                     bytes_per_record: float | None, now_ms: int,
                     instance: dg.DagsterInstance | None = None) -> TopicScan:
    """Where each partition's next window starts and how far it may reach; 1-3 admin round trips for the topic."""
    parts = kafka.partitions(topic)
    # The last stable offset, not the high watermark: a window must not reach into an open transaction, whose
    # records a read_committed reader cannot see yet and would record as absent.
    end = list_offsets(kafka, topic, {p: OffsetSpec.latest() for p in parts})
    nxt = next_offsets(list(windows))
    # A partition without windows (new topic, or partitions added to it) starts at cfg.start_position.
    nxt |= start_offsets(kafka, cfg, topic, [p for p in parts if p not in nxt], end, instance)
    size, reason = window_size(cfg.flush, bytes_per_record)
    pending = [p for p in parts if end[p] > nxt[p]]
    aged: dict[int, int] = {}
    if cfg.flush.interval_seconds is not None and pending:
        # The first offset whose record is at most interval_seconds old; every record before it is older. One
        # round trip for all partitions instead of fetching a record per partition. -1: no record that recent.
        cutoff = now_ms - round(cfg.flush.interval_seconds * 1000)
        found = list_offsets(kafka, topic, {p: OffsetSpec.for_timestamp(cutoff) for p in pending})
        aged = {p: end[p] if o < 0 else o for p, o in found.items()}
    behind = [f"partition {p}: windows reach offset {nxt[p]} but Kafka's last stable offset is {end[p]}"
              for p in parts if nxt[p] > end[p]]
    states = [PartitionState(topic, p, nxt[p], max(end[p], nxt[p]), size, reason, aged.get(p)) for p in parts]
    return TopicScan(states, behind)


RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"


def run_requests(topic: str, cuts: list[Cut], windows_per_run: int) -> list[dg.RunRequest]:
    """One run per `windows_per_run` consecutive cuts of a topic: a backlog is caught up in a few Spark sessions,
    not one per window. The cuts are added as dynamic partitions in this same order, so each chunk is a
    contiguous slice of the insertion order, which is what a dynamic partition range means."""
    out = []
    for i in range(0, len(cuts), windows_per_run):
        chunk = cuts[i:i + windows_per_run]
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


def evaluate(context: dg.SensorEvaluationContext | dg.ScheduleEvaluationContext, kafka: KafkaResource,
             cfg: ArchiveConfig, max_windows: int = MAX_WINDOWS_PER_TICK,
             cut_rest: bool = False) -> dg.SensorResult:
    """One tick for one archive: the windows to add, and one run request per `windows_per_run` windows.

    `cut_rest` (the cut schedule): also cut every partition's partial rest up to its last stable offset."""
    now_ms = int(time.time() * 1000)
    states: list[PartitionState] = []
    for topic in cfg.topics:
        try:
            bpr = recent_bytes_per_record(context.instance, topic) if cfg.flush.bytes is not None else None
            scan = partition_states(kafka, cfg, topic, existing_windows(context.instance, topic, context.log), bpr,
                                    now_ms, context.instance)
        except UnknownTopic as e:
            # The other topics of the archive still get their windows; this one waits until it exists.
            context.log.warning(str(e))
            continue
        for msg in scan.behind:
            context.log.warning(f"topic {topic!r} {msg} (was the topic deleted and recreated?); no window cut")
        states += scan.states
    cuts = plan_windows(states, max_windows, cut_rest)
    if not cuts:
        return dg.SensorResult(skip_reason=NO_WINDOWS_REST if cut_rest else NO_WINDOWS)
    cuts_by_topic: dict[str, list[Cut]] = {}
    for c in cuts:
        cuts_by_topic.setdefault(c.topic, []).append(c)
    context.log.info(f"cutting {len(cuts)} windows: " + ", ".join(f"{t}: {len(c)}" for t, c in cuts_by_topic.items()))
    return dg.SensorResult(
        run_requests=[r for t, cs in cuts_by_topic.items() for r in run_requests(t, cs, cfg.windows_per_run)],
        dynamic_partitions_requests=[window_partitions(t).build_add_request([c.window.key for c in cs])
                                     for t, cs in cuts_by_topic.items()],
    )


def build_offsets_sensor(cfg: ArchiveConfig, max_windows: int = MAX_WINDOWS_PER_TICK,
                         ) -> dg.SensorDefinition:
    @dg.sensor(
        name=sensor_name(cfg),
        asset_selection=[archive_asset_key(t) for t in cfg.topics],
        minimum_interval_seconds=MINIMUM_INTERVAL_SECONDS,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description=f"Cuts offset windows of {', '.join(cfg.topics)} (flush.count {cfg.flush.count}, flush.bytes "
                    f"{cfg.flush.bytes}, flush.interval_seconds {cfg.flush.interval_seconds}) and archives them, "
                    f"{cfg.windows_per_run} windows per run, at most {max_windows} windows per tick.",
    )
    def _offsets_sensor(context: dg.SensorEvaluationContext, kafka: KafkaResource) -> dg.SensorResult:
        return evaluate(context, kafka, cfg, max_windows)

    return _offsets_sensor


def cut_schedule_name(cfg: ArchiveConfig) -> str:
    return f"archive_{cfg.name}_cut"


def build_cut_schedule(cfg: ArchiveConfig, max_windows: int = MAX_WINDOWS_PER_TICK,
                       ) -> dg.ScheduleDefinition:
    """Cron mode (`schedule_cron`): on a fixed cadence, cut what the sensor cuts plus every partition's rest up to
    its last stable offset ("cut at the high watermark").

    Schedules cannot return partition requests: the tick adds its windows to the instance itself, then returns
    the runs (the same run keys as the sensor's: unique per window range, so a re-evaluated tick launches nothing
    twice). A run's window is given by tags (`dagster/partition`, or the range tags), not `partition_key`: the
    schedule's job (the implicit asset job) spans every topic's asset, whose partitions definitions differ.
    """
    assert cfg.schedule_cron is not None

    @dg.schedule(
        name=cut_schedule_name(cfg),
        cron_schedule=cfg.schedule_cron,
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.STOPPED,
        # The repository's implicit asset job (what the sensor's asset-selection runs use): an asset job over the
        # archive's topics cannot be built, their partitions definitions differ.
        job_name=IMPLICIT_ASSET_JOB_NAME,
        description=f"Cuts offset windows of {', '.join(cfg.topics)} at {cfg.schedule_cron!r} (UTC): full windows "
                    f"(flush.count {cfg.flush.count}, flush.bytes {cfg.flush.bytes}) and every partition's rest up "
                    f"to its last stable offset, {cfg.windows_per_run} windows per run, at most {max_windows} "
                    f"windows per tick.",
    )
    def _cut_schedule(context: dg.ScheduleEvaluationContext, kafka: KafkaResource):
        result = evaluate(context, kafka, cfg, max_windows, cut_rest=True)
        if result.skip_reason is not None:
            return result.skip_reason
        for req in result.dynamic_partitions_requests or []:
            context.instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
        return [r if r.partition_key is None else
                r.with_replaced_attrs(partition_key=None, tags={**r.tags, PARTITION_TAG: r.partition_key})
                for r in result.run_requests or []]

    return _cut_schedule


PARTITION_TAG = "dagster/partition"


def build_archive_automation(settings: Settings) -> dg.Definitions:
    """Sensors, asset checks, and the daily check schedule of every archive (needs the `kafka` and `s3` resources);
    the cut schedule of archives with `schedule_cron`."""
    sensors, checks, jobs, schedules = [], [], [], []
    for cfg in settings.archives:
        sensors.append(build_offsets_sensor(cfg))
        if cfg.schedule_cron is not None:
            schedules.append(build_cut_schedule(cfg))
        for topic in cfg.topics:
            checks += build_archive_checks(cfg, topic)
        job, schedule = build_checks_schedule(cfg)
        jobs.append(job)
        schedules.append(schedule)
    return dg.Definitions(sensors=sensors, asset_checks=checks, jobs=jobs, schedules=schedules)
