"""The offsets sensor's look at Kafka: per partition of each topic, where its next window starts and how far Kafka
lets it reach. One metadata request and 1-3 `ListOffsets` round trips for all the archive's topics together, however
many they are. What to cut from that is pure (plan.py); which offsets already have windows comes from the Dagster
instance (defs/archive/sensors.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from confluent_kafka.admin import OffsetSpec

from s3_archive.archive.plan import PartitionState, window_size
from s3_archive.config.archive import ArchiveConfig
from s3_archive.io.kafka import KafkaResource

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


def start_offsets(kafka: KafkaResource, cfg: ArchiveConfig, new: list[TopicPartitionKey],
                  end: dict[TopicPartitionKey, int], starts: dict[str, dict[int, int]]) -> dict[TopicPartitionKey, int]:
    """Where the first window of each partition in `new` (partitions with no window yet) starts, per
    `cfg.start_position`: the log start offset; the last stable offset when the partition was first seen
    ("latest", remembered in `starts`, the sensor cursor's, so that records produced before its first window are
    not skipped by later ticks); or the first offset at/after an epoch-ms timestamp (none that new: the end)."""
    if not new:
        return {}
    pos = cfg.start_position
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


def scan_topics(kafka: KafkaResource, cfg: ArchiveConfig, ends: Mapping[str, dict[int, int]],
                bytes_per_record: Mapping[str, float | None], now_ms: int,
                starts: dict[str, dict[int, int]]) -> Scan:
    """Where each partition of each topic in `ends` starts its next window and how far it may reach. `ends`: per
    topic, where each partition's windows end (the sensor's `window_ends`). `starts`: the `start_position: latest`
    anchors per topic (sensor cursor), updated in place."""
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
    nxt |= start_offsets(kafka, cfg, [tp for tp in tps if tp not in nxt], end, starts)
    pending = [tp for tp in tps if end[tp] > nxt[tp]]
    aged: dict[TopicPartitionKey, int] = {}
    if cfg.flush.interval_seconds is not None and pending:
        # The first offset whose record is at most interval_seconds old; every record before it is older. One
        # round trip for all partitions instead of fetching a record per partition. -1: no record that recent.
        cutoff = now_ms - round(cfg.flush.interval_seconds * 1000)
        found = list_offsets(kafka, {tp: OffsetSpec.for_timestamp(cutoff) for tp in pending})
        aged = {tp: end[tp] if o < 0 else o for tp, o in found.items()}
    out = {t: TopicScan() for t in parts}
    for t, p in tps:
        tp = (t, p)
        size, reason = window_size(cfg.flush, bytes_per_record.get(t))
        if nxt[tp] > end[tp]:
            out[t].behind.append(f"partition {p}: windows reach offset {nxt[tp]} but Kafka's last stable offset is "
                                 f"{end[tp]}")
        out[t].states.append(PartitionState(t, p, nxt[tp], max(end[tp], nxt[tp]), size, reason, aged.get(tp)))
    return Scan(out, missing)
