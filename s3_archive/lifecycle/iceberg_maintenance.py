"""Maintenance of an archive's Iceberg tables (`format: iceberg`): snapshot expiration and orphan file removal,
through Iceberg's own Spark procedures — never raw S3 deletes under a table, which would leave its metadata
pointing to missing files.

- `expire_snapshots`: snapshots older than `snapshot_retention_days` (keeping `retain_last`) are dropped with the
  files only they reference. The archive only adds files (its overwrite of a window's rows deletes none unless a
  window was committed twice, which the validation prevents), so every window's data files stay referenced (an
  erasure commits a window's rows again and expires every older snapshot at once: erasure/iceberg_erase.py).
- `remove_orphan_files`: files under the table's location that no snapshot references and that are older than
  `orphan_file_days` (the data files of attempts that failed before their commit). Listed through the table's
  FileIO (`prefix_listing`), not Hadoop's file systems.
Snapshot summaries of expired snapshots go with them; the windows' manifests stay the record (docs/commit-protocol.md).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.iceberg import IcebergOptions
from s3_archive.io.iceberg_catalog import S3Endpoint, missing_metadata, table_ident, use_catalog


def _ts(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def maintain_table(spark: Any, cfg: ArchiveConfig, topic: str, endpoint: S3Endpoint,
                   now: datetime | None = None) -> dict[str, Any]:
    """Expire old snapshots and remove orphan files of the topic's table; what was done (counts). `now` moves the
    snapshot cutoff (tests); the orphan cutoff never passes the wall clock (Iceberg refuses one under 24 hours ago:
    a younger file may belong to a commit in progress)."""
    ice = cfg.iceberg or IcebergOptions()
    wall = datetime.now(UTC)
    now = now or wall
    catalog = use_catalog(spark, cfg, endpoint)
    ident = table_ident(cfg, topic)
    name = ident.split(".", 1)[1]
    try:
        if not spark.catalog.tableExists(ident):
            return {"table": ident, "exists": False}
    except Exception as e:
        if (gone := missing_metadata(e, ident, cfg)) is not None:
            raise gone from None
        raise
    expired = expire_snapshots(spark, ident, now - timedelta(days=ice.snapshot_retention_days), ice.retain_last)
    orphans = spark.sql(
        f"CALL {catalog}.system.remove_orphan_files(table => '{name}', "
        f"older_than => TIMESTAMP '{_ts(min(now, wall) - timedelta(days=ice.orphan_file_days))}', "
        "prefix_listing => true)"
    ).collect()
    return {"table": ident, "exists": True, **expired, "orphan_files_removed": len(orphans)}


def expire_snapshots(spark: Any, ident: str, older_than: datetime, retain_last: int) -> dict[str, int]:
    """Iceberg's expire_snapshots on the table `ident` (catalog.database.table, its catalog set on the session):
    snapshots older than `older_than` dropped, keeping the last `retain_last`, with the files only they referenced;
    how many of each kind of file it deleted."""
    catalog, name = ident.split(".", 1)
    # The session's time zone is UTC (SparkResource), so the literal is UTC.
    expired = spark.sql(
        f"CALL {catalog}.system.expire_snapshots(table => '{name}', older_than => TIMESTAMP '{_ts(older_than)}', "
        f"retain_last => {retain_last})").collect()[0].asDict()
    return {"expired_data_files": int(expired.get("deleted_data_files_count") or 0),
            "expired_manifest_files": int(expired.get("deleted_manifest_files_count") or 0),
            "expired_manifest_lists": int(expired.get("deleted_manifest_lists_count") or 0)}
