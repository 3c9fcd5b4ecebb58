"""The archive asset over Spark Connect: `SparkResource(remote="sc://127.0.0.1:<port>")` against a real Connect
server started from pyspark's own bundle with the project's jars. Each run is a fresh process (runner.py); the
output is read back here with boto3 and pyarrow."""

from __future__ import annotations

import io
import json

import pyarrow.parquet as pq

from s3_archive.keys.objects import DEAD_LETTER, object_key, parse_object_key
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.credentials import TEST_AWS
from s3_archive_tests.integration.archive_helpers import (
    archive_config,
    archived_records,
    final_objects,
    manifest,
    staging_objects,
)
from s3_archive_tests.integration.spark.iceberg_checks import archive_and_check_iceberg
from s3_archive_tests.integration.spark.runner import archive_job
from s3_archive_tests.kafka_helpers import NASTY, create_topic, parquet_records, produce


def _connect(server) -> dict:
    return {"remote": server.url}


def _table(s3, bucket: str, key: str):
    return pq.read_table(io.BytesIO(s3.get_object(Bucket=bucket, Key=key)["Body"].read()))


def _ok(out: dict) -> dict:
    assert out["success"], "\n".join(out["failures"] + out["errors"])
    return out["windows"]


def test_parquet_archive_over_connect_reads_back_byte_exact(spark_connect, kafka, s3, services, unique, read_path):
    topic = create_topic(kafka, f"sc-parquet-{unique}", partitions=2)
    produced = produce(kafka, topic, [(i % 2, k, v, h) for i, (k, v, h) in enumerate(NASTY * 2)])
    cfg = archive_config(services.bucket, topic, f"connect/{unique}/parquet/", read_path=read_path)
    windows = [OffsetWindow(0, 0, 8), OffsetWindow(1, 0, 5), OffsetWindow(1, 5, 8)]
    out = archive_job(services, _connect(spark_connect), cfg, topic, windows,
                      secrets=(TEST_AWS["AWS_SECRET_ACCESS_KEY"],))
    metas = _ok(out)
    # The server has the S3 secret in its environment only: on no command line while it runs the job.
    assert out["process_list"]["leaks"] == []
    assert any("SparkConnectServer" in cmd for cmd in out["process_list"]["spark_jvms"])

    assert {k: m["records"] for k, m in metas.items()} == {w.key: w.end - w.start for w in windows}
    assert archived_records(s3, cfg, topic) == produced  # keys, values, headers, offsets, timestamps: all of them
    for w in windows:
        m = manifest(s3, cfg, topic, w)
        assert m.record_count == w.end - w.start and m.absent_offsets == []
    assert staging_objects(s3, cfg, topic) == []


VALUES = [
    b'{"id": 1, "name": "a", "tags": ["x"]}',
    b"\xff\xfe not utf-8",
    b'{"id": 2, "extra": {"deep": true}}',
    b"[1, 2, 3]",                      # JSON, but not an object
    None,                              # tombstone: decodes (to nulls)
    b"not json at all",
    b'{"id": "three", "name": null}',  # id's type varies between records: kept as text
]


def test_json_decoding_with_inferred_schema_and_dead_letters_over_connect(spark_connect, kafka, s3, services,
                                                                          unique):
    topic = create_topic(kafka, f"sc-json-{unique}")
    produced = produce(kafka, topic, [(0, f"k{i}".encode(), v, [("h", b"1")]) for i, v in enumerate(VALUES)])
    cfg = archive_config(services.bucket, topic, f"connect/{unique}/json/",
                         value_decoding={"type": "json", "on_error": "dead_letter", "column_prefix": "v_"})
    window = OffsetWindow(0, 0, len(VALUES))
    metas = _ok(archive_job(services, _connect(spark_connect), cfg, topic, [window]))

    assert metas[window.key]["undecodable_records"] == 3
    m = manifest(s3, cfg, topic, window)
    assert m.record_count == len(VALUES) and m.undecodable_records == 3 and m.absent_offsets == []
    [key] = final_objects(s3, cfg, topic)
    t = _table(s3, cfg.bucket, key)
    assert t.column("offset").to_pylist() == [0, 2, 4, 6]
    assert t.column("value").to_pylist() == [VALUES[0], VALUES[2], None, VALUES[6]]
    assert t.column("v_id").to_pylist() == ["1", "2", None, "three"]  # inferred; mixed types kept as text
    assert t.column("v_name").to_pylist() == ["a", None, None, None]
    assert t.column("v_extra").to_pylist()[1] == {"deep": True}
    [dead] = [o.key for o in m.dead_letter_objects]
    assert dead.startswith(f"{cfg.prefix}{DEAD_LETTER}/{topic}/kafka_partition=0/")
    assert parquet_records(s3.get_object(Bucket=cfg.bucket, Key=dead)["Body"].read()) == [produced[i]
                                                                                          for i in (1, 3, 5)]
    assert staging_objects(s3, cfg, topic) == []


def test_rotation_by_records_and_bytes_over_connect(spark_connect, kafka, s3, services, unique):
    topic = create_topic(kafka, f"sc-rotate-{unique}")
    # 40 records of 100..4000 bytes: uneven sizes exercise the byte cap, the record cap splits the small ones
    produced = produce(kafka, topic, [(0, None, bytes([65 + i % 26]) * (100 * (i + 1)), []) for i in range(40)])
    cap, most = 10_000, 6
    cfg = archive_config(services.bucket, topic, f"connect/{unique}/rotate/", max_bytes_per_object=cap,
                         max_records_per_object=most)
    window = OffsetWindow(0, 0, 40)
    _ok(archive_job(services, _connect(spark_connect), cfg, topic, [window]))

    keys = sorted(final_objects(s3, cfg, topic))
    assert keys == [object_key(cfg.prefix, topic, window, i, ".parquet") for i in range(len(keys))]
    parts = [_table(s3, cfg.bucket, k).column("offset").to_pylist() for k in keys]
    assert [o for p in parts for o in p] == list(range(40))
    assert all(0 < len(p) <= most for p in parts) and len(parts) > 40 // most
    assert parts == _rotated(produced, cap, most)
    assert sorted(o.key for o in manifest(s3, cfg, topic, window).objects) == keys


def _rotated(produced, cap: int, most: int) -> list[list[int]]:
    """The parts rotation must give: by bytes first (record i is in byte part floor(bytes before i / cap)),
    then each byte part cut every `most` records."""
    byte_parts: dict[int, list[int]] = {}
    before = 0
    for r in produced:
        byte_parts.setdefault(before // cap, []).append(r.offset)
        before += len(r.value)
    return [p[i:i + most] for _, p in sorted(byte_parts.items()) for i in range(0, len(p), most)]


LAYOUT = {
    "template": "{{topic}}/{{partition_by}}/{{topic}}+{{partition}}+{{start_offset}}+{{part}}",
    "partition_by": [{"kind": "time", "path_format": "'day'=yyyy-MM-dd", "timezone": "Europe/Berlin",
                      "duration_seconds": 86400},
                     {"kind": "value", "field": "region"}],
}
# 2024-03-30T23:30Z is already 03-31 in Berlin; a region that needs encoding, and a missing one
TIMED = [(1711841400000, "eu/west"), (1711841400000, "us"), (1711756800000, "eu/west"), (1711841401000, "a b=c"),
         (1711756800001, None), (1711841402000, "eu/west")]


def test_custom_layout_with_time_and_field_partitioning_over_connect(spark_connect, kafka, s3, services, unique):
    topic = create_topic(kafka, f"sc-layout-{unique}", config={"retention.ms": "-1"})  # timestamps from 2024
    values = [json.dumps({"region": r} if r is not None else {}).encode() for _, r in TIMED]
    produce(kafka, topic, [(0, b"k", v, []) for v in values], timestamps=[t for t, _ in TIMED])
    cfg = archive_config(services.bucket, topic, f"connect/{unique}/layout/", layout=LAYOUT)
    window = OffsetWindow(0, 0, len(TIMED))
    _ok(archive_job(services, _connect(spark_connect), cfg, topic, [window]))

    keys = sorted(final_objects(s3, cfg, topic))
    by_bucket = {tuple(parse_object_key(cfg.layout, cfg.prefix, k, ".parquet")["partition_by"]):
                 _table(s3, cfg.bucket, k).column("offset").to_pylist() for k in keys}
    # Berlin midnight is 2024-03-30T23:00Z; records keep offset order within their object
    assert by_bucket == {("day=2024-03-31", "eu/west"): [0, 5], ("day=2024-03-31", "us"): [1],
                         ("day=2024-03-30", "eu/west"): [2], ("day=2024-03-31", "a b=c"): [3],
                         ("day=2024-03-30", None): [4]}
    assert f"{cfg.prefix}{topic}/day=2024-03-31/region=eu%2Fwest/" in "".join(keys)
    assert sorted(o.key for o in manifest(s3, cfg, topic, window).objects) == keys


def test_iceberg_archive_over_connect_commits_once_and_restores_byte_exact(spark_connect, kafka, s3, services,
                                                                           unique):
    """format: iceberg over Spark Connect: the client sends the archive's catalog as `spark.sql.catalog.*` session
    settings (no secret: the server's Glue and S3 clients take its environment's keys), the server's classpath
    carries Iceberg's runtime."""
    out = archive_and_check_iceberg(services, kafka, s3, _connect(spark_connect), f"sc-ice-{unique}")
    assert any("SparkConnectServer" in cmd for cmd in out["process_list"]["spark_jvms"])
