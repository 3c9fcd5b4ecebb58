"""A data object's SHA-256 (the manifest's) sent as its S3 checksum by the single PUT (archive/executor/upload.py)
against real servers: moto and versitygw accept the request (unsigned body, signed checksum header; on an Object
Lock bucket too) and keep the checksum with the object; versitygw, which checks it as S3 does, refuses a body that
does not match it (moto keeps what it is given without checking, so that part runs on versitygw only)."""

from __future__ import annotations

import base64
import hashlib
import os

import pytest
from botocore.exceptions import ClientError

from s3_archive.archive.executor.upload import ObjectUpload
from s3_archive.archive.protocol import S3Connection
from s3_archive.io.s3 import NOT_FOUND, error_code


def _checksum(data: bytes) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def test_the_store_keeps_the_objects_sha256_as_its_checksum(store, unique):
    conn = S3Connection.of_client(store.client())
    body = os.urandom(3 << 20)
    upload = ObjectUpload(conn, store.bucket, f"checksum/{unique}/o.bin", f"checksum/{unique}/_manifest.json")
    for i in range(0, len(body), 1 << 20):
        upload.write(body[i:i + (1 << 20)])
    written = upload.finish()
    head = store.client().head_object(Bucket=store.bucket, Key=written.key, ChecksumMode="ENABLED")
    assert head["ChecksumSHA256"] == _checksum(body) and written.sha256 == hashlib.sha256(body).hexdigest()
    got = store.client().get_object(Bucket=store.bucket, Key=written.key)["Body"].read()
    assert got == body


def test_versitygw_refuses_a_body_its_checksum_does_not_match(versitygw_store, unique):
    conn = S3Connection.of_client(versitygw_store.client())
    key = f"checksum/{unique}/tampered.bin"
    with pytest.raises(ClientError):
        conn.client(payload_signing=False).put_object(
            Bucket=versitygw_store.bucket, Key=key, Body=b"the archived bytes", ChecksumAlgorithm="SHA256",
            ChecksumSHA256=_checksum(b"other bytes"))
    with pytest.raises(ClientError) as e:
        versitygw_store.client().head_object(Bucket=versitygw_store.bucket, Key=key)
    assert error_code(e.value) in NOT_FOUND
