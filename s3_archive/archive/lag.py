"""How far each archived partition is behind Kafka, for the metrics exporter (docs/metrics.md).

Per refresh: one metadata request for the archives' topics' partitions, one offsets request for their last stable
offsets (all topics at once), and one consumer group offsets request per topic of an archive with a consumer group
(`consumer_group_offsets`, on by default). The archived end of a partition is the group's offset (where the
committed windows reach, contiguously), or, without a group, the end of its newest committed window (`archived`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka.admin import OffsetSpec

from s3_archive.config.archive import ArchiveConfig
from s3_archive.io.kafka import KafkaResource


@dataclass(frozen=True)
class PartitionLag:
    end: int  # the last stable offset (what a window may reach)
    archived: int  # the offset the archive has committed up to (exclusive)

    @property
    def records(self) -> int:
        return max(self.end - self.archived, 0)


def archive_lag(kafka: KafkaResource, archives: list[ArchiveConfig],
                archived: Mapping[tuple[str, int], int]) -> dict[tuple[str, str, int], PartitionLag]:
    """(archive, topic, partition) -> its lag. `archived`: per (topic, partition), the end of the newest committed
    window (the instance's), used where an archive has no consumer group; a partition with neither starts at 0."""
    topics = sorted({t for a in archives for t in a.topics})
    partitions = kafka.topic_partitions(topics)
    ends = kafka.list_offsets_many({(t, p): OffsetSpec.latest() for t, ps in partitions.items() for p in ps},
                                   read_committed=True)
    out: dict[tuple[str, str, int], PartitionLag] = {}
    for a in archives:
        for t in a.topics:
            parts = partitions.get(t, [])
            group = kafka.group_offsets(a.group_id, t, parts) if a.group_id is not None and parts else {}
            for p in parts:
                done = group.get(p, archived.get((t, p), 0))
                out[(a.name, t, p)] = PartitionLag(ends[(t, p)], done)
    return out
