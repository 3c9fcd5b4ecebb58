"""A Spark JVM without Iceberg's runtime (a Connect server or executors started without jvm/iceberg's jars) fails
an Iceberg window with an error that names the missing class and where the jars go; other errors pass unchanged."""

from __future__ import annotations

import pytest

from s3_archive.archive.driver.iceberg_commit import _explained
from s3_archive.archive.failures import permanent
from s3_archive.config.archive import ArchiveConfig
from s3_archive.io.iceberg_catalog import table_ident
from s3_archive.model.errors import ArchiveIntegrityError, MissingJars

MISSING = [
    # the driver (a Connect server's): Spark cannot load the catalog's plugin class
    ("[INTERNAL_ERROR] Cannot find catalog plugin class for catalog 's3archive_orders': "
     "org.apache.iceberg.spark.SparkCatalog. SQLSTATE: XX000", "org.apache.iceberg.spark.SparkCatalog"),
    # an executor: a task deserializes Iceberg's write classes
    ("Job aborted due to stage failure: ... java.lang.ClassNotFoundException: org.apache.iceberg.spark.source."
     "SparkWrite$WriterFactory\n\tat java.base/...", "org.apache.iceberg.spark.source.SparkWrite$WriterFactory"),
    ("java.lang.NoClassDefFoundError: org/apache/iceberg/io/FileIO", "org.apache.iceberg.io.FileIO"),
]


@pytest.mark.parametrize(("message", "missing"), MISSING)
def test_a_jvm_without_icebergs_runtime_is_told_which_jars_go_where(message, missing):
    e = _explained(RuntimeError(message))
    assert isinstance(e, MissingJars)
    assert f"(class {missing} not found)" in str(e)
    assert "jars/iceberg" in str(e) and "worker_jars_dir" in str(e) and "Spark Connect server" in str(e)


def test_other_missing_classes_and_errors_pass_unchanged():
    # an AWS SDK class missing under Iceberg's frames is the SDK bundle's problem, not Iceberg's runtime
    sdk = RuntimeError("java.lang.NoClassDefFoundError: software/amazon/awssdk/http/apache5/Apache5HttpClient$Builder"
                       "\n\tat org.apache.iceberg.aws.HttpClientProperties.applyHttpClientConfigurations")
    other = RuntimeError("org.apache.iceberg.exceptions.ValidationException: Found conflicting files")
    assert _explained(sdk) is sdk and _explained(other) is other


GONE = ("An error occurred while calling o4446.tableExists.\n: org.apache.iceberg.exceptions.NotFoundException: "
        "Location does not exist: s3://bench/fmt-iceberg/_iceberg/s3_archive/bench/metadata/00001-439c4f46.metadata.json"
        "\n\tat org.apache.iceberg.aws.s3.S3InputStream.openStream(S3InputStream.java:263)")


@pytest.mark.parametrize("catalog", ["glue", "jdbc"])
def test_a_table_whose_metadata_file_is_gone_fails_once_naming_the_table_the_file_and_what_to_do(catalog):
    iceberg = {"catalog": "jdbc", "jdbc_uri": "jdbc:sqlite:/tmp/i.db"} if catalog == "jdbc" else {}
    cfg = ArchiveConfig(name="bench", topics=["orders"], bucket="bench", prefix="fmt-iceberg/", format="iceberg",
                        iceberg=iceberg)
    ident = table_ident(cfg, "orders")
    e = _explained(RuntimeError(GONE), ident, cfg)
    assert isinstance(e, ArchiveIntegrityError) and permanent(e)  # no retry: the catalog keeps naming the file
    text = str(e)
    assert text.startswith(f"Iceberg table {ident}: its {catalog} catalog names the metadata file "
                           "s3://bench/fmt-iceberg/_iceberg/s3_archive/bench/metadata/00001-439c4f46.metadata.json, "
                           "which does not exist")
    assert ("aws glue delete-table --database-name s3_archive --name orders" in text) == (catalog == "glue")
    assert "put that file back" in text and "manifests" in text
    other = RuntimeError("org.apache.iceberg.exceptions.NotFoundException: Location does not exist: "
                         "s3://b/t/data/00000-1.parquet")  # a data file, not the table's metadata: unchanged
    assert _explained(other, ident, cfg) is other
