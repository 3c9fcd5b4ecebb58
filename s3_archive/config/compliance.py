"""The `retention_lock:`, `verify:`, `erasure:` and `drill:` of an archive: S3 Object Lock on every committed window,
the daily check that re-reads the windows against their manifests' hashes and chains, how an erasure request
rewrites windows, and the restore drill (docs/compliance.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from s3_archive.config.names import TOPIC
from s3_archive.model.base import StrictModel


class RetentionLock(StrictModel):
    """Every object and manifest of a window is locked (S3 Object Lock) until the window's commit time + `days`.
    The bucket must have Object Lock enabled (which versions it); the archive refuses one without."""

    mode: Literal["governance", "compliance"] = Field(description="compliance: nobody can shorten or remove the lock, "
                                                                  "not even the root account; governance: only with "
                                                                  "s3:BypassGovernanceRetention")
    days: int = Field(ge=1, le=36_500, description="days a committed window stays locked after its commit")

    @property
    def s3_mode(self) -> str:
        """The mode as S3 spells it (ObjectLockMode)."""
        return self.mode.upper()


class VerifyOptions(StrictModel):
    """The `verify` asset check: each run re-reads windows (their objects hashed, their manifests' chain walked)
    for at most `bytes_per_run` bytes, going on where the last run stopped, so the archive is read end to end every
    `period_days` at most; a run that cannot keep that pace warns."""

    bytes_per_run: int = Field(default=10 << 30, ge=1, description="bytes of objects a scheduled run reads at most")
    period_days: float = Field(default=30, gt=0, description="every window is re-read at least this often (the "
                                                              "check runs daily, with the archive's other checks)")


class ErasureOptions(StrictModel):
    """How `erase` rewrites the windows holding the records to erase: `drop` leaves them out of the new objects,
    `null` keeps them with their value and headers null (the key too: it is what is erased). Either way the new
    manifest lists their offsets and a restore skips them. Under a governance `retention_lock` the old objects can
    be deleted only with s3:BypassGovernanceRetention, and only when `allow_governance_bypass` says so; under a
    compliance lock erasure is refused."""

    mode: Literal["drop", "null"] = Field(default="drop", description="drop: the records leave the objects; null: "
                                                                      "kept with key, value and headers null")
    allow_governance_bypass: bool = Field(default=False, description="under a governance retention_lock: delete the "
                                                                     "superseded objects with "
                                                                     "BypassGovernanceRetention")


class DrillOptions(StrictModel):
    """The `drill` asset check: every `every_days` it restores a rotating sample of committed windows (at most
    `bytes_per_run` bytes of objects) into a scratch topic with the restore's own path, reads them back and compares
    them record by record with the archive, and records the restore's seconds per GB (the RTO evidence)."""

    bytes_per_run: int = Field(default=64 << 20, ge=1, description="bytes of objects a drill restores at most (at "
                                                                    "least one window)")
    scratch_topic: str | None = Field(default=None, description="an existing topic the drill restores into (never "
                                                                "deleted; give it a short retention.ms); null: a "
                                                                "topic s3-archive-drill-<topic>-<time> created and "
                                                                "deleted by each drill")
    every_days: int = Field(default=7, ge=1, le=366, description="days between drills (the check runs daily with "
                                                                 "the archive's other checks; after a failed drill, "
                                                                 "the next run drills again)")

    @field_validator("scratch_topic")
    @classmethod
    def _scratch(cls, v: str | None) -> str | None:
        if v is not None and (not TOPIC.fullmatch(v) or v in (".", "..")):
            raise ValueError(f"not a valid Kafka topic name: {v!r} (allowed: 1-249 of a-z A-Z 0-9 . _ -)")
        return v
