"""commit_window on a versioned bucket with Object Lock, and the chain's link found by listing or from the run's own
listing (moto in-process: the S3 semantics of Object Lock and conditional writes, no server). The integration twins run the commit protocol's
tests on moto's server (integration/archive/test_archive.py, `store` moto-locked; test_verify.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from s3_archive.archive.driver.commit import commit_window
from s3_archive.archive.driver.manifest_chain import listed_link, previous_link, run_manifests
from s3_archive.archive.integrity import sha256_hex
from s3_archive.keys.objects import WindowLocation, manifest_key, object_key
from s3_archive.model.manifest import ManifestObject, Retention
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.manifests import hand_manifest

BUCKET, PREFIX, TOPIC = "locked-commit", "p/", "t"


@pytest.fixture
def s3():
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET, ObjectLockEnabledForBucket=True)
        yield client


def _commit(s3, window: OffsetWindow, retention: Retention | None = None, stray: bool = False):
    key = object_key(PREFIX, TOPIC, window, 0, ".parquet")
    etag = s3.put_object(Bucket=BUCKET, Key=key, Body=b"data")["ETag"].strip('"')  # written unlocked, as the tasks do
    if stray:
        s3.put_object(Bucket=BUCKET, Key=object_key(PREFIX, TOPIC, window, 7, ".parquet"), Body=b"stale")
    draft = hand_manifest(TOPIC, window, retention=None if retention is None else retention.model_dump())
    return commit_window(s3, WindowLocation(BUCKET, PREFIX, TOPIC, window, ".parquet"), draft,
                         [ManifestObject(key=key, size=4, etag=etag, sha256=sha256_hex(b"data"))], [], [])


def test_the_commit_locks_objects_and_manifest_and_still_removes_a_loser_s_stray(s3):
    until = (datetime.now(UTC) + timedelta(days=1)).replace(microsecond=0)
    w = OffsetWindow(0, 0, 10)
    result = _commit(s3, w, Retention(mode="COMPLIANCE", retain_until=until.isoformat()), stray=True)

    assert result.committed_by_us and result.manifest.retention.until == until
    for key in (object_key(PREFIX, TOPIC, w, 0, ".parquet"), manifest_key(PREFIX, TOPIC, w)):
        head = s3.head_object(Bucket=BUCKET, Key=key)
        assert (head["ObjectLockMode"], head["ObjectLockRetainUntilDate"]) == ("COMPLIANCE", until)
    listed = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{PREFIX}{TOPIC}/")["Contents"]]
    assert listed == [object_key(PREFIX, TOPIC, w, 0, ".parquet")]  # the unlocked stray deleted (a delete marker)
    version = s3.head_object(Bucket=BUCKET, Key=manifest_key(PREFIX, TOPIC, w))["VersionId"]
    with pytest.raises(ClientError, match="AccessDenied"):
        s3.delete_object(Bucket=BUCKET, Key=manifest_key(PREFIX, TOPIC, w), VersionId=version)


def test_the_link_is_found_however_far_back_the_previous_window_ends(s3):
    w0, w1, far = OffsetWindow(0, 0, 10), OffsetWindow(0, 10, 20), OffsetWindow(0, 100_000, 100_010)
    assert previous_link(s3, WindowLocation(BUCKET, PREFIX, TOPIC, w0, ".parquet")) is None
    first = _commit(s3, w0)
    body = s3.get_object(Bucket=BUCKET, Key=manifest_key(PREFIX, TOPIC, w0))["Body"].read()
    assert first.manifest.previous_manifest is None
    second = _commit(s3, w1)
    assert second.manifest.previous_manifest.sha256 == sha256_hex(body)
    _commit(s3, OffsetWindow(1, 10, 20))  # another partition: never linked
    link = previous_link(s3, WindowLocation(BUCKET, PREFIX, TOPIC, far, ".parquet"))  # past the first reach
    assert link.key == manifest_key(PREFIX, TOPIC, w1)


def test_a_window_is_locked_at_least_days_after_its_commit_to_the_whole_second():
    from s3_archive.archive.driver.manifest_draft import _until

    committed = datetime(2026, 1, 1, 12, 0, 0, 250_000, tzinfo=UTC)
    assert _until(committed, 30) == datetime(2026, 1, 31, 12, 0, 1, tzinfo=UTC).isoformat()


def _requests(s3) -> list[str]:
    """The operations `s3` sends from now on (botocore's own event, before each request)."""
    sent: list[str] = []
    s3.meta.events.register("before-call.s3", lambda model, **_: sent.append(model.name))
    return sent


def test_the_run_s_listing_finds_committed_windows_and_the_link_without_another_listing(s3):
    w0, w1, w2, w3 = (OffsetWindow(0, i * 10, i * 10 + 10) for i in range(4))
    for w in (w0, w1):
        _commit(s3, w)
    _commit(s3, OffsetWindow(1, 0, 10))
    sent = _requests(s3)
    listed = run_manifests(s3, BUCKET, PREFIX, TOPIC, [w3, w1, w2, OffsetWindow(1, 10, 20)])
    assert listed == {0: [manifest_key(PREFIX, TOPIC, w0), manifest_key(PREFIX, TOPIC, w1)],
                      1: [manifest_key(PREFIX, TOPIC, OffsetWindow(1, 0, 10))]}
    assert sent == ["ListObjectsV2", "ListObjectsV2"]  # one per partition

    sent.clear()
    body = s3.get_object(Bucket=BUCKET, Key=manifest_key(PREFIX, TOPIC, w1))["Body"].read()
    known, link = listed_link(s3, WindowLocation(BUCKET, PREFIX, TOPIC, w2, ".parquet"), listed[0])
    assert known and (link.key, link.sha256) == (manifest_key(PREFIX, TOPIC, w1), sha256_hex(body))
    assert sent == ["GetObject", "GetObject"]  # this test's read of the body, then the link's: no listing
    assert previous_link(s3, WindowLocation(BUCKET, PREFIX, TOPIC, w2, ".parquet")) == link  # as found by listing

    sent.clear()  # w2 is not committed: only a listing can find w3's link
    assert listed_link(s3, WindowLocation(BUCKET, PREFIX, TOPIC, w3, ".parquet"), listed[0]) == (False, None)
    assert previous_link(s3, WindowLocation(BUCKET, PREFIX, TOPIC, w3, ".parquet")).key == link.key
    assert sent == ["ListObjectsV2", "GetObject"]

    sent.clear()  # a partition's first window has no link, and nothing is asked
    first = WindowLocation(BUCKET, PREFIX, TOPIC, OffsetWindow(2, 0, 5), ".parquet")
    assert listed_link(s3, first) == (True, None) and previous_link(s3, first) is None
    assert sent == []


def test_a_listed_link_gone_before_it_is_read_is_left_to_the_listing(s3):
    w0, w1, w2 = (OffsetWindow(0, i * 10, i * 10 + 10) for i in range(3))
    _commit(s3, w0)
    _commit(s3, w1)
    listed = [manifest_key(PREFIX, TOPIC, w0), manifest_key(PREFIX, TOPIC, w1)]
    s3.delete_object(Bucket=BUCKET, Key=manifest_key(PREFIX, TOPIC, w1))  # a delete marker: w1's manifest is gone
    assert listed_link(s3, WindowLocation(BUCKET, PREFIX, TOPIC, w2, ".parquet"), listed) == (False, None)
    assert previous_link(s3, WindowLocation(BUCKET, PREFIX, TOPIC, w2, ".parquet")).key == listed[0]


def test_windows_of_a_run_far_apart_are_listed_apart(s3):
    near = [OffsetWindow(0, i * 10, i * 10 + 10) for i in range(3)]
    far = OffsetWindow(0, 100_000, 100_010)
    for w in (*near, OffsetWindow(0, 50_000, 50_010), far):
        _commit(s3, w)
    sent = _requests(s3)
    listed = run_manifests(s3, BUCKET, PREFIX, TOPIC, [far, near[0], near[2]])
    assert listed == {0: [manifest_key(PREFIX, TOPIC, w) for w in (*near, far)]}  # not the window between
    assert sent == ["ListObjectsV2", "ListObjectsV2"]
