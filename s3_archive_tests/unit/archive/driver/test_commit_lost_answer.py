"""commit_window when the manifest PUT's answer is lost and the SDK's retry gets 412 (moto in-process: the S3
semantics of If-None-Match, no server). The integration twin goes through the fault proxy
(integration/reliability/test_s3_faults.py)."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from moto import mock_aws

from s3_archive.archive.driver.commit import commit_window
from s3_archive.keys.objects import WindowLocation, manifest_key, object_key
from s3_archive.model.manifest import ManifestObject
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.manifests import hand_manifest

BUCKET, PREFIX, TOPIC, WINDOW = "lost-answers", "p/", "t", OffsetWindow(0, 0, 10)


class LostManifestAnswer:
    """A boto3 client whose manifest PUT takes effect and then fails as botocore's retry of it would: 412."""

    def __init__(self, s3: Any) -> None:
        self.s3 = s3

    def __getattr__(self, name: str) -> Any:
        return getattr(self.s3, name)

    def put_object(self, **kw: Any) -> dict:
        self.s3.put_object(**kw)
        if "/_manifests/" in kw["Key"]:
            self.s3.put_object(**kw)  # the retry: raises 412 PreconditionFailed
        return {}


@pytest.fixture
def s3():
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield client


def _commit(s3: Any, client: Any, attempt: str, stray: bool = False):
    key = object_key(PREFIX, TOPIC, WINDOW, 0, ".parquet")
    etag = s3.put_object(Bucket=BUCKET, Key=key, Body=b"data")["ETag"].strip('"')
    if stray:
        s3.put_object(Bucket=BUCKET, Key=object_key(PREFIX, TOPIC, WINDOW, 7, ".parquet"), Body=b"stale")
    draft = hand_manifest(TOPIC, WINDOW, attempt=attempt)
    return commit_window(client, WindowLocation(BUCKET, PREFIX, TOPIC, WINDOW, ".parquet"), draft,
                         [ManifestObject(key=key, size=4, etag=etag)], [], [])


def test_the_retry_finding_our_own_manifest_is_our_commit(s3):
    result = _commit(s3, LostManifestAnswer(s3), "ours", stray=True)

    assert result.committed_by_us and result.manifest.attempt == "ours"
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{PREFIX}{TOPIC}/")["Contents"]]
    assert keys == [object_key(PREFIX, TOPIC, WINDOW, 0, ".parquet")]  # the stray removed before the commit


def test_another_attempt_s_manifest_is_still_adopted_as_theirs(s3):
    s3.put_object(Bucket=BUCKET, Key=object_key(PREFIX, TOPIC, WINDOW, 0, ".parquet"), Body=b"data")
    theirs = hand_manifest(TOPIC, WINDOW, attempt="theirs", objects=[{
        "key": object_key(PREFIX, TOPIC, WINDOW, 0, ".parquet"), "size": 4,
        "etag": s3.head_object(Bucket=BUCKET, Key=object_key(PREFIX, TOPIC, WINDOW, 0, ".parquet"))["ETag"].strip('"')}])
    s3.put_object(Bucket=BUCKET, Key=manifest_key(PREFIX, TOPIC, WINDOW), Body=theirs.dumps())

    result = _commit(s3, s3, "ours")

    assert not result.committed_by_us and result.manifest.attempt == "theirs"
