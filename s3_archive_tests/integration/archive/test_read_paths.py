"""The two read paths (`read_path`: librdkafka in the write tasks, with either `task_reader`, native or python, or
Spark's Kafka source) write the same bytes: every output the task computes itself (every format's lines and every
layout's buckets rendered in the task) and every one whose columns Spark computes from the tasks' envelope (a value
parsed as JSON), the same window of awkward records archived into three buckets under the same keys (avro's sync
marker comes from the key)."""

from __future__ import annotations

import json

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
           (b"j2", b'{"id": "x", "tags": [1]}', [("ts", b"1700000000000")]),
           (b'say "hi",\nthen', b'a,b;c:d "q" \\ \t\r\n\x01\x1f\x7f \xe2\x80\xa8 end', [('na"me\n,', b"\x00\xff")]),
           (b'{"id": -12345678901234567890}', '{"id": 1.5e300, "name": "ü \\"x\\"", "at": 1710052200000}'.encode(),
            [("ts", b"-1"), ("ts", b"1710054000000")]),
           (b" pad ", b"  ", [("", b""), ("h", None)])]
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
    "jsonl": {"format": "jsonl"},
    "json-utf8-skip": {"format": "json", "compression": "gzip", "value_decoding": {"type": "utf8", "on_error": "skip"}},
    "csv": {"format": "csv"},
    "csv-every-field-header": {"format": "csv", "csv_fields": ["key", "value", "offset", "timestamp", "headers"],
                               "sink_output": {"csv_header": True}},
    "csv-value-text-zstd": {"format": "csv", "compression": "zstd", "csv_fields": ["key", "headers", "value"],
                            "sink_output": {"value": "text"}},
    "layout-by-key": {"layout": BY_KEY},
    "layout-by-fields-rotated": {"format": "jsonl", "max_records_per_object": 2, "layout": {
        "template": BY_KEY["template"], "partition_by": [{"kind": "value", "field": "name"},
                                                         {"kind": "key", "field": "id"},
                                                         {"kind": "header", "header": "h"}]}},
    "layout-by-times": {"format": "avro", "layout": {"template": BY_KEY["template"], "timezone": "America/New_York",
                                                     "partition_by": [
        {"kind": "time", "path_format": "yyyy/MM/dd/HH/mm"},
        {"kind": "time", "source": "value", "field": "at", "path_format": "'d'=yyyy-MM-dd/'h'=HH",
         "timezone": "Asia/Kolkata", "duration_seconds": 7200},
        {"kind": "time", "source": "header", "field": "ts", "path_format": "yyyyMMdd", "timezone": "UTC"}]}},
    "layout-template-slots": {"format": "csv", "layout": {
        "template": "{{topic}}/{{timestamp:unit=yyyy}}/{{timestamp:unit=HH}}/{{topic}}+{{partition}}+"
                    "{{start_offset}}+{{part}}-{{key}}", "timezone": "Europe/Berlin", "partition_by": []}},
    "layout-missing-dead-letters": {"value_decoding": {"type": "utf8", "on_error": "dead_letter"},
                                    "sink_output": {"skip_tombstones": True},
                                    "layout": {"template": BY_KEY["template"], "on_missing": "dead_letter",
                                               "partition_by": [{"kind": "header", "header": "ts"}]}},
    # computed by Spark from the tasks' envelope: a value parsed as JSON
    "json-decoded-dead-letters": {"value_decoding": {"type": "json", "on_error": "dead_letter"}},
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
    assert mine.record_count + (mine.skipped_records or 0) == len(RECORDS) and mine.objects
    prefix = f"paths/{case}/spark/"
    written = _objects(s3, services.bucket, prefix)
    assert written == _objects(s3, PYTHON_BUCKET, prefix)
    assert written == _objects(s3, OTHER_BUCKET, prefix)
    assert len(written) >= len(mine.objects)


REGISTRY_CASES = {  # Schema Registry Avro decoded in the task on both paths: the task's own envelope or Spark's
    "avro-values-dead-letters": {"value_decoding": {"type": "avro", "on_error": "dead_letter"}},
    "avro-values-by-decoded-field-and-key-rotated": {
        "value_decoding": {"type": "avro"}, "max_records_per_object": 2,
        "layout": {"template": BY_KEY["template"], "partition_by": [
            {"kind": "value", "field": "shop.region", "name": "region"}, {"kind": "key", "hive": False}]}},
}


@pytest.mark.parametrize("case", REGISTRY_CASES)
def test_both_read_paths_decode_registry_payloads_to_the_same_bytes(case, registry_server, kafka, s3, services,
                                                                    spark, unique):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from s3_archive.io.registry_client import RegistryConnection

    create_bucket(services.s3_endpoint_url, OTHER_BUCKET)
    topic = create_topic(kafka, f"read-paths-sr-{unique}")
    schema = {"type": "record", "name": "Sale", "fields": [
        {"name": "id", "type": "long"}, {"name": "note", "type": "string"},
        {"name": "shop", "type": {"type": "record", "name": "Shop", "fields": [
            {"name": "region", "type": ["null", "string"], "default": None}]}}]}
    ser = AvroSerializer(SchemaRegistryClient({"url": registry_server.url, "timeout": 10}), json.dumps(schema),
                         conf={"auto.register.schemas": True})
    notes = ['a "quoted", comma', "new\nline ✓", "", "\x00\x1f"]
    regions = ["eu/west", None, "us", "eu/west", "ü ö"]
    values = [ser({"id": -i * 10**15, "note": notes[i % len(notes)], "shop": {"region": r}},
                  SerializationContext(topic, MessageField.VALUE)) for i, r in enumerate(regions)]
    records = [(b"k%d" % (i % 2), v, [("h", b"x")]) for i, v in enumerate(values)] + [(b"bad", b"\x00\x00", [])]
    produce(kafka, topic, [(0, k, v, h) for k, v, h in records])
    if "dead_letter" not in json.dumps(REGISTRY_CASES[case]):
        records = records[:-1]
    window = OffsetWindow(0, 0, len(records))
    registry = RegistryConnection(registry_server.url, timeout_s=10)
    results = {}
    for bucket, path in ((services.bucket, "librdkafka"), (OTHER_BUCKET, "spark")):
        cfg = archive_config(bucket, topic, f"paths-sr/{case}/", read_path="spark", **REGISTRY_CASES[case])
        cfg = cfg.model_copy(update={"read_path": path})
        ctx = ArchiveContext.of_client(spark, kafka, s3, log, registry)
        results[path] = archive_window(ctx, cfg, topic, window).manifest
    ignored = {"attempt", "committed_at"}
    assert results["librdkafka"].model_dump(exclude=ignored) == results["spark"].model_dump(exclude=ignored)
    prefix = f"paths-sr/{case}/spark/"
    written = _objects(s3, services.bucket, prefix)
    assert written == _objects(s3, OTHER_BUCKET, prefix)
    assert len(written) >= len(results["librdkafka"].objects) > 0


def test_the_task_read_jobs_shape_is_worked_out_once_per_session_and_output(spark):
    """task_read_job.py::task_shape: a second run of an output in the same session gets the very shape the first
    worked out, the one write_frame gives over an empty envelope; another output gets its own."""
    from s3_archive.archive.driver.output import Output
    from s3_archive.archive.driver.spark_job import write_frame
    from s3_archive.archive.driver.task_read_job import task_shape
    from s3_archive.archive.protocol import ENVELOPE_DDL

    parquet = Output.of(archive_config(OTHER_BUCKET, "shapes", "p/", read_path="librdkafka"))
    csv = Output.of(archive_config(OTHER_BUCKET, "shapes", "p/", read_path="librdkafka", format="csv"))
    first = task_shape(spark, parquet, None)
    assert task_shape(spark, parquet, None) is first
    frame, shape = write_frame(spark.createDataFrame([], ENVELOPE_DDL), parquet, None)
    assert first == (shape, frame.schema.json())
    other = task_shape(spark, csv, None)
    assert other is task_shape(spark, csv, None) and other != first
    assert other[0].fmt.name == "csv" and "_line" in other[1]
