"""Every archive's automation in one set of definitions: its offsets sensor, with `continuous` its continuous job and
sensor, its topics' asset checks, the daily check schedule, with `retire_after_days` the window retirement, and the
`erase` job."""

from __future__ import annotations

import dagster as dg

from s3_archive.config.settings import Settings
from s3_archive.defs.archive.checks import build_archive_checks
from s3_archive.defs.archive.continuous_job import build_continuous
from s3_archive.defs.archive.erase_job import build_erase_job
from s3_archive.defs.archive.schedules import build_checks_schedule, build_retire_schedule
from s3_archive.defs.archive.sensors import build_offsets_sensor


def build_archive_automation(settings: Settings) -> dg.Definitions:
    """Sensors, asset checks, the daily check schedule and the window retirement of every archive (needs the `kafka`
    and `s3` resources)."""
    sensors, checks, jobs, schedules = [], [], [], []
    for cfg in settings.archives:
        sensors.append(build_offsets_sensor(cfg))
        if cfg.continuous is not None:
            job, sensor = build_continuous(cfg)
            jobs.append(job)
            sensors.append(sensor)
        for topic in cfg.topics:
            checks += build_archive_checks(cfg, topic, settings.predecessor(cfg.name, topic))
        job, schedule = build_checks_schedule(cfg)
        jobs.append(job)
        schedules.append(schedule)
        if cfg.retire_after_days is not None:
            job, schedule = build_retire_schedule(cfg)
            jobs.append(job)
            schedules.append(schedule)
    jobs.append(build_erase_job(settings))
    return dg.Definitions(sensors=sensors, asset_checks=checks, jobs=jobs, schedules=schedules)
