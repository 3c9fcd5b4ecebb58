"""Restore throughput: a thin call of `s3_archive.restore.restore_windows`.

Kept apart on purpose: the restore worker's `bench/restore_vs_produce.py` (branch restore-foreign) is to provide the
importable restore-vs-produce figure; once it lands, `restore_throughput` is the one function to replace with a
call of it (bench/run.py only needs seconds, records and bytes back).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from s3_archive.resources import KafkaResource
from s3_archive.restore import RestoreRequest, restore_windows
from s3_archive.windows import OffsetWindow


def restore_throughput(kafka: KafkaResource, s3: Any, bucket: str, prefix: str, source_topic: str,
                       target_topic: str, windows: list[OffsetWindow]) -> dict[str, Any]:
    """Restore `windows` of the archive under `prefix` into `target_topic` (an existing, empty topic); seconds
    until the last transaction is committed."""
    t = time.monotonic()
    reports = list(restore_windows(kafka, s3, bucket, prefix, RestoreRequest(source_topic, target_topic), windows,
                                   logging.getLogger("bench.restore")))
    dt = time.monotonic() - t
    return {"seconds": dt, "records": sum(r.restored for r in reports), "bytes": sum(r.bytes for r in reports),
            "transactions": sum(r.transactions for r in reports)}
