"""Is the S3 store fit for the exactly-once commit? The commit (docs/commit-protocol.md) rests on conditional
requests: a create with `If-None-Match: *` (objects, the manifest, a multipart upload's completion) is refused with
412 when the key exists, and a replace or delete with `If-Match: <ETag>` only applies to that version. A store that
ignores one of them accepts a second manifest or deletes a concurrent attempt's object without a word.

So before its first commit to a bucket, a process checks the store once (`ensure_conditional_writes`; the answer is
kept per endpoint and bucket for the process): one object under `<prefix>_store_probe/`, created, created again,
replaced, completed over and deleted with the conditions, then removed. A store that accepts what it must refuse is
refused with one error naming the endpoint and every missing condition; nothing was archived. There is no weaker
mode to fall back to.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from s3_archive.io.s3 import NO_SUCH_UPLOAD, NOT_FOUND, PRECONDITION_FAILED, S3Client, error_code
from s3_archive.keys.objects import store_probe_key
from s3_archive.model.errors import ConditionalWritesUnsupported, ObjectLockMissing

# An ETag no object has: a condition on it must fail.
_OTHER_ETAG = '"00000000000000000000000000000000"'

_checked: set[tuple[str, str]] = set()
_lock = threading.Lock()


def endpoint_of(s3: S3Client) -> str:
    return str(getattr(getattr(s3, "meta", None), "endpoint_url", None) or "S3")


def ensure_conditional_writes(s3: S3Client, bucket: str, prefix: str) -> None:
    """Raise ConditionalWritesUnsupported unless the store honours every conditional request the commit relies on;
    probed once per process, endpoint and bucket (a refusal is probed again next time)."""
    where = (endpoint_of(s3), bucket)
    with _lock:
        if where in _checked:
            return
        missing = probe_conditional_writes(s3, bucket, prefix)
        if missing:
            raise ConditionalWritesUnsupported(
                f"the S3 store at {where[0]} (bucket {bucket!r}) does not honour the conditional requests the "
                f"exactly-once commit relies on (docs/commit-protocol.md): {'; '.join(missing)}. Nothing was "
                "archived. Use a store that supports S3 conditional writes: If-None-Match: * on PutObject and "
                "CompleteMultipartUpload, If-Match on PutObject and DeleteObject (AWS S3 does)")
        _checked.add(where)


def ensure_object_lock(s3: S3Client, bucket: str, archive: str) -> None:
    """Raise ObjectLockMissing unless the bucket has S3 Object Lock enabled (`retention_lock` of archive `archive`
    needs it: a lock on an object of a bucket without it is refused by S3, and only a bucket created with it, or
    with it turned on, versions every object so that a locked version survives an overwrite or a delete)."""
    try:
        enabled = s3.get_object_lock_configuration(Bucket=bucket).get("ObjectLockConfiguration", {}).get(
            "ObjectLockEnabled")
    except ClientError as e:
        if error_code(e) not in ("ObjectLockConfigurationNotFoundError", "NoSuchObjectLockConfiguration"):
            raise
        enabled = None
    if enabled != "Enabled":
        raise ObjectLockMissing(
            f"archive {archive!r} sets retention_lock, but bucket {bucket!r} at {endpoint_of(s3)} does not have S3 "
            f"Object Lock enabled (ObjectLockConfiguration.ObjectLockEnabled is {enabled or 'not set'}, must be "
            "Enabled). Create the bucket with Object Lock (aws s3api create-bucket --object-lock-enabled-for-bucket) "
            "or enable it (aws s3api put-object-lock-configuration --object-lock-configuration "
            "ObjectLockEnabled=Enabled), or remove retention_lock; docs/compliance.md. Nothing was archived")


def forget_checked() -> None:
    """Forget which stores passed (tests)."""
    with _lock:
        _checked.clear()


def _outcome(call: Callable[[], Any]) -> str | None:
    """None when the store refused the call with 412; else what it did instead."""
    try:
        call()
    except ClientError as e:
        if error_code(e) in PRECONDITION_FAILED:
            return None
        return f"answered {error_code(e) or e}"
    return "accepted it"


def probe_conditional_writes(s3: S3Client, bucket: str, prefix: str) -> list[str]:
    """What the store gets wrong of the commit's conditional requests (empty: nothing). Leaves no object and no
    open upload behind. Raises a ClientError the store gives where it must accept (e.g. access refused)."""
    key = store_probe_key(prefix, uuid.uuid4().hex)
    missing: list[str] = []

    def must_refuse(what: str, call: Callable[[], Any]) -> None:
        outcome = _outcome(call)
        if outcome is not None:
            missing.append(f"{what}: the store {outcome}, where it must refuse with 412 PreconditionFailed")

    def put(body: bytes, **condition: str) -> Any:
        return s3.put_object(Bucket=bucket, Key=key, Body=body, **condition)

    def put_applied(body: bytes, **condition: str) -> None:
        """A PUT that must succeed; a 412 whose object holds `body` is our own PUT whose answer was lost (and
        retried by the SDK)."""
        try:
            put(body, **condition)
        except ClientError as e:
            if error_code(e) not in PRECONDITION_FAILED or \
                    s3.head_object(Bucket=bucket, Key=key)["ETag"] != _md5_etag(body):
                raise

    put_applied(b"1", IfNoneMatch="*")  # a new random key: nothing can be there
    try:
        must_refuse("PutObject with If-None-Match: * on an existing key", lambda: put(b"2", IfNoneMatch="*"))
        must_refuse("PutObject with If-Match of another ETag", lambda: put(b"3", IfMatch=_OTHER_ETAG))
        etag = s3.head_object(Bucket=bucket, Key=key)["ETag"]  # the probes above may have replaced it
        try:
            put_applied(b"4", IfMatch=etag)
        except ClientError as e:
            missing.append(f"PutObject with If-Match of the object's own ETag: the store answered "
                           f"{error_code(e) or e}, where it must replace the object")
        upload = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
        try:
            part = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=1, Body=b"5")
            must_refuse("CompleteMultipartUpload with If-None-Match: * on an existing key",
                        lambda: s3.complete_multipart_upload(
                            Bucket=bucket, Key=key, UploadId=upload, IfNoneMatch="*",
                            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]}))
        finally:
            _abort(s3, bucket, key, upload)
        outcome = _outcome(lambda: s3.delete_object(Bucket=bucket, Key=key, IfMatch=_OTHER_ETAG))
        if outcome is not None and not _exists(s3, bucket, key):
            missing.append(f"DeleteObject with If-Match of another ETag: the store {outcome} and deleted the object, "
                           "where it must refuse with 412 PreconditionFailed")
    finally:
        _remove(s3, bucket, key)
    return missing


def _remove(s3: S3Client, bucket: str, key: str) -> None:
    """The probe's object and any upload of it left open (a create whose answer was lost, retried by the SDK)."""
    for u in s3.list_multipart_uploads(Bucket=bucket, Prefix=key).get("Uploads", []):
        _abort(s3, bucket, u["Key"], u["UploadId"])
    try:
        s3.delete_object(Bucket=bucket, Key=key)
    except ClientError as e:
        if error_code(e) not in NOT_FOUND:
            raise


def _md5_etag(body: bytes) -> str:
    return f'"{hashlib.md5(body).hexdigest()}"'


def _exists(s3: S3Client, bucket: str, key: str) -> bool:
    try:
        s3.head_object(Bucket=bucket, Key=key)
        return True
    except ClientError as e:
        if error_code(e) in NOT_FOUND:
            return False
        raise


def _abort(s3: S3Client, bucket: str, key: str, upload: str) -> None:
    try:
        s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload)
    except ClientError as e:
        if error_code(e) not in NO_SUCH_UPLOAD:
            raise
