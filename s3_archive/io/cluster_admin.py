"""The admin requests disaster recovery makes of a cluster (recovery/): its id, topics' partition counts and
non-default configs, topic creation, every consumer group's committed offsets, and the ACLs. Each failure is one
KafkaUnavailable naming the request (`KafkaResource.unavailable`); ACLs a principal may not read are a value
(`AclsUnreadable`), never fatal."""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from s3_archive.io.kafka import KafkaResource

GroupOffsets = dict[str, dict[str, dict[int, int]]]  # group -> topic -> partition -> committed offset


@dataclass(frozen=True)
class TopicShape:
    """A topic as a cluster holds it: partition count and the configs set on the topic (not broker defaults)."""

    partitions: int
    configs: dict[str, str]


@dataclass(frozen=True)
class AclsUnreadable:
    """Why the ACLs could not be read (no authorizer, or no Describe permission on the cluster)."""

    reason: str


def cluster_id(kafka: KafkaResource) -> str:
    admin = kafka.admin()
    try:
        return str(admin.describe_cluster(request_timeout=kafka.timeout_s).result(timeout=kafka.timeout_s + 5)
                   .cluster_id)
    except (KafkaException, TimeoutError) as e:
        raise kafka.unavailable(e, admin, "describing the cluster") from e


def topic_shapes(kafka: KafkaResource, topics: list[str]) -> dict[str, TopicShape]:
    """Each of `topics` that exists: partition count and the configs whose source is the topic itself."""
    parts = kafka.topic_partitions(topics)
    if not parts:
        return {}
    admin = kafka.admin()
    resources = {t: ConfigResource(ResourceType.TOPIC, t) for t in parts}
    try:
        futures = admin.describe_configs(list(resources.values()), request_timeout=kafka.timeout_s)
        out = {}
        for topic, res in resources.items():
            entries = futures[res].result(timeout=kafka.timeout_s + 5)
            configs = {name: e.value for name, e in sorted(entries.items())
                       if int(getattr(e.source, "value", e.source)) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
                       and e.value is not None}
            out[topic] = TopicShape(len(parts[topic]), configs)
        return out
    except (KafkaException, TimeoutError) as e:
        raise kafka.unavailable(e, admin, "describing topic configs") from e


def create_topic(kafka: KafkaResource, topic: str, shape: TopicShape) -> bool:
    """Create `topic` with `shape` (the cluster's default replication factor); False when it exists already."""
    admin = kafka.admin()
    new = NewTopic(topic, num_partitions=shape.partitions, config=dict(shape.configs))
    try:
        admin.create_topics([new], request_timeout=kafka.timeout_s)[topic].result(timeout=kafka.timeout_s + 5)
        return True
    except KafkaException as e:
        err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
        if err is not None and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        raise kafka.unavailable(e, admin, f"creating topic {topic!r}") from e
    except TimeoutError as e:
        raise kafka.unavailable(e, admin, f"creating topic {topic!r}") from e


def consumer_groups(kafka: KafkaResource) -> list[str]:
    admin = kafka.admin()
    try:
        result = admin.list_consumer_groups(request_timeout=kafka.timeout_s).result(timeout=kafka.timeout_s + 5)
    except (KafkaException, TimeoutError) as e:
        raise kafka.unavailable(e, admin, "listing consumer groups") from e
    return sorted(g.group_id for g in result.valid)


def committed_offsets(kafka: KafkaResource, groups: list[str], topics: set[str]) -> GroupOffsets:
    """group -> topic -> partition -> committed offset, for `topics` only; groups with none of them left out."""
    out: dict[str, dict[str, dict[int, int]]] = {}
    for group in groups:
        result = kafka.group_request(
            f"reading the offsets of consumer group {group!r}",
            lambda admin, g=group: admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(g)],
                                                                     request_timeout=kafka.timeout_s)[g])
        for tp in result.topic_partitions:
            if tp.topic in topics and tp.error is None and tp.offset >= 0:
                out.setdefault(group, {}).setdefault(tp.topic, {})[tp.partition] = tp.offset
    return out


def acls(kafka: KafkaResource) -> list[dict[str, str]] | AclsUnreadable:
    """Every ACL binding the principal may describe, as plain values (filtered by the caller)."""
    admin = kafka.admin()
    any_acl = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                               AclPermissionType.ANY)
    try:
        bindings = admin.describe_acls(any_acl, request_timeout=kafka.timeout_s).result(timeout=kafka.timeout_s + 5)
    except Exception as e:  # noqa: BLE001 - no authorizer, no permission, an old broker: said, never fatal
        err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
        return AclsUnreadable(kafka.scrub(err.str() if err is not None else str(e) or type(e).__name__))
    return [{"resource_type": b.restype.name, "name": b.name, "pattern": b.resource_pattern_type.name,
             "principal": b.principal, "host": b.host, "operation": b.operation.name,
             "permission": b.permission_type.name} for b in bindings]
