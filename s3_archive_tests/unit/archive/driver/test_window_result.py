"""The archive asset's per-window metadata, read from the typed manifest: the same keys and values as from the
manifest's JSON, for today's manifests and for those from before the output options."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from s3_archive.archive.driver.coordinator import WindowResult
from s3_archive.keys.objects import WindowLocation, manifest_key
from s3_archive.model.manifest import parse_manifest

MANIFESTS = Path(__file__).parents[2] / "model" / "manifests"


@pytest.mark.parametrize("name", sorted(p.name for p in MANIFESTS.glob("*.json")))
def test_metadata_is_read_from_the_manifest(name):
    text = (MANIFESTS / name).read_text()
    d = json.loads(text)
    where = WindowLocation("b", "", d["topic"], parse_manifest(text).window, ".parquet")
    result = WindowResult(where, parse_manifest(text), "already_committed", 2.0)
    assert result.metadata() == {
        "outcome": "already_committed", "attempt": d["attempt"], "records": d["record_count"], "bytes_read": d["bytes_read"],
        "bytes_written": d["bytes_written"], "objects": len(d["objects"]), "first_offset": d["first_offset"],
        "last_offset": d["last_offset"], "min_timestamp": d["min_timestamp"], "max_timestamp": d["max_timestamp"],
        "absent_offsets": d["absent_offset_count"], "lost_offsets": sum(b - a for a, b in d["lost_offsets"]),
        "undecodable_records": d.get("undecodable_records", 0), "seconds": 2.0,
        "unplaceable_records": d.get("unplaceable_records", 0), "skipped_records": d.get("skipped_records", 0),
        "tombstones_skipped": d.get("tombstones_skipped", 0),
        "records_per_second": round(d["record_count"] / 2.0, 1), "manifest": f"s3://b/{manifest_key('', d['topic'], where.window)}",
        "bytes": d["bytes_written"], "lag_seconds": round(
            datetime.fromisoformat(d["committed_at"]).timestamp() - d["max_timestamp_ms"] / 1000, 3)}
