"""Every format x codec round-trips through an independent reader (pyarrow, fastavro, json, csv)."""

from __future__ import annotations

import base64
import bz2
import csv
import gzip
import io
import json

import fastavro
import pytest

from s3_archive.archive.driver.archive_run import ArchiveContext
from s3_archive.archive.driver.coordinator import archive_window
from s3_archive.model.formats import FORMATS
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.integration.archive_helpers import archive_config, final_objects, log
from s3_archive_tests.kafka_helpers import Rec, create_topic, parquet_records, produce

RECORDS = [
    (b"\x00\xffk", b"\x00\x01v", [("dup", b"1"), ("dup", b"2"), ("nul", None)]),
    (None, b"null key", []),
    (b"tomb", None, [("h", b"")]),
    (b"e", b"", []),
    ("ключ".encode(), "значение, \"quoted\"\nnewline".encode(), [("ü", "ö".encode())]),
]
COMBOS = [(f, c) for f, spec in FORMATS.items() for c in spec.codecs if f != "bytes" and not spec.table]


def _decompress(data: bytes, key: str) -> bytes:
    if key.endswith(".gz"):
        return gzip.decompress(data)
    if key.endswith(".bz2"):
        return bz2.decompress(data)
    if key.endswith(".zst"):
        from backports import zstd

        return zstd.decompress(data)
    return data


def _avro(data: bytes) -> list[Rec]:
    out = []
    for r in fastavro.reader(io.BytesIO(data)):
        ts = r["timestamp"]
        out.append(Rec(r["partition"], r["offset"], r["key"], r["value"],
                       tuple((h["key"], h["value"]) for h in r["headers"] or []), round(ts.timestamp() * 1000)))
    return out


def _json_rec(r: dict) -> Rec:
    from datetime import datetime

    b64 = lambda v: None if v is None else base64.b64decode(v)  # noqa: E731
    return Rec(r["partition"], r["offset"], b64(r["key"]), b64(r["value"]),
               tuple((h["key"], b64(h.get("value"))) for h in r["headers"] or []),
               round(datetime.fromisoformat(r["timestamp"]).timestamp() * 1000))


def _jsonl(data: bytes) -> list[Rec]:
    return [_json_rec(r) for r in map(json.loads, data.decode().splitlines())]


def _json_array(data: bytes) -> list[Rec]:
    doc = json.loads(data)
    assert isinstance(doc, list)
    return [_json_rec(r) for r in doc]


@pytest.fixture(scope="module")
def topic_and_records(kafka):
    topic = create_topic(kafka, "formats-matrix")
    return topic, produce(kafka, topic, [(0, k, v, h) for k, v, h in RECORDS])


@pytest.mark.parametrize("fmt,codec", COMBOS)
def test_format_and_codec_round_trip(fmt, codec, topic_and_records, kafka, s3, services, spark, read_path):
    topic, produced = topic_and_records
    cfg = archive_config(services.bucket, topic, f"formats/{fmt}-{codec}/", format=fmt, compression=codec, read_path=read_path)
    result = archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic,
                            OffsetWindow(0, 0, len(RECORDS)))
    [key] = final_objects(s3, cfg, topic)
    assert key.endswith(FORMATS[fmt].object_suffix(codec))
    data = _decompress(s3.get_object(Bucket=cfg.bucket, Key=key)["Body"].read(), key)
    assert result.manifest.record_count == len(RECORDS)

    if fmt == "parquet":
        assert parquet_records(data) == produced
    elif fmt == "avro":
        assert _avro(data) == produced
    elif fmt == "jsonl":
        assert _jsonl(data) == produced
    elif fmt == "json":
        assert _json_array(data) == produced
    elif fmt == "csv":
        rows = list(csv.reader(io.StringIO(data.decode())))
        expected = []
        for r in produced:
            b64 = lambda v: "" if v is None else base64.b64encode(v).decode()  # noqa: E731
            headers = ";".join(f"{base64.b64encode(k.encode()).decode()}:{b64(v)}" for k, v in r.headers)
            expected.append([b64(r.key), b64(r.value), str(r.offset), str(r.timestamp_ms), headers])
        assert rows == expected
    else:  # text: one value per line, as UTF-8
        assert data.decode() == "".join(f"{(r.value or b'').decode()}\n" for r in produced)


def test_csv_fields_choose_and_order_the_columns(topic_and_records, kafka, s3, services, spark, read_path):
    topic, produced = topic_and_records
    cfg = archive_config(services.bucket, topic, "formats/csv-fields/", format="csv",
                         csv_fields=["offset", "value"], read_path=read_path)
    archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, OffsetWindow(0, 0, len(RECORDS)))
    [key] = final_objects(s3, cfg, topic)
    rows = list(csv.reader(io.StringIO(s3.get_object(Bucket=cfg.bucket, Key=key)["Body"].read().decode())))
    assert rows == [[str(r.offset), "" if r.value is None else base64.b64encode(r.value).decode()] for r in produced]


def test_bytes_is_one_object_per_record_named_by_offset(topic_and_records, kafka, s3, services, spark, read_path):
    topic, produced = topic_and_records
    cfg = archive_config(services.bucket, topic, "formats/bytes/", format="bytes", read_path=read_path)
    window = OffsetWindow(0, 0, len(RECORDS))
    result = archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, window)
    keys = sorted(final_objects(s3, cfg, topic))
    assert [k.rsplit("+", 1)[1] for k in keys] == [f"{r.offset:019d}.bin" for r in produced]
    # the value's bytes, nothing else; a tombstone is an empty object
    assert [s3.get_object(Bucket=cfg.bucket, Key=k)["Body"].read() for k in keys] == [r.value or b"" for r in produced]
    assert [o.key for o in result.manifest.objects] == keys
    assert not result.manifest.restorable
    again = archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, window)
    assert again.outcome == "already_committed"


def test_avro_writer_schema_is_the_one_sparks_avro_writer_derives(spark, tmp_path):
    """Our avro objects' writer schema is the one Spark's avro writer would put in the header (the Glue table's
    literal is read from it), for the envelope and decoded value types: the same types, logical types and full
    names (compared parsed: Avro may spell a full name as `name` + `namespace`)."""
    from s3_archive.model.registry_types import avro_schema

    df = spark.sql("""SELECT CAST('k' AS BINARY) AS key, CAST(NULL AS BINARY) AS value,
        array(named_struct('key', 'h', 'value', CAST('v' AS BINARY))) AS headers, 't' AS topic, 0 AS partition,
        CAST(1 AS BIGINT) AS offset, TIMESTAMP '2024-01-01 00:00:00' AS timestamp, 0 AS timestamp_type,
        named_struct('a', 1.5D, 'b', array(true), 'c', named_struct('d', DATE '2024-01-02')) AS v_obj,
        map('x', 1) AS v_map, CAST(1.25 AS DECIMAL(12, 2)) AS v_dec, CAST(2 AS SMALLINT) AS v_short""")
    df.write.format("avro").save(str(tmp_path / "spark"))
    [path] = (tmp_path / "spark").glob("part-*.avro")
    with open(path, "rb") as f:
        spark_schema = json.loads(fastavro.reader(f).metadata["avro.schema"])
    assert fastavro.parse_schema(json.loads(avro_schema(df.schema.json()))) == fastavro.parse_schema(spark_schema)
