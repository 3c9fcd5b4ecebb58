"""archive/archive_lineage.py and catalog/catalog_lineage.py: the datasets an archive and a catalog run name, an
Iceberg archive's table named as its catalog's tables are (OpenLineage's naming spec), and the events they make
valid against the spec's schema."""

from __future__ import annotations

import json
import uuid

from openlineage.client.serde import Serde

from s3_archive.archive.archive_lineage import archive_datasets, iceberg_table_name
from s3_archive.catalog.catalog_lineage import catalog_datasets
from s3_archive.config.archive import ArchiveConfig
from s3_archive.io.lineage import LineageRun, build_event
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.lineage_events import validate_event
from s3_archive_tests.manifests import hand_manifest

W = OffsetWindow(0, 0, 10)
SCHEMA = '{"type":"struct","fields":[{"name":"key","type":"binary","nullable":true,"metadata":{}}]}'
GLUE = ("eu-west-1", "123456789012")


def _iceberg(**iceberg) -> ArchiveConfig:
    return ArchiveConfig(name="orders", topics=["orders"], bucket="lake", prefix="raw/", format="iceberg",
                         iceberg=iceberg or None)


def _event(inputs, outputs) -> dict:
    event = json.loads(Serde.to_json(build_event("COMPLETE", LineageRun("j", "ARCHIVE", str(uuid.uuid4()), inputs,
                                                                         outputs))))
    validate_event(event)
    return event


def test_an_iceberg_archive_outputs_its_glue_table_named_as_glue_names_it():
    cfg = _iceberg()
    m = hand_manifest("orders", W, iceberg_table="s3_archive_orders.s3_archive.orders", schema=SCHEMA)
    [source], [location, table] = archive_datasets(cfg, "orders", "b:9092", [W], {W: m}, GLUE)
    event = _event([source], [location, table])
    [location, table] = event["outputs"]
    assert (table["namespace"], table["name"]) == ("arn:aws:glue:eu-west-1:123456789012", "table/s3_archive/orders")
    assert table["outputFacets"]["outputStatistics"]["rowCount"] == 10
    assert [f["name"] for f in table["facets"]["schema"]["fields"]] == ["key"]
    assert (location["namespace"], location["name"]) == ("s3://lake", "raw/orders")
    assert location["facets"]["symlinks"]["identifiers"] == [
        {"namespace": "arn:aws:glue:eu-west-1:123456789012", "name": "table/s3_archive/orders", "type": "TABLE"}]


def test_an_iceberg_tables_name_follows_its_catalog():
    ident = "cat.s3_archive.orders"
    assert iceberg_table_name(_iceberg(), ident, None) == ("iceberg:glue", ident)  # the account not known
    pg = _iceberg(catalog="jdbc", jdbc_uri="jdbc:postgresql://pg.internal/iceberg?sslmode=require")
    assert iceberg_table_name(pg, ident, GLUE) == ("postgres://pg.internal:5432", "iceberg.s3_archive.orders")
    pg_port = _iceberg(catalog="jdbc", jdbc_uri="jdbc:postgresql://pg:6432/ice")
    assert iceberg_table_name(pg_port, ident, None) == ("postgres://pg:6432", "ice.s3_archive.orders")
    sqlite = _iceberg(catalog="jdbc", jdbc_uri="jdbc:sqlite:/var/lib/iceberg.db")
    assert iceberg_table_name(sqlite, ident, None) == ("iceberg:jdbc", ident)  # the spec names no SQLite table
    # only a name the spec gives is an output of its own; the others stay the location's symlink
    m = hand_manifest("orders", W, iceberg_table=ident)
    assert len(archive_datasets(sqlite, "orders", "b:9092", [W], {W: m})[1]) == 1


def test_a_catalog_run_reads_the_location_and_writes_the_glue_table_with_its_columns():
    cfg = ArchiveConfig(name="orders", topics=["orders"], bucket="lake", prefix="raw/")
    table_input = {"StorageDescriptor": {"Columns": [{"Name": "key", "Type": "binary"}]},
                   "PartitionKeys": [{"Name": "kafka_partition", "Type": "int"}]}
    [source], [table] = catalog_datasets(cfg, "orders", "db", "orders_t", GLUE, table_input)
    event = _event([source], [table])
    [out] = event["outputs"]
    assert (event["inputs"][0]["namespace"], event["inputs"][0]["name"]) == ("s3://lake", "raw/orders")
    assert (out["namespace"], out["name"]) == ("arn:aws:glue:eu-west-1:123456789012", "table/db/orders_t")
    assert [(f["name"], f["type"]) for f in out["facets"]["schema"]["fields"]] == [("key", "binary"),
                                                                                   ("kafka_partition", "int")]
    assert catalog_datasets(cfg, "orders", "db", "orders_t", None)[1] == []  # the account not known: no table
