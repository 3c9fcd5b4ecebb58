"""The capture sensors: one per archive with `disaster_recovery.enabled`, running from the start, evaluated at
most every `snapshot_interval_seconds`; each tick keeps the archived topics' configs and the ACLs when they changed
and a snapshot of the consumer groups' committed offsets (recovery/capture.py)."""

# No `from __future__ import annotations`: Dagster reads the context annotation at definition time.

import time

import dagster as dg

from s3_archive.config.archive import ArchiveConfig
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.s3_resource import S3Resource
from s3_archive.model.errors import UserError
from s3_archive.recovery.capture import capture


def capture_sensor_name(cfg: ArchiveConfig) -> str:
    return f"dr_capture_{cfg.name}"


def build_capture_sensor(cfg: ArchiveConfig) -> dg.SensorDefinition:
    @dg.sensor(name=capture_sensor_name(cfg), minimum_interval_seconds=cfg.disaster_recovery.snapshot_interval_seconds,
               default_status=dg.DefaultSensorStatus.RUNNING,
               description=f"Keeps beside archive {cfg.name!r} (s3://{cfg.bucket}/{cfg.prefix}_dr/) its topics' "
                           "configs and ACLs when they change, and the consumer groups' committed offsets every "
                           f"{cfg.disaster_recovery.snapshot_interval_seconds}s (docs/disaster-recovery.md)")
    def _capture(context: dg.SensorEvaluationContext, kafka: KafkaResource, s3: S3Resource) -> dg.SkipReason:
        try:
            rep = capture(kafka, s3.get_client(), cfg, int(time.time() * 1000), groups_due=True)
        except UserError as e:
            return dg.SkipReason(f"capture failed: {type(e).__name__}: {e}")
        if rep.acls.startswith("not captured"):
            context.log.warning(f"ACLs {rep.acls}")
        return dg.SkipReason(f"captured: configs written for {rep.topics_written or 'no topic (unchanged)'}; "
                             f"{len(rep.groups)} groups' offsets; ACLs {rep.acls}")

    return _capture


def build_capture_sensors(archives: list[ArchiveConfig]) -> list[dg.SensorDefinition]:
    return [build_capture_sensor(a) for a in archives if a.disaster_recovery.enabled]
