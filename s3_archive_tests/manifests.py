"""Manifests for windows that tests write by hand (objects put straight into moto, no Spark): complete manifests of
today's shape, so every reader meets what the archive writes."""

from __future__ import annotations

from typing import Any

from s3_archive.model.manifest import MANIFEST_VERSION, Manifest, ManifestObject
from s3_archive.model.windows import OffsetWindow


def hand_manifest(topic: str = "t", window: OffsetWindow = OffsetWindow(0, 0, 10),
                  objects: list[dict[str, Any]] | None = None, **fields: Any) -> Manifest:
    """A committed window's manifest: every record of `window` present, no timestamps, parquet; `fields`
    override any field (e.g. format, compression, record_count, restorable, committed_at)."""
    objs = [ManifestObject(**o) for o in objects or []]
    values: dict[str, Any] = {
        "manifest_version": MANIFEST_VERSION, "writer": "s3_archive_tests", "topic": topic,
        "partition": window.partition, "start_offset": window.start, "end_offset": window.end,
        "window_key": window.key, "format": "parquet", "compression": "none", "record_count": window.size,
        "bytes_read": 0, "bytes_written": sum(o.size for o in objs), "first_offset": window.start,
        "last_offset": window.end - 1, "min_timestamp_ms": None, "max_timestamp_ms": None, "min_timestamp": None,
        "max_timestamp": None, "absent_offsets": [], "absent_offsets_truncated": False, "absent_offset_count": 0,
        "lost_offsets": [], "schema": "{}", "attempt": "by-hand", "committed_at": "2024-01-01T00:00:00+00:00",
        "objects": objs,
    }
    return Manifest.model_validate({**values, **fields})
