"""A catalog run's OpenLineage datasets (io/lineage.py): the topic's S3 location it describes, the Glue table it
keeps. Pure."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from s3_archive.config.archive import ArchiveConfig
from s3_archive.io.lineage import LineageDataset, glue_dataset, s3_dataset


def catalog_datasets(cfg: ArchiveConfig, topic: str, database: str, table: str, glue: tuple[str, str] | None,
                     table_input: dict[str, Any] | None = None) -> tuple[list[LineageDataset], list[LineageDataset]]:
    """(inputs, outputs): the topic's S3 location; the Glue table `database.table` in `glue` (region, account id;
    None: not known, no output named), with its columns and partition keys once `table_input` is written."""
    source = s3_dataset(cfg.bucket, f"{cfg.prefix}{topic}")
    if glue is None:
        return [source], []
    target = glue_dataset(*glue, database, table)
    if table_input is not None:
        columns = [*table_input["StorageDescriptor"]["Columns"], *table_input["PartitionKeys"]]
        target = replace(target, columns=tuple((c["Name"], c["Type"]) for c in columns))
    return [source], [target]
