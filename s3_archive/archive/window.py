"""Archive one window: check Kafka still has it, stage it with Spark, commit it exactly once.

This is the whole materialization of one Dagster partition; the asset (defs/archive/assets.py) only maps
partition keys to windows and reports the results.

"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from s3_archive.__init__ import __version__
from s3_archive.archive.commit import CommitResult, Fault, clean_staging, commit_window, no_fault
from s3_archive.archive.write import (
    Output,
    StageStats,
    UndecodableValue,
    absent_ranges,
    absent_ranges_from_kafka,
    stage_window,
)
from s3_archive.config.archive import ArchiveConfig
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.s3 import read_manifest, verify_manifest
from s3_archive.keys.objects import dead_letter_stem, manifest_key, staging_prefix
from s3_archive.model.errors import ArchiveIntegrityError, DataLoss, WindowNotAvailable
from s3_archive.model.formats import FORMATS
from s3_archive.model.manifest import MANIFEST_VERSION, Manifest
from s3_archive.model.windows import OffsetWindow


@dataclass(frozen=True)
class WindowResult:
    window: OffsetWindow
    manifest: Manifest
    outcome: str  # "committed" | "already_committed" | "committed_by_concurrent_attempt"
    seconds: float

    def metadata(self, bucket: str, manifest_key: str) -> dict[str, Any]:
        m = self.manifest
        records = m.record_count
        return {
            "outcome": self.outcome,
            "records": records,
            "bytes_read": m.bytes_read,
            "bytes_written": m.bytes_written,
            "objects": len(m.objects),
            "first_offset": m.first_offset,
            "last_offset": m.last_offset,
            "min_timestamp": m.min_timestamp,
            "max_timestamp": m.max_timestamp,
            "absent_offsets": m.absent_offset_count,
            "lost_offsets": m.lost_offset_count,
            "undecodable_records": m.undecodable_records or 0,
            "seconds": round(self.seconds, 3),
            "records_per_second": round(records / self.seconds, 1) if self.seconds > 0 else 0.0,
            "manifest": f"s3://{bucket}/{manifest_key}",
        }


def _iso(ms: int | None) -> str | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def _loss(cfg: ArchiveConfig, topic: str, window: OffsetWindow, lost_to: int, earliest: int, log: Any) -> list[int]:
    msg = (f"topic {topic!r} partition {window.partition}: offsets [{window.start}, {lost_to}) of window "
           f"{window.key} are no longer in Kafka (deleted by retention); earliest available offset is {earliest}")
    if cfg.on_data_loss == "fail":
        raise DataLoss(msg + ". To archive what is left and record the gap, set on_data_loss: record_gap")
    log.warning(msg + "; recording the gap in the manifest (on_data_loss: record_gap)")
    return [window.start, lost_to]


def archive_window(spark: Any, kafka: KafkaResource, s3: Any, cfg: ArchiveConfig, topic: str,
                   window: OffsetWindow, log: Any, fault: Fault = no_fault) -> WindowResult:
    t0 = time.monotonic()
    mkey = manifest_key(cfg.prefix, topic, window)
    existing = read_manifest(s3, cfg.bucket, mkey)
    if existing is not None:
        problems = verify_manifest(s3, cfg.bucket, existing)
        if problems:
            raise ArchiveIntegrityError(
                f"window {window.key} of {topic!r} is committed (s3://{cfg.bucket}/{mkey}) but its objects do not "
                f"match the manifest: {'; '.join(problems[:5])}. Restore the objects, or delete the manifest to "
                "archive the window again")
        clean_staging(s3, cfg.bucket, cfg.prefix, topic, window)
        return WindowResult(window, existing, "already_committed", time.monotonic() - t0)

    earliest = kafka.offsets(topic, "earliest", [window.partition])[window.partition]
    latest = kafka.offsets(topic, "latest", [window.partition])[window.partition]
    if window.end > latest:
        raise WindowNotAvailable(f"window {window.key} of {topic!r} ends at offset {window.end}, but partition "
                                 f"{window.partition} has only reached offset {latest} (high watermark)")
    lost: list[list[int]] = []
    read_start = window.start
    if earliest > window.start:
        lost.append(_loss(cfg, topic, window, min(earliest, window.end), earliest, log))
        read_start = lost[0][1]

    fmt = FORMATS[cfg.format]
    out = Output.of(cfg)
    attempt = f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    staging = staging_prefix(cfg.prefix, topic, window, attempt)
    staging_uri = f"s3a://{cfg.bucket}/{staging}"
    dead_attempt = f"{attempt}-dead-letter" if out.on_error == "dead_letter" else None
    dead_uri = (f"s3a://{cfg.bucket}/{staging_prefix(cfg.prefix, topic, window, dead_attempt)}"
                if dead_attempt else None)
    if read_start < window.end:
        try:
            stats = stage_window(spark, kafka.spark_options(), topic, window, read_start, out, staging_uri, dead_uri)
        except UndecodableValue:
            clean_staging(s3, cfg.bucket, cfg.prefix, topic, window)
            raise
    else:
        stats = StageStats(0, 0, None, None, None, None, "{}")

    # Retention may have moved while Spark read: records before the first one we got may be gone.
    earliest_after = kafka.offsets(topic, "earliest", [window.partition])[window.partition]
    first_seen = stats.first_offset if stats.first_offset is not None else window.end
    if earliest_after > read_start and first_seen > read_start:
        lost_to = min(earliest_after, first_seen)
        lost.append(_loss(cfg, topic, OffsetWindow(window.partition, read_start, window.end), lost_to,
                          earliest_after, log))
        read_start = lost_to

    absent: list[list[int]] = []
    truncated = False
    expected = window.end - read_start
    if stats.records != expected and stats.records > 0:
        if stats.offsets_in_output:
            absent, truncated = absent_ranges(spark, fmt, staging_uri, stats.schema_json, read_start, window.end)
        else:  # the output lacks some offsets (no metadata, text formats, dead letters): re-read them from Kafka
            absent, truncated = absent_ranges_from_kafka(spark, kafka.spark_options(), topic, window.partition,
                                                         read_start, window.end)
    elif stats.records == 0 and expected > 0:
        absent = [[read_start, window.end]]

    draft = Manifest(
        manifest_version=MANIFEST_VERSION,
        writer=f"s3-archive {__version__}",
        topic=topic,
        partition=window.partition,
        start_offset=window.start,
        end_offset=window.end,
        window_key=window.key,
        format=cfg.format,
        compression=cfg.codec,
        envelope=list(out.columns),
        value_decoding=cfg.value_decoding.type,
        undecodable_records=stats.undecodable,
        restorable=cfg.restorable,
        record_count=stats.records,
        bytes_read=stats.bytes_read,
        bytes_written=0,  # commit_window fills in the objects
        first_offset=stats.first_offset,
        last_offset=stats.last_offset,
        min_timestamp_ms=stats.min_timestamp_ms,
        max_timestamp_ms=stats.max_timestamp_ms,
        min_timestamp=_iso(stats.min_timestamp_ms),
        max_timestamp=_iso(stats.max_timestamp_ms),
        absent_offsets=absent,
        absent_offsets_truncated=truncated,
        absent_offset_count=expected - stats.records,
        lost_offsets=lost,
        spark_schema=stats.schema_json,
        attempt=attempt,
        committed_at=datetime.now(UTC).isoformat(),
        objects=[],
    )
    if stats.undecodable:
        log.warning(f"window {window.key} of {topic!r}: {stats.undecodable} record(s) with an undecodable value "
                    f"(first at offset {stats.first_undecodable_offset}) go to "
                    f"s3://{cfg.bucket}/{dead_letter_stem(cfg.prefix, topic, window)}…")
    result: CommitResult = commit_window(s3, cfg.bucket, cfg.prefix, topic, window, attempt,
                                         fmt.object_suffix(cfg.codec), draft,
                                         stats.records > stats.undecodable, fault, per_record=fmt.name == "bytes",
                                         dead_letter_attempt=dead_attempt if stats.undecodable else None,
                                         out_layout=cfg.layout, publish_codec=fmt.publish_codec(cfg.codec))
    outcome = "committed" if result.committed_by_us else "committed_by_concurrent_attempt"
    return WindowResult(window, result.manifest, outcome, time.monotonic() - t0)
