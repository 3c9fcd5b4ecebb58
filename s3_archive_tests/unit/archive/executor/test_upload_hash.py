"""ObjectUpload hashes the bytes as the encoder writes them (moto in-process): the SHA-256 it returns is that of the
object stored, for a single PUT, a multipart upload, and an identical object found already there; a single PUT sends
it as the object's S3 checksum, and botocore hashes the body no more (unless flexible checksums are off)."""

from __future__ import annotations

import base64
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


def _sent_headers(client) -> list[dict[str, str]]:
    """The headers of every PutObject `client` sends from now on, as signed."""
    sent: list[dict[str, str]] = []
    def keep(request, **_) -> None:
        sent.append({k: v.decode() if isinstance(v, bytes) else v for k, v in request.headers.items()})

    client.meta.events.register_first("before-send.s3.PutObject", keep)
    return sent


def test_the_hash_travels_as_the_objects_checksum_and_the_body_is_not_hashed_again(conn):
    sent = _sent_headers(conn.client(payload_signing=False))
    body = os.urandom(70_000)
    written = _upload(conn, "p/t/checksum.bin", [body[:1000], body[1000:]])
    checksum = base64.b64encode(hashlib.sha256(body).digest()).decode()
    [headers] = sent
    assert headers["x-amz-checksum-sha256"] == checksum and headers["x-amz-sdk-checksum-algorithm"] == "SHA256"
    assert headers["X-Amz-Content-SHA256"] == "UNSIGNED-PAYLOAD"  # the signed checksum header stands for the body
    assert not [h for h in headers if h.lower().startswith("x-amz-checksum-") and h != "x-amz-checksum-sha256"]
    head = conn.client().head_object(Bucket=BUCKET, Key=written.key, ChecksumMode="ENABLED")
    assert head["ChecksumSHA256"] == checksum and written.sha256 == hashlib.sha256(body).hexdigest()


def test_with_flexible_checksums_off_the_put_is_botocores_default(conn, monkeypatch):
    monkeypatch.setenv("AWS_REQUEST_CHECKSUM_CALCULATION", "when_required")
    off = S3Connection(region="us-east-1", max_attempts=4)  # a client of its own, made with the setting
    sent = _sent_headers(off.client())
    body = os.urandom(5000)
    written = _upload(off, "p/t/no-checksum.bin", [body])
    [headers] = sent
    assert not [h for h in headers if h.lower().startswith("x-amz-checksum-")]
    assert headers["X-Amz-Content-SHA256"] == hashlib.sha256(body).hexdigest()  # botocore signs the body itself
    assert "ChecksumSHA256" not in off.client().head_object(Bucket=BUCKET, Key=written.key, ChecksumMode="ENABLED")
