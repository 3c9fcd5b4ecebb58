"""Archive and restore through the S3 fault proxy in front of the real moto server (and versitygw: `store`):
botocore's own retries absorb 503/500/dropped connections, and a lost answer (the request took effect, the client
never heard) on each conditional write the commit protocol makes is adopted as this attempt's own — committed once,
rightly labelled, nothing stray left."""

from __future__ import annotations

import os

import pytest

from s3_archive.archive.driver.archive_run import ArchiveContext, ArchiveHooks
from s3_archive.archive.driver.coordinator import archive_window
from s3_archive.archive.protocol import S3Connection
from s3_archive.io.iceberg_catalog import S3Endpoint
from s3_archive.io.s3 import delete_keys
from s3_archive.keys.objects import MANIFESTS, object_key
from s3_archive.local.fault_proxy import FaultRule
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.integration.archive_helpers import archive_config, archived_records, final_objects, log, manifest
from s3_archive_tests.kafka_helpers import create_topic, produce
from s3_archive_tests.reliability import fault_round, proxied_s3


@pytest.fixture
def proxy(fault_proxy):
    fault_proxy.clear()
    yield fault_proxy
    fault_proxy.clear()


@pytest.fixture
def store_proxy(store, request):
    """The fault proxy in front of `store`'s server."""
    proxy = request.getfixturevalue({"moto": "fault_proxy", "moto-locked": "fault_proxy",
                                     "versitygw": "versitygw_fault_proxy",
                                     "versitygw-locked": "versitygw_locked_fault_proxy"}[store.name])
    proxy.clear()
    yield proxy
    proxy.clear()


def _archive_with(proxy, rule, kafka, store, spark, unique, name, records, job_options=None, setup=None):
    """One window archived through the proxy with `rule`; returns (result, cfg, topic, window, produced, stats)."""
    topic = create_topic(kafka, f"{name}-{unique}")
    produced = produce(kafka, topic, records)
    window = OffsetWindow(0, 0, len(records))
    cfg = archive_config(store.bucket, topic, f"{name}/{unique}/", max_records_per_object=40, **store.archive_options)
    if setup:
        setup(cfg, topic, window)
    res = proxied_s3(proxy)
    proxy.set_rules([rule(cfg, topic)])
    s3 = res.get_client()
    ctx = ArchiveContext(spark, kafka, s3, S3Connection.of_resource(res), S3Endpoint.of_client(s3), log)
    result = archive_window(ctx, cfg, topic, window, ArchiveHooks(job_options=job_options or {}))
    stats = proxy.stats()
    proxy.clear()
    return result, cfg, topic, window, produced, stats


def _exactly_once(s3, cfg, topic, window, produced, result):
    assert result.outcome == "committed"  # our own commit, not "committed_by_concurrent_attempt"
    assert manifest(s3, cfg, topic, window).attempt == result.manifest.attempt
    assert archived_records(s3, cfg, topic) == produced
    assert sorted(final_objects(s3, cfg, topic)) == sorted(o.key for o in result.manifest.objects)
    assert not s3.list_multipart_uploads(Bucket=cfg.bucket, Prefix=cfg.prefix).get("Uploads")


def test_a_lost_answer_to_the_manifest_put_is_our_own_commit(kafka, store, spark, store_proxy, unique):
    s3 = store.client()
    def rule(cfg, topic):
        return FaultRule("lost", method="PUT", header="If-None-Match", path=f"/{MANIFESTS}/{topic}/", times=1)

    result, cfg, topic, window, produced, stats = _archive_with(
        store_proxy, rule, kafka, store, spark, unique, "lostmanifest",
        [(0, f"{i}".encode(), os.urandom(100), []) for i in range(100)])

    assert stats["faults"] == {"lost": 1}
    _exactly_once(s3, cfg, topic, window, produced, result)


def test_a_lost_answer_to_an_object_put_keeps_our_object(kafka, store, spark, store_proxy, unique):
    s3 = store.client()
    def rule(cfg, topic):
        return FaultRule("lost", method="PUT", header="If-None-Match", path=f"/{cfg.prefix}{topic}/", times=1)

    result, cfg, topic, window, produced, stats = _archive_with(
        store_proxy, rule, kafka, store, spark, unique, "lostobject",
        [(0, f"{i}".encode(), os.urandom(100), []) for i in range(100)])

    assert stats["faults"] == {"lost": 1}
    _exactly_once(s3, cfg, topic, window, produced, result)


def test_a_lost_answer_to_complete_multipart_upload_keeps_our_object(kafka, store, spark, store_proxy, unique):
    s3 = store.client()
    def rule(cfg, topic):
        return FaultRule("lost", method="POST", query="uploadId", path=f"/{cfg.prefix}{topic}/", times=1)

    small_parts = {"multipart_threshold": 5 << 20, "part_size": 5 << 20}  # S3's smallest part: 5 MiB
    result, cfg, topic, window, produced, stats = _archive_with(
        store_proxy, rule, kafka, store, spark, unique, "lostcomplete",
        [(0, f"{i}".encode(), os.urandom(200_000), []) for i in range(30)], job_options=small_parts)

    assert stats["faults"] == {"lost": 1}
    _exactly_once(s3, cfg, topic, window, produced, result)


def test_a_lost_answer_to_a_stray_delete_still_removes_it(kafka, store, spark, store_proxy, unique):
    s3 = store.client()
    def stray(cfg, topic, window):
        s3.put_object(Bucket=cfg.bucket, Key=object_key(cfg.prefix, topic, window, 7, ".parquet"), Body=b"stale")

    def rule(cfg, topic):
        return FaultRule("lost", method="DELETE", path=f"/{cfg.prefix}{topic}/", times=1)

    result, cfg, topic, window, produced, stats = _archive_with(
        store_proxy, rule, kafka, store, spark, unique, "loststray",
        [(0, None, f"{i}".encode(), []) for i in range(20)], setup=stray)

    assert stats["faults"] == {"lost": 1}
    _exactly_once(s3, cfg, topic, window, produced, result)


def test_a_lost_answer_to_delete_objects_is_retried_to_the_same_end(s3, services, proxy, unique):
    keys = [f"lostdelete/{unique}/{i}" for i in range(3)]
    for k in keys:
        s3.put_object(Bucket=services.bucket, Key=k, Body=b"x")
    proxy.set_rules([FaultRule("lost", method="POST", query="delete", times=1)])

    delete_keys(proxied_s3(proxy).get_client(), services.bucket, keys)

    assert proxy.stats()["faults"] == {"lost": 1}
    assert not s3.list_objects_v2(Bucket=services.bucket, Prefix=f"lostdelete/{unique}/").get("Contents")


def test_archive_and_restore_at_ten_percent_mixed_faults_lose_and_duplicate_nothing(kafka, s3, services, spark,
                                                                                    proxy):
    r = fault_round(spark, kafka, s3, proxy, services.bucket, seed=15, share=0.10)

    assert sum(r["faults"].values()) > 0, r
    assert (r["uncommitted_windows"], r["stray_objects"], r["missing_objects"], r["open_uploads"]) == (0, [], [], 0), r
    assert (r["lost"], r["duplicated"], r["byte_exact"]) == (0, 0, True), r
    assert set(r["outcomes"]) <= {"committed"}, r
