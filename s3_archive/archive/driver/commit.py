"""The exactly-once commit of one window, on the driver, after the write tasks put its objects at their final keys:

    1. LIST the window's keys: every object this attempt wrote must be there with its ETag (else another attempt
       changed it meanwhile: adopt its manifest, or fail without committing).
    2. Remove strays: objects whose key belongs to this window but that this attempt did not write (left by an
       earlier attempt with other parts; never a later generation's, an erasure's: erasure/erase_run.py), each
       deleted only if unchanged since the LIST (`If-Match`); and abort
       multipart uploads left open under the window by a killed attempt.
    3. Under `retention_lock`, lock each object until the window's retain-until (PutObjectRetention; the tasks put
       them unlocked, so what a losing attempt leaves is deleted as before). Then PUT the manifest, linked to the
       previous committed manifest of the partition (manifest_chain.py) and locked itself, with `If-None-Match: *`
       (`put_manifest`, format iceberg's step 3 too): the first attempt to get there commits; any other gets 412
       and adopts the committed manifest (its objects are the same keys with the same bytes; checked). A 412 that
       finds this attempt's own manifest (a lost answer, retried by the SDK) is our commit.

A crash before 3 leaves no manifest: the next attempt writes the same keys (same bytes: kept as they are) and
removes what it does not write. `fault` lets tests stop the protocol after any step (`CommitStep`;
docs/commit-protocol.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from botocore.exceptions import ClientError

from s3_archive.archive.driver.manifest_chain import previous_link
from s3_archive.io.s3 import (
    CONFLICT,
    DENIED,
    NO_SUCH_UPLOAD,
    NOT_FOUND,
    PRECONDITION_FAILED,
    S3Client,
    error_code,
    list_objects,
    read_manifest,
)
from s3_archive.keys.objects import WindowLocation, generation_of_key
from s3_archive.model.errors import ArchiveIntegrityError
from s3_archive.model.manifest import MANIFEST_VERSION, Manifest, ManifestObject, Retention


class CommitStep(StrEnum):
    """The steps after which a test's `fault` may stop a commit (docs/commit-protocol.md)."""

    WRITTEN = "written"  # the write tasks put the objects; nothing listed or removed yet
    CLEANED = "cleaned"  # strays removed, open uploads aborted; no manifest yet
    MANIFEST_WRITTEN = "manifest_written"  # the commit point passed
    ICEBERG_CHECKED = "iceberg_checked"  # format iceberg: the table's snapshots read, before the overwrite
    ICEBERG_COMMITTED = "iceberg_committed"  # format iceberg: the snapshot committed, no manifest yet


Fault = Callable[[CommitStep], None]


class Outcome(StrEnum):
    """How a window of a run ended up committed (metadata `outcome`)."""

    COMMITTED = "committed"  # by this run
    ALREADY_COMMITTED = "already_committed"  # before this run looked: nothing written
    COMMITTED_BY_CONCURRENT_ATTEMPT = "committed_by_concurrent_attempt"  # another run got there first; adopted


def no_fault(step: CommitStep) -> None:
    return None


def _etag(o: dict) -> str:
    return str(o.get("ETag", "")).strip('"')


def window_objects(s3: S3Client, where: WindowLocation, dead_letters: bool) -> dict[str, dict]:
    """Every object in the bucket that belongs to this window by its key (data, and dead letters when asked),
    whatever attempt wrote it: key -> its ListObjectsV2 entry."""
    found = {o["Key"]: o for o in list_objects(s3, where.bucket, where.scan_prefix) if where.owns(o["Key"])}
    if dead_letters:
        found |= {o["Key"]: o for o in list_objects(s3, where.bucket, where.dead_letter_stem)}
    return found


def open_uploads(s3: S3Client, bucket: str, prefixes: Iterable[str]) -> list[dict]:
    """Multipart uploads still open under the prefixes (Key, UploadId, Initiated)."""
    out: list[dict] = []
    for prefix in prefixes:
        for page in s3.get_paginator("list_multipart_uploads").paginate(Bucket=bucket, Prefix=prefix):
            out += page.get("Uploads", [])
    return out


def delete_if_unchanged(s3: S3Client, bucket: str, entries: Iterable[dict]) -> None:
    """Delete each object only if it still has the ETag it was listed with (a concurrent attempt's newer object
    of the same key stays); already gone is fine."""
    for o in entries:
        try:
            s3.delete_object(Bucket=bucket, Key=o["Key"], IfMatch=o["ETag"])
        except ClientError as e:
            if error_code(e) not in NOT_FOUND + PRECONDITION_FAILED:
                raise


def remove_objects(s3: S3Client, where: WindowLocation, uploads: list[dict]) -> None:
    """An uncommitted attempt that stops (undecodable values, data lost while reading): leave nothing of the window
    behind, unless another attempt committed it meanwhile."""
    if read_manifest(s3, where.bucket, where.manifest_key) is not None:
        return
    delete_if_unchanged(s3, where.bucket, window_objects(s3, where, True).values())
    _abort(s3, where.bucket, [u for u in uploads if _upload_of(u, where)])


def _upload_of(u: dict, where: WindowLocation) -> bool:
    return where.owns(u["Key"]) or u["Key"].startswith(where.dead_letter_stem)


def _abort(s3: S3Client, bucket: str, uploads: list[dict]) -> None:
    for u in uploads:
        try:
            s3.abort_multipart_upload(Bucket=bucket, Key=u["Key"], UploadId=u["UploadId"])
        except ClientError as e:
            if error_code(e) not in NO_SUCH_UPLOAD:
                raise


@dataclass(frozen=True)
class CommitResult:
    manifest: Manifest
    committed_by_us: bool  # False: another attempt committed this window first; we adopted its manifest


def adopt(s3: S3Client, where: WindowLocation, listed: dict[str, dict] | None = None) -> CommitResult | None:
    """The window's committed manifest, if there is one; with `listed` (this attempt's LIST of the window), its
    objects are checked against what is in the bucket."""
    theirs = read_manifest(s3, where.bucket, where.manifest_key)
    if theirs is None:
        return None
    if listed is not None and (theirs.generation or 1) > 1:
        # Rewritten by an erasure since: what this attempt wrote may hold erased records, and is not committed.
        kept = {o.key for o in theirs.all_objects}
        delete_if_unchanged(s3, where.bucket, [o for k, o in listed.items() if k not in kept
                                               and generation_of_key(k, where.suffix) == 1])
    elif listed is not None:
        wrong = [o.key for o in theirs.all_objects if _etag(listed.get(o.key, {})) != o.etag]
        if wrong:
            raise ArchiveIntegrityError(
                f"window {theirs.window_key} of {theirs.topic!r} was committed by attempt {theirs.attempt} "
                f"({where.url(where.manifest_key)}), but {len(wrong)} of its objects hold other bytes than it lists "
                f"(first: {where.url(wrong[0])}): another attempt rewrote them. Delete the manifest and archive the "
                "window again")
    return CommitResult(theirs, committed_by_us=False)


def put_manifest(s3: S3Client, where: WindowLocation, manifest: Manifest, listed: dict[str, dict] | None = None,
                 fault: Fault = no_fault) -> CommitResult:
    """Step 3, for every format: the window's manifest with `If-None-Match: *`. Refused (412, or 409 for a
    concurrent conditional write), the manifest another attempt wrote first is adopted (with `listed`, its objects
    checked: adopt), unless it is this very manifest (the same attempt and time: the PUT reached S3, its answer was
    lost and the SDK's retry got 412), which is our commit."""
    if manifest.manifest_version == MANIFEST_VERSION and manifest.previous_manifest is None:
        manifest = manifest.model_copy(update={"previous_manifest": previous_link(s3, where)})
    lock = {} if manifest.retention is None else {"ObjectLockMode": manifest.retention.mode,
                                                  "ObjectLockRetainUntilDate": manifest.retention.until}
    try:
        s3.put_object(Bucket=where.bucket, Key=where.manifest_key, Body=manifest.dumps(),
                      ContentType="application/json", IfNoneMatch="*", **lock)
    except ClientError as e:
        if error_code(e) in PRECONDITION_FAILED + CONFLICT and (won := adopt(s3, where, listed)) is not None:
            m = won.manifest
            ours_after_all = (m.attempt, m.committed_at) == (manifest.attempt, manifest.committed_at)
            return CommitResult(m, committed_by_us=True) if ours_after_all else won
        raise
    fault(CommitStep.MANIFEST_WRITTEN)
    return CommitResult(manifest, committed_by_us=True)


def commit_window(s3: S3Client, where: WindowLocation, draft: Manifest, objects: list[ManifestObject],
                  dead_objects: list[ManifestObject], uploads: list[dict], fault: Fault = no_fault,
                  dead_letters: bool = False) -> CommitResult:
    """`draft`: the window's manifest but for its objects (and bytes_written), which this fills in. `uploads`:
    the open multipart uploads listed under the run's prefixes (those of this window are aborted)."""
    fault(CommitStep.WRITTEN)
    listed = window_objects(s3, where, dead_letters or bool(dead_objects))
    ours = {o.key: o for o in [*objects, *dead_objects]}
    changed = [k for k, o in ours.items() if _etag(listed.get(k, {})) != o.etag]
    if changed:
        if (won := adopt(s3, where)) is not None:
            return won
        raise ArchiveIntegrityError(
            f"window {where.window.key} of {where.topic!r}: {len(changed)} object(s) this attempt wrote were changed "
            f"or removed by another attempt before the commit (first: {where.url(changed[0])}); nothing was "
            "committed. Run the window again")
    # an erasure's objects (a later generation of a committed window) are never this attempt's strays
    delete_if_unchanged(s3, where.bucket, [o for k, o in listed.items() if k not in ours
                                           and generation_of_key(k, where.suffix) == 1])
    _abort(s3, where.bucket, [u for u in uploads if _upload_of(u, where)])
    fault(CommitStep.CLEANED)

    manifest = draft.with_objects(sorted(objects, key=lambda o: o.key), sorted(dead_objects, key=lambda o: o.key))
    if manifest.retention is not None:
        lock_objects(s3, where.bucket, manifest.all_objects, manifest.retention)
    return put_manifest(s3, where, manifest, listed, fault)


def lock_objects(s3: S3Client, bucket: str, objects: list[ManifestObject], retention: Retention) -> None:
    """Lock each object (its current version: the one the LIST just checked) until the window's retain-until. A
    lock an attempt of the same window set later than ours stays: S3 refuses to shorten it, which is fine."""
    def lock(o: ManifestObject) -> None:
        try:
            s3.put_object_retention(Bucket=bucket, Key=o.key, Retention={"Mode": retention.mode,
                                                                         "RetainUntilDate": retention.until})
        except ClientError as e:
            if error_code(e) not in (*DENIED, "InvalidRequest") or _locked_until(s3, bucket, o.key) < retention.until:
                raise

    with ThreadPoolExecutor(max_workers=min(16, max(1, len(objects)))) as pool:
        list(pool.map(lock, objects))


def _locked_until(s3: S3Client, bucket: str, key: str) -> datetime:
    until = s3.head_object(Bucket=bucket, Key=key).get("ObjectLockRetainUntilDate")
    return until or datetime.min.replace(tzinfo=UTC)
