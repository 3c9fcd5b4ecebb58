"""One object written once to its final key, from an executor: a single conditional PutObject, or a multipart upload
for a large one. Runs where Spark runs the write tasks (executors), so it imports nothing of Spark or Dagster.

An object's bytes are hashed (SHA-256, the manifest's tamper evidence) as the encoder writes them, and go into a
spool (memory, then a local temp file past SPOOL_MEMORY), so a task's memory stays flat whatever the object's size.
At close, an object of at most `multipart_threshold` bytes is one PutObject with `If-None-Match: *` (one request);
a larger one became a multipart upload when it crossed the threshold, its parts uploaded as they fill and completed
with `If-None-Match: *`.

The single PutObject carries that SHA-256 as the object's S3 checksum (`x-amz-checksum-sha256`): S3 checks the bytes
it receives against it (a mismatch is refused) and keeps it with the object (HeadObject / GetObjectAttributes with
checksum mode). The header is signed, so the request names no other hash of the body (`UNSIGNED-PAYLOAD`) and
botocore hashes the body neither for its default CRC32 checksum nor for the signature: the bytes are hashed once,
as they are written. With flexible checksums off for the connection (AWS_REQUEST_CHECKSUM_CALCULATION=when_required:
a store without them), the PUT is botocore's default one. Multipart parts keep botocore's default checksum.

`If-None-Match: *` never overwrites a committed window's object by accident: when the key exists (412), the
existing object is examined (`ObjectExists`): if it holds the same bytes (same ETag) it is kept as is; if the
window is already committed the task stops (the driver adopts the manifest); otherwise it is a leftover of an
uncommitted attempt and is replaced with `If-Match: <its ETag>` (replacing exactly the version examined).
"""

from __future__ import annotations

import base64
import hashlib
import os
import tempfile
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from s3_archive.archive.protocol import MULTIPART_THRESHOLD, PART_SIZE, S3Connection
from s3_archive.io.s3 import CONFLICT, NOT_FOUND, PRECONDITION_FAILED, error_code

SPOOL_MEMORY = 1 << 20  # bytes of an object kept in memory before its spool moves to a temp file


class WindowAlreadyCommitted(Exception):
    """While writing, the window turned out to be committed by another attempt: stop, the driver adopts it."""


@dataclass(frozen=True)
class Written:
    key: str
    size: int
    etag: str
    sha256: str  # of the bytes written, computed while writing them (no second read)


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
        self._hash = hashlib.sha256()
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
        self._hash.update(data)
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
        s3, checksum = self._put_client(s3)
        r = s3.put_object(Bucket=self.bucket, Key=self.key, Body=self._spool, ContentLength=self._size,
                          **checksum, **dict(self.conn.put_args), **condition)
        return _etag(r)

    def _put_client(self, s3: Any) -> tuple[Any, dict[str, str]]:
        """The client of the single PUT and its checksum arguments: the SHA-256 computed while writing as the
        object's checksum, sent by the client that does not hash the body to sign it (see the module docstring);
        `s3` and none when the connection's flexible checksums are off."""
        if s3.meta.config.request_checksum_calculation != "when_supported":
            return s3, {}
        return self.conn.client(payload_signing=False), {
            "ChecksumAlgorithm": "SHA256", "ChecksumSHA256": base64.b64encode(self._hash.digest()).decode()}

    def _committed(self) -> bool:
        try:
            self.conn.client().head_object(Bucket=self.bucket, Key=self.manifest_key)
            return True
        except ClientError as e:
            if error_code(e) in NOT_FOUND:
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
                    return Written(self.key, self._size, self._store(**condition), self._hash.hexdigest())
                except ClientError as e:
                    code = error_code(e)
                    if code in CONFLICT:
                        continue  # a concurrent conditional write of the same key: look again
                    if code not in PRECONDITION_FAILED and not (condition.get("IfMatch") and code in NOT_FOUND):
                        raise
                try:
                    existing = _etag(self.conn.client().head_object(Bucket=self.bucket, Key=self.key))
                except ClientError as e:
                    if error_code(e) not in NOT_FOUND:
                        raise
                    condition = {"IfNoneMatch": "*"}  # gone meanwhile (a stray removed): write it anew
                    continue
                if existing == self._md5_etag():
                    if self._upload_id is not None:
                        self.abort()
                    return Written(self.key, self._size, existing, self._hash.hexdigest())  # the same bytes: kept
                if self._committed():
                    raise WindowAlreadyCommitted(self.key)
                condition = {"IfMatch": f'"{existing}"'}  # a leftover of an uncommitted attempt: replace it
            raise RuntimeError(f"s3://{self.bucket}/{self.key} kept changing while it was written (5 tries); "
                               "another attempt of this window is writing it: run the window again")
        finally:
            self._spool.close()
