"""The two read paths (`read_path`: librdkafka in the write tasks, with either `task_reader`, native or python, or
Spark's Kafka source) write the same bytes: every output the task computes itself and every one whose columns Spark
computes from the tasks' envelope, the same window archived into three buckets under the same keys (avro's sync
marker comes from the key)."""

from __future__ import annotations

import pytest

from s3_archive.archive.driver.archive_run import ArchiveContext
from s3_archive.archive.driver.coordinator import archive_window
from s3_archive.io.s3 import list_objects
from s3_archive.local.stack import create_bucket
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.integration.archive_helpers import archive_config, log
from s3_archive_tests.kafka_helpers import NASTY, create_topic, produce

OTHER_BUCKET = "s3-archive-test-spark-path"
PYTHON_BUCKET = "s3-archive-test-python-reader"
RECORDS = [*NASTY, (b"bad", b"\xff\xfe not utf-8", [("h", b"x")]), (b"j", b'{"id": 7, "name": "n"}', []),
           (b"j2", b'{"id": "x", "tags": [1]}', [("ts", b"1700000000000")])]
BY_KEY = {"template": "{{topic}}/{{partition_by}}/{{topic}}+{{partition}}+{{start_offset}}+{{part}}",
          "partition_by": [{"kind": "kafka_partition"}, {"kind": "key", "hive": False}]}
CASES = {  # computed in the task
    "parquet": {},
    "avro-zstd": {"format": "avro", "compression": "zstd"},
    "parquet-utf8-dead-letters-no-metadata": {"value_decoding": {"type": "utf8", "on_error": "dead_letter"},
                                              "envelope": {"metadata": False}},
    "avro-utf8-dead-letters": {"format": "avro", "value_decoding": {"type": "utf8", "on_error": "dead_letter"}},
    "text-gzip": {"format": "text", "compression": "gzip"},
    "parquet-rotated-plain-partition": {"max_records_per_object": 3, "layout": {"partition_by": [
        {"kind": "kafka_partition", "hive": False}]}},
    # computed by Spark from the tasks' envelope
    "jsonl": {"format": "jsonl"},
    "csv": {"format": "csv"},
    "json-decoded-dead-letters": {"value_decoding": {"type": "json", "on_error": "dead_letter"}},
    "layout-by-key": {"layout": BY_KEY},
}


@pytest.fixture(scope="module")
def nasty_topic(kafka, services):
    create_bucket(services.s3_endpoint_url, OTHER_BUCKET)
    create_bucket(services.s3_endpoint_url, PYTHON_BUCKET)
    topic = create_topic(kafka, "read-paths", partitions=2)
    produce(kafka, topic, [(p, k, v, h) for p in (0, 1) for k, v, h in RECORDS])
    return topic


def _objects(s3, bucket: str, prefix: str) -> dict[str, bytes]:
    return {o["Key"]: s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
            for o in list_objects(s3, bucket, prefix)
            if "_manifests/" not in o["Key"]}


@pytest.mark.parametrize("case", CASES)
def test_both_read_paths_and_both_task_readers_write_the_same_bytes(case, nasty_topic, kafka, s3, services, spark):
    topic = nasty_topic
    window = OffsetWindow(1, 0, len(RECORDS))
    results = {}
    ways = ((services.bucket, "librdkafka", "native"), (PYTHON_BUCKET, "librdkafka", "python"),
            (OTHER_BUCKET, "spark", "native"))
    for bucket, path, reader in ways:
        cfg = archive_config(bucket, topic, f"paths/{case}/", read_path="spark", **CASES[case])
        cfg = cfg.model_copy(update={"read_path": path, "task_reader": reader})
        results[bucket] = archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, window).manifest
    mine = results[services.bucket]
    ignored = {"attempt", "committed_at"}
    for bucket in (PYTHON_BUCKET, OTHER_BUCKET):
        assert mine.model_dump(exclude=ignored) == results[bucket].model_dump(exclude=ignored), bucket
    assert mine.record_count == len(RECORDS) and mine.objects
    prefix = f"paths/{case}/spark/"
    written = _objects(s3, services.bucket, prefix)
    assert written == _objects(s3, PYTHON_BUCKET, prefix)
    assert written == _objects(s3, OTHER_BUCKET, prefix)
    assert len(written) >= len(mine.objects)
