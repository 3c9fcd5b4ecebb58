"""The Glue table of an archive that decodes Schema Registry payloads, through the Dagster assets: its columns are the
decoded fields of every window's schema (a field a newer version adds becomes a column, an older one stays), and
Spark reads the typed objects at the table's location with the table's schema."""

from __future__ import annotations

import json

import boto3
import dagster as dg
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from s3_archive.catalog.tables import spark_schema_ddl, table_name
from s3_archive.config.catalog import CatalogOptions
from s3_archive.config.settings import Settings
from s3_archive.defs.catalog.assets import build_catalog_defs
from s3_archive.io.schema_registry import SchemaRegistryResource
from s3_archive.model.windows import OffsetWindow as W
from s3_archive_tests.credentials import TEST_AWS
from s3_archive_tests.integration.archive_helpers import archive_config, materialize, resources, window_metadata
from s3_archive_tests.kafka_helpers import create_topic, produce

V1 = {"type": "record", "name": "Reading", "fields": [
    {"name": "sensor", "type": "string"}, {"name": "celsius", "type": "double"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "site", "type": ["null", "string"], "default": None}]}


def test_the_table_reads_the_typed_objects_and_gains_new_fields(registry_server, kafka, services, spark_resource,
                                                                  spark, unique):
    topic = create_topic(kafka, f"cat-sr-{unique}")
    sr = SchemaRegistryClient({"url": registry_server.url, "timeout": 10})
    ctx = SerializationContext(topic, MessageField.VALUE)
    v1 = AvroSerializer(sr, json.dumps(V1))
    produce(kafka, topic, [(0, None, v1({"sensor": f"s{i}", "celsius": 20.5 + i, "at": 1_700_000_000_000 + i}, ctx),
                            []) for i in range(2)])
    res = resources(services, kafka, spark_resource) | {
        "schema_registry": SchemaRegistryResource(url=registry_server.url)}
    cfg = archive_config(services.bucket, topic, f"catsr/{unique}/", value_decoding={"type": "avro"},
                         key_decoding={"type": "bytes"})
    meta = window_metadata(materialize(cfg, topic, [W(0, 0, 2)], res))
    assert meta[W(0, 0, 2).key]["records"] == 2
    [asset] = build_catalog_defs(Settings(archives=[cfg]), {"test": CatalogOptions(database=f"catsr_{unique}")}).assets
    dg.materialize([asset], resources=res, instance=dg.DagsterInstance.ephemeral())

    v2 = AvroSerializer(sr, json.dumps(V2))
    produce(kafka, topic, [(0, None, v2({"sensor": "s9", "celsius": -1.0, "at": 1_700_000_000_009, "site": "Bergen"},
                                        ctx), [])])
    materialize(cfg, topic, [W(0, 2, 3)], res)
    dg.materialize([asset], resources=res, instance=dg.DagsterInstance.ephemeral())
    glue = boto3.client("glue", endpoint_url=services.s3_endpoint_url, region_name=TEST_AWS["AWS_REGION"],
                        aws_access_key_id=TEST_AWS["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=TEST_AWS["AWS_SECRET_ACCESS_KEY"])
    table = glue.get_table(DatabaseName=f"catsr_{unique}", Name=table_name(topic))["Table"]
    cols = {c["Name"]: c["Type"] for c in table["StorageDescriptor"]["Columns"]}
    assert {k: cols[k] for k in ("sensor", "celsius", "at", "site")} == {
        "sensor": "string", "celsius": "double", "at": "timestamp", "site": "string"}
    location = f"s3a://{services.bucket}/{cfg.prefix}{topic}/"
    rows = (spark.read.schema(spark_schema_ddl(table)).parquet(location).orderBy("offset")
            .select("offset", "sensor", "celsius", "site").collect())
    assert [tuple(r) for r in rows] == [(0, "s0", 20.5, None), (1, "s1", 21.5, None), (2, "s9", -1.0, "Bergen")]
