"""The capture beside an archive (run by defs/recovery/sensors.py): each archived topic's shape when it changes,
the captured groups' committed offsets at most every `snapshot_interval_seconds`, the ACLs when they change. A
failure to read the ACLs is reported, never fatal."""

from __future__ import annotations

from dataclasses import dataclass, field

from s3_archive.config.archive import ArchiveConfig
from s3_archive.io.cluster_admin import AclsUnreadable, acls, committed_offsets, consumer_groups, topic_shapes
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.s3 import S3Client, list_objects
from s3_archive.keys.recovery_keys import (
    acl_key,
    acl_prefix,
    group_snapshot_key,
    stamped,
    topic_config_key,
    topic_config_prefix,
)
from s3_archive.recovery.snapshots import (
    AclCapture,
    GroupSnapshot,
    TopicCapture,
    captured_groups,
    relevant_acls,
    sha,
)


@dataclass
class CaptureReport:
    topics_written: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    snapshot_key: str | None = None
    acls: str = ""  # "written", "unchanged", or why they could not be read


def _newest_sha(s3: S3Client, bucket: str, prefix: str) -> str | None:
    keys = [o["Key"] for o in list_objects(s3, bucket, prefix)]
    return stamped(max(keys))[1] if keys else None


def capture(kafka: KafkaResource, s3: S3Client, cfg: ArchiveConfig, now_ms: int, groups_due: bool) -> CaptureReport:
    """One capture of `cfg`'s topics at `now_ms`; the group snapshot only when `groups_due`."""
    rep, topics = CaptureReport(), list(cfg.topics)
    for topic, shape in sorted(topic_shapes(kafka, topics).items()):
        cap = TopicCapture(topic, shape.partitions, shape.configs, now_ms)
        digest = sha(cap.content())
        if _newest_sha(s3, cfg.bucket, topic_config_prefix(cfg.prefix, topic)) != digest[:16]:
            s3.put_object(Bucket=cfg.bucket, Key=topic_config_key(cfg.prefix, topic, now_ms, digest),
                          Body=cap.encode(), ContentType="application/json")
            rep.topics_written.append(topic)
    own = [cfg.group_id] if cfg.group_id else []
    groups = captured_groups(consumer_groups(kafka), cfg.disaster_recovery.groups, own)
    if groups_due:
        offsets = committed_offsets(kafka, groups, set(topics))
        rep.groups = sorted(offsets)
        parts = kafka.topic_partitions(topics)
        ends = kafka.list_offsets_many({(t, p): _latest() for t, ps in parts.items() for p in ps}, read_committed=True)
        snap = GroupSnapshot(now_ms, offsets, {t: {p: ends[(t, p)] for p in ps} for t, ps in parts.items()})
        rep.snapshot_key = group_snapshot_key(cfg.prefix, now_ms)
        s3.put_object(Bucket=cfg.bucket, Key=rep.snapshot_key, Body=snap.encode(), ContentType="application/json")
    found = acls(kafka)
    if isinstance(found, AclsUnreadable):
        rep.acls = f"not captured: {found.reason}"
        return rep
    bindings = relevant_acls(found, set(topics), set(groups))
    digest = sha(bindings)
    if _newest_sha(s3, cfg.bucket, acl_prefix(cfg.prefix)) == digest[:16]:
        rep.acls = "unchanged"
    else:
        s3.put_object(Bucket=cfg.bucket, Key=acl_key(cfg.prefix, now_ms, digest),
                      Body=AclCapture(now_ms, bindings).encode(), ContentType="application/json")
        rep.acls = "written"
    return rep


def _latest():
    from confluent_kafka.admin import OffsetSpec

    return OffsetSpec.latest()
