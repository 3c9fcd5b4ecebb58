"""Where an archive of `format: iceberg` keeps its tables (`iceberg:` of an archive): which catalog, and where the
table data lives. The database and table names come from `catalog:` (config/catalog.py), as for Glue tables."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from s3_archive.model.base import StrictModel

ICEBERG_CATALOGS = ("glue", "jdbc")
_COLUMN = r"[A-Za-z_][A-Za-z0-9_]*"
# Iceberg's partition transforms, in its own SQL syntax: identity, time of the record timestamp, bucket.
PARTITION_TRANSFORM = re.compile(
    rf"(?P<identity>{_COLUMN})|identity\((?P<identity2>{_COLUMN})\)"
    rf"|(?P<time>years|months|days|hours)\(timestamp\)"
    rf"|bucket\((?P<buckets>[1-9][0-9]{{0,5}}),\s*(?P<bucket>{_COLUMN})\)")


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

    partition_by: list[str] = Field(
        default=["partition"], description="the table's partition spec, Iceberg transforms of its columns: a "
        "column (identity), days(timestamp) / hours(timestamp) / months / years, bucket(N, column)")
    snapshot_retention_days: float = Field(
        default=7, gt=0, description="the maintenance asset expires snapshots older than this (Iceberg's "
                                     "expire_snapshots), keeping at least retain_last")
    retain_last: int = Field(default=10, ge=1, description="snapshots always kept by the maintenance asset")
    orphan_file_days: float = Field(
        default=3, ge=1, description="the maintenance asset removes files under a table that no snapshot "
                                     "references and that are older than this (remove_orphan_files); an attempt "
                                     "still writing its data files is younger")

    def partition_columns(self) -> list[str]:
        """The table columns the partition spec reads."""
        out = []
        for t in self.partition_by:
            m = PARTITION_TRANSFORM.fullmatch(t)
            assert m is not None  # checked by _transforms
            out.append("timestamp" if m["time"] else m["identity"] or m["identity2"] or m["bucket"])
        return out

    @field_validator("warehouse")
    @classmethod
    def _warehouse(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith("s3://"):
            raise ValueError(f"must be an s3:// URI (s3://bucket/path), got {v!r}")
        return v.rstrip("/") if v else v

    @field_validator("partition_by")
    @classmethod
    def _transforms(cls, v: list[str]) -> list[str]:
        for i, t in enumerate(v):
            if not PARTITION_TRANSFORM.fullmatch(t.strip()):
                raise ValueError(f"partition_by[{i}] {t!r} is not a partition transform; allowed: a column name "
                                 "(identity), days(timestamp), hours(timestamp), months(timestamp), "
                                 "years(timestamp), bucket(N, column)")
        return [t.strip() for t in v]

    @model_validator(mode="after")
    def _jdbc(self) -> IcebergOptions:
        if self.catalog == "jdbc" and not (self.jdbc_uri or "").startswith("jdbc:"):
            raise ValueError(f"catalog 'jdbc' needs jdbc_uri (a jdbc: URL, e.g. jdbc:sqlite:/path/iceberg.db), "
                             f"got {self.jdbc_uri!r}")
        if self.catalog != "jdbc" and self.jdbc_uri is not None:
            raise ValueError(f"jdbc_uri applies to catalog 'jdbc' only, not {self.catalog!r}")
        return self
