"""An erase run's OpenLineage events (io/lineage.py): the topic's S3 location as input and output, the windows
rewritten and records erased in the output's `s3archive_erasure` facet (never what was matched). `erase_datasets` is
pure; `traced_erase` is `erase_run.erase` inside the run's events (a dry run writes nothing and emits nothing)."""

from __future__ import annotations

from collections.abc import Sequence

from s3_archive.config.archive import ArchiveConfig
from s3_archive.erasure.erase_run import EraseReport, erase
from s3_archive.erasure.erasure import EraseRequest, WindowErasure
from s3_archive.erasure.iceberg_erase import TableSession
from s3_archive.io.lineage import ErasedWindow, LineageDataset, WarnLog, lineage_run, s3_dataset
from s3_archive.io.s3 import S3Client


def erase_datasets(cfg: ArchiveConfig, topic: str, erased: Sequence[WindowErasure] | None = None,
                   ) -> tuple[list[LineageDataset], list[LineageDataset]]:
    """(inputs, outputs): the topic's S3 location both; the output with the windows rewritten, the generation each
    committed and the records it erased, once the erasure is done (`erased`). Never what was matched."""
    location = s3_dataset(cfg.bucket, f"{cfg.prefix}{topic}")
    if erased is None:
        return [location], [location]
    windows = tuple(ErasedWindow(w.window, w.generation, w.records) for w in sorted(erased, key=lambda w: w.window))
    return [location], [LineageDataset(location.namespace, location.name, erased=windows)]


def traced_erase(s3: S3Client, cfg: ArchiveConfig, request: EraseRequest, run_id: str, log: WarnLog,
                 dry_run: bool = False, table: TableSession | None = None) -> EraseReport:
    """`erase`, its run's lineage (job `erase.<archive>.<topic>`, `run_id` a UUID) around it unless `dry_run`;
    `table`: format iceberg's Spark session."""
    if dry_run:
        return erase(s3, cfg, request, dry_run=True)
    inputs, outputs = erase_datasets(cfg, request.topic)
    with lineage_run(f"erase.{cfg.name}.{request.topic}", "ERASE", run_id, inputs, outputs, log) as lineage:
        report = erase(s3, cfg, request, table=table)
        lineage.inputs, lineage.outputs = erase_datasets(cfg, request.topic, report.erased)
    return report
