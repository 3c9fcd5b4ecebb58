"""Where an archive of `format: iceberg` keeps its tables (`iceberg:` of an archive): which catalog, and where the
table data lives. The database and table names come from `catalog:` (config/catalog.py), as for Glue tables."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from s3_archive.model.base import StrictModel

ICEBERG_CATALOGS = ("glue", "jdbc")


class IcebergOptions(StrictModel):
    """The Iceberg catalog of an archive: AWS Glue (the S3Resource's region, credentials and Glue endpoint), or a
    JDBC catalog (e.g. SQLite or PostgreSQL) where Glue is not used."""

    catalog: Literal["glue", "jdbc"] = "glue"
    jdbc_uri: str | None = Field(
        default=None, description="jdbc only: the catalog database, e.g. jdbc:sqlite:/var/lib/s3-archive/"
                                  "iceberg.db or jdbc:postgresql://host/db (credentials from the environment)")
    warehouse: str | None = Field(
        default=None, description="s3://bucket/path under which new tables are created; None: "
                                  "s3://<bucket>/<prefix>_iceberg")

    snapshot_retention_days: float = Field(
        default=7, gt=0, description="the maintenance asset expires snapshots older than this (Iceberg's "
                                     "expire_snapshots), keeping at least retain_last")
    retain_last: int = Field(default=10, ge=1, description="snapshots always kept by the maintenance asset")
    orphan_file_days: float = Field(
        default=3, ge=1, description="the maintenance asset removes files under a table that no snapshot "
                                     "references and that are older than this (remove_orphan_files); an attempt "
                                     "still writing its data files is younger")

    @field_validator("warehouse")
    @classmethod
    def _warehouse(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith("s3://"):
            raise ValueError(f"must be an s3:// URI (s3://bucket/path), got {v!r}")
        return v.rstrip("/") if v else v

    @model_validator(mode="after")
    def _jdbc(self) -> IcebergOptions:
        if self.catalog == "jdbc" and not (self.jdbc_uri or "").startswith("jdbc:"):
            raise ValueError(f"catalog 'jdbc' needs jdbc_uri (a jdbc: URL, e.g. jdbc:sqlite:/path/iceberg.db), "
                             f"got {self.jdbc_uri!r}")
        if self.catalog != "jdbc" and self.jdbc_uri is not None:
            raise ValueError(f"jdbc_uri applies to catalog 'jdbc' only, not {self.catalog!r}")
        return self
