import pytest
from pydantic import ValidationError

from s3_archive.config.archive import ArchiveConfig
from s3_archive.io.iceberg_catalog import S3Endpoint, catalog_conf, table_ident, warehouse


def _cfg(**kw) -> ArchiveConfig:
    return ArchiveConfig(name="orders", topics=["orders.v1"], bucket="b-1", prefix="arch", format="iceberg", **kw)


def test_glue_catalog_conf_is_sql_settings_without_secrets():
    conf = catalog_conf(_cfg(), S3Endpoint("eu-west-1", "http://127.0.0.1:5000", "http://127.0.0.1:5000", True))
    name = "spark.sql.catalog.s3archive_orders"
    assert conf[name] == "org.apache.iceberg.spark.SparkCatalog"
    assert conf[f"{name}.catalog-impl"] == "org.apache.iceberg.aws.glue.GlueCatalog"
    assert conf[f"{name}.warehouse"] == "s3://b-1/arch/_iceberg"
    assert conf[f"{name}.glue.endpoint"] == conf[f"{name}.s3.endpoint"] == "http://127.0.0.1:5000"
    assert conf[f"{name}.s3.path-style-access"] == "true" and conf[f"{name}.client.region"] == "eu-west-1"
    assert conf[f"{name}.cache-enabled"] == "false"
    assert all(k.startswith("spark.sql.catalog.") for k in conf)  # sendable by a Spark Connect client
    assert not any("secret" in k or "access-key" in k for k in conf)
    assert table_ident(_cfg(), "orders.v1") == "s3archive_orders.s3_archive.orders_v1"


def test_aws_endpoints_are_left_to_the_sdk():
    conf = catalog_conf(_cfg(), S3Endpoint())
    assert not any(k.endswith((".s3.endpoint", ".glue.endpoint")) for k in conf)


def test_jdbc_catalog_and_warehouse():
    cfg = _cfg(iceberg={"catalog": "jdbc", "jdbc_uri": "jdbc:sqlite:/tmp/ice.db", "warehouse": "s3://b-1/h/"})
    conf = catalog_conf(cfg, S3Endpoint())
    assert conf["spark.sql.catalog.s3archive_orders.catalog-impl"] == "org.apache.iceberg.jdbc.JdbcCatalog"
    assert conf["spark.sql.catalog.s3archive_orders.uri"] == "jdbc:sqlite:/tmp/ice.db"
    assert warehouse(cfg) == "s3://b-1/h"


@pytest.mark.parametrize("kw,message", [
    ({"iceberg": {"catalog": "jdbc"}}, "catalog 'jdbc' needs jdbc_uri"),
    ({"iceberg": {"jdbc_uri": "jdbc:sqlite:x"}}, "jdbc_uri applies to catalog 'jdbc' only"),
    ({"iceberg": {"warehouse": "/local"}}, "must be an s3:// URI"),
    ({"iceberg": {"warehouse": "s3://other/x"}}, "must be in the archive.s bucket"),
    ({"max_records_per_object": 10}, "max_records_per_object does not apply to format 'iceberg'"),
    ({"layout": {}}, "layout does not apply to format 'iceberg'"),
    ({"envelope": {"metadata": False}}, "needs envelope.metadata"),
    ({"lifecycle": {"expiration_days": 30}}, "S3 must not expire or archive files under an Iceberg table"),
    ({"iceberg": {"warehouse": "s3://b-1/arch/orders.v1/t"}}, "under topic 'orders.v1'"),
    ({"iceberg": {"partition_by": ["day(ts)"]}}, r"partition_by\[0\] 'day\(ts\)' is not a partition transform"),
    ({"iceberg": {"partition_by": ["bucket(8, region)"]}}, r"column\(s\) \['region'\] are not stored"),
    ({"envelope": {"key": False}, "iceberg": {"partition_by": ["bucket(8, key)"]}}, "are not stored"),
])
def test_iceberg_options_refused(kw, message):
    with pytest.raises(ValidationError, match=message):
        _cfg(**kw)


def test_partition_transforms_accepted():
    cfg = _cfg(iceberg={"partition_by": ["partition", "hours(timestamp)", "bucket(16, key)", "identity(v_region)"]},
               value_decoding={"type": "json", "json_schema": "region STRING", "column_prefix": "v_"})
    assert cfg.iceberg.partition_columns() == ["partition", "timestamp", "key", "v_region"]
    assert _cfg(iceberg={"partition_by": []}).iceberg.partition_by == []


def test_dead_letters_accepted():
    cfg = _cfg(value_decoding={"type": "json", "on_error": "dead_letter"})
    assert cfg.value_decoding.on_error == "dead_letter" and cfg.restorable


def test_iceberg_options_only_with_format_iceberg():
    with pytest.raises(ValidationError, match="iceberg applies to format 'iceberg' only"):
        ArchiveConfig(name="a", topics=["t"], bucket="b-1", format="parquet", iceberg={})
