"""Restore throughput: a thin call of `s3_archive.restore.restore_windows`.

Not replaced by `bench.restore_vs_produce.run` (now on main), because that measures something else: it writes its own
synthetic archive with pyarrow (one partition, 10,000-record windows, random hex values) and produces its own
records, repeating internally. `make bench`'s restore row restores what the s3-archive contender itself archived
in round 1 (4 partitions, windows of up to 100,000 records, the workload's JSON values), next to a bare produce of
the same workload records, one pair per interleaved round. Both stay: `restore_vs_produce` for the restore's own
profiling (`--profile`), this one for the end-to-end row.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from s3_archive.io.kafka import KafkaResource
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.request import RestoreRequest
from s3_archive.restore.run import restore_windows


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
