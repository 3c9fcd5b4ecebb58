"""The offsets sensor's upkeep against the real broker, moto and Spark: committed windows whose manifests are gone
are reported at the next tick and archived again while Kafka holds them; failed runs are requested again after their
backoff, a bounded number of times, never after an error no retry can fix; records that wait too long turn
`archive_fresh` red; and the archive's consumer group shows its lag in Kafka's own `kafka-consumer-groups.sh`."""

import os
import subprocess
import time

import dagster as dg
from confluent_kafka import TopicPartition

from s3_archive.archive.cursor import SensorCursor
from s3_archive.config.archive import ArchiveConfig, FlushPolicy, Retries
from s3_archive.defs.archive.checks import FRESH, MANIFESTS
from s3_archive.defs.archive.partitions import GAVE_UP_TAG, RERUN_OF_TAG, RUN_ATTEMPT_TAG
from s3_archive.defs.archive.sensors import build_offsets_sensor
from s3_archive.io.paths import jars
from s3_archive.io.s3_resource import S3Resource
from s3_archive.keys.objects import manifest_key
from s3_archive.local.processes import free_port
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.credentials import TEST_AWS
from s3_archive_tests.integration.archive_helpers import manifest, materialize, resources, window_metadata
from s3_archive_tests.kafka_helpers import create_topic, open_producer, produce


def tick(cfg: ArchiveConfig, res: dict, instance: dg.DagsterInstance, cursor: str | None) -> dg.SensorResult:
    with dg.build_sensor_context(instance=instance, resources={"kafka": res["kafka"], "s3": res["s3"]},
                                 cursor=cursor) as context:
        result = build_offsets_sensor(cfg)(context)
    assert isinstance(result, dg.SensorResult)
    for req in result.dynamic_partitions_requests or []:  # as the daemon does before it launches the runs
        instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
    return result


def verdicts(result: dg.SensorResult) -> dict[str, dg.AssetCheckEvaluation]:
    return {e.check_name: e for e in result.asset_events or [] if isinstance(e, dg.AssetCheckEvaluation)}


def requested(result: dg.SensorResult) -> list[OffsetWindow]:
    return [OffsetWindow.parse(r.partition_key) for r in result.run_requests or [] if r.partition_key]


def delete_records(kafka, topic: str, partition: int, before: int) -> None:
    tp = TopicPartition(topic, partition, before)
    admin = kafka.admin()  # keep a reference: a collected client never resolves its futures
    admin.delete_records([tp])[tp].result(timeout=30)


def test_lost_manifests_are_reported_at_the_next_tick_and_archived_again_while_kafka_holds_them(
        kafka, services, spark_resource, s3, unique):
    topic = create_topic(kafka, f"lost-{unique}")
    produce(kafka, topic, [(0, None, f"v{i}".encode(), []) for i in range(30)])
    cfg = ArchiveConfig(name="lost", topics=[topic], bucket=services.bucket, prefix=f"lost/{unique}/",
                        flush=FlushPolicy(count=10, interval_seconds=None), windows_per_run=3)
    res = resources(services, kafka, spark_resource)
    instance = dg.DagsterInstance.ephemeral()
    windows = [OffsetWindow(0, s, s + 10) for s in (0, 10, 20)]

    first = tick(cfg, res, instance, None)
    assert requested(first) == [] and len(first.run_requests) == 1  # one run over the range of three windows
    materialize(cfg, topic, windows, res, instance)
    assert verdicts(first)[MANIFESTS].passed
    ok = tick(cfg, res, instance, first.cursor)
    # Still passing: reported once, when it first passed, not at every tick.
    assert MANIFESTS not in verdicts(ok) and SensorCursor.parse(ok.cursor).verdicts[topic][MANIFESTS] == "ok"
    assert not ok.run_requests

    # A manifest deleted behind Dagster's back (a lifecycle rule, someone emptying a prefix): the next tick says so,
    # naming the window, and requests it again (Kafka still has its records).
    s3.delete_object(Bucket=services.bucket, Key=manifest_key(cfg.prefix, topic, windows[1]))
    lost = tick(cfg, res, instance, ok.cursor)
    check = verdicts(lost)[MANIFESTS]
    assert not check.passed and check.metadata["lost_manifests"].value == 1
    assert windows[1].key in check.description and "archives it again" in check.description
    (again,) = lost.run_requests
    assert again.partition_key == windows[1].key and "#rearchive@" in again.run_key
    assert tick(cfg, res, instance, lost.cursor).run_requests == []  # while it runs: not requested twice

    materialize(cfg, topic, [windows[1]], res, instance)
    assert manifest(s3, cfg, topic, windows[1]).record_count == 10
    back = tick(cfg, res, instance, lost.cursor)
    assert verdicts(back)[MANIFESTS].passed and not back.run_requests

    # Gone from Kafka too: reported, not requested.
    delete_records(kafka, topic, 0, 25)
    s3.delete_object(Bucket=services.bucket, Key=manifest_key(cfg.prefix, topic, windows[2]))
    gone = tick(cfg, res, instance, back.cursor)
    check = verdicts(gone)[MANIFESTS]
    assert not check.passed and "cannot be archived again" in check.description and not gone.run_requests


def test_a_failed_run_is_requested_again_after_its_backoff_a_bounded_number_of_times(kafka, services,
                                                                                      spark_resource, unique):
    topic = create_topic(kafka, f"rerun-{unique}")
    produce(kafka, topic, [(0, None, b"x", [])] * 10)
    cfg = ArchiveConfig(name="rerun", topics=[topic], bucket=services.bucket, prefix=f"rerun/{unique}/",
                        flush=FlushPolicy(count=10, interval_seconds=None),
                        retries=Retries(max=1, backoff_seconds=0.2, reruns=1))
    res = resources(services, kafka, spark_resource)
    with dg.instance_for_test() as instance:
        first = tick(cfg, res, instance, None)
        (req,) = first.run_requests
        window = OffsetWindow.parse(req.partition_key)

        # S3 unreachable (nothing listens there): a transient failure; the step is retried once, then the run fails.
        down = {**res, "s3": S3Resource(endpoint_url=f"http://127.0.0.1:{free_port()}", max_attempts=0,
                                        region_name=TEST_AWS["AWS_REGION"],
                                        aws_access_key_id=TEST_AWS["AWS_ACCESS_KEY_ID"],
                                        aws_secret_access_key=TEST_AWS["AWS_SECRET_ACCESS_KEY"])}
        failed = materialize(cfg, topic, [window], down, instance, raise_on_error=False, tags=req.tags)
        assert not failed.success
        assert len(failed.filter_events(lambda e: e.event_type_value == "STEP_RESTARTED")) == 1
        assert GAVE_UP_TAG not in instance.get_run_by_id(failed.run_id).tags

        time.sleep(0.5)  # rerun delay: 0.2 s x 2^(max 1 + attempt 1 - 1)
        second = tick(cfg, res, instance, first.cursor)
        (rerun,) = second.run_requests
        assert rerun.partition_key == window.key and rerun.run_key == f"{topic}/rerun/{failed.run_id}"
        assert rerun.tags[RUN_ATTEMPT_TAG] == "2" and rerun.tags[RERUN_OF_TAG] == failed.run_id

        # The second run fails too: retries.reruns is 1, so nothing more is requested.
        failed_again = materialize(cfg, topic, [window], down, instance, raise_on_error=False, tags=rerun.tags)
        assert not failed_again.success
        time.sleep(1.0)
        assert tick(cfg, res, instance, second.cursor).run_requests == []

        # Archived by hand at last: the metadata counts the runs and the step's retries.
        done = materialize(cfg, topic, [window], res, instance, tags={RUN_ATTEMPT_TAG: "3"})
        meta = window_metadata(done)[window.key]
        assert (meta["run_attempt"], meta["step_retry"], meta["outcome"]) == (3, 0, "committed")


def test_a_missing_bucket_fails_at_once_and_is_never_requested_again(kafka, services, spark_resource, unique):
    topic = create_topic(kafka, f"nobucket-{unique}")
    produce(kafka, topic, [(0, None, b"x", [])] * 10)
    cfg = ArchiveConfig(name="nobucket", topics=[topic], bucket=f"no-such-bucket-{unique}", prefix="p/",
                        flush=FlushPolicy(count=10, interval_seconds=None),
                        retries=Retries(max=3, backoff_seconds=0.1, reruns=3))
    res = resources(services, kafka, spark_resource)
    with dg.instance_for_test() as instance:
        first = tick(cfg, res, instance, None)
        (req,) = first.run_requests
        failed = materialize(cfg, topic, [OffsetWindow.parse(req.partition_key)], res, instance,
                             raise_on_error=False, tags=req.tags)
        assert not failed.success
        assert failed.filter_events(lambda e: e.event_type_value == "STEP_RESTARTED") == []  # not retried
        (failure,) = failed.filter_events(lambda e: e.event_type_value == "STEP_FAILURE")
        text = failure.step_failure_data.user_failure_data.description
        assert f"bucket 'no-such-bucket-{unique}' does not exist" in text and "Not retried" in text
        assert instance.get_run_by_id(failed.run_id).tags[GAVE_UP_TAG] == "true"
        time.sleep(1.0)
        assert tick(cfg, res, instance, first.cursor).run_requests == []


def test_records_older_than_the_bound_in_no_committed_window_turn_the_archive_stale(kafka, services,
                                                                                    spark_resource, unique):
    topic = create_topic(kafka, f"fresh-{unique}", partitions=2)
    old = int(time.time() * 1000) - 3_600_000
    produce(kafka, topic, [(p, None, b"x", []) for p in (0, 1) for _ in range(5)], timestamps=[old] * 10)
    # An hour old: older than flush.interval_seconds x freshness_factor = 120 s from the start.
    cfg = ArchiveConfig(name="fresh", topics=[topic], bucket=services.bucket, prefix=f"fresh/{unique}/",
                        flush=FlushPolicy(count=5, interval_seconds=60), freshness_factor=2)
    res = resources(services, kafka, spark_resource)
    instance = dg.DagsterInstance.ephemeral()
    first = tick(cfg, res, instance, None)
    stale = verdicts(first)[FRESH]
    assert not stale.passed and stale.metadata["stale_offsets"].value == 10  # cut, not committed yet
    assert "older than 120 s" in stale.description
    materialize(cfg, topic, [OffsetWindow(0, 0, 5)], res, instance)
    half = tick(cfg, res, instance, first.cursor)
    assert verdicts(half)[FRESH].metadata["stale_by_partition"].value == {"1": 5}
    materialize(cfg, topic, [OffsetWindow(1, 0, 5)], res, instance)
    fresh = tick(cfg, res, instance, half.cursor)
    assert verdicts(fresh)[FRESH].passed
    assert FRESH not in verdicts(tick(cfg, res, instance, fresh.cursor))  # reported when it changes, not each tick
    assert SensorCursor.parse(fresh.cursor).verdicts[topic][FRESH] == "ok"


def consumer_groups(bootstrap: str, group: str) -> dict[int, tuple[int, int, int]]:
    """`kafka-consumer-groups.sh --describe --group <group>` (Kafka's own tool, of the broker's release): per
    partition CURRENT-OFFSET, LOG-END-OFFSET, LAG."""
    classpath = os.pathsep.join(str(j) for j in jars("kafka-tools"))
    out = subprocess.run(["java", "-cp", classpath, "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                          "--bootstrap-server", bootstrap, "--describe", "--group", group],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    rows = {}
    lines = [ln.split() for ln in out.splitlines() if ln.strip()]
    header = next(ln for ln in lines if "CURRENT-OFFSET" in ln)
    for ln in lines[lines.index(header) + 1:]:
        row = dict(zip(header, ln, strict=False))
        rows[int(row["PARTITION"])] = (int(row["CURRENT-OFFSET"]), int(row["LOG-END-OFFSET"]), int(row["LAG"]))
    return rows


def test_the_committed_ends_are_a_consumer_groups_offsets_and_kafkas_tool_shows_the_lag(kafka, services,
                                                                                       spark_resource, unique):
    topic = create_topic(kafka, f"lag-{unique}", partitions=2)
    produce(kafka, topic, [(p, None, b"x", []) for p in (0, 1) for _ in range(30)])
    group = f"archive-lag-{unique}"
    cfg = ArchiveConfig(name="lag", topics=[topic], bucket=services.bucket, prefix=f"lag/{unique}/",
                        consumer_group=group)
    res = resources(services, kafka, spark_resource)
    instance = dg.DagsterInstance.ephemeral()
    # Out of order: partition 0's second window commits first, so the group waits for the first one.
    materialize(cfg, topic, [OffsetWindow(0, 10, 20)], res, instance)
    assert kafka.group_offsets(group, topic, [0, 1]) == {}
    materialize(cfg, topic, [OffsetWindow(0, 0, 10), OffsetWindow(1, 0, 25)], res, instance)
    assert consumer_groups(services.bootstrap_servers, group) == {0: (20, 30, 10), 1: (25, 30, 5)}

    # A transaction's records and its commit marker: windows end at the last stable offset, the group with them.
    with open_producer(kafka, **{"transactional.id": f"lag-{unique}"}) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        for _ in range(5):
            producer.produce(topic, b"t", partition=1)
        producer.commit_transaction()
    materialize(cfg, topic, [OffsetWindow(1, 25, 36)], res, instance)  # 5 old + 5 transactional + the marker
    assert consumer_groups(services.bootstrap_servers, group)[1] == (36, 36, 0)


def test_an_archive_can_write_no_group_offsets(kafka, services, spark_resource, unique):
    topic = create_topic(kafka, f"nolag-{unique}")
    produce(kafka, topic, [(0, None, b"x", [])] * 5)
    cfg = ArchiveConfig(name="nolag", topics=[topic], bucket=services.bucket, prefix=f"nolag/{unique}/",
                        consumer_group_offsets=False)
    materialize(cfg, topic, [OffsetWindow(0, 0, 5)], resources(services, kafka, spark_resource))
    assert kafka.group_offsets(f"s3-archive.{cfg.name}", topic, [0]) == {}
