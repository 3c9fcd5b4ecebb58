"""The offsets sensor's look at Kafka: per partition of a topic, where its next window starts and how far Kafka
lets it reach (1-3 admin round trips per topic). What to cut from that is pure (plan.py); which offsets already
have windows comes from the Dagster instance (defs/archive/sensors.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from confluent_kafka.admin import OffsetSpec

from s3_archive.archive.plan import PartitionState, window_size
from s3_archive.config.archive import ArchiveConfig, GroupStart
from s3_archive.io.kafka import KafkaResource
from s3_archive.model.errors import TakeOverRefused


def list_offsets(kafka: KafkaResource, topic: str, specs: dict[int, OffsetSpec]) -> dict[int, int]:
    """read_committed, so `latest` is the last stable offset (see `partition_states`)."""
    return kafka.list_offsets(topic, specs, read_committed=True)


@dataclass(frozen=True)
class TopicScan:
    states: list[PartitionState]
    behind: list[str]  # partitions whose windows reach past what Kafka has: reported, never cut


def start_offsets(kafka: KafkaResource, cfg: ArchiveConfig, topic: str, parts: Sequence[int], end: dict[int, int],
                  starts: dict[int, int] | None, taken_over: bool = False) -> dict[int, int]:
    """Where the first window of each partition in `parts` (partitions with no window yet) starts, per
    `cfg.start_position`: the log start offset; the last stable offset when the partition was first seen
    ("latest", remembered in `starts`, the topic's part of the sensor cursor, so that records produced before its
    first window are not skipped by later ticks); the first offset at/after an epoch-ms timestamp (none that
    new: the end); or a consumer group's committed offset (`take_over_offsets`), remembered in `starts` too, so a
    partition that gets its first window ticks later does not depend on the group's offsets still being there.
    `taken_over`: the topic has windows already."""
    if not parts:
        return {}
    pos = cfg.start_position
    if isinstance(pos, GroupStart):
        anchored = {p: starts[p] for p in parts if starts is not None and p in starts}
        rest = [p for p in parts if p not in anchored]
        new = take_over_offsets(kafka, pos.consumer_group, topic, rest, taken_over) if rest else {}
        if starts is not None:
            starts.update(new)
        return anchored | new
    if pos == "earliest":
        return list_offsets(kafka, topic, {p: OffsetSpec.earliest() for p in parts})
    if isinstance(pos, int) and pos >= 0:
        found = list_offsets(kafka, topic, {p: OffsetSpec.for_timestamp(pos) for p in parts})
        return {p: end[p] if o < 0 else o for p, o in found.items()}
    # "latest" (or -1): the end at the first tick that saw the partition, remembered until it has a window.
    if starts is None:
        raise ValueError("start_position 'latest' needs the sensor cursor to remember where partitions start")
    out = {p: starts[p] for p in parts if p in starts}
    new = {p: end[p] for p in parts if p not in out}
    starts.update(new)
    return out | new


def take_over_offsets(kafka: KafkaResource, group: str, topic: str, parts: Sequence[int],
                      taken_over: bool = False) -> dict[int, int]:
    """Where a stopped consumer group (a Kafka Connect sink's) left each partition: its committed offset, the next
    record it would have read. A partition the group never committed starts at its log start, as the connector's
    consumer would have (auto.offset.reset earliest). Before the topic has windows (not `taken_over`) it is
    refused while the group has members (the connector still runs: its offsets move on, and its objects and the
    windows would overlap) and when the group has no offset for the topic at all (a wrong group name would
    otherwise archive everything the connector already wrote). Once taken over, a partition without a window yet
    (or added later) starts at the group's offset if it still has one, else at its log start."""
    offsets, members = kafka.group_offsets(group, topic, list(parts))
    if members and not taken_over:
        raise TakeOverRefused(f"consumer group {group!r} has {members} active member(s): the connector still "
                              "consumes; stop it (pause is not enough: delete or stop its tasks) before the archive "
                              "takes over, else the records it writes meanwhile are archived twice")
    if not offsets and not taken_over:
        raise TakeOverRefused(f"consumer group {group!r} has no committed offset for topic {topic!r}; a Kafka Connect "
                              "sink's group is connect-<connector name> (or its consumer.override.group.id). "
                              "Nothing is archived until the group is right")
    missing = [p for p in parts if p not in offsets]
    return offsets | list_offsets(kafka, topic, {p: OffsetSpec.earliest() for p in missing})


def partition_states(kafka: KafkaResource, cfg: ArchiveConfig, topic: str, ends: dict[int, int],
                     bytes_per_record: float | None, now_ms: int,
                     starts: dict[int, int] | None = None) -> TopicScan:
    """Where each partition's next window starts and how far it may reach; 1-3 admin round trips for the topic.
    `ends`: where each partition's windows end (the sensor's `window_ends`). `starts`: the topic's
    `start_position: latest` / consumer_group anchors (sensor cursor), updated in place."""
    parts = kafka.partitions(topic)
    # The last stable offset, not the high watermark: a window must not reach into an open transaction, whose
    # records a read_committed reader cannot see yet and would record as absent.
    end = list_offsets(kafka, topic, {p: OffsetSpec.latest() for p in parts})
    nxt = dict(ends)
    for p in [p for p in starts or {} if p in nxt]:  # a partition with a window no longer needs its anchor
        del starts[p]
    # A partition without windows (new topic, or partitions added to it) starts at cfg.start_position.
    nxt |= start_offsets(kafka, cfg, topic, [p for p in parts if p not in nxt], end, starts, taken_over=bool(ends))
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
