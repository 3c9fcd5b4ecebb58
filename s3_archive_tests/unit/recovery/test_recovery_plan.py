"""The recovery's plan: topics created, left alone or refused; groups' offsets translated or skipped with the
reason; which groups are captured; the newest capture at or before a time."""

from __future__ import annotations

from s3_archive.io.cluster_admin import TopicShape
from s3_archive.keys.recovery_keys import group_snapshot_key, stamped, topic_config_key
from s3_archive.recovery.recovery_plan import PartitionMap, plan_topic, translate_group
from s3_archive.recovery.snapshots import GroupSnapshot, TopicCapture, captured_groups, newest_at, relevant_acls
from s3_archive.restore.offset_map import Run

COMPACTED = TopicCapture("t", 3, {"cleanup.policy": "compact", "retention.ms": "-1"}, 1)


def test_a_missing_topic_is_created_as_captured() -> None:
    plan = plan_topic(COMPACTED, None, allow_changes=False)
    assert (plan.action, plan.partitions, plan.configs, plan.remapped) == ("create", 3, COMPACTED.configs, False)
    assert "create with 3 partitions" in plan.line()


def test_an_existing_topic_with_another_cleanup_policy_is_refused_unless_allowed() -> None:
    target = TopicShape(3, {"retention.ms": "-1"})
    plan = plan_topic(COMPACTED, target, allow_changes=False)
    assert plan.action == "refused"
    assert "cleanup.policy='delete' (captured 'compact')" in plan.reason and "allow_config_changes" in plan.reason
    assert plan_topic(COMPACTED, target, allow_changes=True).action == "exists"


def test_log_append_time_on_the_target_is_refused() -> None:
    plan = plan_topic(TopicCapture("t", 1, {}, 1), TopicShape(1, {"message.timestamp.type": "LogAppendTime"}), False)
    assert plan.action == "refused" and "message.timestamp.type='LogAppendTime'" in plan.reason


def test_other_differences_are_shown_not_refused() -> None:
    plan = plan_topic(COMPACTED, TopicShape(3, {"cleanup.policy": "compact", "retention.ms": "1000"}), False)
    assert plan.action == "exists"
    assert plan.differs == {"retention.ms": ("-1", "1000")}
    assert "retention.ms: captured '-1', target '1000'" in plan.line()


def test_another_partition_count_only_when_asked() -> None:
    target = TopicShape(6, dict(COMPACTED.configs))
    refused = plan_topic(COMPACTED, target, False)
    assert refused.action == "refused" and "partitions {t: 6}" in refused.reason
    asked = plan_topic(COMPACTED, target, False, partitions=6)
    assert asked.action == "exists" and asked.remapped
    assert plan_topic(COMPACTED, None, False, partitions=4).remapped


def test_group_translation_sets_what_it_can_and_says_why_not_the_rest() -> None:
    maps = {"a": {0: PartitionMap((Run(10, 0, 5), Run(20, 6, 5)), 11), 1: PartitionMap(problem="no map")},
            "b": "the topic was restored with the murmur2 remap: committed offsets cannot be translated"}
    plan = translate_group("g", {"a": {0: 12, 1: 3}, "b": {0: 1}, "c": {0: 0}}, maps)
    assert plan.offsets == {"a": {0: 2}}
    assert plan.skipped == ["a[1]: no map", "b: the topic was restored with the murmur2 remap: committed offsets "
                            "cannot be translated", "c: topic 'c' is not part of this recovery"]
    assert translate_group("g", {"a": {0: 15}}, maps).offsets == {"a": {0: 6}}  # in the gap: the next record
    assert translate_group("g", {"a": {0: 99}}, maps).offsets == {"a": {0: 11}}  # past the end


def test_captured_groups_leave_the_products_own_out() -> None:
    groups = ["orders-app", "s3-archive.demo", "s3-archive-restore.t.t", "mine", "billing"]
    assert captured_groups(groups, ".*", ["mine"]) == ["billing", "orders-app"]
    assert captured_groups(groups, "orders-.*", []) == ["orders-app"]


def test_relevant_acls() -> None:
    def acl(rt: str, name: str, pattern: str = "LITERAL") -> dict[str, str]:
        return {"resource_type": rt, "name": name, "pattern": pattern, "principal": "User:a", "host": "*",
                "operation": "READ", "permission": "ALLOW"}

    found = relevant_acls([acl("TOPIC", "t"), acl("TOPIC", "other"), acl("TOPIC", "t", "PREFIXED"),
                           acl("GROUP", "g"), acl("GROUP", "*"), acl("CLUSTER", "kafka-cluster")], {"tx"}, {"g"})
    assert [(b["resource_type"], b["name"], b["pattern"]) for b in found] == [
        ("GROUP", "*", "LITERAL"), ("GROUP", "g", "LITERAL"), ("TOPIC", "t", "PREFIXED")]


def test_newest_capture_at_or_before_a_time() -> None:
    keys = [group_snapshot_key("p/", ms) for ms in (1000, 2000, 3000)]
    assert newest_at(keys, None) == keys[2]
    assert newest_at(keys, 2500) == keys[1]
    assert newest_at(keys, 2000) == keys[1]
    assert newest_at(keys, 999) is None
    key = topic_config_key("p/", "t", 1234, "ab" * 32)
    assert stamped(key) == (1234, "ab" * 8)


def test_captures_round_trip() -> None:
    snap = GroupSnapshot(5, {"g": {"t": {0: 3, 2: 7}}}, {"t": {0: 10, 1: 0, 2: 9}})
    assert GroupSnapshot.decode(snap.encode(), "x") == snap
    assert TopicCapture.decode(COMPACTED.encode(), "x") == COMPACTED
