"""The task batches of `read_path: librdkafka` (executor/task_columns.py: csv and JSON lines, buckets, dead letters)
equal what Spark's expressions compute from the same envelope (driver/spark_job.py::write_frame), column by column
and value by value, over awkward records: unicode, control characters, quotes, commas, newlines, null and empty
keys and values, headers with empty or duplicate names and null values, binary, big and negative numbers in JSON,
timestamps before the epoch and across a daylight-saving change; a csv or JSON line is Spark's followed by its line
end (encoders.py::line_end: the task renders it with the line). Real PySpark, no Kafka: the envelope is the same
Arrow batch on both sides (test_read_paths.py compares whole objects read from a real broker)."""

from __future__ import annotations

import json
from datetime import UTC

import pyarrow as pa
import pytest

from s3_archive.archive.driver.output import Output
from s3_archive.archive.driver.spark_job import write_frame
from s3_archive.archive.driver.task_read_job import computed_in_task, line_plan
from s3_archive.archive.executor.encoders import line_end
from s3_archive.archive.executor.kafka_read import ENVELOPE_SCHEMA
from s3_archive.archive.executor.task_columns import task_batch
from s3_archive.archive.protocol import ENVELOPE_DDL, JobTemplate, WriteJob
from s3_archive_tests.integration.archive_helpers import archive_config

JSON_VALUE = json.dumps({"region": "eu/west \"1\", ✓", "n": -123456789012345678, "big": 12345678901234567890123,
                         "f": -1.5e300, "t": 1710054000000, "nested": {"a": [1, None, "x"]}, "empty": ""},
                        ensure_ascii=False).encode()
MS_DST = 1710052200000  # 2024-03-10 01:30 America/New_York, half an hour before the clocks go forward
RECORDS = [  # key, value, headers, timestamp (ms)
    (b"\x00\xff\x10binary-key", b"\x00\x01\x02\xfe\xff", [("dup", b"1"), ("dup", b"2"), ("nul", None)], 0),
    (None, b"null key", None, -1),
    (b"tombstone", None, [("h", b"")], 1),
    (b"", b"", [("", b"empty header name")], 999),
    ("ключ".encode(), "значение ✓ \u2028 😀".encode(), [("ü", "ö".encode())], 1700000000123),
    (None, None, [("only", None), ("only", None)], MS_DST),
    (b'he said "hi", then\nleft', b'a,b;c:d "q" \\ \t\r\n\x01\x1f\x7f end', [('na"me\n,', b"\x00\xff")],
     MS_DST + 3_600_000),
    (b'{"id": 7, "tenant": "a b"}', JSON_VALUE, [("ts", b"1700000000000"), ("region", b"eu")], 2**41),
    (b'{"id": "x/y"}', b'{"region": null, "t": "not ms", "n": 1.50}', [("ts", b"-5")], 1700000000000),
    (b"k", b"not json {", [("ts", b"\xff")], 1700000000001),
    (b"k", b'["array", 1]', None, 1700000000002),
    (b" lead and trail ", b"  ", [("dup", None)], 1700000003600),
]


def _envelope() -> pa.RecordBatch:
    n = len(RECORDS)
    headers = [None if h is None else [{"key": k, "value": v} for k, v in h] for _, _, h, _ in RECORDS]
    return pa.RecordBatch.from_arrays([
        pa.array([k for k, *_ in RECORDS], pa.binary()),
        pa.array([v for _, v, *_ in RECORDS], pa.binary()),
        pa.array(headers, ENVELOPE_SCHEMA.field("headers").type),
        pa.array(["the topic"] * n, pa.string()),
        pa.array([3] * n, pa.int32()),
        pa.array(range(100, 100 + n), pa.int64()),
        pa.array([t * 1000 for *_, t in RECORDS], pa.timestamp("us", tz="UTC")),
        pa.array([0] * n, pa.int32()),
    ], schema=ENVELOPE_SCHEMA)


def _rows(env: pa.RecordBatch) -> list[tuple]:
    """The envelope as Spark rows (timestamps as aware datetimes: no local time zone in between)."""
    return [(k, v, None if h is None else [(x["key"], x["value"]) for x in h], t, p, o, ts.astimezone(UTC), tt)
            for k, v, h, t, p, o, ts, tt in zip(*[c.to_pylist() for c in env.columns], strict=True)]


TEMPLATE = "{{topic}}/{{partition_by}}/{{topic}}+{{partition}}+{{start_offset}}+{{part}}"
CASES = {
    "csv-every-field": {"format": "csv", "csv_fields": ["key", "value", "offset", "timestamp", "headers"]},
    "csv-value-text": {"format": "csv", "csv_fields": ["key", "offset", "value"],
                       "sink_output": {"value": "text", "csv_header": True}},
    "csv-only-value-text": {"format": "csv", "csv_fields": ["value"], "sink_output": {"value": "text"}},
    "jsonl": {"format": "jsonl"},
    "json-utf8-dead-letters": {"format": "json", "value_decoding": {"type": "utf8", "on_error": "dead_letter"}},
    "jsonl-no-metadata": {"format": "jsonl", "envelope": {"metadata": False}},
    "jsonl-only-metadata": {"format": "jsonl", "envelope": {"key": False, "value": False, "headers": False}},
    "layout-key-and-headers": {"layout": {"template": TEMPLATE, "partition_by": [
        {"kind": "kafka_partition"}, {"kind": "key", "hive": False}, {"kind": "header", "header": "dup"},
        {"kind": "header", "header": "only", "name": "only"}]}},
    "layout-fields": {"layout": {"template": TEMPLATE, "partition_by": [
        {"kind": "value", "field": "region"}, {"kind": "value", "field": "nested"},
        {"kind": "value", "field": "n", "hive": False}, {"kind": "key", "field": "id"},
        {"kind": "value", "field": "f"}, {"kind": "value", "field": "big"}, {"kind": "value", "field": "empty"}]}},
    "layout-times": {"format": "jsonl", "layout": {"template": TEMPLATE, "timezone": "America/New_York",
                                                   "partition_by": [
        {"kind": "time", "path_format": "yyyy/MM/dd/HH/mm"},
        {"kind": "time", "source": "value", "field": "t", "timezone": "Asia/Kolkata",
         "path_format": "'d'=yyyy-MM-dd/'h'=HH", "duration_seconds": 7200},
        {"kind": "time", "source": "header", "field": "ts", "timezone": "UTC", "path_format": "yyyyMMdd"}]}},
    "layout-template-slots": {"format": "csv", "csv_fields": ["key", "value"], "layout": {
        "template": "{{topic}}/{{timestamp:unit=yyyy}}{{timestamp:unit=MM}}/{{timestamp:unit=dd}}/"
                    "{{timestamp:unit=HH}}/{{topic}}+{{partition}}+{{start_offset}}+{{part}}-{{key}}",
        "timezone": "Europe/Berlin", "partition_by": []}},
    "layout-missing-dead-letters-skip-tombstones": {
        "value_decoding": {"type": "utf8", "on_error": "dead_letter"},
        "sink_output": {"skip_tombstones": True},
        "layout": {"template": TEMPLATE, "on_missing": "dead_letter", "partition_by": [
            {"kind": "value", "field": "region"}, {"kind": "header", "header": "ts"}]}},
}


@pytest.mark.parametrize("case", CASES)
def test_task_batches_equal_sparks_columns(case, spark):
    out = Output.of(archive_config("test-bucket", "t", "p/", read_path="librdkafka", **CASES[case]))
    assert computed_in_task(out)
    env = _envelope()
    df = spark.createDataFrame(_rows(env), ENVELOPE_DDL).coalesce(1)
    frame, shape = write_frame(df, out, None)
    job = WriteJob.of(JobTemplate(topic="t", bucket="b", prefix="p/", conn=None), shape,  # type: ignore[arg-type]
                      task_schema=frame.schema.json(), lines=line_plan(out))
    mine = task_batch(job, env)
    assert mine.schema.names == frame.columns and mine.num_rows == len(RECORDS)
    # Every record's internal columns (order, bucket, dead letters); every column of the records that are written
    # (an undecodable value's line or text is never written: Spark keeps its invalid bytes, the task a null).
    internal = [c for c in frame.columns if c.startswith("_") and c != "_line"]
    theirs = frame.select(*internal).toArrow()
    for name in internal:
        assert mine.column(name).to_pylist() == theirs.column(name).to_pylist(), name
    if "_good" in frame.columns:
        frame, mine = frame.where("_good"), mine.filter(mine.column("_good"))
    theirs = frame.toArrow()
    assert mine.num_rows == theirs.num_rows > 0
    for name in frame.columns:
        expected = theirs.column(name).to_pylist()
        if name == "_line" and job.lines is not None:  # the task renders a csv or JSON line with its end
            expected = [None if v is None else v + line_end(job.fmt.name) for v in expected]
        assert mine.column(name).to_pylist() == expected, name
