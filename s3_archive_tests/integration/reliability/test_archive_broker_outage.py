"""A broker restart under an archive run (reliability tier), on a broker of its own (`outage_broker`): stopped
while the run's Spark job reads Kafka, started again on the same ports and storage ~10 s later. The run rides it
out or fails within a bound naming the broker; the re-run completes; every record is archived exactly once."""

from __future__ import annotations

import os
import threading
import time

import dagster as dg
import pytest

from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.integration.archive_helpers import (
    archive_config,
    archived_records,
    manifest,
    materialize,
    resources,
    staging_objects,
    window_metadata,
)
from s3_archive_tests.kafka_helpers import create_topic, produce

RECORDS, WINDOW = 120_000, 60_000  # ~120 MB: the Spark job reads Kafka for a few seconds
DOWN_S = 10.0
BOUND_S = 180.0
pytestmark = pytest.mark.alone  # the outages' lengths and bounds are wall time


def test_broker_restarted_mid_archive_then_rerun_is_exactly_once(outage_broker, outage_kafka, services, spark_resource,
                                                                  s3, unique):
    kafka = outage_kafka
    topic = create_topic(kafka, f"outage-arc-{unique}")
    produced = produce(kafka, topic, [(0, f"{i}".encode(), os.urandom(1000), []) for i in range(RECORDS)])
    cfg = archive_config(services.bucket, topic, f"outage-arc/{unique}/", format="parquet")
    windows = [OffsetWindow(0, s, s + WINDOW) for s in range(0, RECORDS, WINDOW)]
    res = resources(services, kafka, spark_resource)
    tracker = spark_resource.session().sparkContext.statusTracker()
    stopped_in_job, restarted, done = threading.Event(), threading.Event(), threading.Event()

    def outage() -> None:
        # Stop the broker once the run's Spark job is running (it reads Kafka), start it again DOWN_S later.
        while not done.is_set() and not tracker.getActiveStageIds():
            time.sleep(0.02)
        if done.is_set():
            return
        outage_broker.stop()
        stopped_in_job.set()
        time.sleep(DOWN_S)
        outage_broker.start()
        restarted.set()

    instance = dg.DagsterInstance.ephemeral()
    stopper = threading.Thread(target=outage, daemon=True)
    stopper.start()
    t0 = time.monotonic()
    try:
        first = materialize(cfg, topic, windows, res, instance, raise_on_error=False)
    finally:
        done.set()
    elapsed = time.monotonic() - t0
    stopper.join(DOWN_S + 60)  # a stop seen late (Spark's status lags) restarts the broker before the next test
    print(f"\narchive with a {DOWN_S:.0f}s broker restart (stopped during the Spark job: {stopped_in_job.is_set()}): "
          f"{'rode it out' if first.success else 'failed'} after {elapsed:.1f}s")
    assert stopped_in_job.is_set(), "the run's Spark job ended before the broker could be stopped"
    assert elapsed < BOUND_S
    if not first.success:
        (failure,) = [e for e in first.all_events if e.event_type_value == "STEP_FAILURE"]
        message = failure.event_specific_data.error.message
        print(message[-1500:])
        assert outage_broker.bootstrap_servers in message or "Kafka" in message or "kafka" in message, message
    assert restarted.wait(120), "the broker did not come back"

    again = materialize(cfg, topic, windows, res, instance)  # the re-run completes
    outcomes = {k: m["outcome"] for k, m in window_metadata(again).items()}
    assert set(outcomes.values()) <= {"committed", "already_committed"}, outcomes
    if first.success:
        assert set(outcomes.values()) == {"already_committed"}
    assert [manifest(s3, cfg, topic, w).record_count for w in windows] == [WINDOW] * len(windows)
    assert archived_records(s3, cfg, topic) == produced  # 0 lost, 0 duplicated, byte for byte
    assert staging_objects(s3, cfg, topic) == []


START_DOWN_S = 20.0  # stopped before the run starts, started again this long after (its start takes seconds more)


def test_a_broker_down_as_the_run_starts_is_waited_for_with_no_step_retry(outage_broker, outage_kafka, services,
                                                                           spark_resource, s3, unique):
    kafka = outage_kafka
    topic = create_topic(kafka, f"outage-start-{unique}", partitions=2)
    produced = produce(kafka, topic, [(i % 2, f"k{i}".encode(), f"v{i}".encode(), []) for i in range(200)])
    # no step retry: only the run's own wait (broker_outage_seconds, 60 s by default) can carry it through
    cfg = archive_config(services.bucket, topic, f"outage-start/{unique}/", retries={"max": 0, "reruns": 0})
    windows = [OffsetWindow(p, 0, 100) for p in (0, 1)]
    back = threading.Event()

    def restart() -> None:
        time.sleep(START_DOWN_S)
        outage_broker.start()
        back.set()

    outage_broker.stop()
    threading.Thread(target=restart, daemon=True).start()
    t0 = time.monotonic()
    result = materialize(cfg, topic, windows, resources(services, kafka, spark_resource), raise_on_error=False)
    elapsed = time.monotonic() - t0
    print(f"\narchive run started with the broker down for {START_DOWN_S:.0f}s: "
          f"{'committed' if result.success else 'failed'} after {elapsed:.1f}s")
    assert back.wait(60), "the broker did not come back"
    assert result.success and elapsed > START_DOWN_S  # it waited for the broker rather than failing
    meta = window_metadata(result)
    assert sorted(meta) == sorted(w.key for w in windows)
    assert {m["outcome"] for m in meta.values()} == {"committed"} and {m["step_retry"] for m in meta.values()} == {0}
    # every record once (archived_records is in (partition, offset) order)
    assert archived_records(s3, cfg, topic) == sorted(produced, key=lambda r: (r.partition, r.offset))


def test_a_broker_down_past_broker_outage_seconds_fails_the_run_saying_how_long(outage_broker, outage_kafka, services,
                                                                                 spark_resource, unique):
    kafka = outage_kafka
    topic = create_topic(kafka, f"outage-bound-{unique}")
    produce(kafka, topic, [(0, None, b"v", [])])
    cfg = archive_config(services.bucket, topic, f"outage-bound/{unique}/", broker_outage_seconds=3,
                         retries={"max": 0, "reruns": 0})
    outage_broker.stop()
    t0 = time.monotonic()
    try:
        result = materialize(cfg, topic, [OffsetWindow(0, 0, 1)], resources(services, kafka, spark_resource),
                             raise_on_error=False)
    finally:
        elapsed = time.monotonic() - t0
        outage_broker.start()
    assert not result.success
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    message = failure.event_specific_data.error.message
    assert "KafkaUnavailable: cannot reach Kafka at" in message and "(broker_outage_seconds: 3)" in message, message
    # bounded: the bound plus one request's timeout (outage_kafka's 5 s), plus the run's own start
    assert elapsed < 3 + 5 + 30, elapsed
