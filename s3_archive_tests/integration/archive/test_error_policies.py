"""Per-record error policies through the real broker, Spark and moto: records whose value does not decode, and
records the layout cannot place, skipped (counted in the manifest and the metadata), failed, or kept as dead letters
in S3 and in a Kafka dead-letter topic with context headers, exactly once when a window is archived again."""

from __future__ import annotations

import json

import pytest

from s3_archive.archive.driver.archive_run import ArchiveContext
from s3_archive.archive.driver.coordinator import archive_window
from s3_archive.archive.driver.dead_letter_topic import (
    OFFSET_HEADER,
    PARTITION_HEADER,
    REASON_HEADER,
    TOPIC_HEADER,
    ledger_group,
)
from s3_archive.model.errors import UnplaceableRecord
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.integration.archive_helpers import archive_config, archived_records, log, manifest
from s3_archive_tests.kafka_helpers import consume_all, create_topic, parquet_records, produce

# Offsets 1 and 3 do not decode as JSON objects; 4 decodes but has no "region" for the layout.
VALUES = [b'{"region": "eu"}', b"\xff not utf-8", b'{"region": "us"}', b"[1, 2]", b'{"other": 1}',
          b'{"region": "eu"}']
REGION_LAYOUT = {"template": "{{topic}}/{{partition_by}}/{{topic}}+{{partition}}+{{start_offset}}+{{part}}",
                 "partition_by": [{"kind": "value", "field": "region"}]}


@pytest.fixture(scope="module")
def bad_topic_and_records(kafka):
    topic = create_topic(kafka, "policies")
    return topic, produce(kafka, topic, [(0, f"k{i}".encode(), v, [("h", b"1")]) for i, v in enumerate(VALUES)])


def test_skip_drops_undecodable_and_unplaceable_records_and_counts_them(bad_topic_and_records, kafka, s3, services,
                                                                        spark):
    topic, produced = bad_topic_and_records
    cfg = archive_config(services.bucket, topic, "policies/skip/",
                         value_decoding={"type": "json", "on_error": "skip", "column_prefix": "v_"},
                         layout={**REGION_LAYOUT, "on_missing": "skip"})
    r = archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, OffsetWindow(0, 0, len(VALUES)))
    m = r.manifest
    assert (m.skipped_records, m.undecodable_records, m.unplaceable_records) == (3, 2, 1)
    assert m.record_count == 3 and m.absent_offset_count == 0 and m.dead_letter_objects == []
    meta = r.metadata()
    assert (meta["skipped_records"], meta["records"]) == (3, 3)
    assert sorted(x.offset for x in archived_records(s3, cfg, topic)) == [0, 2, 5]


def test_an_unplaceable_record_fails_the_window_naming_it_and_commits_nothing(bad_topic_and_records, kafka, s3,
                                                                              services, spark):
    topic, _ = bad_topic_and_records
    cfg = archive_config(services.bucket, topic, "policies/fail/",
                         value_decoding={"type": "json", "on_error": "skip", "column_prefix": "v_"},
                         layout={**REGION_LAYOUT, "on_missing": "fail"})
    window = OffsetWindow(0, 0, len(VALUES))
    with pytest.raises(UnplaceableRecord, match=rf"topic '{topic}' partition 0: 1 record\(s\).*offset 4\b"):
        archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, window)
    assert manifest(s3, cfg, topic, window) is None


def test_dead_letters_go_to_s3_and_to_a_kafka_topic_with_context_headers_once(bad_topic_and_records, kafka, s3,
                                                                              services, spark, unique):
    topic, produced = bad_topic_and_records
    dlq = create_topic(kafka, f"policies-dlq-{unique}")
    cfg = archive_config(services.bucket, topic, f"policies/dlq-{unique}/",
                         value_decoding={"type": "json", "on_error": "dead_letter", "column_prefix": "v_"},
                         layout={**REGION_LAYOUT, "on_missing": "dead_letter"}, dead_letter_topic=dlq,
                         consumer_group=f"policies-{unique}")
    window = OffsetWindow(0, 0, len(VALUES))
    m = archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, window).manifest
    assert (m.undecodable_records, m.unplaceable_records, m.record_count) == (2, 1, len(VALUES))
    dead = [r for o in m.dead_letter_objects
            for r in parquet_records(s3.get_object(Bucket=cfg.bucket, Key=o.key)["Body"].read())]
    assert sorted(dead, key=lambda r: r.offset) == [produced[i] for i in (1, 3, 4)]

    def published():
        return [g for g in consume_all(kafka, dlq)[0]]

    got = published()
    assert [(g.key, g.value, g.timestamp_ms) for g in got] == [
        (produced[i].key, produced[i].value, produced[i].timestamp_ms) for i in (1, 3, 4)]
    for g, i in zip(got, (1, 3, 4), strict=True):
        headers = dict(g.headers)
        assert g.headers[0] == ("h", b"1")  # the record's own headers first
        assert (headers[TOPIC_HEADER], headers[PARTITION_HEADER], headers[OFFSET_HEADER]) == (
            topic.encode(), b"0", str(i).encode())
    assert [dict(g.headers)[REASON_HEADER].decode() for g in got] == [
        "value_decoding json: the value is not UTF-8", "value_decoding json: the value is not a JSON object",
        "layout: a partition_by value (or {{key}}) the record lacks"]

    # Archived again (a re-run finds it committed): the ledger says its dead letters were produced; none twice.
    again = archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, window)
    assert again.outcome == "already_committed" and len(published()) == 3
    assert json.loads(kafka_ledger(kafka, cfg, topic)) == [[0, len(VALUES)]]


def kafka_ledger(kafka, cfg, topic: str) -> str:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(kafka.client_config(**{"group.id": ledger_group(cfg), "enable.auto.commit": False}))
    try:
        (tp,) = c.committed([TopicPartition(topic, 0)], timeout=30)
        return tp.metadata
    finally:
        c.close()
