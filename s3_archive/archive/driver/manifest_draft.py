"""A window's manifest before its objects: what the run read of it and what it found, built once for every format.
commit.py fills in the objects a write job put (commit_window); iceberg_commit.py the table's data files and the
snapshot; both then write it with commit.py::put_manifest.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from s3_archive.__init__ import __version__
from s3_archive.archive.driver.archive_run import PendingWindow
from s3_archive.archive.driver.output import Output
from s3_archive.archive.protocol import RecordStats
from s3_archive.config.archive import ArchiveConfig
from s3_archive.model.manifest import MANIFEST_VERSION, Manifest, ManifestSchema, Retention, iso


def _until(committed: datetime, days: int) -> str:
    """committed + days, up to the next whole second: stores keep a RetainUntilDate to the second (versitygw), so
    that two attempts compare their locks as the store does."""
    return ((committed + timedelta(days=days)).replace(microsecond=0) + timedelta(seconds=1)).isoformat()


def manifest_draft(cfg: ArchiveConfig, p: PendingWindow, stats: RecordStats, spark_schema: str, attempt: str,
                   schemas: list[ManifestSchema] | None = None) -> Manifest:
    """The manifest of window `p` of archive `cfg` but for its objects (and `bytes_written`): its records'
    statistics (`stats`, whose `absent` ranges are listed), the offsets lost before it was read (`p.lost`), the
    stored columns' Spark schema, the attempt whose commit it records (format iceberg: the snapshot's), the registry
    schemas its records used (`schemas`: registry decoding)."""
    w, out, now = p.window, Output.of(cfg), datetime.now(UTC)
    lock = cfg.retention_lock
    return Manifest(
        manifest_version=MANIFEST_VERSION,
        generation=1,
        retention=None if lock is None else Retention(mode=lock.s3_mode, retain_until=_until(now, lock.days)),
        schemas=schemas,
        writer=f"s3-archive {__version__}",
        topic=p.where.topic,
        partition=w.partition,
        start_offset=w.start,
        end_offset=w.end,
        window_key=w.key,
        format=cfg.format,
        compression=cfg.codec,
        envelope=list(out.columns),
        value_decoding=cfg.value_decoding.type,
        undecodable_records=stats.undecodable,
        unplaceable_records=stats.unplaceable or None,
        skipped_records=stats.skipped or None,
        tombstones_skipped=stats.tombstones_skipped if out.skip_tombstones else None,
        restorable=cfg.restorable,
        record_count=stats.records - stats.skipped,
        bytes_read=stats.bytes_read,
        bytes_written=0,  # with the objects
        first_offset=stats.first_offset,
        last_offset=stats.last_offset,
        min_timestamp_ms=stats.min_timestamp_ms,
        max_timestamp_ms=stats.max_timestamp_ms,
        min_timestamp=iso(stats.min_timestamp_ms),
        max_timestamp=iso(stats.max_timestamp_ms),
        absent_offsets=stats.absent,
        absent_offsets_truncated=stats.absent_truncated,
        absent_offset_count=w.end - p.read_start - stats.records,
        lost_offsets=p.lost,
        spark_schema=spark_schema,
        attempt=attempt,
        committed_at=now.isoformat(),
        objects=[],
    )
