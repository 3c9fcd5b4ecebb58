"""What the capture keeps beside an archive, as values and JSON: a topic's shape (partitions, non-default configs),
a snapshot of the consumer groups' committed offsets, the ACLs; which groups are captured; the newest capture at
or before a time. Pure."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from s3_archive.keys.recovery_keys import stamped
from s3_archive.model.errors import InvalidRestore

DOC_VERSION = 1
# The product's own groups: the archive's committed ends (s3-archive.<name> or its consumer_group), the restores'
# ledgers (s3-archive-restore.*), the counting and probing consumers (s3-archive-*).
OWN_GROUP_PREFIX = "s3-archive"

GroupOffsets = dict[str, dict[str, dict[int, int]]]  # group -> topic -> partition -> committed offset


def sha(doc: Any) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def captured_groups(groups: Iterable[str], pattern: str, own: Iterable[str]) -> list[str]:
    """The groups whose offsets are snapshotted: those `pattern` matches (in full), never the product's own."""
    rx, own = re.compile(pattern), set(own)
    return sorted(g for g in groups if rx.fullmatch(g) and g not in own and not g.startswith(OWN_GROUP_PREFIX))


@dataclass(frozen=True)
class TopicCapture:
    topic: str
    partitions: int
    configs: dict[str, str]
    seen_ms: int

    def content(self) -> dict[str, Any]:
        return {"topic": self.topic, "partitions": self.partitions, "configs": dict(sorted(self.configs.items()))}

    def encode(self) -> bytes:
        return _encode({**self.content(), "seen_ms": self.seen_ms})

    @classmethod
    def decode(cls, body: bytes, where: str) -> TopicCapture:
        doc = _decode(body, where)
        return cls(doc["topic"], int(doc["partitions"]), {str(k): str(v) for k, v in doc["configs"].items()},
                   int(doc["seen_ms"]))


@dataclass(frozen=True)
class GroupSnapshot:
    """The committed offsets of the captured groups on the archive's topics at `taken_ms`, and each topic's log
    end then (what a group had not read yet)."""

    taken_ms: int
    groups: GroupOffsets
    ends: dict[str, dict[int, int]] = field(default_factory=dict)

    def encode(self) -> bytes:
        return _encode({"taken_ms": self.taken_ms, "groups": self.groups, "ends": self.ends})

    @classmethod
    def decode(cls, body: bytes, where: str) -> GroupSnapshot:
        doc = _decode(body, where)
        groups = {g: {t: {int(p): int(o) for p, o in ps.items()} for t, ps in ts.items()}
                  for g, ts in doc["groups"].items()}
        ends = {t: {int(p): int(o) for p, o in ps.items()} for t, ps in doc.get("ends", {}).items()}
        return cls(int(doc["taken_ms"]), groups, ends)


@dataclass(frozen=True)
class AclCapture:
    seen_ms: int
    bindings: list[dict[str, str]]

    def encode(self) -> bytes:
        return _encode({"seen_ms": self.seen_ms, "bindings": self.bindings})


def relevant_acls(bindings: list[dict[str, str]], topics: set[str], groups: set[str]) -> list[dict[str, str]]:
    """The bindings on the archived topics and the captured groups (literal names, prefixes and wildcards)."""
    def hits(b: dict[str, str]) -> bool:
        names = topics if b["resource_type"] == "TOPIC" else groups if b["resource_type"] == "GROUP" else set()
        if b["name"] == "*":
            return bool(names)
        if b["pattern"] == "PREFIXED":
            return any(n.startswith(b["name"]) for n in names)
        return b["name"] in names

    return sorted((b for b in bindings if hits(b)), key=lambda b: sorted(b.items()))


def newest_at(keys: Iterable[str], as_of_ms: int | None) -> str | None:
    """The key of the newest capture at or before `as_of_ms` (None: the newest of all)."""
    best = None
    for key in keys:
        ms = stamped(key)[0]
        if (as_of_ms is None or ms <= as_of_ms) and (best is None or ms > stamped(best)[0]):
            best = key
    return best


def _encode(doc: dict[str, Any]) -> bytes:
    return json.dumps({"v": DOC_VERSION, **doc}, sort_keys=True, separators=(",", ":")).encode()


def _decode(body: bytes, where: str) -> dict[str, Any]:
    try:
        doc = json.loads(body)
    except ValueError as e:
        raise InvalidRestore(f"{where} is not JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("v") != DOC_VERSION:
        raise InvalidRestore(f"{where} is not a disaster-recovery capture of version {DOC_VERSION}")
    return doc
