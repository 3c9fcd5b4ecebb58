"""The offsets sensor's sweeps over what its cursor keeps (docs/sensors.md, "Upkeep"): the manifests listed in S3
against the committed windows (those whose manifest is gone, and which of them Kafka can still archive again), and
the records that wait too long to be committed. The verdicts are archive/health.py's; defs/archive/upkeep.py reports
them as check results and turns the windows to archive again into run requests.

What the Dagster instance knows of a topic comes in as a `WindowsView` (defs/archive/instance.py reads it, lazily):
the sweep reads its retired ranges, and its windows only where manifests are gone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from botocore.exceptions import BotoCoreError, ClientError
from confluent_kafka.admin import OffsetSpec

from s3_archive.archive import health
from s3_archive.archive.cursor import Open, SensorCursor, open_windows
from s3_archive.archive.health import Verdict, WindowsView
from s3_archive.archive.plan import PartitionState
from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.lifecycle import expiry_due
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.s3 import S3Client, list_objects
from s3_archive.keys.objects import manifests_from, partition_manifest_prefix
from s3_archive.model.windows import InvalidWindow, OffsetWindow

SWEEP_LISTINGS = 40  # S3 listing pages the manifest sweep reads per tick at most (1,000 manifests each)


# --- freshness ---------------------------------------------------------------------------------------------------

def uncommitted(cursor: SensorCursor, states: list[PartitionState]) -> dict[str, dict[int, int]]:
    """Per topic and Kafka partition of the tick's scan, the first offset in no committed window: the start of its
    first open window, else where its next window starts."""
    by_topic: dict[str, list[PartitionState]] = {}
    for s in states:
        by_topic.setdefault(s.topic, []).append(s)
    out: dict[str, dict[int, int]] = {}
    for topic, ss in by_topic.items():
        opens = open_windows(cursor, topic)
        out[topic] = {s.partition: min([w.start for w in opens.get(s.partition, [])] + [s.next_offset]) for s in ss}
    return out


def sweep_freshness(kafka: KafkaResource, cfg: ArchiveConfig, cursor: SensorCursor, states: list[PartitionState],
                    now: float) -> dict[str, Verdict]:
    """Per topic, the archive_fresh verdict from the tick's scan (next window start, last stable offset), the open
    windows, and one batched `ListOffsets` by timestamp."""
    first = uncommitted(cursor, states)
    end = {(s.topic, s.partition): s.end_offset for s in states}
    bound = cfg.freshness_bound_seconds
    pending = {(t, p): u for t, us in first.items() for p, u in us.items() if u < end[(t, p)]}
    young = {} if bound is None or not pending else kafka.list_offsets_many(
        {tp: OffsetSpec.for_timestamp(int((now - bound) * 1000)) for tp in pending}, read_committed=True)
    return {t: health.freshness_verdict(cfg, t, us, {p: o for (tt, p), o in young.items() if tt == t},
                                        {p: e for (tt, p), e in end.items() if tt == t})
            for t, us in first.items()}


# --- manifests ---------------------------------------------------------------------------------------------------

@dataclass
class Swept:
    """The manifests_present verdict of each topic swept, the lost windows to archive again, and, when S3 could not
    be read (the sweep goes on where it was at a later tick), why."""

    verdicts: dict[str, Verdict]
    rearchive: dict[str, list[OffsetWindow]]
    unreadable: str | None = None


def listed_windows(s3: S3Client, cfg: ArchiveConfig, topic: str, partition: int, start: int, end: int,
                   ) -> tuple[list[tuple[int, int]], int]:
    """The windows of one Kafka partition whose manifests are listed in S3, from the one starting at `start` to
    those starting before `end`, as (start, end); and how many keys were listed."""
    listed, n = [], 0
    for o in list_objects(s3, cfg.bucket, partition_manifest_prefix(cfg.prefix, topic, partition),
                          manifests_from(cfg.prefix, topic, partition, start)):
        n += 1
        try:
            w = OffsetWindow.parse(o["Key"].rsplit("/", 1)[-1].removesuffix(".json"))
        except InvalidWindow:
            continue
        if w.start >= end:
            break
        listed.append((w.start, w.end))
    return listed, n


def lost_windows(view: WindowsView, cfg: ArchiveConfig, gaps: dict[int, list[tuple[int, int]]], now: float,
                 ) -> list[OffsetWindow]:
    """The live windows inside the gaps (every key of the topic is read: this happens when manifests are gone),
    but those S3 may have expired under the lifecycle's expiration_days."""
    inside = [w for w in view.windows
              if any(a <= w.start and w.end <= b for a, b in gaps.get(w.partition, []))]
    days = cfg.lifecycle_policy.expiration_days
    if not days or not inside:
        return inside
    when = view.materialized_at([w.key for w in inside])
    at = datetime.fromtimestamp(now, UTC)
    return [w for w in inside if not expiry_due(when.get(w.key), days, at)]


def rearchivable(kafka: KafkaResource, topic: str, lost: list[OffsetWindow]) -> list[OffsetWindow]:
    """The lost windows whose records Kafka still holds (its log start is at or before their start)."""
    if not lost:
        return []
    log_start = kafka.offsets(topic, "earliest", sorted({w.partition for w in lost}))
    return [w for w in lost if log_start.get(w.partition, w.start + 1) <= w.start]


def sweep_manifests(views: Mapping[str, WindowsView], kafka: KafkaResource, s3: S3Client, cfg: ArchiveConfig,
                    cursor: SensorCursor, now: float, budget: int = SWEEP_LISTINGS) -> Swept:
    """Compare each partition's committed live windows (from its retired range, or first window, to its last
    window; open ones left out) with the manifests listed in S3, topic after topic, going on where the last tick
    stopped when the listings reach `budget`. A small archive is swept whole at every tick. `views`: per topic, what
    the instance knows of its windows. S3 unreadable: no verdict (`unreadable` says why)."""
    try:
        return _sweep(views, kafka, s3, cfg, cursor, now, budget)
    except (ClientError, BotoCoreError) as e:
        return Swept({}, {}, unreadable=str(e))


def _sweep(views: Mapping[str, WindowsView], kafka: KafkaResource, s3: S3Client, cfg: ArchiveConfig,
           cursor: SensorCursor, now: float, budget: int) -> Swept:
    topics = sorted(cfg.topics)
    if cursor.sweep in topics:
        i = topics.index(cursor.sweep)
        topics = topics[i:] + topics[:i]
    out = Swept({}, {})
    listings = 0
    cursor.sweep = None
    for topic in topics:
        if listings >= budget:
            cursor.sweep = topic
            break
        tail = cursor.tails.get(topic)
        if tail is None or not tail.next:  # no window yet: nothing to lose, and nothing to list
            out.verdicts[topic] = health.manifests_verdict(cfg, topic, [], set(), 0)
            continue
        view = views[topic]
        retired = view.retired
        opens = open_windows(cursor, topic)
        gaps: dict[int, list[tuple[int, int]]] = {}
        checked = 0
        present: set[tuple[int, int, int]] = set()
        for p, nxt in sorted(tail.next.items()):
            start = retired.ranges[p].end if p in retired.ranges else tail.first.get(p)
            if start is None or start >= nxt:
                continue
            listed, n = listed_windows(s3, cfg, topic, p, start, nxt)
            present |= {(p, a, b) for a, b in listed}
            listings += 1 + n // 1000
            checked += len(listed)
            if missing := health.missing_ranges(start, nxt, opens.get(p, []), listed):
                gaps[p] = missing
        lost = lost_windows(view, cfg, gaps, now) if gaps else []
        again = rearchivable(kafka, topic, lost)
        # Lost earlier and being archived again (open meanwhile): still reported until their manifest is back.
        pending = [w for w in map(OffsetWindow.parse, cursor.open.get(topic, Open()).lost)
                   if (w.partition, w.start, w.end) not in present]
        out.verdicts[topic] = health.manifests_verdict(cfg, topic, lost + pending, set(again) | set(pending),
                                                       checked)
        if again:
            out.rearchive[topic] = again
    return out
