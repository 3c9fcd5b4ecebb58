"""An archive's disaster-recovery capture (`disaster_recovery:` of an archive): which consumer groups' committed
offsets are snapshotted beside the windows, and how often (docs/disaster-recovery.md)."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from s3_archive.model.base import StrictModel


class RecoveryCapture(StrictModel):
    """What the capture sensor keeps beside the archive: topic configs and ACLs when they change, and the committed
    offsets of the matching consumer groups every `snapshot_interval_seconds` (the groups' RPO)."""

    enabled: bool = Field(default=True, description="capture topic configs, group offsets and ACLs beside the "
                                                    "archive")
    groups: str = Field(default=".*", description="regular expression (full match) of the consumer groups whose "
                                                  "offsets are snapshotted; the product's own never are")
    snapshot_interval_seconds: int = Field(default=60, ge=10, le=86_400, description="group offsets are snapshotted "
                                           "at most this often: the consumer groups' recovery point objective")

    @field_validator("groups")
    @classmethod
    def _regex(cls, v: str) -> str:
        try:
            re.compile(v)
        except re.error as e:
            raise ValueError(f"must be a regular expression, got {v!r}: {e}") from None
        return v
