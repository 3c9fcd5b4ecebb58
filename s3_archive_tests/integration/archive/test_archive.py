"""The archive asset against the real broker, moto server and Spark: fidelity, idempotence, exactly-once."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter

import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pytest

from s3_archive.archive.driver.archive_run import ArchiveContext, ArchiveHooks
from s3_archive.archive.driver.coordinator import archive_window
from s3_archive.io.s3 import check_bucket
from s3_archive.io.spark import KAFKA_MIN_PARTITIONS_CONF, MAGIC_COMMITTER_CONF
from s3_archive.keys.objects import object_key
from s3_archive.local.moto_server import MotoServer
from s3_archive.model.errors import DataLoss, S3Unavailable
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.credentials import TEST_AWS
from s3_archive_tests.integration.archive_helpers import (
    archive_config,
    archived_records,
    final_objects,
    log,
    manifest,
    materialize,
    resources,
    staging_objects,
    window_metadata,
)
from s3_archive_tests.kafka_helpers import (
    NASTY,
    create_topic,
    jsonl_records,
    parquet_records,
    produce,
    produce_transactions,
)
from s3_archive_tests.lineage_events import capture_lineage, read_events, stop_capturing, validate_event


@pytest.fixture
def res(services, kafka, spark_resource):
    return resources(services, kafka, spark_resource)


@pytest.mark.parametrize("fmt,codec", [("parquet", "snappy"), ("jsonl", "gzip")])
def test_byte_exact_round_trip_of_nasty_records(fmt, codec, kafka, s3, services, res, unique, read_path):
    topic = create_topic(kafka, f"nasty-{fmt}-{unique}")
    produced = produce(kafka, topic, [(0, k, v, h) for k, v, h in NASTY])
    cfg = archive_config(services.bucket, topic, f"rt/{unique}/", format=fmt, compression=codec, read_path=read_path)
    window = OffsetWindow(0, 0, len(NASTY))

    meta = window_metadata(materialize(cfg, topic, [window], res))[window.key]

    assert archived_records(s3, cfg, topic) == produced
    assert meta["records"] == len(NASTY) and meta["objects"] == 1 and meta["absent_offsets"] == 0
    assert (meta["first_offset"], meta["last_offset"]) == (0, len(NASTY) - 1)
    assert meta["bytes_written"] == sum(o["size"] for o in final_objects(s3, cfg, topic).values())
    suffix = ".parquet" if fmt == "parquet" else ".jsonl.gz"
    assert list(final_objects(s3, cfg, topic)) == [object_key(cfg.prefix, topic, window, 0, suffix)]
    assert staging_objects(s3, cfg, topic) == []


def test_rematerializing_a_window_three_times_keeps_one_copy(kafka, s3, services, res, unique, read_path):
    topic = create_topic(kafka, f"rerun-{unique}", partitions=2)
    produced = produce(kafka, topic, [(i % 2, f"{i}".encode(), b"v" * i, []) for i in range(40)])
    cfg = archive_config(services.bucket, topic, f"rerun/{unique}/", read_path=read_path)
    windows = [OffsetWindow(0, 0, 20), OffsetWindow(1, 0, 10), OffsetWindow(1, 10, 20)]

    outcomes, snapshots = [], []
    for _ in range(3):
        meta = window_metadata(materialize(cfg, topic, windows, res))
        outcomes.append(sorted(m["outcome"] for m in meta.values()))
        snapshots.append(final_objects(s3, cfg, topic))

    assert outcomes == [["committed"] * 3] + [["already_committed"] * 3] * 2
    assert snapshots[0] == snapshots[1] == snapshots[2] and len(snapshots[0]) == 3
    assert archived_records(s3, cfg, topic) == produced


@pytest.mark.parametrize("step", ["object:1", "written", "cleaned", "manifest_written"])
def test_crash_at_each_commit_step_then_rerun_is_exactly_once(step, kafka, store, spark, unique, read_path):
    s3 = store.client()
    topic = create_topic(kafka, f"crash-{unique}")
    produced = produce(kafka, topic, [(0, f"{i}".encode(), os.urandom(50), [("i", str(i).encode())])
                                      for i in range(30)])
    # Three parts per window, so "object:1" stops the write task with one object written and two not.
    cfg = archive_config(store.bucket, topic, f"crash/{unique}/", max_records_per_object=10, read_path=read_path,
                         **store.archive_options)
    window = OffsetWindow(0, 0, 30)

    class Crash(Exception):
        pass

    def fault(at: str) -> None:
        if at == step:
            raise Crash(at)

    if step.startswith("object:"):  # in the write task, on the executor
        with pytest.raises(Exception, match="test fault"):
            archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, window,
                           ArchiveHooks(write_fault=step))
    else:  # in the driver's commit
        with pytest.raises(Crash):
            archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, window,
                           ArchiveHooks(fault=fault))
    assert (manifest(s3, cfg, topic, window) is not None) == (step == "manifest_written")
    assert final_objects(s3, cfg, topic), "the crashed attempt leaves objects at the final keys behind"

    result = archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, window)

    committed = manifest(s3, cfg, topic, window)
    assert result.outcome == ("already_committed" if step == "manifest_written" else "committed")
    assert archived_records(s3, cfg, topic) == produced
    assert sorted(final_objects(s3, cfg, topic)) == sorted(o.key for o in committed.objects)
    assert len(committed.objects) == 3
    assert staging_objects(s3, cfg, topic) == []


def test_an_attempt_killed_mid_upload_then_rerun_is_exactly_once(kafka, store, spark, unique, read_path):
    """The write task's Python worker is killed (SIGKILL) with a multipart upload open and a part uploaded; the
    re-run commits every record once and leaves no open upload and no stray object."""
    s3 = store.client()
    topic = create_topic(kafka, f"killed-{unique}")
    produced = produce(kafka, topic, [(0, f"{i}".encode(), os.urandom(200_000), []) for i in range(60)])
    cfg = archive_config(store.bucket, topic, f"killed/{unique}/", max_records_per_object=40, read_path=read_path,
                         **store.archive_options)
    window = OffsetWindow(0, 0, 60)
    small_parts = {"multipart_threshold": 5 << 20, "part_size": 5 << 20}  # S3's smallest part: 5 MiB

    with pytest.raises(Exception, match="(?i)worker|crash|exit"):
        archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, window,
                       ArchiveHooks(write_fault="mid_upload", job_options=small_parts))
    assert manifest(s3, cfg, topic, window) is None
    assert s3.list_multipart_uploads(Bucket=cfg.bucket, Prefix=cfg.prefix).get("Uploads"), "an upload was left open"

    result = archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, window,
                            ArchiveHooks(job_options=small_parts))

    assert result.outcome == "committed"
    assert archived_records(s3, cfg, topic) == produced
    assert sorted(final_objects(s3, cfg, topic)) == sorted(o.key for o in result.manifest.objects)
    assert len(result.manifest.objects) == 2
    assert not s3.list_multipart_uploads(Bucket=cfg.bucket, Prefix=cfg.prefix).get("Uploads")


def test_a_stale_extra_part_from_an_earlier_attempt_is_removed(kafka, store, spark, unique, read_path):
    s3 = store.client()
    topic = create_topic(kafka, f"orphan-{unique}")
    produced = produce(kafka, topic, [(0, None, f"{i}".encode(), []) for i in range(20)])
    window = OffsetWindow(0, 0, 20)
    cfg = archive_config(store.bucket, topic, f"orphan/{unique}/", read_path=read_path, **store.archive_options)
    orphan = object_key(cfg.prefix, topic, window, 7, ".parquet")  # as if an earlier attempt wrote 8 parts
    s3.put_object(Bucket=cfg.bucket, Key=orphan, Body=b"stale")

    archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, window)

    assert orphan not in final_objects(s3, cfg, topic)
    assert archived_records(s3, cfg, topic) == produced


def test_two_concurrent_runs_of_one_window_store_each_record_once(kafka, store, spark, unique, read_path):
    s3 = store.client()
    topic = create_topic(kafka, f"race-{unique}")
    produced = produce(kafka, topic, [(0, f"{i}".encode(), os.urandom(100), []) for i in range(500)])
    cfg = archive_config(store.bucket, topic, f"race/{unique}/", max_records_per_object=200, read_path=read_path,
                         **store.archive_options)
    window = OffsetWindow(0, 0, 500)
    barrier = threading.Barrier(2)
    results, errors = [], []

    def run() -> None:
        # Both attempts write, then meet before committing: they really race for the manifest.
        def fault(at: str) -> None:
            if at == "written":
                barrier.wait(timeout=120)
        try:
            results.append(archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, window,
                                          ArchiveHooks(fault=fault)))
        except Exception as e:  # pragma: no cover - reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)

    assert errors == []
    assert sorted(r.outcome for r in results) == ["committed", "committed_by_concurrent_attempt"]
    assert results[0].manifest.attempt == results[1].manifest.attempt
    records = archived_records(s3, cfg, topic)
    assert records == produced
    assert max(Counter(r.offset for r in records).values()) == 1


def test_backfill_range_runs_many_windows_in_one_run(kafka, s3, services, res, unique, read_path, monkeypatch,
                                                    tmp_path):
    topic = create_topic(kafka, f"range-{unique}", partitions=2)
    produced = produce(kafka, topic, [(i % 2, None, f"{i}".encode(), []) for i in range(120)])
    cfg = archive_config(services.bucket, topic, f"range/{unique}/", read_path=read_path)
    windows = [OffsetWindow(p, s, s + 20) for p in (0, 1) for s in (0, 20, 40)]
    lineage = capture_lineage(monkeypatch, tmp_path / "lineage.jsonl")

    result = materialize(cfg, topic, windows, res)

    meta = window_metadata(result)
    assert sorted(meta) == sorted(w.key for w in windows)
    assert all(m["records"] == 20 and m["outcome"] == "committed" for m in meta.values())
    assert all(m["records_per_second"] > 0 and m["seconds"] > 0 for m in meta.values())
    assert archived_records(s3, cfg, topic) == produced
    # The run's lineage: START, then COMPLETE with the topic's offset ranges in, the S3 location out.
    start, complete = read_events(lineage)
    for e in (start, complete):
        validate_event(e)
    assert (start["eventType"], complete["eventType"]) == ("START", "COMPLETE")
    assert start["run"]["runId"] == complete["run"]["runId"] == result.run_id
    [source], [target] = complete["inputs"], complete["outputs"]
    assert (source["namespace"], source["name"]) == (f"kafka://{kafka.bootstrap_servers.split(',')[0]}", topic)
    assert (target["namespace"], target["name"]) == (f"s3://{cfg.bucket}", f"{cfg.prefix}{topic}")
    ranges = [{"key": w.key, "partition": w.partition, "startOffset": w.start, "endOffset": w.end, "records": 20}
              for w in sorted(windows)]
    assert source["inputFacets"]["s3archive_windows"]["windows"] == ranges
    assert target["outputFacets"]["s3archive_windows"]["windows"] == ranges
    stats = target["outputFacets"]["outputStatistics"]
    assert (stats["rowCount"], stats["size"]) == (120, sum(o["size"] for o in final_objects(s3, cfg, topic).values()))
    assert {"key", "value", "offset"} <= {f["name"] for f in target["facets"]["schema"]["fields"]}


def test_kafka_min_partitions_splits_a_window_into_objects_in_offset_order(kafka, s3, services, spark, unique, read_path):
    """SparkResource.kafka_min_partitions: one window read by several Spark tasks, one staged file each; the
    commit numbers them by task index, which follows the Kafka source's offset split, so the window's objects
    hold ascending, adjacent offset ranges."""
    topic = create_topic(kafka, f"minparts-{unique}")
    produced = produce(kafka, topic, [(0, f"k{i}".encode(), f"v{i}".encode(), []) for i in range(60)])
    window = OffsetWindow(0, 0, 60)
    spark.conf.set(KAFKA_MIN_PARTITIONS_CONF, "3")
    try:
        for fmt in ("parquet", "jsonl"):
            cfg = archive_config(services.bucket, topic, f"minparts/{unique}/{fmt}/", format=fmt, read_path=read_path)
            committed = archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, window).manifest
            objs = committed.objects
            assert len(objs) == 3, objs
            bodies = [(o.key, s3.get_object(Bucket=cfg.bucket, Key=o.key)["Body"].read()) for o in objs]
            per_object = [[r.offset for r in (parquet_records(b) if fmt == "parquet"
                                               else jsonl_records(b, gzipped=k.endswith(".gz")))] for k, b in bodies]
            assert [o[0] for o in per_object] == [0, 20, 40]
            assert [off for o in per_object for off in o] == list(range(60))
            assert archived_records(s3, cfg, topic) == produced
    finally:
        spark.conf.unset(KAFKA_MIN_PARTITIONS_CONF)


def test_the_s3a_magic_committer_stages_what_the_commit_publishes(kafka, s3, services, spark, unique, read_path):
    """SparkResource.s3_committer = "magic" (set here on the running session): Spark's files reach staging as
    completed multipart uploads, the window commits as usual, and nothing of the committer's is left behind."""
    topic = create_topic(kafka, f"magic-{unique}", partitions=2)
    produced = produce(kafka, topic, [(i % 2, f"k{i}".encode(), f"v{i}".encode(), [("h", b"1")]) for i in range(40)])
    cfg = archive_config(services.bucket, topic, f"magic/{unique}/", read_path=read_path)
    runtime = {k.removeprefix("spark.hadoop."): v for k, v in MAGIC_COMMITTER_CONF.items()}
    saved = {k: spark.conf.get(k, None) for k in runtime}
    for k, v in runtime.items():
        spark.conf.set(k, v)
    try:
        manifests = [archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic,
                                    OffsetWindow(p, 0, 20)).manifest for p in (0, 1)]
    finally:
        for k, v in saved.items():
            spark.conf.unset(k) if v is None else spark.conf.set(k, v)
    assert [len(m.objects) for m in manifests] == [1, 1]
    assert archived_records(s3, cfg, topic) == produced
    assert staging_objects(s3, cfg, topic) == []
    everything = [o["Key"] for o in s3.list_objects_v2(Bucket=cfg.bucket, Prefix=cfg.prefix).get("Contents", [])]
    assert not [k for k in everything if "__magic" in k or "_SUCCESS" in k or ".pending" in k], everything


def test_independent_reader_with_hive_partitioning_sees_what_was_produced(kafka, s3, services, res, unique, read_path):
    topic = create_topic(kafka, f"reader-{unique}", partitions=3)
    produced = produce(kafka, topic, [(i % 3, f"k{i}".encode(), f"v{i}".encode(), [("n", str(i).encode())])
                                      for i in range(90)])
    cfg = archive_config(services.bucket, topic, f"reader/{unique}/", read_path=read_path)
    materialize(cfg, topic, [OffsetWindow(p, 0, 30) for p in range(3)], res)

    fs = pafs.S3FileSystem(endpoint_override=services.s3_endpoint_url, scheme="http",
                           access_key=TEST_AWS["AWS_ACCESS_KEY_ID"], secret_key=TEST_AWS["AWS_SECRET_ACCESS_KEY"],
                           region=TEST_AWS["AWS_REGION"])
    table = ds.dataset(f"{cfg.bucket}/{cfg.prefix}{topic}", filesystem=fs, format="parquet",
                       partitioning="hive").to_table()
    rows = sorted(table.to_pylist(), key=lambda r: (r["partition"], r["offset"]))
    assert [(r["kafka_partition"], r["partition"], r["offset"], r["key"], r["value"]) for r in rows] == \
        [(p.partition, p.partition, p.offset, p.key, p.value) for p in produced]


def test_aborted_transactions_are_not_archived_and_markers_are_recorded(kafka, s3, services, res, unique, reading):
    topic = create_topic(kafka, f"txn-{unique}")
    committed, end = produce_transactions(kafka, topic)
    committed_values = committed[0] + committed[1]
    cfg = archive_config(services.bucket, topic, f"txn/{unique}/", **reading)
    # ending at a commit marker; only aborted records and their marker; ending in aborted records and a marker
    windows = [OffsetWindow(0, 0, 6), OffsetWindow(0, 6, 12), OffsetWindow(0, 12, end)]

    meta = window_metadata(materialize(cfg, topic, windows, res))

    assert [r.value for r in archived_records(s3, cfg, topic)] == committed_values
    assert [meta[w.key]["records"] for w in windows] == [5, 0, 5]
    assert [manifest(s3, cfg, topic, w).absent_offsets for w in windows] == [[[5, 6]], [[6, 12]], [[17, 24]]]
    assert sum(meta[w.key]["absent_offsets"] for w in windows) == end - 10
    assert all(manifest(s3, cfg, topic, w).lost_offsets == [] for w in windows)


def test_window_deleted_by_retention_fails_clearly_or_records_the_gap(kafka, s3, services, spark, unique, reading):
    from confluent_kafka import TopicPartition

    topic = create_topic(kafka, f"ret-{unique}")
    produced = produce(kafka, topic, [(0, None, f"{i}".encode(), []) for i in range(30)])
    admin = kafka.admin()
    admin.delete_records([TopicPartition(topic, 0, 12)])[TopicPartition(topic, 0, 12)].result(timeout=30)
    window = OffsetWindow(0, 0, 30)

    strict = archive_config(services.bucket, topic, f"ret/{unique}/a/", **reading)
    with pytest.raises(DataLoss) as err:
        archive_window(ArchiveContext.of_client(spark, kafka, s3, log), strict, topic, window)
    assert f"topic '{topic}' partition 0: offsets [0, 12)" in str(err.value)
    assert "earliest available offset is 12" in str(err.value)
    assert manifest(s3, strict, topic, window) is None and final_objects(s3, strict, topic) == {}

    tolerant = archive_config(services.bucket, topic, f"ret/{unique}/b/", on_data_loss="record_gap", **reading)
    result = archive_window(ArchiveContext.of_client(spark, kafka, s3, log), tolerant, topic, window)
    assert result.manifest.lost_offsets == [[0, 12]]
    assert archived_records(s3, tolerant, topic) == produced[12:]


def test_missing_bucket_and_unknown_topic_fail_with_one_clear_error(kafka, services, res, unique, read_path,
                                                                   monkeypatch, tmp_path):
    topic = create_topic(kafka, f"err-{unique}")
    produce(kafka, topic, [(0, None, b"x", [])])
    no_bucket = archive_config("no-such-bucket-" + unique, topic, "", read_path=read_path)
    lineage = capture_lineage(monkeypatch, tmp_path / "lineage.jsonl")
    result = materialize(no_bucket, topic, [OffsetWindow(0, 0, 1)], res, raise_on_error=False)
    assert not result.success
    assert f"bucket 'no-such-bucket-{unique}' does not exist" in _failure_text(result)
    # Its lineage ends in FAIL, with the same error (not retried: one attempt, one START and one FAIL).
    events = read_events(lineage)
    assert [e["eventType"] for e in events] == ["START", "FAIL"]
    validate_event(events[1])
    assert f"no-such-bucket-{unique}' does not exist" in events[1]["run"]["facets"]["errorMessage"]["message"]
    stop_capturing(monkeypatch)

    ghost = f"ghost-{unique}"
    result = materialize(archive_config(services.bucket, ghost, "", read_path=read_path), ghost, [OffsetWindow(0, 0, 1)], res,
                         raise_on_error=False)
    assert f"topic '{ghost}' does not exist" in _failure_text(result)

    beyond = materialize(archive_config(services.bucket, topic, f"beyond/{unique}/", read_path=read_path), topic,
                         [OffsetWindow(0, 0, 5)], res, raise_on_error=False)
    assert "has only reached offset 1 (high watermark)" in _failure_text(beyond)


def _failure_text(result) -> str:
    failures = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failures, "the run should have failed"
    return "\n".join(str(e.event_specific_data.error.message) + str(e.event_specific_data.error.cause or "")
                     for e in failures)


def _consume_all(kafka, topic: str, partition: int, end: int) -> list:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(kafka.client_config(**{"group.id": f"probe-{topic}", "enable.auto.commit": False,
                                               "isolation.level": "read_committed"}))
    consumer.assign([TopicPartition(topic, partition, 0)])
    got = []
    try:
        while True:
            msg = consumer.poll(2)
            if msg is None or msg.error() is not None:
                break
            got.append(msg)
            if msg.offset() >= end - 1:
                break
    finally:
        consumer.close()
    return got


def test_compacted_topic_gaps_are_recorded_in_the_manifest(kafka, s3, services, res, unique, reading):

    topic = create_topic(kafka, f"compact-{unique}", config={
        "cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.001",
        "min.compaction.lag.ms": "0", "delete.retention.ms": "100"})
    produce(kafka, topic, [(0, f"k{i % 5}".encode(), f"v{i}".encode(), []) for i in range(50)])
    time.sleep(0.3)
    produce(kafka, topic, [(0, b"roll", b"closes the first segment", [])])
    end = kafka.offsets(topic, "latest")[0]
    deadline = time.monotonic() + 90
    while len(survivors := _consume_all(kafka, topic, 0, end)) >= end:
        assert time.monotonic() < deadline, "the log cleaner did not compact the topic within 90 s"
        time.sleep(1)
        produce(kafka, topic, [(0, b"roll", b"x", [])])  # keep rolling segments so the cleaner has work
        end = kafka.offsets(topic, "latest")[0]
    end = kafka.offsets(topic, "latest")[0]
    survivors = _consume_all(kafka, topic, 0, end)
    cfg = archive_config(services.bucket, topic, f"compact/{unique}/", **reading)
    window = OffsetWindow(0, 0, end)

    materialize(cfg, topic, [window], res)

    archived = archived_records(s3, cfg, topic)
    assert [(r.offset, r.key, r.value) for r in archived] == [(m.offset(), m.key(), m.value()) for m in survivors]
    m = manifest(s3, cfg, topic, window)
    present = {r.offset for r in archived}
    absent = {o for a, b in m.absent_offsets for o in range(a, b)}
    assert absent and absent == set(range(end)) - present
    assert m.absent_offset_count == end - len(archived) and m.lost_offsets == []


def test_secrets_never_reach_logs_metadata_or_errors(kafka, services, res, unique, read_path):
    topic = create_topic(kafka, f"secret-{unique}")
    produce(kafka, topic, [(0, None, b"x", [])] * 3)
    cfg = archive_config(services.bucket, topic, f"secret/{unique}/", read_path=read_path)
    ok = materialize(cfg, topic, [OffsetWindow(0, 0, 3)], res)
    failed = materialize(cfg, topic, [OffsetWindow(0, 0, 9)], res, raise_on_error=False)  # past the watermark
    assert not failed.success
    for result in (ok, failed):
        text = "\n".join(repr(e) for e in result.all_events)
        assert TEST_AWS["AWS_SECRET_ACCESS_KEY"] not in text
        assert TEST_AWS["AWS_SECRET_ACCESS_KEY"] not in repr(window_metadata(result))


def test_wrong_credentials_are_one_clear_error_without_the_secret(tmp_path):
    import boto3

    # A moto server of its own that checks credentials (the shared one accepts any).
    moto = MotoServer(tmp_path / "moto", env={"INITIAL_NO_AUTH_ACTION_COUNT": "0"})
    moto.start()
    try:
        client = boto3.client("s3", endpoint_url=moto.endpoint_url, region_name="us-east-1",
                              aws_access_key_id="AKIAWRONGWRONGWRONG", aws_secret_access_key="wrong-secret-xyz")
        with pytest.raises(S3Unavailable) as err:
            check_bucket(client, "any-bucket")
        assert "access to bucket 'any-bucket'" in str(err.value) and "was refused" in str(err.value)
        assert "check the AWS credentials" in str(err.value)
        assert "wrong-secret-xyz" not in str(err.value)
    finally:
        moto.stop()
