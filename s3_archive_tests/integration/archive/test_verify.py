"""Object Lock and tamper evidence against the real moto server and Spark: windows archived with hashes and a chain,
tampered with in each way (a byte flipped, an object deleted, a stray added, a manifest edited, a manifest removed
from the middle of a chain), each caught by `verify` naming its window; an untouched archive verifies clean; the
rotation reads every window in turn within its budget; a locked window's objects cannot be deleted or overwritten in
place (moto and versitygw), and a bucket without Object Lock is refused."""

from __future__ import annotations

import hashlib
import json
import os
from datetime import datetime, timedelta

import pytest
import yaml

from s3_archive.archive.driver.archive_run import ArchiveContext
from s3_archive.archive.driver.coordinator import archive_window, archive_windows
from s3_archive.archive.integrity import Differs, sha256_hex
from s3_archive.archive.verify import verify_topic, verify_verdict
from s3_archive.cli import main
from s3_archive.keys.objects import manifest_key, object_key, verify_state_key
from s3_archive.model.errors import ObjectLockMissing
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.integration.archive_helpers import archive_config, log, manifest
from s3_archive_tests.kafka_helpers import create_topic, produce
from s3_archive_tests.manifests import hand_manifest

WINDOWS = [OffsetWindow(0, i * 10, i * 10 + 10) for i in range(8)]


def _archived(kafka, spark, s3, bucket: str, name: str, unique: str, windows=WINDOWS, **options):
    topic = create_topic(kafka, f"{name}-{unique}")
    produce(kafka, topic, [(0, f"k{i}".encode(), os.urandom(64), []) for i in range(windows[-1].end)])
    cfg = archive_config(bucket, topic, f"{name}/{unique}/", **options)
    results = archive_windows(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, windows)
    assert all(not isinstance(r, BaseException) for r in results.values()), results
    return cfg, topic


def _failures(report) -> set[tuple[str, Differs]]:
    return {(f.window, f.differs) for f in report.failures}


def test_each_kind_of_tampering_is_caught_naming_the_window(kafka, s3, services, spark, unique, tmp_path,
                                                           monkeypatch, capsys):
    cfg, topic = _archived(kafka, spark, s3, services.bucket, "tamper", unique)
    committed = {w: manifest(s3, cfg, topic, w) for w in WINDOWS}
    # Hashed as written, and chained: each manifest names the previous one with the hash of its bytes.
    for prev, w in zip(WINDOWS, WINDOWS[1:], strict=False):
        link, body = committed[w].previous_manifest, s3.get_object(
            Bucket=cfg.bucket, Key=manifest_key(cfg.prefix, topic, prev))["Body"].read()
        assert (link.key, link.sha256, link.generation) == (manifest_key(cfg.prefix, topic, prev), sha256_hex(body), 1)
    assert committed[WINDOWS[0]].previous_manifest is None
    for m in committed.values():
        assert m.manifest_version == 3 and m.generation == 1 and m.hashed
        for o in m.objects:
            assert o.sha256 == sha256_hex(s3.get_object(Bucket=cfg.bucket, Key=o.key)["Body"].read())

    clean = verify_topic(s3, cfg, topic, full=True)
    assert (clean.findings, len(clean.read), clean.windows) == ([], 8, 8)
    assert clean.bytes_read == sum(m.bytes_written for m in committed.values()) and clean.completed_pass
    assert verify_verdict(clean, cfg).passed

    w = WINDOWS
    flipped = committed[w[1]].objects[0].key
    body = bytearray(s3.get_object(Bucket=cfg.bucket, Key=flipped)["Body"].read())
    body[len(body) // 2] ^= 0x01
    s3.put_object(Bucket=cfg.bucket, Key=flipped, Body=bytes(body))
    s3.delete_object(Bucket=cfg.bucket, Key=committed[w[2]].objects[0].key)
    stray = object_key(cfg.prefix, topic, w[3], 9, ".parquet")
    s3.put_object(Bucket=cfg.bucket, Key=stray, Body=b"not archived")
    edited = manifest_key(cfg.prefix, topic, w[4])
    text = json.loads(s3.get_object(Bucket=cfg.bucket, Key=edited)["Body"].read())
    s3.put_object(Bucket=cfg.bucket, Key=edited, Body=json.dumps({**text, "record_count": 9}, indent=1,
                                                                  sort_keys=True).encode())
    s3.delete_object(Bucket=cfg.bucket, Key=manifest_key(cfg.prefix, topic, w[6]))

    report = verify_topic(s3, cfg, topic, full=True)

    assert _failures(report) == {(w[1].key, Differs.CHANGED), (w[2].key, Differs.MISSING), (w[3].key, Differs.ADDED),
                                 (w[4].key, Differs.MANIFEST_EDITED), (w[6].key, Differs.MANIFEST_MISSING)}
    by_window = {f.window: f for f in report.failures}
    assert by_window[w[1].key].key == flipped and committed[w[1]].objects[0].sha256 in by_window[w[1].key].detail
    assert by_window[w[3].key].key == stray
    assert w[5].key in by_window[w[4].key].detail and w[7].key in by_window[w[6].key].detail  # whose link
    verdict = verify_verdict(report, cfg)
    assert not verdict.passed and not verdict.warn and len(verdict.problems) == 5
    assert sorted(verdict.problems) == sorted(f.text(cfg.bucket) for f in report.failures)
    assert all(p.startswith(f"window {f.window}: {f.differs} s3://{cfg.bucket}/{f.key}: ")
               for p, f in zip(verdict.problems, report.failures, strict=True))

    config = tmp_path / "archives.yaml"
    config.write_text(yaml.safe_dump({"archives": [cfg.model_dump(mode="json", exclude_defaults=True)]}))
    for k, v in services.env().items():
        monkeypatch.setenv(k, v)
    assert main(["verify", "--config", str(config), "--topic", topic, "--full"]) == 2
    out = capsys.readouterr().out
    for f in report.failures:
        assert f.text(cfg.bucket) in out
    assert f"{topic}: 7 of 7 window(s) read" in out  # w6's manifest is gone
    assert main(["verify", "--config", str(config), "--topic", "nope", "--full"]) == 1
    assert "--topic 'nope' is not a topic of any configured archive" in capsys.readouterr().err


def test_the_rotation_reads_every_window_in_turn_and_the_newest_manifest_is_watched(kafka, s3, services, spark,
                                                                                      unique):
    windows = WINDOWS[:4]
    cfg, topic = _archived(kafka, spark, s3, services.bucket, "rotate", unique, windows,
                           verify={"bytes_per_run": 1, "period_days": 2})
    reads = [verify_topic(s3, cfg, topic) for _ in range(5)]
    assert [r.read for r in reads] == [[w.key] for w in [*windows, windows[0]]]
    assert [r.completed_pass for r in reads] == [False, False, False, True, False]
    assert all(r.findings == [] and r.runs_per_pass == 4 for r in reads)
    state = json.loads(s3.get_object(Bucket=cfg.bucket, Key=verify_state_key(cfg.prefix, topic))["Body"].read())
    assert state["cursor"] == manifest_key(cfg.prefix, topic, windows[0]) and state["last_pass_completed"]
    assert state["heads"]["0"]["key"] == manifest_key(cfg.prefix, topic, windows[-1])
    slow = verify_verdict(reads[-1], cfg)
    assert slow.warn and "takes about 4 daily runs, more than verify.period_days 2" in slow.problems[0]

    head = manifest_key(cfg.prefix, topic, windows[-1])  # no later manifest links to it: the last run's hash does
    text = json.loads(s3.get_object(Bucket=cfg.bucket, Key=head)["Body"].read())
    s3.put_object(Bucket=cfg.bucket, Key=head, Body=json.dumps({**text, "record_count": 1}).encode())
    after = verify_topic(s3, cfg, topic)
    assert after.read == [windows[1].key] and _failures(after) == {(windows[-1].key, Differs.MANIFEST_EDITED)}


def test_a_manifest_without_hashes_verifies_as_unhashed(s3, services, unique):
    cfg = archive_config(services.bucket, "old", f"unhashed/{unique}/")
    w = OffsetWindow(0, 0, 10)
    key = object_key(cfg.prefix, "old", w, 0, ".parquet")
    etag = s3.put_object(Bucket=cfg.bucket, Key=key, Body=b"12345")["ETag"].strip('"')
    old = hand_manifest("old", w, [{"key": key, "size": 5, "etag": etag}], manifest_version=1)
    s3.put_object(Bucket=cfg.bucket, Key=manifest_key(cfg.prefix, "old", w), Body=old.dumps())

    report = verify_topic(s3, cfg, "old", full=True)

    assert report.failures == [] and report.unhashed_windows == [w.key] and report.bytes_read == 0
    verdict = verify_verdict(report, cfg)
    assert verdict.passed and "1 unhashed window(s) checked by size and ETag" in verdict.ok
    s3.put_object(Bucket=cfg.bucket, Key=key, Body=b"54321")  # same size, other bytes: the ETag tells
    assert _failures(verify_topic(s3, cfg, "old", full=True)) == {(w.key, Differs.CHANGED)}


@pytest.fixture(params=["moto_locked_store", "versitygw_locked_store"])
def locked_store(request):
    """A bucket with S3 Object Lock on each server that has it."""
    return request.getfixturevalue(request.param)


def test_a_locked_window_cannot_be_deleted_or_overwritten_in_place(kafka, spark, locked_store, unique):
    s3 = locked_store.client()
    cfg, topic = _archived(kafka, spark, s3, locked_store.bucket, "locked", unique, WINDOWS[:2],
                           **locked_store.archive_options)
    m = manifest(s3, cfg, topic, WINDOWS[1])
    assert m.retention is not None and m.retention.mode == "COMPLIANCE"
    assert timedelta(days=1) < m.retention.until - datetime.fromisoformat(m.committed_at) <= timedelta(days=1, seconds=1)
    obj = m.objects[0]
    for key in (obj.key, manifest_key(cfg.prefix, topic, WINDOWS[1])):
        head = s3.head_object(Bucket=cfg.bucket, Key=key)
        assert head["ObjectLockMode"] == "COMPLIANCE"
        assert abs((head["ObjectLockRetainUntilDate"] - m.retention.until).total_seconds()) < 1
    version = s3.head_object(Bucket=cfg.bucket, Key=obj.key)["VersionId"]

    with pytest.raises(Exception, match="AccessDenied"):
        s3.delete_object(Bucket=cfg.bucket, Key=obj.key, VersionId=version)
    s3.put_object(Bucket=cfg.bucket, Key=obj.key, Body=b"replaced")  # a new version over the locked one

    original = s3.get_object(Bucket=cfg.bucket, Key=obj.key, VersionId=version)["Body"].read()
    assert hashlib.sha256(original).hexdigest() == obj.sha256  # the locked version still holds the archived bytes
    assert manifest(s3, cfg, topic, WINDOWS[1]) == m  # and the manifest still lists it
    report = verify_topic(s3, cfg, topic, full=True)
    assert _failures(report) == {(WINDOWS[1].key, Differs.RESIZED)}


def test_retention_lock_on_a_bucket_without_object_lock_is_refused_naming_the_setting(kafka, s3, services, spark,
                                                                                      unique):
    topic = create_topic(kafka, f"unlocked-{unique}")
    produce(kafka, topic, [(0, None, b"v", [])])
    cfg = archive_config(services.bucket, topic, f"unlocked/{unique}/",
                         retention_lock={"mode": "governance", "days": 7})
    with pytest.raises(ObjectLockMissing) as e:
        archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, OffsetWindow(0, 0, 1))
    assert (f"bucket {services.bucket!r}" in str(e.value) and "ObjectLockEnabled is not set, must be Enabled"
            in str(e.value) and "Nothing was archived" in str(e.value))
    assert manifest(s3, cfg, topic, OffsetWindow(0, 0, 1)) is None
