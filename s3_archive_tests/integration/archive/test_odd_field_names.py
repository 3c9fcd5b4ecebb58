"""`value_decoding: json` with payload field names Spark cannot resolve as they are: two that differ only in case, a
backtick, a dot, an envelope column's name in another case. The window archives, its records read back byte for
byte, each decoded column holds its field, and the catalog's column is the stored one; real broker, Spark, moto."""

from __future__ import annotations

import gzip
import io
import json

import pyarrow.parquet as pq
import pytest

from s3_archive.archive.driver.coordinator import archive_window
from s3_archive.catalog.tables import decoded_columns
from s3_archive.model.columns import SOURCE_FIELD
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.sources import window_batches
from s3_archive_tests.integration.archive_helpers import archive_config, final_objects, log, staging_objects
from s3_archive_tests.kafka_helpers import create_topic, produce

VALUES = [
    b'{"id": 1, "ID": "one", "a`b": 2, "a.b": 3, "Offset": 7, "o": {"x": 1, "X": 2}}',
    b'{"ID": "two", "id": 2}',
    b"not json",  # a dead letter
    b'{"ID": "three"}',
    b'{"k": 1, "k": 2}',  # the same name twice is no JSON object Spark takes (try_parse_json): a dead letter
]


@pytest.fixture(scope="module")
def odd_topic_and_records(kafka):
    topic = create_topic(kafka, "odd-names")
    return topic, produce(kafka, topic, [(0, f"k{i}".encode(), v, [("h", b"1")]) for i, v in enumerate(VALUES)])


def _read_back(s3, bucket, window, manifest) -> list[tuple]:
    return [(r[1], r[2], r[3], tuple(r[4]), r[5]) for b in window_batches(s3, bucket, window, manifest)
            for r in b.rows()]


def test_fields_differing_only_in_case_or_holding_a_backtick_archive_and_read_back(odd_topic_and_records, kafka, s3,
                                                                                   services, spark, read_path):
    topic, produced = odd_topic_and_records
    case_sensitive = spark.conf.get("spark.sql.caseSensitive")
    cfg = archive_config(services.bucket, topic, "odd/parquet/", value_decoding={"type": "json",
                                                                                 "on_error": "dead_letter"}, read_path=read_path)
    window = OffsetWindow(0, 0, len(VALUES))
    m = archive_window(spark, kafka, s3, cfg, topic, window, log).manifest
    assert spark.conf.get("spark.sql.caseSensitive") == case_sensitive  # the session is left as it was
    assert m.record_count == len(VALUES) and m.undecodable_records == 2
    [key] = final_objects(s3, cfg, topic)
    t = pq.read_table(io.BytesIO(s3.get_object(Bucket=cfg.bucket, Key=key)["Body"].read()))
    assert t.column("offset").to_pylist() == [0, 1, 3]
    assert t.column("value").to_pylist() == [VALUES[0], VALUES[1], VALUES[3]]  # the raw value, unchanged
    # `id` keeps its name, `ID` is stored as `id_2` (the catalog's name for it); odd but distinct names are kept
    assert t.column("id").to_pylist() == [1, 2, None]
    assert t.column("id_2").to_pylist() == ["one", "two", "three"]
    assert t.column("a`b").to_pylist() == [2, None, None] and t.column("a.b").to_pylist() == [3, None, None]
    assert t.column("offset_2").to_pylist() == [7, None, None]  # `Offset`: the envelope's offset after case folding
    assert t.column("o").to_pylist()[0] == {"x": 1, "X": 2}  # nested fields are not resolved by name: kept
    # every record back, in offset order, byte for byte (the dead letter merged in by offset)
    assert _read_back(s3, cfg.bucket, window, m) == [(r.offset, r.key, r.value, r.headers, r.timestamp_ms)
                                                     for r in produced]
    assert staging_objects(s3, cfg, topic) == []
    # the manifest's schema says which field a renamed column holds, and the catalog's columns are the stored ones
    fields = {f["name"]: f["metadata"] for f in json.loads(m.spark_schema)["fields"]}
    assert fields["id_2"] == {SOURCE_FIELD: "ID"} and fields["offset_2"] == {SOURCE_FIELD: "Offset"}
    assert fields["id"] == {}
    cols = {c["Name"]: c["Comment"] for c in decoded_columns(cfg, {"m": m.spark_schema})[0]}
    assert {"id", "id_2", "offset_2"} <= set(cols) and '"ID"' in cols["id_2"] and '"Offset"' in cols["offset_2"]


def test_a_given_schema_with_such_names_and_a_prefix_archives_as_jsonl(odd_topic_and_records, kafka, s3, services,
                                                                       spark, read_path):
    topic, produced = odd_topic_and_records
    cfg = archive_config(services.bucket, topic, "odd/jsonl/", format="jsonl", compression="gzip",
                         value_decoding={"type": "json", "json_schema": "`id` BIGINT, `ID` STRING, `a``b` BIGINT",
                                         "column_prefix": "v_"}, read_path=read_path)
    window = OffsetWindow(0, 0, 2)  # on_error fail: the window without the record that is not JSON
    m = archive_window(spark, kafka, s3, cfg, topic, window, log).manifest
    [key] = final_objects(s3, cfg, topic)
    rows = [json.loads(line) for line in gzip.decompress(s3.get_object(Bucket=cfg.bucket, Key=key)["Body"].read())
            .decode().splitlines()]
    assert [(r["v_id"], r["v_id_2"], r["v_a`b"]) for r in rows] == [(1, "one", 2), (2, "two", None)]
    assert _read_back(s3, cfg.bucket, window, m) == [(r.offset, r.key, r.value, r.headers, r.timestamp_ms)
                                                     for r in produced[:2]]
