"""The `retention_lock:`, `verify:` and `erasure:` of an archive: S3 Object Lock on every committed window, the daily
check that re-reads the windows against their manifests' hashes and chains, and how an erasure request rewrites
windows (docs/compliance.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

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
