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
    values = {**values, **fields}
    if values["manifest_version"] == MANIFEST_VERSION:
        values.setdefault("generation", 1)
    return Manifest.model_validate(values)


def put_jsonl_window(s3: Any, bucket: str, prefix: str, topic: str, window: OffsetWindow,
                     timestamp_ms: int) -> list[tuple[bytes, bytes, int]]:
    """Commit `window` by hand (no Spark): one uncompressed jsonl object of a record per offset (key `k<offset>`,
    value `v<offset>`, header `o`), then its manifest. Returns the records as (key, value, timestamp_ms)."""
    import base64
    import json
    from datetime import UTC, datetime

    from s3_archive.keys.objects import manifest_key, object_key

    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    records = [(f"k{o}".encode(), f"v{o}".encode(), timestamp_ms + o) for o in range(window.start, window.end)]
    iso = lambda ms: datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")  # noqa: E731
    data = "".join(json.dumps({"key": b64(k), "value": b64(v), "headers": [{"key": "o", "value": b64(k[1:])}],
                               "topic": topic, "partition": window.partition, "offset": window.start + i,
                               "timestamp": iso(ts), "timestamp_type": 0}) + "\n"
                   for i, (k, v, ts) in enumerate(records)).encode()
    key = object_key(prefix, topic, window, 0, ".jsonl")
    etag = s3.put_object(Bucket=bucket, Key=key, Body=data)["ETag"].strip('"')
    m = hand_manifest(topic, window, [{"key": key, "size": len(data), "etag": etag}], format="jsonl",
                      min_timestamp_ms=records[0][2], max_timestamp_ms=records[-1][2],
                      min_timestamp=iso(records[0][2]), max_timestamp=iso(records[-1][2]))
    s3.put_object(Bucket=bucket, Key=manifest_key(prefix, topic, window), Body=m.dumps())
    return records
