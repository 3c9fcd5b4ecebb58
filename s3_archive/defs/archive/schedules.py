"""An archive's two daily jobs: every asset check (the checks are left out of the sensor's window runs), and the
retirement of windows older than `retire_after_days` from the partition set (docs/windows.md)."""

# No `from __future__ import annotations`: Dagster reads the context and resource annotations at definition time.

from datetime import UTC, datetime

import dagster as dg

from s3_archive.config.archive import ArchiveConfig
from s3_archive.defs.archive.instance import retire_topic
from s3_archive.defs.archive.partitions import archive_asset_key
from s3_archive.io.s3_resource import S3Resource

# 06:00 UTC: after a night of windows, before people look at the dashboards.
CHECKS_CRON = "0 6 * * *"
RETIRE_CRON = "30 5 * * *"  # daily, before the checks, which then see the retired ranges


def checks_job_name(cfg: ArchiveConfig) -> str:
    return f"archive_{cfg.name}_checks"


def build_checks_schedule(cfg: ArchiveConfig) -> tuple["dg.UnresolvedAssetJobDefinition", dg.ScheduleDefinition]:
    """The archive's checks-only job (no window is materialized) and its daily schedule."""
    job = dg.define_asset_job(
        checks_job_name(cfg),
        selection=dg.AssetSelection.checks_for_assets(*[archive_asset_key(t) for t in cfg.topics]),
        description=f"Asset checks of archive {cfg.name!r}: contiguity, S3 objects, retention, retention headroom.",
    )
    schedule = dg.ScheduleDefinition(name=f"{checks_job_name(cfg)}_daily", cron_schedule=CHECKS_CRON, job=job,
                                     execution_timezone="UTC", default_status=dg.DefaultScheduleStatus.STOPPED)
    return job, schedule


def retire_job_name(cfg: ArchiveConfig) -> str:
    return f"archive_{cfg.name}_retire_windows"


def build_retire_schedule(cfg: ArchiveConfig) -> tuple[dg.JobDefinition, dg.ScheduleDefinition]:
    """The archive's retirement job (one op over its topics) and its daily schedule (running by default: it is what
    keeps the partition set bounded)."""

    @dg.op(name=f"archive_{cfg.name}_retire", description=f"Retire windows of {', '.join(cfg.topics)} committed more "
                                                           f"than {cfg.retire_after_days:g} days ago.")
    def _retire(context: dg.OpExecutionContext, s3: S3Resource) -> None:
        client = s3.get_client()
        now = datetime.now(UTC)
        for topic in cfg.topics:
            r = retire_topic(context.instance, client, cfg, topic, now, context.log)
            context.log.info(f"topic {topic!r}: {r.retired} windows retired, {r.runs_deleted} runs deleted"
                             + "".join(f"; partition {p} keeps the rest: {why}" for p, why in sorted(r.kept.items())))

    @dg.job(name=retire_job_name(cfg), description=f"Window retirement of archive {cfg.name!r} (docs/windows.md).")
    def _job() -> None:
        _retire()

    schedule = dg.ScheduleDefinition(name=f"{retire_job_name(cfg)}_daily", cron_schedule=RETIRE_CRON, job=_job,
                                     execution_timezone="UTC", default_status=dg.DefaultScheduleStatus.RUNNING)
    return _job, schedule
