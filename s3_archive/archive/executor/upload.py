"""One object written once to its final key, from an executor: a single conditional PutObject, or a multipart upload
for a large one. Runs where Spark runs the write tasks (executors), so it imports nothing of Spark or Dagster.

An object's bytes go into a spool (memory, then a local temp file past SPOOL_MEMORY), so a task's memory stays
flat whatever the object's size. At close, an object of at most `multipart_threshold` bytes is one PutObject with
`If-None-Match: *` (one request); a larger one became a multipart upload when it crossed the threshold, its parts
uploaded as they fill and completed with `If-None-Match: *`.

`If-None-Match: *` never overwrites a committed window's object by accident: when the key exists (412), the
existing object is examined (`ObjectExists`): if it holds the same bytes (same ETag) it is kept as is; if the
window is already committed the task stops (the driver adopts the manifest); otherwise it is a leftover of an
uncommitted attempt and is replaced with `If-Match: <its ETag>` (replacing exactly the version examined).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

SPOOL_MEMORY = 8 << 20  # bytes of an object kept in memory before its spool moves to a temp file
MULTIPART_THRESHOLD = 256 << 20  # larger objects are multipart uploads (S3's single PUT allows up to 5 GiB)
PART_SIZE = 64 << 20  # multipart part size (S3: at least 5 MiB, except the last part)
_PRECONDITION = ("PreconditionFailed", "412")
_CONFLICT = ("ConditionalRequestConflict", "409")
_MISSING = ("NoSuchKey", "404", "NotFound")


@dataclass(frozen=True)
class S3Connection:
    """How executors (and the driver) reach S3 with boto3: picklable, so a Spark task can rebuild the client.

    Secrets are excluded from repr, so they never reach a log or an error message."""

    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    path_style: bool = False
    verify: bool | str | None = None
    # Extra PutObject / CreateMultipartUpload arguments for every data object (e.g. ServerSideEncryption,
    # SSEKMSKeyId, StorageClass).
    put_args: tuple[tuple[str, str], ...] = ()
    # botocore's own retries (S3Resource.max_attempts / retry_mode): throttling, 5xx and dropped connections.
    # max_attempts is botocore's `retries.max_attempts`: retries after the first try.
    max_attempts: int = 5
    retry_mode: str = "standard"

    def client(self) -> Any:
        """A boto3 S3 client (one per process and connection: boto3 clients are thread-safe)."""
        return _client(self)

    @classmethod
    def of_resource(cls, resource: Any) -> S3Connection:
        """The connection of the runs' `S3Resource` (io/s3_resource.py), for the executors: endpoint, region, path
        style, CA bundle, credentials (None: the executors' default chain) and the SSE-KMS key and storage class
        every data object is written with."""
        return cls(endpoint_url=resource.endpoint_url or None, region=resource.region_name,
                   access_key_id=resource.aws_access_key_id, secret_access_key=resource.aws_secret_access_key,
                   session_token=resource.aws_session_token, path_style=resource.path_style,
                   verify=resource.ca_bundle or resource.verify,
                   put_args=tuple(sorted(resource.object_write_args("data").items())),
                   max_attempts=resource.max_attempts, retry_mode=resource.retry_mode)

    @classmethod
    def of_client(cls, s3: Any) -> S3Connection:
        """The connection of a boto3 client (tests, benchmarks): its endpoint, region, addressing style and the
        credentials it signs with (None: the executors use the default credential chain)."""
        creds = s3._request_signer._credentials  # botocore has no public accessor for a client's credentials
        frozen = creds.get_frozen_credentials() if creds is not None else None
        retries = s3.meta.config.retries or {}
        return cls(endpoint_url=s3.meta.endpoint_url, region=s3.meta.region_name,
                   access_key_id=frozen.access_key if frozen else None,
                   secret_access_key=frozen.secret_key if frozen else None,
                   session_token=frozen.token if frozen else None,
                   path_style=(s3.meta.config.s3 or {}).get("addressing_style") == "path",
                   # botocore keeps total_max_attempts (the first try + retries; 3 by default in standard mode).
                   max_attempts=retries.get("total_max_attempts", 3) - 1,
                   retry_mode=retries.get("mode", "standard"))


_clients: dict[S3Connection, Any] = {}
_clients_lock = threading.Lock()


def _client(conn: S3Connection) -> Any:
    with _clients_lock:
        if conn not in _clients:
            import boto3
            from botocore.config import Config

            _clients[conn] = boto3.client(
                "s3", endpoint_url=conn.endpoint_url, region_name=conn.region,
                aws_access_key_id=conn.access_key_id, aws_secret_access_key=conn.secret_access_key,
                aws_session_token=conn.session_token, verify=conn.verify,
                config=Config(s3={"addressing_style": "path" if conn.path_style else "auto"},
                              max_pool_connections=32,
                              retries={"max_attempts": conn.max_attempts, "mode": conn.retry_mode}))
        return _clients[conn]


class WindowAlreadyCommitted(Exception):
    """While writing, the window turned out to be committed by another attempt: stop, the driver adopts it."""


def code(e: ClientError) -> str:
    return str(e.response.get("Error", {}).get("Code", ""))


@dataclass(frozen=True)
class Written:
    key: str
    size: int
    etag: str


def _etag(response: dict) -> str:
    return str(response["ETag"]).strip('"')


class ObjectUpload:
    """A file-like sink for one object's bytes (write, tell, flush, close): ParquetWriter and the codecs write into
    it; `finish()` stores the object and returns its key, size and ETag."""

    def __init__(self, conn: S3Connection, bucket: str, key: str, manifest_key: str,
                 multipart_threshold: int = MULTIPART_THRESHOLD, part_size: int = PART_SIZE,
                 fault: str | None = None) -> None:
        self.conn, self.bucket, self.key, self.manifest_key = conn, bucket, key, manifest_key
        self.threshold, self.part_size, self.fault = multipart_threshold, part_size, fault
        self._spool = self._new_spool()
        self._size = 0
        self._upload_id: str | None = None
        self._parts: list[dict] = []
        self.closed = False

    @staticmethod
    def _new_spool() -> Any:
        return tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY, dir=os.environ.get("SPARK_LOCAL_DIRS",
                                                                                       "").split(",")[0] or None)

    # --- file-like -------------------------------------------------------------------------------------------
    def write(self, data: Any) -> int:
        n = self._spool.write(data)
        self._size += n
        if self._upload_id is None and self._size > self.threshold:
            self._start_multipart()
        if self._upload_id is not None and self._spool.tell() >= self.part_size:
            self._flush_parts(final=False)
        return n

    def tell(self) -> int:
        return self._size

    def flush(self) -> None:
        return None

    def close(self) -> None:  # the encoder closing its sink: the object is stored by finish()
        return None

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readable(self) -> bool:
        return False

    @property
    def size(self) -> int:
        return self._size

    # --- storing ---------------------------------------------------------------------------------------------
    def _start_multipart(self) -> None:
        s3 = self.conn.client()
        r = s3.create_multipart_upload(Bucket=self.bucket, Key=self.key, **dict(self.conn.put_args))
        self._upload_id = r["UploadId"]

    def _flush_parts(self, final: bool) -> None:
        """Upload the spool's content as parts of `part_size` (and the rest when `final`)."""
        s3 = self.conn.client()
        spool, self._spool = self._spool, self._new_spool()
        end = spool.tell()
        spool.seek(0)
        while True:
            chunk = spool.read(self.part_size)
            pos = spool.tell()
            if not chunk or (len(chunk) < self.part_size and not final):
                if chunk:
                    self._spool.write(chunk)  # less than a part: keep it for the next one
                break
            n = len(self._parts) + 1
            r = s3.upload_part(Bucket=self.bucket, Key=self.key, UploadId=self._upload_id, PartNumber=n, Body=chunk)
            self._parts.append({"PartNumber": n, "ETag": r["ETag"]})
            if self.fault == "mid_upload":
                os.kill(os.getpid(), 9)  # tests: an attempt killed with a multipart upload open
            if pos >= end:
                break
        spool.close()

    def _md5_etag(self) -> str:
        """The ETag S3 gives these bytes when they are not encrypted with SSE-KMS: MD5, or MD5 of part MD5s."""
        if self._upload_id is not None:
            digest = hashlib.md5(b"".join(bytes.fromhex(p["ETag"].strip('"')) for p in self._parts))
            return f"{digest.hexdigest()}-{len(self._parts)}"
        h = hashlib.md5()
        self._spool.seek(0)
        while chunk := self._spool.read(1 << 20):
            h.update(chunk)
        return h.hexdigest()

    def _store(self, **condition: str) -> str:
        s3 = self.conn.client()
        if self._upload_id is not None:
            r = s3.complete_multipart_upload(Bucket=self.bucket, Key=self.key, UploadId=self._upload_id,
                                             MultipartUpload={"Parts": self._parts}, **condition)
            return _etag(r)
        self._spool.seek(0)
        r = s3.put_object(Bucket=self.bucket, Key=self.key, Body=self._spool, ContentLength=self._size,
                          **dict(self.conn.put_args), **condition)
        return _etag(r)

    def _committed(self) -> bool:
        try:
            self.conn.client().head_object(Bucket=self.bucket, Key=self.manifest_key)
            return True
        except ClientError as e:
            if code(e) in _MISSING:
                return False
            raise

    def abort(self) -> None:
        """Give up this object: close the spool, abort an open multipart upload (best effort)."""
        self.closed = True
        self._spool.close()
        if self._upload_id is not None:
            try:
                self.conn.client().abort_multipart_upload(Bucket=self.bucket, Key=self.key, UploadId=self._upload_id)
            except ClientError:
                pass  # the driver aborts what is left open under the window before it commits

    def finish(self) -> Written:
        """Store the object at its key (see the module docstring); raises WindowAlreadyCommitted."""
        self.closed = True
        if self._upload_id is not None:
            self._flush_parts(final=True)
        condition: dict[str, str] = {"IfNoneMatch": "*"}
        try:
            for _ in range(5):
                try:
                    return Written(self.key, self._size, self._store(**condition))
                except ClientError as e:
                    if code(e) in _CONFLICT:
                        continue  # a concurrent conditional write of the same key: look again
                    if code(e) not in _PRECONDITION and not (condition.get("IfMatch") and code(e) in _MISSING):
                        raise
                try:
                    existing = _etag(self.conn.client().head_object(Bucket=self.bucket, Key=self.key))
                except ClientError as e:
                    if code(e) not in _MISSING:
                        raise
                    condition = {"IfNoneMatch": "*"}  # gone meanwhile (a stray removed): write it anew
                    continue
                if existing == self._md5_etag():
                    if self._upload_id is not None:
                        self.abort()
                    return Written(self.key, self._size, existing)  # the same bytes: keep them
                if self._committed():
                    raise WindowAlreadyCommitted(self.key)
                condition = {"IfMatch": f'"{existing}"'}  # a leftover of an uncommitted attempt: replace it
            raise RuntimeError(f"s3://{self.bucket}/{self.key} kept changing while it was written (5 tries); "
                               "another attempt of this window is writing it: run the window again")
        finally:
            self._spool.close()
