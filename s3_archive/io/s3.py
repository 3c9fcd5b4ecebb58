"""S3 helpers every stage uses: the one paginator (`list_objects`, `list_prefixes`), the one ClientError reader
(`error_code`, `error_message`) and S3's error codes by what they mean, batch deletes, reading a window's manifest
and checking its objects, probing a bucket with a clear error, and one boto3 client per process and connection
(`shared_client`). The executors import it too (archive/executor/upload.py): botocore only, boto3 on first use.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from typing import Any, TypeAlias

from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

from s3_archive.model.errors import S3Refused, S3Unavailable
from s3_archive.model.manifest import Manifest, parse_manifest

# A boto3 S3 client (boto3's clients are made at run time and carry no static type of their own).
S3Client: TypeAlias = Any

# S3's error codes (`error_code`), by what they mean; each names the code and, where a HEAD has no body, the status.
NOT_FOUND = ("NoSuchKey", "404", "NotFound")  # no such object
PRECONDITION_FAILED = ("PreconditionFailed", "412")  # If-None-Match: * on a key that exists, If-Match on another ETag
CONFLICT = ("ConditionalRequestConflict", "409")  # a concurrent conditional write of the same key
NO_SUCH_UPLOAD = ("NoSuchUpload", "404")  # the multipart upload is gone (completed or aborted)
NO_SUCH_BUCKET = ("404", "NoSuchBucket", "NotFound")
DENIED = ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch")
# Answers a retry gets again: the bucket is gone, or the credentials or the policy refuse us.
REFUSALS = ("NoSuchBucket", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AllAccessDisabled",
            "InvalidBucketName", "AccountProblem")


def _pages(s3: S3Client, bucket: str, prefix: str, **kw: Any) -> Iterator[dict]:
    yield from s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix, **kw)


def list_objects(s3: S3Client, bucket: str, prefix: str, start_after: str | None = None) -> Iterator[dict]:
    """Every object under `prefix` (ListObjectsV2 `Contents` entries: Key, Size, StorageClass, ...), in key order;
    with `start_after`, only the keys after it."""
    for page in _pages(s3, bucket, prefix, **({"StartAfter": start_after} if start_after else {})):
        yield from page.get("Contents", [])


def list_prefixes(s3: S3Client, bucket: str, prefix: str, delimiter: str = "/") -> Iterator[str]:
    """The "directories" directly under `prefix`: each common prefix up to the next `delimiter`."""
    for page in _pages(s3, bucket, prefix, Delimiter=delimiter):
        for cp in page.get("CommonPrefixes", []):
            yield cp["Prefix"]


def delete_keys(s3: S3Client, bucket: str, keys: list[str]) -> None:
    for i in range(0, len(keys), 1000):
        s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]], "Quiet": True})


def error_code(e: ClientError) -> str:
    """The S3 (or Glue) error code of a ClientError, e.g. `NoSuchKey`, `404`; empty when it has none."""
    return str(e.response.get("Error", {}).get("Code", ""))


def error_message(e: ClientError) -> str:
    """The service's message of a ClientError; empty when it has none."""
    return str(e.response.get("Error", {}).get("Message", ""))


def read_bytes(s3: S3Client, bucket: str, key: str) -> bytes | None:
    """The object's bytes; None when there is no such object."""
    try:
        return s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as e:
        if error_code(e) in NOT_FOUND:
            return None
        raise


def read_state(s3: S3Client, bucket: str, key: str) -> tuple[bytes | None, str | None]:
    """A small state object's bytes and ETag (None, None when there is none), for `put_state` over it."""
    try:
        r = s3.get_object(Bucket=bucket, Key=key)
    except ClientError as e:
        if error_code(e) in NOT_FOUND:
            return None, None
        raise
    return r["Body"].read(), str(r["ETag"])


def put_state(s3: S3Client, bucket: str, key: str, body: bytes, etag: str | None) -> bool:
    """A state object written over the version read (If-Match `etag`), or created (If-None-Match): False when
    another writer saved meanwhile (its state stays)."""
    condition = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
    try:
        s3.put_object(Bucket=bucket, Key=key, Body=body, ContentType="application/json", **condition)
    except ClientError as e:
        if error_code(e) in PRECONDITION_FAILED + CONFLICT:
            return False
        raise
    return True


def read_manifest(s3: S3Client, bucket: str, key: str) -> Manifest | None:
    """The window's manifest at `key`; None when there is none (not committed). Raises InvalidManifest when it
    does not parse (model/manifest.py)."""
    body = read_bytes(s3, bucket, key)
    return None if body is None else parse_manifest(body, f"s3://{bucket}/{key}")


def verify_manifest(s3: S3Client, bucket: str, manifest: Manifest) -> list[str]:
    """What is wrong with a committed window's objects in S3 (empty when all exist with their recorded sizes)."""
    problems = []
    for obj in manifest.all_objects:
        try:
            head = s3.head_object(Bucket=bucket, Key=obj.key)
        except ClientError as e:
            if error_code(e) in NOT_FOUND:
                problems.append(f"missing: s3://{bucket}/{obj.key}")
                continue
            raise
        if head["ContentLength"] != obj.size:
            problems.append(f"size changed: s3://{bucket}/{obj.key} is {head['ContentLength']} bytes, "
                            f"manifest says {obj.size}")
    return problems


def check_bucket(s3: S3Client, bucket: str, prefix: str = "") -> None:
    """One LIST of at most one key under the archive's prefix, turned into a clear error; never includes
    credentials. Not HeadBucket: that needs s3:ListBucket on the whole bucket, which the least-privilege policy
    (`s3-archive iam-policy`) grants only under the archive's prefixes."""
    with bucket_errors(s3, bucket):
        s3.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1)


@contextmanager
def bucket_errors(s3: S3Client, bucket: str) -> Iterator[None]:
    """A missing bucket, refused access or an unreachable endpoint in the requests made inside, turned into
    check_bucket's clear error (S3Refused, S3Unavailable; never the credentials): so that a run's first request
    under the archive's prefix is its bucket check too."""
    endpoint = getattr(getattr(s3, "meta", None), "endpoint_url", "S3")
    try:
        yield
    except ClientError as e:
        code = error_code(e)
        if code in NO_SUCH_BUCKET:
            raise S3Refused(f"bucket {bucket!r} does not exist at {endpoint}; create it or fix `bucket`") from None
        if code in DENIED:
            raise S3Refused(f"access to bucket {bucket!r} at {endpoint} was refused ({code}); check the AWS "
                                "credentials and the bucket policy") from None
        raise S3Unavailable(f"bucket {bucket!r} at {endpoint}: {code or e}") from None
    except (EndpointConnectionError, NoCredentialsError) as e:
        raise S3Unavailable(f"cannot reach S3 for bucket {bucket!r}: {e}") from None


_clients: dict[Hashable, S3Client] = {}
_clients_lock = threading.Lock()


def shared_client(conn: Any, payload_signing: bool = True) -> S3Client:
    """The boto3 client of a connection (archive/protocol.py::S3Connection: hashable, picklable), one per process,
    connection and `payload_signing` (boto3's clients are thread-safe): endpoint, region, credentials (None: the
    default chain), addressing style, CA bundle and botocore's retries. `payload_signing` False: the signature
    names no hash of the body (`UNSIGNED-PAYLOAD`), for requests that carry the body's SHA-256 in a signed
    `x-amz-checksum-sha256` header, which S3 checks (archive/executor/upload.py): botocore does not hash the body
    again to sign it."""
    with _clients_lock:
        if (conn, payload_signing) not in _clients:
            import boto3
            from botocore.config import Config

            s3 = {"addressing_style": "path" if conn.path_style else "auto"}
            _clients[conn, payload_signing] = boto3.client(
                "s3", endpoint_url=conn.endpoint_url, region_name=conn.region,
                aws_access_key_id=conn.access_key_id, aws_secret_access_key=conn.secret_access_key,
                aws_session_token=conn.session_token, verify=conn.verify,
                config=Config(s3=s3 if payload_signing else s3 | {"payload_signing_enabled": False},
                              max_pool_connections=32,
                              retries={"max_attempts": conn.max_attempts, "mode": conn.retry_mode}))
        return _clients[conn, payload_signing]
