"""Envelope selection, value decoding with the dead-letter prefix, and rotation by records and bytes, through
the real broker, Spark and moto."""

from __future__ import annotations

import io
import json
import time

import fastavro
import pyarrow.parquet as pq
import pytest

from s3_archive.archive.driver.archive_run import ArchiveContext
from s3_archive.archive.driver.coordinator import archive_window
from s3_archive.io.s3 import list_objects
from s3_archive.keys.buckets import join_bucket
from s3_archive.keys.objects import DEAD_LETTER, STAGING, object_key, parse_object_key
from s3_archive.keys.values import encode_value
from s3_archive.model.errors import UndecodableValue
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.integration.archive_helpers import (
    archive_config,
    final_objects,
    log,
    manifest,
    staging_objects,
)
from s3_archive_tests.kafka_helpers import create_topic, open_producer, parquet_codecs, parquet_records, produce

VALUES = [
    b'{"id": 1, "name": "a", "tags": ["x"]}',
    b"\xff\xfe not utf-8",
    b'{"id": 2, "extra": {"deep": true}}',
    b"[1, 2, 3]",                      # JSON, but not an object
    None,                              # tombstone: decodes (to nulls)
    b"not json at all",
    b'{"id": "three", "name": null}',  # id's type varies between records: kept as text
]


def _table(s3, bucket, key):
    return pq.read_table(io.BytesIO(s3.get_object(Bucket=bucket, Key=key)["Body"].read()))


@pytest.fixture(scope="module")
def json_topic_and_records(kafka):
    topic = create_topic(kafka, "decode")
    return topic, produce(kafka, topic, [(0, f"k{i}".encode(), v, [("h", b"1")]) for i, v in enumerate(VALUES)])


def test_inferred_json_fields_become_columns_and_bad_values_go_to_dead_letter(json_topic_and_records, kafka, s3,
                                                                              services, spark, read_path):
    topic, produced = json_topic_and_records
    cfg = archive_config(services.bucket, topic, "opts/json-dlq/",
                         value_decoding={"type": "json", "on_error": "dead_letter", "column_prefix": "v_"}, read_path=read_path)
    window = OffsetWindow(0, 0, len(VALUES))
    result = archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, window)
    m = result.manifest
    assert m.record_count == len(VALUES) and m.undecodable_records == 3
    assert m.absent_offsets == [] and m.absent_offset_count == 0  # dead letters are not gaps
    [key] = final_objects(s3, cfg, topic)
    t = _table(s3, cfg.bucket, key)
    assert t.column("offset").to_pylist() == [0, 2, 4, 6]
    assert t.column("value").to_pylist() == [VALUES[0], VALUES[2], None, VALUES[6]]  # raw value kept
    codecs = parquet_codecs(s3.get_object(Bucket=cfg.bucket, Key=key)["Body"].read())
    assert codecs.pop("value") == "ZSTD" and set(codecs.values()) == {"SNAPPY"}  # the raw copy zstd, the rest snappy
    assert t.column("v_id").to_pylist() == ["1", "2", None, "three"]  # mixed types: as text
    assert t.column("v_name").to_pylist() == ["a", None, None, None]
    assert t.column("v_extra").to_pylist()[1] == {"deep": True}
    [dead] = [o.key for o in m.dead_letter_objects]
    assert dead.startswith(f"{cfg.prefix}{DEAD_LETTER}/{topic}/kafka_partition=0/")
    assert parquet_records(s3.get_object(Bucket=cfg.bucket, Key=dead)["Body"].read()) == [produced[i] for i in (1, 3, 5)]
    assert staging_objects(s3, cfg, topic) == []


def test_avro_holds_the_records_parquet_holds_with_decoded_values(json_topic_and_records, kafka, s3, services, spark,
                                                                  read_path):
    """The columnar avro encoder (archive/executor/avro_encoding.py) on the types Spark infers from JSON values (nested
    records, arrays, nulls, text): fastavro reads back the rows that the Parquet object of the same window holds."""
    topic, _ = json_topic_and_records
    decoding = {"type": "json", "on_error": "dead_letter", "column_prefix": "v_"}
    rows = {}
    for fmt in ("parquet", "avro"):
        cfg = archive_config(services.bucket, topic, f"opts/json-{fmt}/", format=fmt, value_decoding=decoding, read_path=read_path)
        archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, OffsetWindow(0, 0, len(VALUES)))
        [key] = final_objects(s3, cfg, topic)
        body = io.BytesIO(s3.get_object(Bucket=cfg.bucket, Key=key)["Body"].read())
        rows[fmt] = pq.read_table(body).to_pylist() if fmt == "parquet" else list(fastavro.reader(body))
    assert [r["offset"] for r in rows["avro"]] == [0, 2, 4, 6]
    assert rows["avro"][1]["v_extra"] == {"deep": True} and rows["avro"][0]["v_tags"] == ["x"]
    assert rows["avro"] == rows["parquet"]


def test_given_json_schema_types_the_columns(json_topic_and_records, kafka, s3, services, spark, read_path):
    topic, _ = json_topic_and_records
    cfg = archive_config(services.bucket, topic, "opts/json-schema/", envelope={"value": False, "headers": False},
                         value_decoding={"type": "json", "json_schema": "id BIGINT, name STRING",
                                         "on_error": "dead_letter"}, read_path=read_path)
    archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, OffsetWindow(0, 0, len(VALUES)))
    [key] = final_objects(s3, cfg, topic)
    t = _table(s3, cfg.bucket, key)
    assert t.column_names == ["key", "topic", "partition", "offset", "timestamp", "timestamp_type", "id", "name"]
    assert t.column("id").to_pylist() == [1, 2, None, None]  # "three" is no BIGINT: null, raw value not kept
    assert str(t.schema.field("id").type) == "int64"


def test_undecodable_fails_by_default_naming_the_offset_and_commits_nothing(json_topic_and_records, kafka, s3, services,
                                                                            spark, read_path):
    topic, _ = json_topic_and_records
    cfg = archive_config(services.bucket, topic, "opts/json-fail/", value_decoding={"type": "utf8"}, read_path=read_path)
    window = OffsetWindow(0, 0, len(VALUES))
    with pytest.raises(UndecodableValue, match=rf"topic '{topic}' partition 0: 1 record\(s\).*offset 1\b.*dead_letter"):
        archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, window)
    assert manifest(s3, cfg, topic, window) is None
    assert final_objects(s3, cfg, topic) == {} and staging_objects(s3, cfg, topic) == []
    ok = archive_config(services.bucket, topic, "opts/utf8/", value_decoding={"type": "utf8"}, read_path=read_path)
    archive_window(ArchiveContext.of_client(spark, kafka, s3, log), ok, topic, OffsetWindow(0, 2, 3))
    [key] = final_objects(s3, ok, topic)
    assert _table(s3, ok.bucket, key).column("value").to_pylist() == [VALUES[2].decode()]


def test_envelope_without_metadata_still_records_gaps_from_kafka(kafka, s3, services, spark, unique, read_path):
    topic = create_topic(kafka, f"env-{unique}", config={"cleanup.policy": "compact"})
    produce(kafka, topic, [(0, b"k", b"v", [])])
    cfg = archive_config(services.bucket, topic, "opts/env/", envelope={"metadata": False, "headers": False}, read_path=read_path)
    # offsets [0, 1) exist; ask for exactly that and check the columns
    result = archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, OffsetWindow(0, 0, 1))
    [key] = final_objects(s3, cfg, topic)
    assert _table(s3, cfg.bucket, key).column_names == ["key", "value"]
    assert result.manifest.envelope == ["key", "value"] and not result.manifest.restorable


@pytest.fixture(scope="module")
def sized_topic_and_records(kafka):
    topic = create_topic(kafka, "rotate")
    # 40 records, values of 100..4000 bytes: uneven sizes exercise the byte cap
    return topic, produce(kafka, topic, [(0, None, bytes([65 + i % 26]) * (100 * (i + 1)), []) for i in range(40)])


def _parts(s3, cfg, topic):
    return [(k, _table(s3, cfg.bucket, k)) for k in sorted(final_objects(s3, cfg, topic))]


def test_byte_cap_rotation_is_deterministic_and_ordered(sized_topic_and_records, kafka, s3, services, spark, read_path):
    topic, produced = sized_topic_and_records
    cap = 10_000
    cfg = archive_config(services.bucket, topic, "opts/bytes-cap/", max_bytes_per_object=cap, read_path=read_path)
    window = OffsetWindow(0, 0, 40)
    archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, window)
    parts = _parts(s3, cfg, topic)
    assert [k for k, _ in parts] == [object_key(cfg.prefix, topic, window, i, ".parquet")
                                     for i in range(len(parts))]
    offsets = [o for _, t in parts for o in t.column("offset").to_pylist()]
    assert offsets == list(range(40))  # every record once, in order across parts
    # Record i goes to part floor(bytes before i / cap): a part ends with the record that crosses the next
    # multiple of the cap (flush.size-like rotation, computable per record, so the same on every run).
    expected: list[list[int]] = []
    before = 0
    for r in produced:
        k = before // cap
        while len(expected) <= k:
            expected.append([])
        expected[k].append(r.offset)
        before += len(r.value)
    expected = [p for p in expected if p]
    assert all(sum(len(produced[o].value) for o in p[:-1]) < cap for p in expected)
    assert [t.column("offset").to_pylist() for _, t in parts] == expected
    # the same window archived again elsewhere gives the same parts
    cfg2 = archive_config(services.bucket, topic, "opts/bytes-cap-2/", max_bytes_per_object=cap, read_path=read_path)
    archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg2, topic, window)
    assert [t.column("offset").to_pylist() for _, t in _parts(s3, cfg2, topic)] == expected


def test_json_array_with_record_cap_gives_one_valid_array_per_object(sized_topic_and_records, kafka, s3, services,
                                                                     spark, read_path):
    topic, _ = sized_topic_and_records
    cfg = archive_config(services.bucket, topic, "opts/json-cap/", format="json", compression="gzip",
                         max_records_per_object=15, max_bytes_per_object=60_000, read_path=read_path)
    archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, OffsetWindow(0, 0, 40))
    import gzip

    docs = [json.loads(gzip.decompress(s3.get_object(Bucket=cfg.bucket, Key=k)["Body"].read()))
            for k in sorted(final_objects(s3, cfg, topic))]
    assert all(isinstance(d, list) and 0 < len(d) <= 15 for d in docs)
    assert [r["offset"] for d in docs for r in d] == list(range(40))
    assert len(docs) > 3  # the byte cap split some parts before 15 records
    assert not [o for o in list_objects(s3, cfg.bucket, f"{cfg.prefix}{STAGING}/")]


LAYOUT = {
    "template": "{{topic}}/{{partition_by}}/{{topic}}+{{partition}}+{{start_offset}}+{{part}}",
    "partition_by": [{"kind": "time", "path_format": "'day'=yyyy-MM-dd", "timezone": "Europe/Berlin",
                      "duration_seconds": 86400},
                     {"kind": "value", "field": "region"}],
}
# 2024-03-30T23:30Z is already 03-31 in Berlin; regions include characters that need encoding, and a missing one
TIMED = [(1711841400000, "eu/west"), (1711841400000, "us"), (1711756800000, "eu/west"), (1711841401000, "a b=c"),
         (1711756800001, None), (1711841402000, "eu/west")]


def test_layout_template_and_partitioners_bucket_a_window(kafka, s3, services, spark, unique, read_path):
    from s3_archive.config.archive import ArchiveConfig

    topic = create_topic(kafka, f"layout-{unique}", config={"retention.ms": "-1"})  # the timestamps are from 2024
    values = [json.dumps({"region": r} if r is not None else {}).encode() for _, r in TIMED]
    produced = produce(kafka, topic, [(0, b"k", v, []) for v in values], timestamps=[t for t, _ in TIMED])
    cfg = archive_config(services.bucket, topic, "opts/layout/", layout=LAYOUT, max_records_per_object=1, read_path=read_path)
    assert isinstance(cfg, ArchiveConfig) and cfg.layout is not None
    window = OffsetWindow(0, 0, len(TIMED))
    # an object a crashed earlier attempt left in a bucket this attempt will not write: must be removed
    bucket = join_bucket([encode_value("day=2024-01-01"), encode_value("gone")])
    stale = object_key(cfg.prefix, topic, window, 0, ".parquet", cfg.layout, bucket)
    s3.put_object(Bucket=cfg.bucket, Key=stale, Body=b"stale")
    result = archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, window)
    keys = sorted(final_objects(s3, cfg, topic))
    assert stale not in keys and len(keys) == len(TIMED)  # one record per part
    by_key = {k: _table(s3, cfg.bucket, k).column("offset").to_pylist() for k in keys}
    assert sorted(o for offs in by_key.values() for o in offs) == list(range(len(TIMED)))
    for k, offs in by_key.items():
        v = parse_object_key(cfg.layout, cfg.prefix, k, ".parquet")
        assert (v["topic"], v["partition"], v["start_offset"]) == (topic, 0, 0)
        [o] = offs
        ts, region = TIMED[o]
        day = "2024-03-31" if ts >= 1711839600000 else "2024-03-30"  # Berlin midnight = 2024-03-30T23:00Z
        assert v["partition_by"] == [f"day={day}", region]
    assert f"{cfg.prefix}{topic}/day=2024-03-31/region=eu%2Fwest/" in "".join(keys)
    assert sorted(o.key for o in result.manifest.objects) == keys
    assert produced  # the records above are the produced ones


def test_a_window_with_no_committed_record_through_rotation_commits_empty(kafka, s3, services, spark, unique,
                                                                          read_path):
    """All records aborted: an empty read through a window function must not lose the window's statistics
    (adaptive execution used to drop them, and the run waited forever)."""
    topic = create_topic(kafka, f"aborted-{unique}")
    with open_producer(kafka, **{"transactional.id": f"aborted-{unique}"}) as producer:
        producer.init_transactions(30)
        producer.begin_transaction()
        for i in range(3):
            producer.produce(topic, value=b"x", partition=0)
        producer.flush(30)  # abort purges what is still queued: get the records into the log first
        producer.abort_transaction(30)
    # The coordinator writes the abort marker after it answers: wait for it to reach the log.
    deadline = time.monotonic() + 15
    while (end := kafka.offsets(topic, "latest")[0]) < 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert end == 4  # 3 aborted records + the abort marker
    for fmt, extra in (("parquet", {"max_records_per_object": 2}), ("json", {})):
        cfg = archive_config(services.bucket, topic, f"opts/aborted-{fmt}/", format=fmt, **extra, read_path=read_path)
        result = archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, OffsetWindow(0, 0, end))
        assert result.manifest.record_count == 0 and result.manifest.objects == []
        assert result.manifest.absent_offsets == [[0, end]]
