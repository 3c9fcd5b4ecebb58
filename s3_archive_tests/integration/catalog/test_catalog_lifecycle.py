"""Catalog and lifecycle against the session's moto server, Kafka broker and Spark: archived windows are queryable
through their Glue table's schema, partitions register as windows land, and lifecycle reconciliation is
idempotent and never touches rules it does not own."""

from __future__ import annotations

import base64
import io
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import dagster as dg
import fastavro
import pytest
from botocore.exceptions import ClientError

from s3_archive.catalog.avro_header import newest_writer_schema
from s3_archive.catalog.glue import TableConflict, ensure_table, registered_partitions, sync_catalog
from s3_archive.catalog.mappings import (
    JSON_SERDE,
    PARQUET_INPUT,
    PARQUET_OUTPUT,
    PARQUET_SERDE,
    TEXT_INPUT,
    TEXT_OUTPUT,
)
from s3_archive.catalog.table_partitions import HIVE_NULL
from s3_archive.catalog.tables import build_table_input, spark_schema_ddl, table_columns, table_name
from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.catalog import CatalogOptions
from s3_archive.config.lifecycle import LifecyclePolicy, Transition
from s3_archive.config.settings import Settings
from s3_archive.defs.archive.checks import objects_result
from s3_archive.defs.archive.partitions import archive_asset_key, window_partitions
from s3_archive.defs.catalog.assets import build_catalog_defs
from s3_archive.defs.lifecycle.assets import build_lifecycle_defs
from s3_archive.keys.objects import manifest_key, object_key
from s3_archive.lifecycle.reconcile import reconcile_lifecycle
from s3_archive.lifecycle.rules import build_rules, owner_prefix
from s3_archive.model.windows import OffsetWindow as W
from s3_archive_tests.credentials import TEST_AWS
from s3_archive_tests.integration.archive_helpers import archive_config, final_objects, log, materialize, resources
from s3_archive_tests.kafka_helpers import create_topic, produce
from s3_archive_tests.lineage_events import capture_lineage, read_events, stop_capturing, validate_event
from s3_archive_tests.manifests import hand_manifest


@pytest.fixture
def res(services, kafka, spark_resource) -> dict:
    return resources(services, kafka, spark_resource)


def client(services, service: str, record: list[str] | None = None) -> Any:
    """A real boto3 client on the moto server; `record` collects the names of the operations it calls."""
    c = boto3.client(service, endpoint_url=services.s3_endpoint_url, region_name=TEST_AWS["AWS_REGION"],
                     aws_access_key_id=TEST_AWS["AWS_ACCESS_KEY_ID"],
                     aws_secret_access_key=TEST_AWS["AWS_SECRET_ACCESS_KEY"])
    if record is not None:
        c.meta.events.register("before-call.*.*", lambda model, **_: record.append(model.name))
    return c


def run_asset(asset: dg.AssetsDefinition, res: dict) -> dict[str, Any]:
    result = dg.materialize([asset], resources=res, instance=dg.DagsterInstance.ephemeral())
    [event] = result.get_asset_materialization_events()
    return {k: v.value for k, v in event.materialization.metadata.items()}


WRITES = {"CreateDatabase", "CreateTable", "UpdateTable", "BatchCreatePartition", "PutBucketLifecycleConfiguration",
          "DeleteBucketLifecycle"}


# --- catalog -----------------------------------------------------------------------------------------------------


def test_archived_parquet_windows_are_queryable_through_the_catalog_table(kafka, services, res, spark, unique,
                                                                         tmp_path, monkeypatch):
    topic = create_topic(kafka, f"cat-pq-{unique}", partitions=2)
    produced = produce(kafka, topic, [(i % 2, f"k{i}".encode(), f"v{i}".encode(), [("i", str(i).encode()), ("n", None)])
                                      for i in range(30)])
    cfg = archive_config(services.bucket, topic, f"cat/{unique}/")
    materialize(cfg, topic, [W(0, 0, 10), W(0, 10, 15), W(1, 0, 15)], res)
    database = f"cat_{unique}"
    [asset] = build_catalog_defs(Settings(archives=[cfg]), {"test": CatalogOptions(database=database)}).assets

    lineage = capture_lineage(monkeypatch, tmp_path / "lineage.jsonl")
    first, second = run_asset(asset, res), run_asset(asset, res)
    stop_capturing(monkeypatch)

    assert (first["table_action"], first["database_created"], first["kafka_partitions"]) == ("created", True, 2)
    assert "CREATE EXTERNAL TABLE IF NOT EXISTS" in first["ddl"]
    assert (second["table_action"], second["database_created"], second["changes"]) == ("unchanged", False, [])
    name = table_name(topic)
    table = client(services, "glue").get_table(DatabaseName=database, Name=name)["Table"]
    sd = table["StorageDescriptor"]
    assert [(c["Name"], c["Type"]) for c in sd["Columns"]] == [
        ("key", "binary"), ("value", "binary"), ("headers", "array<struct<key:string,value:binary>>"),
        ("topic", "string"), ("partition", "int"), ("offset", "bigint"), ("timestamp", "timestamp"),
        ("timestamp_type", "int")]
    assert [(c["Name"], c["Type"]) for c in table["PartitionKeys"]] == [("kafka_partition", "int")]
    assert sd["SerdeInfo"]["SerializationLibrary"] == PARQUET_SERDE
    assert (sd["InputFormat"], sd["OutputFormat"]) == (PARQUET_INPUT, PARQUET_OUTPUT)
    location = f"s3://{services.bucket}/{cfg.prefix}{topic}/"
    assert sd["Location"] == location and table["TableType"] == "EXTERNAL_TABLE"
    assert {k: v for k, v in table["Parameters"].items() if k.startswith(("projection.", "storage."))} == {
        "projection.enabled": "true", "projection.kafka_partition.type": "integer",
        "projection.kafka_partition.range": "0,1",
        "storage.location.template": f"{location}kafka_partition=${{kafka_partition}}/"}
    assert table["VersionId"] == "1", "the second run wrote nothing"
    # Each run's lineage: the S3 location in, the Glue table out, named by the catalog's region and account (as the
    # server's STS answers it), with the table's columns and partition key.
    events = read_events(lineage)
    account = client(services, "sts").get_caller_identity()["Account"]
    assert [e["eventType"] for e in events] == ["START", "COMPLETE"] * 2
    for e in events:
        validate_event(e)
        assert e["job"]["name"] == f"catalog.{cfg.name}.{topic}"
        assert [(d["namespace"], d["name"]) for d in e["inputs"]] == [(f"s3://{cfg.bucket}", f"{cfg.prefix}{topic}")]
        assert [(d["namespace"], d["name"]) for d in e["outputs"]] == [
            (f"arn:aws:glue:{TEST_AWS['AWS_REGION']}:{account}", f"table/{database}/{name}")]
    assert [(f["name"], f["type"]) for f in events[1]["outputs"][0]["facets"]["schema"]["fields"]] == [
        (c["Name"], c["Type"]) for c in [*sd["Columns"], *table["PartitionKeys"]]]

    # Spark SQL over the table's location, read with exactly the columns and partition key Glue declares.
    view = f"cat_{unique}"
    spark.read.schema(spark_schema_ddl(table)).parquet(location.replace("s3://", "s3a://")) \
        .createOrReplaceTempView(view)
    per_partition = spark.sql(
        f"SELECT kafka_partition, count(*), min(offset), max(offset), "
        f"sum(CASE WHEN partition = kafka_partition AND topic = '{topic}' THEN 0 ELSE 1 END) "
        f"FROM {view} GROUP BY kafka_partition ORDER BY kafka_partition").collect()
    assert [tuple(r) for r in per_partition] == [(0, 15, 0, 14, 0), (1, 15, 0, 14, 0)]
    assert spark.sql(f"SELECT count(*) FROM {view} WHERE kafka_partition = 1").collect()[0][0] == 15
    rows = spark.sql(f"SELECT kafka_partition, offset, key, value, headers, unix_millis(timestamp) AS ts "
                     f"FROM {view}").collect()
    got = sorted((r.kafka_partition, r.offset, bytes(r.key), bytes(r.value),
                  tuple((h.key, None if h.value is None else bytes(h.value)) for h in r.headers), r.ts)
                 for r in rows)
    assert got == [(p.partition, p.offset, p.key, p.value, p.headers, p.timestamp_ms) for p in produced]


def test_a_failed_catalog_run_ends_its_lineage_in_fail(services, res, unique, tmp_path, monkeypatch):
    topic = f"cat-ghost-{unique}"  # no such topic: the catalog cannot learn its partition count
    cfg = archive_config(services.bucket, topic, f"cat/{unique}/")
    [asset] = build_catalog_defs(Settings(archives=[cfg]), {"test": CatalogOptions(database=f"cat_{unique}")}).assets
    lineage = capture_lineage(monkeypatch, tmp_path / "lineage.jsonl")
    result = dg.materialize([asset], resources=res, instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert not result.success
    start, fail = read_events(lineage)
    for e in (start, fail):
        validate_event(e)
    assert (start["eventType"], fail["eventType"]) == ("START", "FAIL")
    assert f"catalog of {topic!r} needs its partition count from Kafka" in fail["run"]["facets"]["errorMessage"][
        "message"]
    assert fail["outputs"][0]["name"] == f"table/cat_{unique}/{table_name(topic)}"


def test_jsonl_explicit_partitions_register_as_windows_land_and_survive_schema_evolution(
        kafka, services, res, spark, unique):
    topic = create_topic(kafka, f"cat-js-{unique}", partitions=2)
    produced = produce(kafka, topic, [(i % 2, f"k{i}".encode(), f"v{i}".encode(), []) for i in range(20)])
    cfg = archive_config(services.bucket, topic, f"catjs/{unique}/", format="jsonl", compression="gzip")
    options = CatalogOptions(database=f"catjs_{unique}", partitions="explicit")
    table_input = build_table_input(cfg, topic, options, 2)
    ops: list[str] = []
    glue, s3 = client(services, "glue", ops), client(services, "s3", ops)

    materialize(cfg, topic, [W(0, 0, 10)], res)  # the first window lands in kafka_partition=0
    first = sync_catalog(glue, s3, cfg, topic, options, table_input)
    materialize(cfg, topic, [W(1, 0, 10)], res)  # the next one opens kafka_partition=1
    ops.clear()
    second = sync_catalog(glue, s3, cfg, topic, options, table_input)
    second_ops = list(ops)
    ops.clear()
    third = sync_catalog(glue, s3, cfg, topic, options, table_input)

    assert (first.table_action, first.partitions_added, first.partitions_existing) == ("created", [0], [])
    assert (second.table_action, second.partitions_added, second.partitions_existing) == ("unchanged", [1], [0])
    assert [o for o in second_ops if o in WRITES] == ["BatchCreatePartition"]
    assert (third.table_action, third.partitions_added, third.partitions_existing) == ("unchanged", [], [0, 1])
    assert not [o for o in ops if o in WRITES], "an up-to-date catalog is not written"
    table = glue.get_table(DatabaseName=options.database, Name=table_input["Name"])["Table"]
    sd = table["StorageDescriptor"]
    assert (sd["SerdeInfo"]["SerializationLibrary"], sd["InputFormat"], sd["OutputFormat"]) == (
        JSON_SERDE, TEXT_INPUT, TEXT_OUTPUT)
    assert not [k for k in table["Parameters"] if k.startswith("projection.")]
    parts = glue.get_partitions(DatabaseName=options.database, TableName=table_input["Name"])["Partitions"]
    assert sorted((p["Values"], p["StorageDescriptor"]["Location"]) for p in parts) == [
        (["0"], f"{sd['Location']}kafka_partition=0/"), (["1"], f"{sd['Location']}kafka_partition=1/")]

    # Schema evolution: a column added to the table keeps the registered partitions and the older files readable.
    evolved = build_table_input(cfg, topic, options, 2, columns=[
        *table_columns(cfg), {"Name": "leader_epoch", "Type": "int", "Comment": "added later"}])
    assert ensure_table(glue, options.database, evolved) == ("updated", ["StorageDescriptor.Columns"])
    assert registered_partitions(glue, options.database, table_input["Name"]) == {0, 1}
    table = glue.get_table(DatabaseName=options.database, Name=table_input["Name"])["Table"]
    assert table["StorageDescriptor"]["Columns"][-1]["Name"] == "leader_epoch"

    view = f"catjs_{unique}"
    spark.read.schema(spark_schema_ddl(table)) \
        .option("timestampFormat", "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX") \
        .json(sd["Location"].replace("s3://", "s3a://")).createOrReplaceTempView(view)
    rows = spark.sql(f"SELECT kafka_partition, offset, unbase64(key) AS k, unbase64(value) AS v, leader_epoch, "
                     f"unix_millis(timestamp) AS ts FROM {view}").collect()
    assert sorted((r.kafka_partition, r.offset, bytes(r.k), bytes(r.v), r.leader_epoch, r.ts) for r in rows) == [
        (p.partition, p.offset, p.key, p.value, None, p.timestamp_ms) for p in produced]


DAY_REGION = {
    "template": "{{topic}}/{{partition_by}}/{{topic}}+{{partition}}+{{start_offset}}+{{part}}",
    "partition_by": [{"kind": "time", "path_format": "'day'=yyyy-MM-dd", "timezone": "Europe/Berlin",
                      "duration_seconds": 86400},
                     {"kind": "value", "field": "region"}],
}


def test_a_custom_hive_layout_gets_explicit_partitions_with_decoded_values_and_reads_back(
        kafka, services, res, spark, unique):
    # 2024-03-30T23:30Z is 03-31 in Berlin; regions that need encoding, and one missing (null)
    day1, day2 = 1711756800000, 1711841400000
    timed = [(day2, "eu/west"), (day2, "us"), (day1, "eu/west"), (day2 + 1, "a b=c"), (day1 + 1, None),
             (day2 + 2, "eu/west")]
    topic = create_topic(kafka, f"cat-lay-{unique}", config={"retention.ms": "-1"})  # timestamps from 2024
    produce(kafka, topic, [(0, b"k", json.dumps({} if r is None else {"region": r}).encode(), []) for _, r in timed],
            timestamps=[t for t, _ in timed])
    cfg = archive_config(services.bucket, topic, f"catlay/{unique}/", layout=DAY_REGION)
    materialize(cfg, topic, [W(0, 0, 3), W(0, 3, 6)], res)
    # An object the layout did not write (hidden to Spark's readers by its leading '_'): reported, not registered.
    s3 = client(services, "s3")
    s3.put_object(Bucket=services.bucket, Key=f"{cfg.prefix}{topic}/_tmp/stray.txt", Body=b"x")
    database = f"catlay_{unique}"
    [asset] = build_catalog_defs(Settings(archives=[cfg]), {"test": CatalogOptions(database=database)}).assets

    first, second = run_asset(asset, res), run_asset(asset, res)

    assert first["partition_mode"] == "explicit"  # the default for a layout projection cannot describe
    assert first["skipped_directories"] == second["skipped_directories"] == 1
    expected = {("2024-03-31", "eu/west"): 2, ("2024-03-31", "us"): 1, ("2024-03-30", "eu/west"): 1,
                ("2024-03-31", "a b=c"): 1, ("2024-03-30", HIVE_NULL): 1}
    assert sorted(first["partitions_added"]) == sorted([
        "day=2024-03-31/region=eu%2Fwest", "day=2024-03-31/region=us", "day=2024-03-30/region=eu%2Fwest",
        "day=2024-03-31/region=a%20b%3Dc", "day=2024-03-30/region=(null)"])
    assert (second["table_action"], second["partitions_added"], second["partitions_registered"]) == (
        "unchanged", [], 5)
    glue = client(services, "glue")
    table = glue.get_table(DatabaseName=database, Name=table_name(topic))["Table"]
    location = table["StorageDescriptor"]["Location"]
    assert location == f"s3://{services.bucket}/{cfg.prefix}{topic}/"
    assert [(k["Name"], k["Type"]) for k in table["PartitionKeys"]] == [("day", "string"), ("region", "string")]
    assert not [k for k in table["Parameters"] if k.startswith("projection.")]
    parts = glue.get_partitions(DatabaseName=database, TableName=table["Name"])["Partitions"]
    assert {tuple(p["Values"]) for p in parts} == set(expected)

    # Each registered partition's Location holds exactly the records with its values (read with the table's
    # columns, as an engine using the Glue partitions does)...
    columns = ", ".join(f"`{c['Name']}` {c['Type']}" for c in table["StorageDescriptor"]["Columns"])
    for p in parts:
        rows = spark.read.schema(columns).parquet(p["StorageDescriptor"]["Location"].replace("s3://", "s3a://")) \
            .select("offset", "timestamp").collect()
        assert len(rows) == expected[tuple(p["Values"])], p["Values"]
        day, region = p["Values"]
        for r in rows:
            ts, reg = timed[r.offset]
            assert (reg if reg is not None else HIVE_NULL) == region
            assert day == ("2024-03-31" if ts >= day2 else "2024-03-30")
    # ...and Spark's own partition discovery over the table location with the table's columns and keys decodes
    # the directory names to the same values (a null is the directory's `(null)` text there).
    view = f"catlay_{unique}"
    spark.read.schema(spark_schema_ddl(table)).parquet(location.replace("s3://", "s3a://")) \
        .createOrReplaceTempView(view)
    got = {(r.day, r.region): r.n for r in spark.sql(
        f"SELECT day, region, count(*) AS n FROM {view} GROUP BY day, region").collect()}
    assert got == {(d, "(null)" if r == HIVE_NULL else r): n for (d, r), n in expected.items()}


def _b64(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(b).decode()


def test_avro_csv_and_text_archives_are_queryable_through_their_catalog_tables(kafka, services, res, spark, s3,
                                                                               unique):
    """One topic archived in each of the three formats; each format's Glue table (created in moto) read by Spark
    with exactly the columns, partition key and SerDe settings the table declares."""
    topic = create_topic(kafka, f"cat-fmt-{unique}", partitions=2)
    produced = produce(kafka, topic, [
        (i % 2, None if i == 3 else f"k{i}".encode(),
         None if i == 4 else b"" if i == 5 else f'v{i}, "q"'.encode(), [("i", str(i).encode()), ("n", None)])
        for i in range(12)])
    expected_counts = [(0, 6), (1, 6)]
    windows = [W(0, 0, 6), W(1, 0, 6)]
    glue = client(services, "glue")
    tables: dict[str, dict] = {}
    for fmt, codec in [("avro", "snappy"), ("csv", "gzip"), ("text", "bzip2")]:
        options = CatalogOptions(database=f"catfmt_{unique}", table_prefix=f"{fmt}_")
        cfg = archive_config(services.bucket, topic, f"catfmt/{unique}/{fmt}/", format=fmt, compression=codec)
        materialize(cfg, topic, windows, res)
        writer = newest_writer_schema(s3, cfg.bucket, cfg.prefix, topic, log) if fmt == "avro" else None
        table_input = build_table_input(cfg, topic, options, 2, writer_schema=writer and writer.literal)
        assert sync_catalog(glue, s3, cfg, topic, options, table_input).table_action == "created"
        tables[fmt] = glue.get_table(DatabaseName=options.database, Name=table_input["Name"])["Table"]
        tables[fmt]["_cfg"] = cfg

    def view(fmt: str, reader) -> str:
        table = tables[fmt]
        name = f"catfmt_{fmt}_{unique}"
        reader.schema(spark_schema_ddl(table)) \
            .load(table["StorageDescriptor"]["Location"].replace("s3://", "s3a://")).createOrReplaceTempView(name)
        counts = spark.sql(f"SELECT kafka_partition, count(*) FROM {name} GROUP BY 1 ORDER BY 1").collect()
        assert [tuple(r) for r in counts] == expected_counts, fmt
        return name

    # avro: the table's schema literal is exactly the writer schema in every archived object's header (Spark's
    # text, byte for byte), and reads them.
    avro = tables["avro"]
    literal = avro["StorageDescriptor"]["SerdeInfo"]["Parameters"]["avro.schema.literal"]
    cfg = avro["_cfg"]
    for key in sorted(final_objects(s3, cfg, topic)):
        header = fastavro.reader(io.BytesIO(s3.get_object(Bucket=cfg.bucket, Key=key)["Body"].read()))
        assert header.metadata["avro.schema"] == literal, key
    assert [f["name"] for f in json.loads(literal)["fields"]] == [
        c["Name"] for c in avro["StorageDescriptor"]["Columns"]]
    name = view("avro", spark.read.format("avro").option("avroSchema", literal))
    rows = spark.sql(f"SELECT kafka_partition, offset, key, value, headers, timestamp FROM {name}").collect()
    assert sorted((r.kafka_partition, r.offset, r.key and bytes(r.key), r.value if r.value is None else bytes(r.value),
                   tuple((h.key, h.value and bytes(h.value)) for h in r.headers), r.timestamp) for r in rows) == [
        (p.partition, p.offset, p.key, p.value, p.headers, p.timestamp_ms * 1000) for p in produced]

    # csv: the columns of csv_fields, read with the table's separator and quote characters. The file tells a null
    # (empty field) from an empty value (`""`); Spark sees that once its nullValue is not "" (OpenCSVSerde, which has
    # no null, reads both as '').
    serde = tables["csv"]["StorageDescriptor"]["SerdeInfo"]["Parameters"]
    name = view("csv", spark.read.format("csv").options(sep=serde["separatorChar"], quote=serde["quoteChar"],
                                                         escape=serde["quoteChar"], nullValue="\u0000"))
    rows = spark.sql(f"SELECT kafka_partition, offset, key, value, headers, timestamp FROM {name}").collect()
    assert sorted(tuple(r) for r in rows) == [
        (p.partition, p.offset, _b64(p.key), _b64(p.value),
         ";".join(f"{_b64(k.encode())}:{_b64(v) or ''}" for k, v in p.headers), p.timestamp_ms) for p in produced]

    # text: one value column, the partition key from the directory.
    name = view("text", spark.read.format("text"))
    rows = spark.sql(f"SELECT kafka_partition, value FROM {name}").collect()
    assert sorted(tuple(r) for r in rows) == sorted((p.partition, (p.value or b"").decode()) for p in produced)


def test_the_avro_table_waits_for_the_first_window_and_takes_its_literal_from_the_newest_object(
        kafka, services, res, spark, s3, unique):
    topic = create_topic(kafka, f"cat-avro-{unique}")
    produced = produce(kafka, topic, [(0, f"k{i}".encode(), f"v{i}".encode(), [("i", str(i).encode())])
                                      for i in range(8)])
    cfg = archive_config(services.bucket, topic, f"catavro/{unique}/", format="avro", compression="snappy",
                         value_decoding={"type": "utf8"})
    database = f"catavro_{unique}"
    [asset] = build_catalog_defs(Settings(archives=[cfg]), {"test": CatalogOptions(database=database)}).assets
    glue = client(services, "glue")

    before = run_asset(asset, res)  # nothing archived yet: no table, and the run says why
    assert before["table_action"] == "deferred"
    assert "no window of" in before["reason"] and "is created by the first catalog run after" in before["reason"]
    with pytest.raises(ClientError, match="EntityNotFoundException"):
        glue.get_table(DatabaseName=database, Name=table_name(topic))

    materialize(cfg, topic, [W(0, 0, 4)], res)
    materialize(cfg, topic, [W(0, 4, 8)], res)
    after = run_asset(asset, res)
    assert after["table_action"] == "created"
    newest = manifest_key(cfg.prefix, topic, W(0, 4, 8))
    first_object = json.loads(s3.get_object(Bucket=cfg.bucket, Key=newest)["Body"].read())["objects"][0]["key"]
    assert after["avro_schema_from"] == f"s3://{cfg.bucket}/{first_object}"
    table = glue.get_table(DatabaseName=database, Name=table_name(topic))["Table"]
    literal = table["StorageDescriptor"]["SerdeInfo"]["Parameters"]["avro.schema.literal"]
    header = fastavro.reader(io.BytesIO(s3.get_object(Bucket=cfg.bucket, Key=first_object)["Body"].read()))
    assert literal == header.metadata["avro.schema"]
    value_type = {f["name"]: f["type"] for f in json.loads(literal)["fields"]}["value"]
    assert value_type == ["string", "null"], "value_decoding utf8: Spark wrote the value as a string"
    assert run_asset(asset, res)["table_action"] == "unchanged"

    # Spark reads the table's location with the table's literal and columns.
    spark.read.format("avro").option("avroSchema", literal).schema(spark_schema_ddl(table)) \
        .load(table["StorageDescriptor"]["Location"].replace("s3://", "s3a://")).createOrReplaceTempView(database)
    rows = spark.sql(f"SELECT kafka_partition, offset, value FROM {database} ORDER BY offset").collect()
    assert [tuple(r) for r in rows] == [(0, p.offset, p.value.decode()) for p in produced]


def test_a_table_not_created_for_the_topic_is_never_taken_over(services, unique):
    glue = client(services, "glue")
    cfg = ArchiveConfig(name="orders", topics=["orders"], bucket=services.bucket, prefix=f"own/{unique}/")
    options = CatalogOptions(database=f"own_{unique}")
    glue.create_database(DatabaseInput={"Name": options.database})
    theirs = {"Name": "orders", "TableType": "EXTERNAL_TABLE", "Parameters": {"owner": "bi"},
              "StorageDescriptor": {"Columns": [{"Name": "id", "Type": "int"}], "Location": "s3://elsewhere/"}}
    glue.create_table(DatabaseName=options.database, TableInput=theirs)

    with pytest.raises(TableConflict, match=f"table own_{unique}.orders was not created by s3-archive"):
        ensure_table(glue, options.database, build_table_input(cfg, "orders", options, 1))
    kept = glue.get_table(DatabaseName=options.database, Name="orders")["Table"]
    assert kept["StorageDescriptor"]["Location"] == "s3://elsewhere/" and kept["Parameters"] == {"owner": "bi"}


# --- lifecycle ---------------------------------------------------------------------------------------------------

FOREIGN = [
    {"ID": "logs-expiry", "Status": "Enabled", "Filter": {"Prefix": "logs/"}, "Expiration": {"Days": 7}},
    {"ID": "s3-archive:orders_v2:staging", "Status": "Enabled", "Filter": {"Prefix": "v2/_staging/"},
     "Expiration": {"Days": 2}},
    {"ID": "tagged", "Status": "Disabled", "Filter": {"And": {"Prefix": "x/", "Tags": [{"Key": "k", "Value": "v"}]}},
     "NoncurrentVersionExpiration": {"NoncurrentDays": 5}},
]


def bucket_rules(s3: Any, bucket: str) -> list[dict] | None:
    try:
        return s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    except ClientError as e:
        assert e.response["Error"]["Code"] == "NoSuchLifecycleConfiguration"
        return None


def test_lifecycle_reconcile_is_idempotent_and_leaves_foreign_rules_alone(services, res, unique):
    s3 = client(services, "s3")
    bucket = f"lc-{unique}"
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": FOREIGN})
    cfg = ArchiveConfig(name="orders", topics=["a", "b"], bucket=bucket, prefix="kafka/")
    policy = LifecyclePolicy(transitions=[Transition(days=120, storage_class="GLACIER"),
                                          Transition(days=30, storage_class="STANDARD_IA")], expiration_days=400)
    [asset] = build_lifecycle_defs(Settings(archives=[cfg]), {"orders": policy}).assets
    desired = build_rules("orders", "kafka/", ["a", "b"], policy)

    first, second = run_asset(asset, res), run_asset(asset, res)

    ids = ["s3-archive:orders:data:a", "s3-archive:orders:data:b", "s3-archive:orders:manifests:a",
           "s3-archive:orders:manifests:b", "s3-archive:orders:staging"]
    assert (first["written"], first["added"], first["changed"], first["removed"]) == (True, ids, [], [])
    assert (second["written"], second["added"], second["changed"], second["removed"]) == (False, [], [], [])
    assert (second["unchanged"], second["foreign_rules"]) == (5, 3)
    rules = bucket_rules(s3, bucket)
    assert rules[:3] == FOREIGN and rules[3:] == desired
    data_a = rules[3]
    assert data_a["Filter"] == {"Prefix": "kafka/a/"}
    assert data_a["Transitions"] == [{"Days": 30, "StorageClass": "STANDARD_IA"},
                                     {"Days": 120, "StorageClass": "GLACIER"}]
    assert rules[-1]["Filter"] == {"Prefix": "kafka/_staging/"} and rules[-1]["Expiration"] == {"Days": 2}

    ops: list[str] = []
    owner = owner_prefix("orders")
    again = reconcile_lifecycle(client(services, "s3", ops), bucket, desired, owner)
    assert not again.written and ops == ["GetBucketLifecycleConfiguration"], "nothing is written when up to date"

    # Someone edits one of our rules by hand: it is put back, and only it is reported.
    edited = [*FOREIGN, {**desired[0], "Expiration": {"Days": 1}}, *desired[1:]]
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": edited})
    repaired = run_asset(asset, res)
    assert (repaired["written"], repaired["changed"], repaired["added"]) == (True, [desired[0]["ID"]], [])
    assert bucket_rules(s3, bucket) == [*FOREIGN, *desired]

    # A topic leaves the archive and expiration is dropped: its rules go, the others change, foreign rules stay.
    smaller = ArchiveConfig(name="orders", topics=["a"], bucket=bucket, prefix="kafka/")
    [asset2] = build_lifecycle_defs(Settings(archives=[smaller]), {"orders": LifecyclePolicy()}).assets
    shrunk = run_asset(asset2, res)
    assert shrunk["removed"] == ["s3-archive:orders:data:b", "s3-archive:orders:manifests:a",
                                 "s3-archive:orders:manifests:b"]
    assert shrunk["changed"] == ["s3-archive:orders:data:a"] and shrunk["added"] == []
    assert bucket_rules(s3, bucket)[:3] == FOREIGN


def test_removing_every_rule_deletes_a_configuration_only_when_nothing_foreign_is_left(services, unique):
    s3 = client(services, "s3")
    owner = owner_prefix("solo")
    desired = build_rules("solo", "", ["t"], LifecyclePolicy())
    for bucket, foreign in [(f"lc-solo-{unique}", []), (f"lc-shared-{unique}", FOREIGN[:1])]:
        s3.create_bucket(Bucket=bucket)
        if foreign:
            s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": foreign})
        assert reconcile_lifecycle(s3, bucket, desired, owner).written
        assert bucket_rules(s3, bucket) == [*foreign, *desired]
        removed = reconcile_lifecycle(s3, bucket, [], owner)
        assert removed.written and removed.plan.removed == sorted(r["ID"] for r in desired)
        assert bucket_rules(s3, bucket) == (foreign or None)


def test_a_writer_racing_the_reconcile_is_detected_and_our_rules_restored(services, unique):
    s3, other = client(services, "s3"), client(services, "s3")
    bucket = f"lc-race-{unique}"
    s3.create_bucket(Bucket=bucket)
    owner = owner_prefix("race")
    desired = build_rules("race", "", ["t"], LifecyclePolicy())
    clobbers = {"left": 1}

    def clobber(**_) -> None:
        # Another tool writes its own configuration right after ours (S3 has no conditional lifecycle write).
        if clobbers["left"]:
            clobbers["left"] -= 1
            other.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": FOREIGN[:1]})

    s3.meta.events.register("after-call.s3.PutBucketLifecycleConfiguration", clobber)
    result = reconcile_lifecycle(s3, bucket, desired, owner)
    assert (result.written, result.attempts) == (True, 3)
    assert bucket_rules(s3, bucket) == [*FOREIGN[:1], *desired], "theirs kept, ours written again"

    clobbers["left"] = 99
    s3.delete_bucket_lifecycle(Bucket=bucket)
    with pytest.raises(RuntimeError, match=f"lifecycle rules of bucket '{bucket}' under 's3-archive:race:' changed "
                                           "again after each of 3 writes"):
        reconcile_lifecycle(s3, bucket, desired, owner)


# --- lifecycle expiry vs the objects check -----------------------------------------------------------------------


def test_windows_expired_by_the_lifecycle_are_not_reported_missing(services, unique):
    """Windows written directly to moto with chosen commit times; the check run at chosen 'now's."""
    s3 = client(services, "s3")
    topic = f"exp-{unique}"
    expiring = ArchiveConfig(name="exp", topics=[topic], bucket=services.bucket, prefix=f"exp/{unique}/",
                             lifecycle=LifecyclePolicy(expiration_days=30))
    now = datetime.now(UTC)
    w_old_gone, w_young_gone, w_old_resized, w_unmanifested, w_old_intact = [W(0, i * 10, i * 10 + 10)
                                                                            for i in range(5)]

    def commit(w: W, committed: datetime, data: bool = True) -> str:
        key = object_key(expiring.prefix, topic, w, 0, ".parquet")
        if data:
            s3.put_object(Bucket=expiring.bucket, Key=key, Body=b"12345")
        manifest = hand_manifest(topic, w, [{"key": key, "size": 5, "etag": "x"}],
                                 committed_at=committed.isoformat())
        s3.put_object(Bucket=expiring.bucket, Key=manifest_key(expiring.prefix, topic, w), Body=manifest.dumps())
        return key

    commit(w_old_gone, now - timedelta(days=40), data=False)
    commit(w_young_gone, now - timedelta(days=10), data=False)
    resized = commit(w_old_resized, now - timedelta(days=40))
    s3.put_object(Bucket=expiring.bucket, Key=resized, Body=b"1234")
    commit(w_old_intact, now - timedelta(days=40))
    instance = dg.DagsterInstance.ephemeral()
    windows = [w_old_gone, w_young_gone, w_old_resized, w_unmanifested, w_old_intact]
    instance.add_dynamic_partitions(window_partitions(topic).name, [w.key for w in windows])
    for w in windows:  # materialized now (the unmanifested one never got its manifest)
        instance.report_runless_asset_event(dg.AssetMaterialization(archive_asset_key(topic), partition=w.key))

    def run(cfg: ArchiveConfig, at: datetime) -> tuple[dg.AssetCheckResult, list[str]]:
        r = objects_result(instance, s3, cfg, topic, now=at)
        return r, sorted(r.metadata["expired"].value.split("\n")) if r.metadata["expired_windows"].value else []

    today, expired = run(expiring, now)
    assert not today.passed and today.metadata["problems"].value == 3
    assert expired == [w_old_gone.key] and today.metadata["expiration_days"].value == 30
    assert f"window {w_young_gone.key} (" in today.description and "missing: " in today.description
    assert f"window {w_old_resized.key} (" in today.description and "is 4 bytes, manifest says 5" in today.description
    assert f"window {w_unmanifested.key} of '{topic}' is materialized but has no manifest" in today.description

    # A month later the young window and the unmanifested one (materialized today) are expiring too; a changed
    # size never is an expiry.
    later, expired = run(expiring, now + timedelta(days=31))
    assert expired == sorted([w_old_gone.key, w_young_gone.key, w_unmanifested.key])
    assert later.metadata["problems"].value == 1 and w_old_resized.key in later.description

    # Without an expiration every absence is a problem, however old.
    keep = expiring.model_copy(update={"lifecycle": LifecyclePolicy()})
    forever, expired = run(keep, now + timedelta(days=400))
    assert expired == [] and forever.metadata["problems"].value == 4
    assert forever.metadata["expiration_days"].value == 0

    # Once S3 has expired a whole window (its objects and, by the manifests rule, its manifest), only the
    # materialized partition is left: expired, not missing.
    s3.delete_object(Bucket=expiring.bucket, Key=manifest_key(expiring.prefix, topic, w_old_gone))
    s3.delete_object(Bucket=expiring.bucket, Key=resized)
    s3.delete_object(Bucket=expiring.bucket, Key=manifest_key(expiring.prefix, topic, w_old_resized))
    gone, expired = run(expiring, now + timedelta(days=31))
    assert gone.passed and gone.metadata["expired_windows"].value == 4
    assert "4 older windows expired by the lifecycle policy (expiration_days 30)" in gone.description
    assert gone.metadata["manifests"].value == 2  # the young window's and the intact one's


def test_decoded_json_fields_become_table_columns_and_older_fields_stay(kafka, services, res, spark, unique):
    topic = create_topic(kafka, f"cat-json-{unique}")
    first = [json.dumps({"id": i, "old": "x"}).encode() for i in range(3)]
    produce(kafka, topic, [(0, None, v, []) for v in first])
    cfg = archive_config(services.bucket, topic, f"cat/{unique}/", envelope={"headers": False},
                         value_decoding={"type": "json", "column_prefix": "v_"})
    materialize(cfg, topic, [W(0, 0, 3)], res)
    [asset] = build_catalog_defs(Settings(archives=[cfg]),
                                 {"test": CatalogOptions(database=f"cat_{unique}")}).assets
    assert run_asset(asset, res)["table_action"] == "created"
    # A later window's values lose `old` and gain a nested field: the table gains a column and keeps `v_old`.
    produce(kafka, topic, [(0, None, json.dumps({"id": 9, "n": {"a": 1.5}}).encode(), [])])
    materialize(cfg, topic, [W(0, 3, 4)], res)
    assert run_asset(asset, res)["table_action"] == "updated"
    table = client(services, "glue").get_table(DatabaseName=f"cat_{unique}", Name=table_name(topic))["Table"]
    cols = [(c["Name"], c["Type"]) for c in table["StorageDescriptor"]["Columns"]]
    assert cols[:7] == [("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"),
                        ("offset", "bigint"), ("timestamp", "timestamp"), ("timestamp_type", "int")]
    assert cols[7:] == [("v_id", "bigint"), ("v_n", "struct<a:decimal(2,1)>"), ("v_old", "string")]
    location = f"s3a://{services.bucket}/{cfg.prefix}{topic}/"
    rows = (spark.read.schema(spark_schema_ddl(table)).parquet(location)
            .orderBy("offset").select("offset", "v_id", "v_old").collect())
    assert [tuple(r) for r in rows] == [(0, 0, "x"), (1, 1, "x"), (2, 2, "x"), (3, 9, None)]


def test_payload_field_names_that_are_not_identifiers_are_renamed_never_injected(kafka, services, res, spark, unique):
    topic = create_topic(kafka, f"cat-names-{unique}")
    values = [{"id": i, "first name": "a", "x; DROP TABLE t; --": i, "über": True, "1st": "b",
               "o": {"in ner": 1}} for i in range(2)]
    produce(kafka, topic, [(0, None, json.dumps(v).encode(), []) for v in values])
    cfg = archive_config(services.bucket, topic, f"cat/{unique}/", envelope={"headers": False},
                         value_decoding={"type": "json"})
    materialize(cfg, topic, [W(0, 0, 2)], res)
    [asset] = build_catalog_defs(Settings(archives=[cfg]),
                                 {"test": CatalogOptions(database=f"cat_{unique}")}).assets
    meta = run_asset(asset, res)
    assert meta["table_action"] == "created"
    table = client(services, "glue").get_table(DatabaseName=f"cat_{unique}", Name=table_name(topic))["Table"]
    cols = {c["Name"]: c for c in table["StorageDescriptor"]["Columns"][7:]}  # after the envelope columns
    assert sorted(cols) == sorted(["_1st", "first_name", "id", "o", "uber", "x__drop_table_t____"]), list(cols)
    assert cols["o"]["Type"] == "struct<in_ner:bigint>"
    assert cols["x__drop_table_t____"]["Comment"] == \
        'decoded from the record value field "x; DROP TABLE t; --" (value_decoding: json); renamed'
    ddl = meta["ddl"]
    assert "`x__drop_table_t____` bigint COMMENT 'decoded from the record value field \"x; DROP TABLE t; --\"" in ddl
    # outside quoted comments, the statement's end is the only `;` (other columns' comments contain `;` too)
    assert re.sub(r"'(?:[^'\\]|\\.)*'", "''", ddl).count(";") == 1
    # The table reads back through its own schema: the kept columns carry the values.
    location = f"s3a://{services.bucket}/{cfg.prefix}{topic}/"
    rows = spark.read.schema(spark_schema_ddl(table)).parquet(location).orderBy("offset").select("id").collect()
    assert [r[0] for r in rows] == [0, 1]
