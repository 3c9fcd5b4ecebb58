"""Checks of the topic a restore produces into: it exists (a restore never creates topics), and its settings do not
silently change the restored records (timestamp type, retention)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import UTC, datetime

from confluent_kafka.admin import ConfigResource

from s3_archive.io.kafka import KafkaResource
from s3_archive.model.errors import InvalidRestore, UnknownTopic


def target_partition_count(kafka: KafkaResource, topic: str) -> int:
    try:
        return len(kafka.partitions(topic))
    except UnknownTopic:
        raise InvalidRestore(f"target topic {topic!r} does not exist on {kafka.bootstrap_servers}; create it first "
                             "(a restore never creates topics: partitions, retention and compaction are yours to "
                             "choose)") from None


def target_checks(kafka: KafkaResource, topic: str, manifests: Iterable[dict]) -> tuple[list[str], int]:
    """Warnings about target topic settings that would silently change restored records (best effort: needs
    DescribeConfigs), and the target's retention.ms (-1: unlimited or not known) for records whose age is only
    known once they are read (a sink's objects)."""
    try:
        res = ConfigResource("TOPIC", topic)
        admin = kafka.admin()
        configs = admin.describe_configs([res], request_timeout=kafka.timeout_s)[res].result(timeout=kafka.timeout_s)
    except Exception as e:  # noqa: BLE001 - a missing permission must not stop the restore, but is said
        return [f"could not read the config of target topic {topic!r} ({type(e).__name__}): its timestamp type "
                "and retention were not checked against the archived records"], -1
    out = []
    if configs.get("message.timestamp.type") is not None and configs["message.timestamp.type"].value == \
            "LogAppendTime":
        out.append(f"target topic {topic!r} has message.timestamp.type=LogAppendTime: the broker replaces the "
                   "archived timestamps with its own")
    retention = int(configs["retention.ms"].value) if configs.get("retention.ms") is not None else -1
    oldest = min((m["min_timestamp_ms"] for m in manifests if m.get("min_timestamp_ms") is not None), default=None)
    if retention >= 0 and oldest is not None and oldest < time.time() * 1000 - retention:
        out.append(retention_warning(topic, retention, oldest, "the oldest record to restore"))
    return out, retention


def retention_warning(topic: str, retention_ms: int, oldest_ms: int, which: str) -> str:
    """The warning for records older than the target's retention: the broker deletes them soon after they are
    restored (`which` records: e.g. "the oldest record to restore")."""
    return (f"target topic {topic!r} has retention.ms={retention_ms}, but {which} is from "
            f"{datetime.fromtimestamp(oldest_ms / 1000, UTC).isoformat()}: the broker will delete such records soon "
            "after they are restored. Set retention.ms=-1 on the target first")
