"""Where disaster recovery keeps its objects beside an archive's windows. Pure functions of the prefix.

    <prefix>_dr/topics/<topic>/<seen_ms:013d>-<sha16>.json    a topic's partition count and non-default configs
    <prefix>_dr/groups/<taken_ms:013d>.json                   one snapshot of the consumer groups' committed offsets
    <prefix>_dr/acls/<seen_ms:013d>-<sha16>.json              the ACLs of the archived topics and groups
    <prefix>_restore/<cluster id>/<ledger id>/map/<target partition:05d>/<first target offset:019d>.json
                                                              a restore's source -> target offset map, one object
                                                              per transaction (restore/offset_map.py)

A topic's config and the ACLs are written only when they change (the hash of their content in the name), so the
newest object at or before a time is what the cluster held then.
"""

from __future__ import annotations

DR = "_dr"
RESTORE = "_restore"
TIME_DIGITS = 13


def dr_prefix(prefix: str) -> str:
    return f"{prefix}{DR}/"


def topic_config_prefix(prefix: str, topic: str) -> str:
    return f"{prefix}{DR}/topics/{topic}/"


def topic_config_key(prefix: str, topic: str, seen_ms: int, sha: str) -> str:
    return f"{topic_config_prefix(prefix, topic)}{seen_ms:0{TIME_DIGITS}d}-{sha[:16]}.json"


def group_snapshot_prefix(prefix: str) -> str:
    return f"{prefix}{DR}/groups/"


def group_snapshot_key(prefix: str, taken_ms: int) -> str:
    return f"{group_snapshot_prefix(prefix)}{taken_ms:0{TIME_DIGITS}d}.json"


def acl_prefix(prefix: str) -> str:
    return f"{prefix}{DR}/acls/"


def acl_key(prefix: str, seen_ms: int, sha: str) -> str:
    return f"{acl_prefix(prefix)}{seen_ms:0{TIME_DIGITS}d}-{sha[:16]}.json"


def stamped(key: str) -> tuple[int, str]:
    """(time in ms, content hash or "") of a key made above."""
    stem = key.rsplit("/", 1)[-1].removesuffix(".json")
    ms, _, sha = stem.partition("-")
    return int(ms), sha


def offset_map_prefix(prefix: str, cluster_id: str, ledger_id: str) -> str:
    return f"{prefix}{RESTORE}/{cluster_id}/{ledger_id}/map/"


def offset_map_key(prefix: str, cluster_id: str, ledger_id: str, target_partition: int, first_offset: int) -> str:
    return f"{offset_map_prefix(prefix, cluster_id, ledger_id)}{target_partition:05d}/{first_offset:019d}.json"
