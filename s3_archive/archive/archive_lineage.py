"""An archive run's OpenLineage datasets (io/lineage.py): the Kafka topic it reads, the S3 location it writes.

Pure: from the run's windows and, once they are done, their manifests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from s3_archive.config.archive import ArchiveConfig
from s3_archive.io.lineage import LineageDataset, WindowRange, kafka_dataset, s3_dataset, spark_columns
from s3_archive.model.manifest import Manifest
from s3_archive.model.windows import OffsetWindow


def _ranges(windows: Sequence[OffsetWindow], manifests: Mapping[OffsetWindow, Manifest]) -> list[WindowRange]:
    return [WindowRange(w.key, w.partition, w.start, w.end,
                        manifests[w].record_count if w in manifests else None) for w in sorted(windows)]


def archive_datasets(cfg: ArchiveConfig, topic: str, bootstrap_servers: str, windows: Sequence[OffsetWindow],
                     manifests: Mapping[OffsetWindow, Manifest] | None = None,
                     ) -> tuple[list[LineageDataset], list[LineageDataset]]:
    """(inputs, outputs): the topic with the windows' offset ranges; the topic's S3 location with the windows
    committed (`manifests`: each done window's manifest, committed now or before), their records, bytes and objects,
    and the columns stored (the newest window's schema); an Iceberg archive's table as the location's symlink."""
    manifests = manifests or {}
    ranges = _ranges(windows, manifests)
    source = kafka_dataset(bootstrap_servers, topic, ranges)
    target = s3_dataset(cfg.bucket, f"{cfg.prefix}{topic}", [r for r in ranges if r.records is not None])
    done = [manifests[w] for w in sorted(manifests)]
    if done:
        records = sum(m.record_count for m in done)
        source = source.counted(records, sum(m.bytes_read for m in done))
        target = target.counted(records, sum(m.bytes_written for m in done), sum(len(m.objects) for m in done))
        newest = max(done, key=lambda m: (m.committed_at, m.partition))
        catalog = cfg.iceberg.catalog if cfg.iceberg is not None else "glue"
        target = replace(target, columns=spark_columns(newest.spark_schema),
                         table=None if newest.iceberg_table is None else (f"iceberg:{catalog}", newest.iceberg_table))
    return [source], [target]
