"""A daily run of every asset check of an archive (the checks are left out of the sensor's window runs)."""

from __future__ import annotations

import dagster as dg

from s3_archive.config.archive import ArchiveConfig
from s3_archive.defs.archive.partitions import archive_asset_key

# 06:00 UTC: after a night of windows, before people look at the dashboards.
CHECKS_CRON = "0 6 * * *"


def checks_job_name(cfg: ArchiveConfig) -> str:
    return f"archive_{cfg.name}_checks"


def build_checks_schedule(cfg: ArchiveConfig) -> tuple[dg.UnresolvedAssetJobDefinition, dg.ScheduleDefinition]:
    """The archive's checks-only job (no window is materialized) and its daily schedule."""
    job = dg.define_asset_job(
        checks_job_name(cfg),
        selection=dg.AssetSelection.checks_for_assets(*[archive_asset_key(t) for t in cfg.topics]),
        description=f"Asset checks of archive {cfg.name!r}: contiguity, S3 objects, retention, retention headroom.",
    )
    schedule = dg.ScheduleDefinition(name=f"{checks_job_name(cfg)}_daily", cron_schedule=CHECKS_CRON, job=job,
                                     execution_timezone="UTC", default_status=dg.DefaultScheduleStatus.STOPPED)
    return job, schedule
