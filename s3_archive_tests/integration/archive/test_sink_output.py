"""Sink-compatible output (`sink_output`, `compression_level`, parquet brotli, a dated key template) through the
real broker, Spark and moto, each object read back by an independent reader (json, csv, gzip, zstd, pyarrow) in
the shape the sinks write."""

from __future__ import annotations

import base64
import csv
import gzip
import io
import json
from datetime import UTC, datetime

import pyarrow.parquet as pq
from backports import zstd

from s3_archive.archive.driver.archive_run import ArchiveContext
from s3_archive.archive.driver.coordinator import archive_window
from s3_archive.io.s3 import list_objects
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.integration.archive_helpers import archive_config, final_objects, log, manifest
from s3_archive_tests.kafka_helpers import create_topic, produce

TS = int(datetime(2024, 1, 15, 23, 59, 59, tzinfo=UTC).timestamp() * 1000)
# offset: value; the last one on the next day (UTC)
VALUES = [b'{"id": 1, "tags": ["x"]}', "plain text, ü".encode(), None, b"42", b'"quoted"', None, b"a,b\x00"]


def _topic(kafka, unique: str, name: str) -> tuple[str, OffsetWindow]:
    topic = create_topic(kafka, f"{name}-{unique}", config={"retention.ms": "-1"})  # the timestamps are from 2024
    produce(kafka, topic, [(0, b"k%d" % i, v, [("h", b"1")]) for i, v in enumerate(VALUES)],
            timestamps=[TS] * (len(VALUES) - 1) + [TS + 2000])
    return topic, OffsetWindow(0, 0, len(VALUES))


def _body(s3, bucket: str, key: str) -> bytes:
    return s3.get_object(Bucket=bucket, Key=key)["Body"].read()


def test_jsonl_with_json_values_skipped_tombstones_gzip_level_and_a_dated_template(kafka, s3, services, spark,
                                                                                     unique):
    topic, window = _topic(kafka, unique, "sinkjsonl")
    cfg = archive_config(services.bucket, topic, f"sink/{unique}/jsonl/", format="jsonl", compression="gzip",
                         compression_level=9, sink_output={"value": "json", "skip_tombstones": True},
                         layout={"template": "{{timestamp:unit=yyyy}}-{{timestamp:unit=MM}}-{{timestamp:unit=dd}}/"
                                             "{{topic}}-{{partition}}-{{start_offset}}", "partition_by": [],
                                 "padding": {"type": "none"}, "extension": ""})
    result = archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, window)
    m = result.manifest
    # Tombstones are read and counted, not absent and not written.
    assert (m.record_count, m.tombstones_skipped, m.absent_offset_count, m.restorable) == (7, 2, 0, False)
    assert result.metadata()["tombstones_skipped"] == 2
    assert manifest(s3, cfg, topic, window).tombstones_skipped == 2
    # Aiven's {{utc_date}} as the record's date: the window's last record is of the next day.
    # The template puts the date first: the objects are under the prefix, not under a topic folder.
    keys = sorted(o["Key"] for o in list_objects(s3, services.bucket, cfg.prefix)
                  if not o["Key"].removeprefix(cfg.prefix).startswith("_"))
    assert keys == [f"{cfg.prefix}2024-01-15/{topic}-0-0.gz", f"{cfg.prefix}2024-01-16/{topic}-0-0.gz"]
    rows = []
    for key in keys:
        data = _body(s3, services.bucket, key)
        assert data[8] == 2  # gzip header XFL: 2 = the slowest, maximum compression (level 9)
        rows += [json.loads(line) for line in gzip.decompress(data).splitlines()]
    assert [(r["offset"], r["value"]) for r in rows] == [
        (0, {"id": 1, "tags": ["x"]}), (1, "plain text, ü"), (3, 42), (4, "quoted"), (6, "a,b\x00")]
    assert rows[0]["key"] == "azA=" and rows[0]["headers"] == [{"key": "h", "value": "MQ=="}]


def test_json_arrays_with_json_values(kafka, s3, services, spark, unique):
    topic, window = _topic(kafka, unique, "sinkjson")
    cfg = archive_config(services.bucket, topic, f"sink/{unique}/json/", format="json",
                         sink_output={"value": "json"}, envelope={"key": False, "headers": False})
    archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, window)
    [key] = final_objects(s3, cfg, topic)
    records = json.loads(_body(s3, services.bucket, key))
    assert [r["value"] for r in records] == [{"id": 1, "tags": ["x"]}, "plain text, ü", None, 42, "quoted", None,
                                            "a,b\x00"]
    assert set(records[0]) == {"value", "topic", "partition", "offset", "timestamp", "timestamp_type"}


def test_csv_with_a_header_row_raw_values_and_a_zstd_level(kafka, s3, services, spark, unique):
    topic, window = _topic(kafka, unique, "sinkcsv")
    cfg = archive_config(services.bucket, topic, f"sink/{unique}/csv/", format="csv", compression="zstd",
                         compression_level=19, csv_fields=["offset", "key", "value"], max_records_per_object=4,
                         sink_output={"value": "text", "csv_header": True})
    archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, window)
    keys = sorted(final_objects(s3, cfg, topic))
    assert len(keys) == 2 and all(k.endswith(".csv.zst") for k in keys)
    lines: list[bytes] = []
    for key in keys:
        data = zstd.decompress(_body(s3, services.bucket, key))
        assert data.startswith(b"offset,key,value\n")  # every object starts with the header row
        lines += data.split(b"\n")[1:-1]
    # The raw value last (Aiven's value.encoding none): read with the csv module, split at the first two commas as
    # the Aiven reader does.
    rows = [next(csv.reader(io.StringIO(line.decode("utf-8", "replace"))))[:2] + [line.split(b",", 2)[2]]
            for line in lines]
    assert rows == [[str(i), base64.b64encode(b"k%d" % i).decode(), v or b""] for i, v in enumerate(VALUES)]


def test_parquet_brotli_at_a_level(kafka, s3, services, spark, unique):
    topic, window = _topic(kafka, unique, "sinkbrotli")
    cfg = archive_config(services.bucket, topic, f"sink/{unique}/parquet/", compression="brotli",
                         compression_level=5)
    result = archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, window)
    assert result.manifest.restorable  # a codec and its level lose nothing
    [key] = final_objects(s3, cfg, topic)
    f = pq.ParquetFile(io.BytesIO(_body(s3, services.bucket, key)))
    assert {f.metadata.row_group(0).column(i).compression for i in range(f.metadata.num_columns)} == {"BROTLI"}
    assert f.read().column("value").to_pylist() == VALUES
