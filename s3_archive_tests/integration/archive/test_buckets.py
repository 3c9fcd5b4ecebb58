"""Spark's bucket column equals the pure Python one on the same rows, and survives partitionBy's directory names."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from s3_archive.archive.driver.bucket_column import bucket_column
from s3_archive.keys.buckets import BUCKET_COLUMN, bucket_from_staging_dir, record_bucket
from s3_archive.keys.layout import OutputLayout
from s3_archive.keys.objects import object_key, parse_object_key
from s3_archive.model.windows import OffsetWindow

BERLIN = OutputLayout.model_validate({
    "template": "{{topic}}/{{partition_by}}/{{topic}}+{{partition}}+{{start_offset}}-{{end_offset}}+{{part}}",
    "partition_by": [
        {"kind": "kafka_partition"},
        {"kind": "time", "timezone": "Europe/Berlin", "duration_seconds": 7200},
        {"kind": "value", "field": "order.region"},
        {"kind": "key", "field": "tenant", "hive": False},
        {"kind": "header", "header": "src"},
        {"kind": "time", "source": "value", "field": "ts", "path_format": "'vday'=yyyy-MM-dd"},
        {"kind": "time", "source": "header", "field": "ts", "path_format": "'hmin'=yyyyMMddHHmm",
         "duration_seconds": 900, "timezone": "Asia/Kolkata"},
    ],
})
NEW_YORK = OutputLayout.model_validate({
    "template": "{{topic}}/{{partition_by}}/{{timestamp:unit=yyyy}}{{timestamp:unit=MM}}{{timestamp:unit=dd}}"
                "{{timestamp:unit=HH}}/{{topic}}+{{partition}}+{{start_offset}}+{{part}}-{{key}}",
    "partition_by": [{"kind": "time", "path_format": "'day'=yyyy-MM-dd", "duration_seconds": 86400},
                     {"kind": "time", "path_format": "yyyy/MM/dd/HH", "duration_seconds": 3 * 3600},
                     {"kind": "key", "hive": False}],
    "timezone": "America/New_York",
})


def us(iso: str) -> int:
    return int(datetime.fromisoformat(iso).astimezone(UTC).timestamp() * 1_000_000)


DST_INSTANTS = [us(t) for t in (
    "2024-03-31T00:59:59+00:00", "2024-03-31T01:00:00+00:00", "2024-10-27T00:30:00+00:00",
    "2024-10-27T01:30:00+00:00", "2024-10-27T02:00:00+00:00", "2024-03-10T06:59:59+00:00",
    "2024-03-10T07:00:00+00:00", "2024-11-03T05:30:00+00:00", "2024-11-03T06:30:00+00:00",
    "2024-11-04T04:59:59.999999+00:00", "1969-12-31T23:59:59.999+00:00", "2024-01-01T00:00:00+00:00")]
SPECIAL = ["/", "=", "%", " ", "", "(null)", "é", "日本", ".", "..", "_x", "a+b*c~", "__HIVE_DEFAULT_PARTITION__",
           "a/b=c d%e", "\x01"]


def rows() -> list[dict]:
    out = []
    for i, ts in enumerate(DST_INSTANTS):
        ms = str(ts // 1000)
        out.append({"key": json.dumps({"tenant": SPECIAL[i % len(SPECIAL)]}).encode(),
                    "value": json.dumps({"order": {"region": SPECIAL[-i % len(SPECIAL)]}, "ts": int(ms)}).encode(),
                    "headers": [("src", SPECIAL[i % 5].encode()), ("ts", ms.encode())], "partition": i % 3,
                    "timestamp_us": ts})
    # missing fields and headers, nulls, non-JSON, non-UTF-8, numbers and nested values
    out += [
        {"key": None, "value": None, "headers": None, "partition": 0, "timestamp_us": DST_INSTANTS[0]},
        {"key": b"", "value": b"", "headers": [], "partition": 0, "timestamp_us": DST_INSTANTS[1]},
        {"key": b"\xff\x00k", "value": b"not json", "headers": [("src", None)], "partition": 0,
         "timestamp_us": DST_INSTANTS[2]},
        {"key": b'{"tenant": 42}', "value": b'{"order": {"region": {"a": [1, "\xc3\xa9"]}}, "ts": "x"}',
         "headers": [("src", b"\xfe"), ("src", b"last"), ("ts", b"1.5")], "partition": 1,
         "timestamp_us": DST_INSTANTS[3]},
        {"key": b'{"tenant": null}', "value": b'{"order": {"region": true}}', "headers": [("ts", b"-1")],
         "partition": 2, "timestamp_us": DST_INSTANTS[4]},
        {"key": b'{"tenant": ""}', "value": b'{"order": {}}', "headers": [("other", b"1")], "partition": 2,
         "timestamp_us": DST_INSTANTS[5]},
        {"key": b"[1]", "value": b'{"order": {"region": "\xff"}}', "headers": [("src", b"")], "partition": 2,
         "timestamp_us": DST_INSTANTS[6]},
    ]
    rnd = random.Random(4)
    for _ in range(40):  # random instants over two DST years, random values
        s = rnd.choice(SPECIAL) + rnd.choice(SPECIAL)
        out.append({"key": rnd.choice([None, s.encode(), bytes(rnd.randrange(256) for _ in range(3))]),
                    "value": json.dumps({"order": {"region": rnd.choice([s, None, 7])}}).encode(),
                    "headers": [("src", s.encode())], "partition": rnd.randrange(3),
                    "timestamp_us": rnd.randrange(us("2024-01-01T00:00:00+00:00"), us("2025-12-31T00:00:00+00:00"))})
    return out


@pytest.fixture
def odd_session_time_zone(spark):
    # Buckets must not depend on the Spark session's time zone.
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "Pacific/Chatham")
    yield
    spark.conf.set("spark.sql.session.timeZone", before)


@pytest.mark.parametrize("lay", [BERLIN, NEW_YORK], ids=["berlin", "new_york"])
def test_spark_bucket_equals_python_and_survives_partition_by(spark, odd_session_time_zone, tmp_path: Path, lay):
    data = rows()
    df = spark.createDataFrame(
        [(r["key"], r["value"], r["headers"], r["partition"], i, r["timestamp_us"]) for i, r in enumerate(data)],
        "key binary, value binary, headers array<struct<key:string,value:binary>>, partition int, offset long, "
        "ts long",
    ).withColumn("timestamp", F.timestamp_micros("ts")).withColumn("topic", F.lit("orders"))
    got = {r["offset"]: r[BUCKET_COLUMN] for r in df.select("offset", bucket_column(lay)).collect()}
    expected = {i: record_bucket(lay, r) for i, r in enumerate(data)}
    assert got == expected
    assert len(set(expected.values())) > 10  # the rows really spread over many buckets

    out = tmp_path / "staged"
    df.select(bucket_column(lay), "offset").write.partitionBy(BUCKET_COLUMN).parquet(out.as_uri())
    dirs = [p.name for p in out.iterdir() if p.is_dir()]
    assert sorted(bucket_from_staging_dir(d, BUCKET_COLUMN) for d in dirs) == sorted(set(expected.values()))

    # every bucket names one object per part, and the key parses back to the window and the bucket's values
    w = OffsetWindow(0, 0, len(data))
    keys = {object_key("pre/", "orders", w, 0, ".parquet", lay, b) for b in set(expected.values())}
    assert len(keys) == len(set(expected.values()))
    for k in keys:
        v = parse_object_key(lay, "pre/", k, ".parquet")
        assert (v["topic"], v["partition"], v["start_offset"]) == ("orders", 0, 0)
