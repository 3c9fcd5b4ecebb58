"""ObjectUpload hashes the bytes as the encoder writes them (moto in-process): the SHA-256 it returns is that of the
object stored, for a single PUT, a multipart upload, and an identical object found already there."""

from __future__ import annotations

import hashlib
import os

import boto3
import pytest
from moto import mock_aws

from s3_archive.archive.executor.upload import ObjectUpload
from s3_archive.archive.protocol import S3Connection

BUCKET = "upload-hash"


@pytest.fixture
def conn():
    with mock_aws():
        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=BUCKET)
        yield S3Connection(region="us-east-1")


def _upload(conn: S3Connection, key: str, pieces: list[bytes], **kw):
    up = ObjectUpload(conn, BUCKET, key, "p/_manifests/m.json", **kw)
    for piece in pieces:
        up.write(piece)
    return up.finish()


@pytest.mark.parametrize("multipart", [False, True])
def test_the_hash_is_of_the_bytes_stored(conn, multipart):
    pieces = [os.urandom(n) for n in (1, 70_000, 3 << 20, 5 << 20, 17)]
    kw = {"multipart_threshold": 5 << 20, "part_size": 5 << 20} if multipart else {}
    written = _upload(conn, f"p/t/{multipart}.bin", pieces, **kw)
    stored = conn.client().get_object(Bucket=BUCKET, Key=written.key)["Body"].read()
    assert stored == b"".join(pieces) and written.sha256 == hashlib.sha256(stored).hexdigest()
    assert ("-" in written.etag) == multipart
    again = _upload(conn, f"p/t/{multipart}.bin", pieces, **kw)  # kept as it is: the same bytes, the same hash
    assert (again.etag, again.sha256) == (written.etag, written.sha256)
