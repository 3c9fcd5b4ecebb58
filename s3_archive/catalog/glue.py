"""The catalog's I/O on Glue and S3 clients: create the database and the table, update the table only when its input
changed, and in the explicit-partitions mode register the partition directories that exist.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from s3_archive.catalog.table_partitions import (
    PARTITION_KEY,
    SkippedDirectory,
    layout_partition_dirs,
    layout_partition_input,
    partition_input,
)
from s3_archive.catalog.tables import merge_columns, table_changes, update_input
from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.catalog import CatalogOptions
from s3_archive.io.s3 import S3Client, error_code, error_message, list_objects, list_prefixes, read_manifest
from s3_archive.keys.objects import manifest_prefix
from s3_archive.model.errors import AwsRequestFailed, InvalidManifest
from s3_archive.model.logger import Logger

_PART_DIR = re.compile(rf"{PARTITION_KEY}=(\d+)/$")
BATCH = 100  # BatchCreatePartition's limit per call


def latest_schemas(s3: S3Client, bucket: str, prefix: str, topic: str, log: Logger) -> dict[str, str]:
    """Manifest key -> `schema` of the newest committed window of each Kafka partition (one GET per partition). A
    manifest that does not parse is a logged warning naming it: its partition's schema is left out."""
    newest: dict[str, str] = {}
    for o in list_objects(s3, bucket, manifest_prefix(prefix, topic)):
        directory = o["Key"].rsplit("/", 1)[0]
        newest[directory] = max(newest.get(directory, ""), o["Key"])  # window keys sort by start offset
    schemas = {}
    for key in sorted(newest.values()):
        try:
            m = read_manifest(s3, bucket, key)
        except InvalidManifest as e:
            log.warning(f"catalog of {topic!r}: {e}; the decoded columns leave out this window's schema")
            continue
        if m and m.spark_schema:
            schemas[key] = m.spark_schema
    return schemas


class TableConflict(ValueError):
    """The table name is taken by a table this archive did not create."""


def ensure_database(glue: Any, name: str) -> bool:
    """Create the database if missing; True if this call created it."""
    try:
        glue.get_database(Name=name)
        return False
    except ClientError as e:
        if error_code(e) != "EntityNotFoundException":
            raise
    try:
        glue.create_database(DatabaseInput={"Name": name, "Description": "Kafka topics archived by s3-archive"})
    except ClientError as e:
        if error_code(e) == "AlreadyExistsException":  # created concurrently (another topic's catalog run)
            return False
        raise
    return True


def ensure_table(glue: Any, database: str, table_input: dict[str, Any]) -> tuple[str, list[str]]:
    """Create the table, or update it if its input changed: ("created" | "updated" | "unchanged", changed fields)."""
    name = table_input["Name"]
    try:
        existing = glue.get_table(DatabaseName=database, Name=name)["Table"]
    except ClientError as e:
        if error_code(e) != "EntityNotFoundException":
            raise
        try:
            glue.create_table(DatabaseName=database, TableInput=table_input)
            return "created", []
        except ClientError as e2:
            if error_code(e2) != "AlreadyExistsException":
                raise
            existing = glue.get_table(DatabaseName=database, Name=name)["Table"]
    owner = (existing.get("Parameters") or {}).get("s3_archive.topic")
    wanted = table_input["Parameters"]["s3_archive.topic"]
    if owner != wanted:
        # Never take over a table someone else made (or another topic's): updating would replace its definition.
        what = "was not created by s3-archive" if owner is None else f"catalogues topic {owner!r}"
        raise TableConflict(f"table {database}.{name} {what}, not topic {wanted!r}; drop or rename it, or set a "
                            "different catalog table_prefix or database")
    if (table_input["Parameters"] or {}).get("s3_archive.evolve") == "true":
        sd = table_input["StorageDescriptor"]
        table_input = {**table_input, "StorageDescriptor": {
            **sd, "Columns": merge_columns(sd["Columns"], (existing.get("StorageDescriptor") or {}).get("Columns")
                                           or [])}}
    changes = table_changes(existing, table_input)
    if not changes:
        return "unchanged", []
    glue.update_table(DatabaseName=database, TableInput=update_input(existing, table_input))
    return "updated", changes


def partition_dirs(s3: S3Client, bucket: str, prefix: str, topic: str) -> list[int]:
    """The Kafka partitions that have a `kafka_partition=<p>/` directory (at least one object) under the topic."""
    found = []
    for directory in list_prefixes(s3, bucket, f"{prefix}{topic}/"):
        m = _PART_DIR.search(directory)
        if m:
            found.append(int(m.group(1)))
    return sorted(found)


def registered_values(glue: Any, database: str, table: str) -> set[tuple[str, ...]]:
    out: set[tuple[str, ...]] = set()
    for page in glue.get_paginator("get_partitions").paginate(DatabaseName=database, TableName=table):
        out |= {tuple(p["Values"]) for p in page.get("Partitions", [])}
    return out


def registered_partitions(glue: Any, database: str, table: str) -> set[int]:
    return {int(v[0]) for v in registered_values(glue, database, table)}


def register_partition_inputs(glue: Any, database: str, table: str, inputs: Sequence[dict[str, Any]],
                              ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Register the partition inputs whose values are not yet in the catalog: (added, already registered).
    Existing partitions are untouched; one registered concurrently counts as added."""
    have = registered_values(glue, database, table)
    missing = [i for i in inputs if tuple(i["Values"]) not in have]
    added: list[dict[str, Any]] = []
    for n in range(0, len(missing), BATCH):
        chunk = missing[n:n + BATCH]
        r = glue.batch_create_partition(DatabaseName=database, TableName=table, PartitionInputList=chunk)
        errors = r.get("Errors", [])
        # Registered concurrently by another run: as good as added by us.
        raced = {tuple(e["PartitionValues"]) for e in errors
                 if e.get("ErrorDetail", {}).get("ErrorCode") == "AlreadyExistsException"}
        failed = [e for e in errors if e.get("ErrorDetail", {}).get("ErrorCode") != "AlreadyExistsException"]
        if failed:
            detail = "; ".join(f"{e['PartitionValues']}: {e['ErrorDetail'].get('ErrorCode')} "
                               f"{e['ErrorDetail'].get('ErrorMessage', '')}" for e in failed[:5])
            raise RuntimeError(f"registering partitions of {database}.{table} failed: {detail}")
        added += [i for i in chunk if tuple(i["Values"]) not in raced]
    return added, [i for i in inputs if tuple(i["Values"]) in have]


def register_partitions(glue: Any, database: str, table_input: dict[str, Any],
                        partitions: Sequence[int]) -> tuple[list[int], list[int]]:
    """Register the Kafka partitions not yet in the catalog: (added, already registered)."""
    added, existing = register_partition_inputs(glue, database, table_input["Name"],
                                                [partition_input(table_input, p) for p in sorted(set(partitions))])
    return [int(i["Values"][0]) for i in added], [int(i["Values"][0]) for i in existing]


def layout_partitions(s3: S3Client, cfg: ArchiveConfig, topic: str, table_input: dict[str, Any],
                      ) -> tuple[list[dict[str, Any]], list[SkippedDirectory]]:
    """Partition inputs of every partition_by directory under the topic that holds an object (one listing), and
    the directories the layout does not parse."""
    base = f"{cfg.prefix}{topic}/"
    keys = (o["Key"][len(base):] for o in list_objects(s3, cfg.bucket, base))
    dirs, skipped = layout_partition_dirs(cfg.layout, keys)
    return [layout_partition_input(table_input, d, v) for d, v in dirs.items()], skipped


@dataclass(frozen=True)
class CatalogSync:
    database: str
    table: str
    database_created: bool
    table_action: str  # "created" | "updated" | "unchanged"
    changes: list[str] = field(default_factory=list)
    # Kafka partitions (default layout) or partition directories relative to the location (custom layout)
    partitions_added: list[int] | list[str] = field(default_factory=list)
    partitions_existing: list[int] | list[str] = field(default_factory=list)
    # custom layout, explicit mode: directories under the location the layout does not parse (not registered)
    skipped_directories: list[SkippedDirectory] = field(default_factory=list)


def sync_catalog(glue: Any, s3: S3Client, cfg: ArchiveConfig, topic: str, options: CatalogOptions,
                 table_input: dict[str, Any]) -> CatalogSync:
    """Database, table, and (explicit mode) partitions of one topic, each written only when missing or changed."""
    created = ensure_database(glue, options.database)
    action, changes = ensure_table(glue, options.database, table_input)
    added: list[int] | list[str] = []
    existing: list[int] | list[str] = []
    skipped: list[SkippedDirectory] = []
    if options.partitions == "explicit" and cfg.layout is not None:
        base = len(table_input["StorageDescriptor"]["Location"])
        inputs, skipped = layout_partitions(s3, cfg, topic, table_input)
        new, old = register_partition_inputs(glue, options.database, table_input["Name"], inputs)
        added, existing = ([i["StorageDescriptor"]["Location"][base:-1] for i in x] for x in (new, old))
    elif options.partitions == "explicit":
        added, existing = register_partitions(glue, options.database, table_input,
                                              partition_dirs(s3, cfg.bucket, cfg.prefix, topic))
    return CatalogSync(options.database, table_input["Name"], created, action, changes, added, existing, skipped)


def sync_table(glue: Any, s3: S3Client, cfg: ArchiveConfig, topic: str, options: CatalogOptions,
               table_input: dict[str, Any]) -> CatalogSync:
    """`sync_catalog`, an error Glue or S3 answered raised as AwsRequestFailed naming the request and the table."""
    try:
        return sync_catalog(glue, s3, cfg, topic, options, table_input)
    except ClientError as e:
        raise AwsRequestFailed(f"{e.operation_name} for table {options.database}.{table_input['Name']} failed: "
                               f"{error_code(e)}: {error_message(e)}") from None
