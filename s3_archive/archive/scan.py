"""The offsets sensor's look at Kafka: per partition of each topic, where its next window starts and how far Kafka
lets it reach. One metadata request and 1-3 `ListOffsets` round trips for all the archive's topics together, however
many they are. What to cut from that is pure (plan.py); which offsets already have windows comes from the Dagster
instance (defs/archive/sensors.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from confluent_kafka.admin import OffsetSpec

from s3_archive.archive.plan import PartitionState, window_size
from s3_archive.config.archive import ArchiveConfig, GroupStart
from s3_archive.io.kafka import KafkaResource
from s3_archive.model.errors import TakeOverRefused

TopicPartitionKey = tuple[str, int]


def list_offsets(kafka: KafkaResource, specs: dict[TopicPartitionKey, OffsetSpec]) -> dict[TopicPartitionKey, int]:
    """read_committed, so `latest` is the last stable offset (see `scan_topics`)."""
    return kafka.list_offsets_many(specs, read_committed=True)


@dataclass
class TopicScan:
    states: list[PartitionState] = field(default_factory=list)
    behind: list[str] = field(default_factory=list)  # partitions whose windows reach past what Kafka has: reported


@dataclass(frozen=True)
class Scan:
    topics: dict[str, TopicScan]
    missing: list[str]  # topics of the archive that Kafka does not have
    refused: dict[str, str] = field(default_factory=dict)  # topics whose take-over is refused, and why


def start_offsets(kafka: KafkaResource, cfg: ArchiveConfig, new: list[TopicPartitionKey],
                  end: dict[TopicPartitionKey, int], starts: dict[str, dict[int, int]],
                  taken_over: frozenset[str] = frozenset(), refused: dict[str, str] | None = None,
                  ) -> dict[TopicPartitionKey, int]:
    """Where the first window of each partition in `new` (partitions with no window yet) starts, per
    `cfg.start_position`: the log start offset; the last stable offset when the partition was first seen
    ("latest", remembered in `starts`, the sensor cursor's, so that records produced before its first window are
    not skipped by later ticks); the first offset at/after an epoch-ms timestamp (none that new: the end); or a
    consumer group's committed offset (`take_over_offsets`), remembered in `starts` too, so a partition that gets
    its first window ticks later does not depend on the group's offsets still being there. `taken_over`: the
    topics that have windows already; `refused`: where a topic whose take-over is refused gets its reason (its
    partitions get no start)."""
    if not new:
        return {}
    pos = cfg.start_position
    if isinstance(pos, GroupStart):
        out: dict[TopicPartitionKey, int] = {}
        for topic in sorted({t for t, _ in new}):
            anchors = dict(starts.get(topic, {}))
            parts = [p for t, p in new if t == topic]
            rest = [p for p in parts if p not in anchors]
            try:
                # A topic with starts already taken (a partition added before its first window) is taken over.
                anchors.update(take_over_offsets(kafka, pos.consumer_group, topic, rest,
                                                 topic in taken_over or bool(anchors)) if rest else {})
            except TakeOverRefused as e:
                if refused is None:
                    raise
                refused[topic] = str(e)
                continue
            starts[topic] = anchors
            out |= {(topic, p): anchors[p] for p in parts}
        return out
    if pos == "earliest":
        return list_offsets(kafka, {tp: OffsetSpec.earliest() for tp in new})
    if isinstance(pos, int) and pos >= 0:
        found = list_offsets(kafka, {tp: OffsetSpec.for_timestamp(pos) for tp in new})
        return {tp: end[tp] if o < 0 else o for tp, o in found.items()}
    # "latest" (or -1): the end at the first tick that saw the partition, remembered until it has a window.
    out = {}
    for t, p in new:
        anchors = starts.setdefault(t, {})
        out[(t, p)] = anchors.setdefault(p, end[(t, p)])
    return out


def take_over_offsets(kafka: KafkaResource, group: str, topic: str, parts: Sequence[int],
                      taken_over: bool = False) -> dict[int, int]:
    """Where a stopped consumer group (a Kafka Connect sink's) left each partition: its committed offset, the next
    record it would have read. A partition the group never committed starts at its log start, as the connector's
    consumer would have (auto.offset.reset earliest). Before the topic has windows (not `taken_over`) it is
    refused while the group has members (the connector still runs: its offsets move on, and its objects and the
    windows would overlap) and when the group has no offset for the topic at all (a wrong group name would
    otherwise archive everything the connector already wrote). Once taken over, a partition without a window yet
    (or added later) starts at the group's offset if it still has one, else at its log start."""
    offsets, members = kafka.group_offsets(group, topic, list(parts)), kafka.group_members(group)
    if members and not taken_over:
        raise TakeOverRefused(f"consumer group {group!r} has {members} active member(s): the connector still "
                              "consumes; stop it (pause is not enough: delete or stop its tasks) before the archive "
                              "takes over, else the records it writes meanwhile are archived twice")
    if not offsets and not taken_over:
        raise TakeOverRefused(f"consumer group {group!r} has no committed offset for topic {topic!r}; a Kafka Connect "
                              "sink's group is connect-<connector name> (or its consumer.override.group.id). "
                              "Nothing is archived until the group is right")
    missing = [p for p in parts if p not in offsets]
    earliest = list_offsets(kafka, {(topic, p): OffsetSpec.earliest() for p in missing})
    return offsets | {p: o for (_, p), o in earliest.items()}


def scan_topics(kafka: KafkaResource, cfg: ArchiveConfig, ends: Mapping[str, dict[int, int]],
                bytes_per_record: Mapping[str, float | None], now_ms: int,
                starts: dict[str, dict[int, int]]) -> Scan:
    """Where each partition of each topic in `ends` starts its next window and how far it may reach. `ends`: per
    topic, where each partition's windows end (the sensor's `window_ends`). `starts`: the `start_position: latest`
    and `consumer_group` anchors per topic (sensor cursor), updated in place. A topic whose take-over is refused
    (the connector's group still has members, or has no offsets) is left out, with why, in `Scan.refused`."""
    parts = kafka.topic_partitions(sorted(ends))
    missing = sorted(set(ends) - set(parts))
    tps = [(t, p) for t, ps in sorted(parts.items()) for p in ps]
    # The last stable offset, not the high watermark: a window must not reach into an open transaction, whose
    # records a read_committed reader cannot see yet and would record as absent.
    end = list_offsets(kafka, {tp: OffsetSpec.latest() for tp in tps})
    nxt = {(t, p): o for t in parts for p, o in ends[t].items()}
    for t in parts:  # a partition with a window no longer needs its anchor
        for p in [p for p in starts.get(t, {}) if (t, p) in nxt]:
            del starts[t][p]
        if t in starts and not starts[t]:
            del starts[t]
    # A partition without windows (new topic, or partitions added to it) starts at cfg.start_position.
    refused: dict[str, str] = {}
    nxt |= start_offsets(kafka, cfg, [tp for tp in tps if tp not in nxt], end, starts,
                         frozenset(t for t in parts if ends[t]), refused)
    tps = [tp for tp in tps if tp[0] not in refused]
    pending = [tp for tp in tps if end[tp] > nxt[tp]]
    aged: dict[TopicPartitionKey, int] = {}
    if cfg.flush.interval_seconds is not None and pending:
        # The first offset whose record is at most interval_seconds old; every record before it is older. One
        # round trip for all partitions instead of fetching a record per partition. -1: no record that recent.
        cutoff = now_ms - round(cfg.flush.interval_seconds * 1000)
        found = list_offsets(kafka, {tp: OffsetSpec.for_timestamp(cutoff) for tp in pending})
        aged = {tp: end[tp] if o < 0 else o for tp, o in found.items()}
    out = {t: TopicScan() for t in parts if t not in refused}
    for t, p in tps:
        tp = (t, p)
        size, reason = window_size(cfg.flush, bytes_per_record.get(t))
        if nxt[tp] > end[tp]:
            out[t].behind.append(f"partition {p}: windows reach offset {nxt[tp]} but Kafka's last stable offset is "
                                 f"{end[tp]}")
        out[t].states.append(PartitionState(t, p, nxt[tp], max(end[tp], nxt[tp]), size, reason, aged.get(tp)))
    return Scan(out, missing, refused)
