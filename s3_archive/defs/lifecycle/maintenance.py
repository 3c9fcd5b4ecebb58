"""The Iceberg maintenance asset: one per archive of `format: iceberg`; expires old snapshots and removes orphan
files of the archive's tables through Iceberg's Spark procedures (s3_archive/lifecycle/iceberg_maintenance.py), daily at
06:00 UTC and on demand. The S3 lifecycle rules never expire anything under an Iceberg table (config/archive.py)."""

# No `from __future__ import annotations`: Dagster reads the context and resource annotations at definition time.

import dagster as dg

from s3_archive.config.archive import ArchiveConfig
from s3_archive.io.iceberg_catalog import S3Endpoint, table_ident
from s3_archive.io.s3_resource import S3Resource
from s3_archive.io.spark import SparkResource
from s3_archive.lifecycle.iceberg_maintenance import maintain_table
from s3_archive.model.formats import FORMATS

MAINTENANCE_PREFIX = "iceberg_maintenance"
MAINTENANCE_CRON = "0 6 * * *"
MAINTENANCE_AUTOMATION = (
    dg.AutomationCondition.cron_tick_passed(MAINTENANCE_CRON, "UTC").since_last_handled()
    & ~dg.AutomationCondition.in_progress()
).with_label("daily")


def maintenance_asset_key(archive: str) -> dg.AssetKey:
    return dg.AssetKey([MAINTENANCE_PREFIX, archive])


def build_iceberg_maintenance_asset(cfg: ArchiveConfig) -> dg.AssetsDefinition:
    tables = [table_ident(cfg, t) for t in cfg.topics]

    @dg.asset(
        key=maintenance_asset_key(cfg.name),
        automation_condition=MAINTENANCE_AUTOMATION,
        group_name=f"archive_{cfg.name}",
        kinds={"iceberg", "spark"},
        metadata={"tables": dg.MetadataValue.json(tables)},
        description=f"Iceberg maintenance of archive {cfg.name!r}: expire_snapshots and remove_orphan_files of "
                    f"its {len(tables)} table(s) (docs/formats.md, Iceberg). Never deletes S3 objects directly.",
    )
    def _maintain(context: dg.AssetExecutionContext, spark: SparkResource, s3: S3Resource) -> dg.MaterializeResult:
        endpoint = S3Endpoint.of_resource(s3)
        done = [maintain_table(spark.session(), cfg, t, endpoint) for t in cfg.topics]
        for d in done:
            context.log.info(f"{d['table']}: {d}")
        return dg.MaterializeResult(metadata={
            "tables": dg.MetadataValue.json(done),
            "expired_data_files": sum(d.get("expired_data_files", 0) for d in done),
            "orphan_files_removed": sum(d.get("orphan_files_removed", 0) for d in done),
        })

    return _maintain


def build_iceberg_maintenance_assets(archives: list[ArchiveConfig]) -> list[dg.AssetsDefinition]:
    return [build_iceberg_maintenance_asset(a) for a in archives if FORMATS[a.format].table]
