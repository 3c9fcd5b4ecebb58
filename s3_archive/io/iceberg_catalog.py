"""The Iceberg catalog of an archive of `format: iceberg` as a Spark catalog: its name, its `spark.sql.catalog.*`
settings, and the table of each topic.

The settings are all `spark.sql.catalog.<name>.*` SQL settings, set on the session at run time (`use_catalog`):
a classic session and a Spark Connect client send them alike, and each archive gets a catalog of its own (its
warehouse). They hold no secret: the catalog's AWS clients (Glue, and S3FileIO for the table files) take the JVM's
default credential chain, like boto3 (SparkResource passes static keys to a local driver JVM's environment).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.catalog import CatalogOptions
from s3_archive.config.iceberg import IcebergOptions
from s3_archive.io.s3 import S3Client
from s3_archive.model.errors import ArchiveIntegrityError

if TYPE_CHECKING:  # pyspark is imported by a run that writes, not when the definitions load
    from pyspark.sql import SparkSession

SPARK_CATALOG = "org.apache.iceberg.spark.SparkCatalog"
CATALOG_IMPL = {"glue": "org.apache.iceberg.aws.glue.GlueCatalog", "jdbc": "org.apache.iceberg.jdbc.JdbcCatalog"}
S3_FILE_IO = "org.apache.iceberg.aws.s3.S3FileIO"
# The snapshot summary property that records the windows a commit holds (like the `kafka.connect.offsets`
# property of Iceberg's Kafka Connect sink): window keys joined by ','.
WINDOWS_PROPERTY = "s3archive.windows"
TOPIC_PROPERTY = "s3archive.topic"
# Iceberg's FileIO when the metadata file the catalog names is gone (S3FileIO: "Location does not exist: s3://…")
_METADATA_GONE = re.compile(r"NotFoundException: (?:Location|File) does not exist: (\S+\.metadata\.json)")


@dataclass(frozen=True)
class S3Endpoint:
    """How the JVM's AWS clients reach S3 and Glue (the S3Resource's settings); None: AWS's own."""

    region: str = "us-east-1"
    s3_endpoint_url: str | None = None
    glue_endpoint_url: str | None = None
    path_style: bool = False

    @classmethod
    def of_resource(cls, r: Any) -> S3Endpoint:
        """From an S3Resource (io/s3_resource.py): its Glue endpoint defaults to its S3 endpoint."""
        glue = r.endpoint_url if r.glue_endpoint_url is None else r.glue_endpoint_url
        return cls(r.region_name or "us-east-1", r.endpoint_url or None, glue or None, bool(r.path_style))

    @classmethod
    def of_client(cls, s3: S3Client) -> S3Endpoint:
        """From a boto3 S3 client: its endpoint serves Glue too unless it is AWS's own."""
        url = s3.meta.endpoint_url
        custom = url if "amazonaws.com" not in url else None
        style = (s3.meta.config.s3 or {}).get("addressing_style")
        return cls(s3.meta.region_name or "us-east-1", custom, custom, style == "path" or custom is not None)


def catalog_name(cfg: ArchiveConfig) -> str:
    """The Spark catalog of the archive (one per archive: its own warehouse)."""
    return f"s3archive_{cfg.name}"


def table_name(topic: str, options: CatalogOptions) -> str:
    """The topic as a table name, by the Glue tables' rule (catalog/tables.py): lowercase, others become '_'."""
    name = re.sub(r"[^a-z0-9_]", "_", (options.table_prefix + topic).lower())
    if len(name) > 255:
        raise ValueError(f"table name for topic {topic!r} is {len(name)} characters; Glue allows 255")
    return name


def table_ident(cfg: ArchiveConfig, topic: str) -> str:
    """catalog.database.table of the topic's Iceberg table."""
    options = cfg.catalog or CatalogOptions()
    return f"{catalog_name(cfg)}.{options.database}.{table_name(topic, options)}"


def warehouse(cfg: ArchiveConfig) -> str:
    ice = cfg.iceberg or IcebergOptions()
    return ice.warehouse or f"s3://{cfg.bucket}/{cfg.prefix}_iceberg"


def catalog_conf(cfg: ArchiveConfig, endpoint: S3Endpoint) -> dict[str, str]:
    """The session settings of the archive's Iceberg catalog (no secret in them)."""
    ice = cfg.iceberg or IcebergOptions()
    props = {"catalog-impl": CATALOG_IMPL[ice.catalog], "warehouse": warehouse(cfg), "io-impl": S3_FILE_IO,
             "client.region": endpoint.region, "s3.path-style-access": str(endpoint.path_style).lower(),
             # every change reads the table's current metadata (the exactly-once check must not see a cached one)
             "cache-enabled": "false",
             # Iceberg 1.12 defaults to the SDK's Apache5 client, which the AWS SDK bundle of hadoop-aws (2.29.52)
             # does not have (NoClassDefFoundError: …/apache5/Apache5HttpClient$Builder); jvm/iceberg adds the SDK's
             # url-connection client of the bundle's version
             "http-client.type": "urlconnection"}
    if endpoint.s3_endpoint_url:
        props["s3.endpoint"] = endpoint.s3_endpoint_url
    if ice.catalog == "glue" and endpoint.glue_endpoint_url:
        props["glue.endpoint"] = endpoint.glue_endpoint_url
    if ice.catalog == "jdbc":
        # jdbc_uri is checked by IcebergOptions; the schema version with views support
        props |= {"uri": ice.jdbc_uri or "", "jdbc.schema-version": "V1"}
    name = f"spark.sql.catalog.{catalog_name(cfg)}"
    return {name: SPARK_CATALOG} | {f"{name}.{k}": v for k, v in props.items()}


def use_catalog(spark: SparkSession, cfg: ArchiveConfig, endpoint: S3Endpoint) -> str:
    """Set the archive's catalog on the session (before its first use; a catalog Spark has loaded keeps the
    settings it was loaded with); the catalog's name."""
    for key, value in catalog_conf(cfg, endpoint).items():
        if spark.conf.get(key, None) != value:
            spark.conf.set(key, value)
    return catalog_name(cfg)


def missing_metadata(e: BaseException, ident: str, cfg: ArchiveConfig) -> ArchiveIntegrityError | None:
    """An error of Iceberg's because the metadata file the catalog names for `ident` is gone (deleted under the
    table: a prefix emptied, a lifecycle rule, a hand), as one error naming the table, the file and what to do;
    None for any other error. No retry can help: the catalog keeps naming the missing file."""
    m = _METADATA_GONE.search(str(e))
    if m is None:
        return None
    ice = cfg.iceberg or IcebergOptions()
    name = ident.split(".", 1)[1]
    drop = (f"aws glue delete-table --database-name {name.split('.')[0]} --name {name.split('.')[1]}"
            if ice.catalog == "glue" else f"delete the row of {name} from the JDBC catalog's iceberg_tables")
    return ArchiveIntegrityError(
        f"Iceberg table {ident}: its {ice.catalog} catalog names the metadata file {m[1]}, which does not exist "
        "(deleted under the table), so the table cannot be read or written. Either put that file back (on a "
        "versioned bucket: copy its last version over it), or, if the table's files are gone for good, drop the "
        f"catalog's entry ({drop}; Spark's DROP TABLE needs the file) and delete the manifests of the topic's "
        "windows under the archive's prefix so that they are archived again into a new table")
