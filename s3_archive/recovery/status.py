"""`s3-archive dr status`: the recovery point each topic and consumer group has now: the age of the newest
committed window (its manifest's time in S3) and of the newest group snapshot."""

from __future__ import annotations

from dataclasses import dataclass

from s3_archive.config.archive import ArchiveConfig
from s3_archive.io.s3 import S3Client, list_objects
from s3_archive.keys.objects import manifest_prefix
from s3_archive.keys.recovery_keys import group_snapshot_prefix, stamped, topic_config_prefix
from s3_archive.recovery.snapshots import GroupSnapshot


@dataclass(frozen=True)
class RpoLine:
    kind: str  # "topic" or "group"
    name: str
    age_seconds: float | None  # None: nothing captured yet
    detail: str = ""

    def line(self) -> str:
        age = "never" if self.age_seconds is None else f"{self.age_seconds:.0f}s"
        return f"{self.kind} {self.name}: RPO {age}" + (f" ({self.detail})" if self.detail else "")


def rpo(s3: S3Client, cfg: ArchiveConfig, now_ms: int) -> list[RpoLine]:
    out = []
    for topic in cfg.topics:
        newest = max((o["LastModified"].timestamp() * 1000 for o in list_objects(s3, cfg.bucket,
                                                                               manifest_prefix(cfg.prefix, topic))),
                     default=None)
        configs = [o["Key"] for o in list_objects(s3, cfg.bucket, topic_config_prefix(cfg.prefix, topic))]
        out.append(RpoLine("topic", topic, None if newest is None else (now_ms - newest) / 1000,
                           "newest committed window; config " + ("captured" if configs else "NOT captured")))
    snaps = [o["Key"] for o in list_objects(s3, cfg.bucket, group_snapshot_prefix(cfg.prefix))]
    if not snaps:
        out.append(RpoLine("group", "*", None, f"no snapshot in s3://{cfg.bucket}/{group_snapshot_prefix(cfg.prefix)}"))
        return out
    key = max(snaps)
    snap = GroupSnapshot.decode(s3.get_object(Bucket=cfg.bucket, Key=key)["Body"].read(), key)
    age = (now_ms - stamped(key)[0]) / 1000
    for group in sorted(snap.groups):
        out.append(RpoLine("group", group, age, f"topics {sorted(snap.groups[group])}"))
    return out
