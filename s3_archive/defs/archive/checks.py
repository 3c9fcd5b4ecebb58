"""Asset checks on each archive asset: windows tile the offsets, committed objects are intact, Kafka has not
deleted anything before it was archived (or is about to), committed windows keep their manifests, no record
waits too long to be committed, committed windows re-read match their hashes (`verify`), a sample restores byte
for byte (`drill`, when configured), and, where the archive took over from a Kafka Connect sink, the sink's objects and
the windows meet with no gap or overlap. The verdicts are archive/health.py's; this is their Dagster side.

They scan every window of the topic, so the sensor's window runs leave them out; the daily schedule
(schedules.py) runs them, and they can be run from the UI at any time. The checks of a topic are one step
(a multi-asset check): the partition keys, the retirement record and the materialization status are read once
(`TopicView`, instance.py) and shared by whichever checks are selected. The offsets sensor also reports
`manifests_present` and `archive_fresh` at its ticks, from what it keeps in its cursor (upkeep.py).
"""

# No `from __future__ import annotations`: Dagster reads the context and resource annotations at definition time.

import re
import zlib
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import dagster as dg

from s3_archive.archive import health
from s3_archive.archive.health import Verdict, WindowsView
from s3_archive.archive.verify import verify_topic, verify_verdict
from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.foreign import ForeignSource
from s3_archive.defs.archive.instance import TopicView
from s3_archive.defs.archive.partitions import archive_asset_key
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.s3 import S3Client
from s3_archive.io.s3_resource import S3Resource
from s3_archive.restore.drill import drill_topic
from s3_archive.restore.foreign_sources import discover, last_objects

CONTIGUOUS = "windows_contiguous"
OBJECTS = "objects_match_manifests"
RETENTION = "nothing_lost_to_retention"
HEADROOM = "retention_headroom"
MANIFESTS = "manifests_present"
FRESH = "archive_fresh"
TAKE_OVER = "take_over_boundary"
VERIFY = "verify"
DRILL = "drill"


def check_result(v: Verdict) -> dg.AssetCheckResult:
    """A verdict as Dagster shows it: the problems (or what passed) as the description, their count and the first
    few as metadata, dicts and lists as JSON."""
    meta: dict[str, Any] = {k: dg.MetadataValue.json(x) if isinstance(x, (dict, list)) else x
                            for k, x in v.metadata.items()}
    return dg.AssetCheckResult(
        passed=v.passed, severity=dg.AssetCheckSeverity.WARN if v.warn else dg.AssetCheckSeverity.ERROR,
        description=health.summary(v.problems) if v.problems else v.ok,
        metadata={**meta, "problems": len(v.problems), "details": dg.MetadataValue.text(health.summary(v.problems))},
    )


def contiguity_result(instance: dg.DagsterInstance, topic: str, view: WindowsView | None = None,
                      ) -> dg.AssetCheckResult:
    return check_result(health.contiguity(topic, view or TopicView(instance, topic)))


def objects_result(instance: dg.DagsterInstance, s3: S3Client, cfg: ArchiveConfig, topic: str,
                   now: datetime | None = None, view: WindowsView | None = None) -> dg.AssetCheckResult:
    return check_result(health.objects(s3, cfg, topic, view or TopicView(instance, topic), now))


def retention_result(instance: dg.DagsterInstance, kafka: KafkaResource, topic: str,
                     view: WindowsView | None = None) -> dg.AssetCheckResult:
    return check_result(health.retention(kafka, topic, view or TopicView(instance, topic)))


def headroom_result(instance: dg.DagsterInstance, kafka: KafkaResource, cfg: ArchiveConfig, topic: str,
                    view: WindowsView | None = None) -> dg.AssetCheckResult:
    return check_result(health.headroom(kafka, cfg, topic, view or TopicView(instance, topic)))


def check_step_name(topic: str) -> str:
    """An op name for the topic's checks: topic names may hold '.' and '-', op names may not (hence the hash)."""
    return f"kafka_archive_checks_{re.sub(r'[^A-Za-z0-9_]', '_', topic)}_{zlib.crc32(topic.encode()):08x}"


def take_over_verdict(kafka: KafkaResource, s3: S3Client, cfg: ArchiveConfig, topic: str, sink: ForeignSource,
                      view: WindowsView) -> Verdict:
    """The boundary between the sink the archive took over from and its first windows (health.take_over_verdict),
    the sink's objects planned as a restore plans them: the archive and restore stages never import each other, so
    they meet here."""
    planned = discover(s3, sink, health.archive_starts(view))
    return health.take_over_verdict(kafka, cfg, topic, sink, view, last_objects(s3, sink, planned),
                                    planned.taken_over())


def drill_verdict(kafka: KafkaResource, s3: S3Client, cfg: ArchiveConfig, topic: str, log: Any) -> Verdict:
    """The restore drill's answer (restore/drill.py): the archive and restore stages meet here. A day no drill is
    due passes, saying when the last one (which passed) ran; after a failed drill every run drills again."""
    report = drill_topic(kafka, s3, cfg, topic, log)
    return Verdict(report.problems, report.ok, report.metadata())


def build_archive_checks(cfg: ArchiveConfig, topic: str, sink: ForeignSource | None = None,
                         ) -> list[dg.AssetChecksDefinition]:
    """The topic's checks as one multi-asset check (one step; any subset of them can run); `sink`: the foreign
    source the archive took over the topic from (adds the boundary check)."""
    key = archive_asset_key(topic)
    specs = {
        CONTIGUOUS: "Per Kafka partition, the windows (partition keys, and the retired range) neither overlap nor "
                    "leave gaps.",
        OBJECTS: "Every committed window's objects exist in S3 with the sizes in its manifest, and manifests cover the "
                 "retired windows; windows old enough for the lifecycle's expiration_days may be gone (counted as "
                 "expired).",
        RETENTION: "Kafka has not deleted (retention) offsets that are in no committed window.",
        HEADROOM: f"WARN when a partition's oldest unarchived record is older than {cfg.retention_warn_fraction:g} x "
                  "the topic's retention.ms.",
        MANIFESTS: "Every window Dagster saw committed still has its manifest in S3 (also reported by the offsets "
                   "sensor, which archives such windows again while Kafka holds their records).",
        VERIFY: f"Committed windows re-read (at most {cfg.verify.bytes_per_run} bytes a run, going on where the last "
                "run stopped): each object's SHA-256, size and key against its manifest, and each manifest against "
                "the hash the next one recorded (docs/compliance.md).",
        FRESH: "No record older than "
               + (f"{cfg.freshness_bound_seconds:g} s (flush.interval_seconds x freshness_factor)"
                  if cfg.freshness_bound_seconds is not None else "flush.interval_seconds x freshness_factor")
               + " is in no committed window (also reported by the offsets sensor).",
    }
    if cfg.drill is not None:
        specs[DRILL] = (f"Every {cfg.drill.every_days} day(s): the next committed windows (at most "
                        f"{cfg.drill.bytes_per_run} bytes of objects a drill, in rotation) restored into a scratch "
                        "topic with the restore's own path, read back and compared record by record with the "
                        "archive; restore_seconds_per_gb is the RTO evidence (docs/compliance.md).")
    if sink is not None:
        specs[TAKE_OVER] = (f"Per Kafka partition, the last object of sink {sink.name!r} ends where the first window "
                            "starts: Kafka's records in between counted, no gap (ERROR) and no overlap (WARN).")

    @dg.multi_asset_check(specs=[dg.AssetCheckSpec(n, asset=key, description=d) for n, d in specs.items()],
                          name=check_step_name(topic), can_subset=True,
                          description=f"The asset checks of {topic!r}, reading the instance once.")
    def _checks(context: dg.AssetCheckExecutionContext, kafka: KafkaResource,
                s3: S3Resource) -> Iterator[dg.AssetCheckResult]:
        view = TopicView(context.instance, topic)
        selected = {k.name for k in context.selected_asset_check_keys}
        run = {
            CONTIGUOUS: lambda: health.contiguity(topic, view),
            # Windows S3 expired under the archive's lifecycle expiration_days are reported as expired, not missing.
            OBJECTS: lambda: health.objects(s3.get_client(), cfg, topic, view),
            RETENTION: lambda: health.retention(kafka, topic, view),
            HEADROOM: lambda: health.headroom(kafka, cfg, topic, view),
            MANIFESTS: lambda: health.manifests_present(s3.get_client(), cfg, topic, view,
                                                    health.log_start(kafka, topic)),
            FRESH: lambda: health.freshness(kafka, cfg, topic, view),
            VERIFY: lambda: verify_verdict(verify_topic(s3.get_client(), cfg, topic), cfg),
            DRILL: lambda: drill_verdict(kafka, s3.get_client(), cfg, topic, context.log),
            TAKE_OVER: lambda: take_over_verdict(kafka, s3.get_client(), cfg, topic, sink, view),  # type: ignore[arg-type]
        }
        for name in specs:
            if name in selected:
                r = check_result(run[name]())
                yield dg.AssetCheckResult(asset_key=key, check_name=name, passed=r.passed, severity=r.severity,
                                          description=r.description, metadata=r.metadata)

    return [_checks]
