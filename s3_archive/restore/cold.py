"""Objects in GLACIER / DEEP_ARCHIVE before a restore reads them: ask S3 to restore them (RestoreObject), then
fail with the count still pending or wait, as configured. Used for our archives (objects from the manifests) and
for foreign sources (objects from the listing); the pure state rule is `foreign.cold_state`.

"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from botocore.exceptions import ClientError
from tenacity import Retrying, retry_if_result, stop_after_delay

from s3_archive.io.s3 import S3Client, error_code
from s3_archive.model.errors import ColdObjectsPending
from s3_archive.model.logger import Logger
from s3_archive.model.manifest import ManifestObject
from s3_archive.restore.sources import parallel_map

# Storage classes whose objects must be restored (RestoreObject) before a GET; GLACIER_IR is read directly.
COLD_CLASSES = frozenset({"GLACIER", "DEEP_ARCHIVE"})


@dataclass(frozen=True)
class ListedObject:
    key: str
    size: int
    storage_class: str = "STANDARD"


def cold_state(storage_class: str, restore_header: str | None) -> Literal["ready", "request", "pending"]:
    """Whether an object can be read now: `ready`; in GLACIER/DEEP_ARCHIVE with no restore asked (`request`) or
    with a restore still running (`pending`). `restore_header` is HeadObject's `Restore`
    (`ongoing-request="true"` or `ongoing-request="false", expiry-date="…"`)."""
    if storage_class not in COLD_CLASSES:
        return "ready"
    if restore_header is None:
        return "request"
    return "pending" if 'ongoing-request="true"' in restore_header else "ready"


COLD_TIERS = ("Standard", "Bulk", "Expedited")


@dataclass(frozen=True)
class ColdOptions:
    wait_seconds: float = 0.0  # 0: request, then fail if any is pending; > 0: poll at most this long
    days: int = 7  # RestoreObject Days
    tier: str = "Standard"  # Standard | Bulk | Expedited
    poll_seconds: float = 10.0

    def __post_init__(self) -> None:
        if self.tier not in COLD_TIERS:
            raise ValueError(f"cold_restore_tier must be one of {', '.join(COLD_TIERS)}; got {self.tier!r}")
        if self.days < 1:
            raise ValueError(f"cold_restore_days must be >= 1, got {self.days}")
        if self.wait_seconds < 0:
            raise ValueError(f"wait_for_cold_seconds must be >= 0, got {self.wait_seconds}")


@dataclass
class ColdReport:
    cold: int = 0  # objects in GLACIER / DEEP_ARCHIVE among those to read
    requested: int = 0  # RestoreObject sent by this run
    pending: int = 0  # still being restored when the run gave up or went on


def head_storage_classes(s3: S3Client, bucket: str, objects: Iterable[ManifestObject]) -> list[ListedObject]:
    """Objects named by manifests with their storage class (HeadObject; absent means STANDARD)."""
    def head(o: ManifestObject) -> ListedObject:
        return ListedObject(o.key, o.size, s3.head_object(Bucket=bucket, Key=o.key).get("StorageClass", "STANDARD"))

    return parallel_map(head, list(objects))


def prepare_cold(s3: S3Client, bucket: str, objects: list[ListedObject], opts: ColdOptions, what: str, log: Logger,
                 ) -> ColdReport:
    """Before anything is produced: request a restore of every cold object of `objects` not yet requested, then
    fail with the count of objects still being restored (`opts.wait_seconds` 0), or poll until they are
    readable, for at most `opts.wait_seconds`. `what` names the archive in messages."""
    cold = [o for o in objects if o.storage_class in COLD_CLASSES]
    rep = ColdReport(cold=len(cold))
    if not cold:
        return rep

    def state(o: ListedObject) -> str:
        return cold_state(o.storage_class, s3.head_object(Bucket=bucket, Key=o.key).get("Restore"))

    for o in cold:
        if state(o) == "request":
            try:
                s3.restore_object(Bucket=bucket, Key=o.key,
                                  RestoreRequest={"Days": opts.days, "GlacierJobParameters": {"Tier": opts.tier}})
            except ClientError as e:
                if error_code(e) != "RestoreAlreadyInProgress":
                    raise
            rep.requested += 1
    log.info(f"{what}: {len(cold)} objects are in GLACIER/DEEP_ARCHIVE; restore requested now for "
             f"{rep.requested} ({opts.tier} tier, {opts.days} days)")

    def still_pending() -> list[str]:
        keys = [o.key for o in cold if state(o) != "ready"]
        rep.pending = len(keys)
        return keys

    # Poll every poll_seconds (the last wait cut to the deadline) while any is pending, for at most wait_seconds
    # (0: look once); then give back what is still pending.
    pending = Retrying(
        retry=retry_if_result(bool), stop=stop_after_delay(opts.wait_seconds),
        wait=lambda rs: max(0.0, min(opts.poll_seconds, opts.wait_seconds - rs.seconds_since_start)),
        before_sleep=lambda _: log.info(f"{what}: waiting for {rep.pending} objects to be restored from cold "
                                        "storage"),
        retry_error_callback=lambda rs: rs.outcome.result())(still_pending)
    if not pending:
        return rep
    waited = f" after waiting {opts.wait_seconds:g} s" if opts.wait_seconds > 0 else ""
    raise ColdObjectsPending(
        f"{len(pending)} of {len(cold)} objects of {what} are still being restored from "
        f"GLACIER/DEEP_ARCHIVE{waited} (restore requested by this run: {rep.requested}; e.g. "
        f"s3://{bucket}/{pending[0]}). Nothing was produced. Run again once they are restored (Standard "
        "tier: hours; DEEP_ARCHIVE: up to 48 h), or launch with wait_for_cold_seconds")
