"""The pure parts of the sensor's upkeep: which failures are not retried and when a failed run is requested again,
which committed offsets lost their manifests, and the freshness and manifest verdicts."""

import pytest
from botocore.exceptions import ClientError

from s3_archive.archive.cursor import Open, SensorCursor, Tail
from s3_archive.archive.failures import permanent, rerun_delay
from s3_archive.archive.health import freshness_verdict, manifests_verdict, missing_ranges
from s3_archive.config.archive import ArchiveConfig, FlushPolicy, Retries
from s3_archive.model.errors import DataLoss, KafkaRefused, KafkaUnavailable, S3Refused, S3Unavailable
from s3_archive.model.windows import OffsetWindow


def cfg(**kw) -> ArchiveConfig:
    return ArchiveConfig(name="a", topics=["t"], bucket="bkt", prefix="p/", **kw)


def client_error(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "no"}}, "PutObject")


@pytest.mark.parametrize("error", [
    DataLoss("gone"), S3Refused("bucket 'x' does not exist"), KafkaRefused("refused the login"),
    client_error("NoSuchBucket"), client_error("AccessDenied"),
    # As a Spark job failure reaches the driver: an executor's traceback inside a Java exception's text.
    RuntimeError("Job aborted ... botocore.exceptions.ClientError: An error occurred (InvalidAccessKeyId) when "
                 "calling the PutObject operation: The AWS Access Key Id you provided does not exist"),
    RuntimeError("org.apache.kafka.common.errors.SaslAuthenticationException: Authentication failed"),
])
def test_errors_no_retry_can_fix_are_permanent(error):
    assert permanent(error)


@pytest.mark.parametrize("error", [
    S3Unavailable("cannot reach S3 for bucket 'x'"), KafkaUnavailable("cannot reach Kafka within 15s"),
    client_error("SlowDown"), client_error("InternalError"), TimeoutError("read timed out"),
    RuntimeError("Job aborted due to stage failure: ... (SlowDown) when calling the PutObject operation"),
])
def test_outages_and_throttling_are_retried(error):
    assert not permanent(error)


def test_a_failed_run_is_requested_again_after_the_steps_backoff_continued():
    r = Retries(max=3, backoff_seconds=30, reruns=2)
    # The step's retries waited 30, 90, 210 s (Dagster's exponential backoff); the sensor's reruns wait 240 s, 480 s.
    assert [rerun_delay(r, a) for a in (1, 2)] == [240, 480]
    assert rerun_delay(Retries(max=0, backoff_seconds=5), 1) == 5
    assert rerun_delay(Retries(max=10, backoff_seconds=3600), 10) == 86_400  # at most a day


def test_missing_ranges_are_the_committed_offsets_without_a_manifest():
    opens = [OffsetWindow(0, 30, 40)]
    assert missing_ranges(0, 50, opens, [(0, 10), (10, 20), (20, 30), (40, 50)]) == []
    assert missing_ranges(0, 50, opens, [(0, 10), (20, 30), (40, 50)]) == [(10, 20)]
    assert missing_ranges(0, 50, opens, []) == [(0, 30), (40, 50)]  # a prefix deleted
    assert missing_ranges(100, 150, [], [(0, 100), (100, 150), (150, 200)]) == []  # listed beyond the region


def test_the_manifest_verdict_names_each_lost_window_and_what_happens_to_it():
    lost = [OffsetWindow(0, 0, 10), OffsetWindow(1, 5, 9)]
    v = manifests_verdict(cfg(), "t", lost, {OffsetWindow(0, 0, 10)}, 7)
    assert not v.passed and v.metadata["lost_manifests"] == 2 and v.metadata["rearchiving"] == 1
    assert v.problems[0] == (f"window {lost[0].key} of 't' is materialized but its manifest "
                             f"s3://bkt/p/_manifests/t/kafka_partition=0/{lost[0].key}.json is gone; Kafka still "
                             "holds its records, so the offsets sensor archives it again")
    assert v.problems[1].endswith("Kafka no longer holds all of its records, so it cannot be archived again")
    assert manifests_verdict(cfg(), "t", [], set(), 7).ok == "every committed window of 't' has its manifest (7 found)"


def test_freshness_fails_only_for_records_older_than_the_bound_in_no_committed_window():
    c = cfg(flush=FlushPolicy(interval_seconds=60), freshness_factor=3)
    # p0: offsets 100..150 uncommitted, records before 130 older than 180 s; p1: everything committed; p2: every
    # uncommitted record is old (-1: no record that new).
    v = freshness_verdict(c, "t", {0: 100, 1: 80, 2: 7}, {0: 130, 2: -1}, {0: 150, 1: 80, 2: 9})
    assert v.metadata["stale_by_partition"] == {"0": 30, "2": 2} and v.metadata["stale_offsets"] == 32
    assert v.problems[0] == ("topic 't' partition 0: offsets [100, 130) hold records older than 180 s "
                             "(flush.interval_seconds 60 x freshness_factor 3) that are in no committed window")
    assert freshness_verdict(c, "t", {0: 130}, {0: 130}, {0: 150}).passed
    assert freshness_verdict(cfg(flush=FlushPolicy(interval_seconds=None)), "t", {0: 0}, {}, {0: 9}).passed


def test_the_cursor_keeps_the_upkeep_state():
    c = SensorCursor(tails={"t": Tail("x", {0: 50}, {0: 10})}, open={"t": Open(812, ["k1", "k2"])}, failures=9120,
                     verdicts={"t": {"archive_fresh": "stale 0"}}, sweep="t")
    assert SensorCursor.parse(c.dump()) == c


def test_the_dead_letter_ledger_merges_windows_published_in_any_order():
    from s3_archive.archive.driver.dead_letter_topic import merged

    assert merged([], 10, 20) == [[10, 20]]
    assert merged([[10, 20]], 30, 40) == [[10, 20], [30, 40]]
    assert merged([[10, 20], [30, 40]], 20, 30) == [[10, 40]]
    assert merged([[10, 20]], 0, 10) == [[0, 20]]


def test_a_dead_letter_says_why_it_is_one():
    from s3_archive.archive.driver.dead_letter_topic import reason
    from s3_archive.config.payload import ValueDecoding

    c = cfg(value_decoding=ValueDecoding(type="json", on_error="dead_letter"))
    assert reason(c, b"\xff") == "value_decoding json: the value is not UTF-8"
    assert reason(c, b"[1]") == "value_decoding json: the value is not a JSON object"
    assert reason(c, b"nope") == "value_decoding json: the value is not JSON"
    assert reason(c, b'{"a": 1}') == "layout: a partition_by value (or {{key}}) the record lacks"
    # Schema Registry decoding: the reason the write task stored with the dead letter, the value's or the key's.
    r = cfg(value_decoding=ValueDecoding(type="avro", on_error="dead_letter"))
    assert reason(r, b"\x00\x00\x00\x00\x07x", "value: unknown schema id 7") == "value: unknown schema id 7"
    assert reason(r, b"plain text") == "layout: a partition_by value (or {{key}}) the record lacks"


def test_the_dead_letter_ledger_keeps_the_newest_ranges_that_fit_kafkas_offset_metadata():
    import json
    import logging

    from s3_archive.archive.driver.dead_letter_topic import LEDGER_BYTES, bounded

    ranges = [[i * 100, i * 100 + 10] for i in range(1000)]
    kept = bounded(ranges, logging.getLogger("test"), "t", 0)
    assert len(json.dumps(kept)) <= LEDGER_BYTES < len(json.dumps(kept + [[10**6, 10**6 + 10]]))
    assert kept == ranges[-len(kept):]
    assert bounded(ranges[:3], logging.getLogger("test"), "t", 0) == ranges[:3]
