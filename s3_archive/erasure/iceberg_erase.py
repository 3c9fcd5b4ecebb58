"""Erasure from an archive of `format: iceberg` (docs/compliance.md, "Format iceberg"): a window's rows committed again
to the topic's Iceberg table without the erased records (or with them nulled), through Spark and the archive's own
catalog, so that every reader of the table (Spark, Athena, Glue) sees the rewritten data. erasure/erase_run.py calls
it for each window between the match (in the data files the window's manifest lists) and the manifest's next
generation:

1. The window's rows at the table's current snapshot: when none of the erased offsets holds a matching record any
   more (an erasure killed after its commit, run again), nothing is written.
2. Else one `overwrite` of exactly the window's rows (archive/driver/iceberg_commit.py's filter) by those rows without
   the erased ones (`drop`), or with everything but their position null (`null`), in offset order in one task, with
   serializable isolation validated from the snapshot read in 1: a concurrent commit of the window's rows (another
   erasure) makes Iceberg refuse it, and 1 is done again; an archive run's commits of other windows do not conflict
   (Iceberg retries its commit on the newer snapshot).
3. The window's data files in the table now: the objects of its next manifest generation.

Once every window has ended without a failure, the old data files go (`expire`): the table's manifests are rewritten
(those of the erasure's commits still name the replaced files, with their columns' bounds) and its snapshots expired
with `older_than` now and `retain_last` 1, which deletes the files only the older snapshots referenced; on a versioned
bucket, every version of each object Iceberg deleted under the table's location is deleted too.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from s3_archive.config.archive import ArchiveConfig
from s3_archive.erasure.erasure import EraseRequest
from s3_archive.erasure.rewrite import ENVELOPE_KEPT
from s3_archive.io.iceberg_catalog import S3Endpoint, missing_metadata, table_ident, use_catalog
from s3_archive.io.s3 import S3Client
from s3_archive.lifecycle.iceberg_maintenance import expire_snapshots
from s3_archive.model.errors import ArchiveIntegrityError, ErasureRefused
from s3_archive.model.manifest import ManifestObject
from s3_archive.model.windows import OffsetWindow

ERASURE_PROPERTY = "s3archive.erasure"  # the snapshot summary of an erasure's commit: its id and the window
_LOCATION = re.compile(r"^s3a?://([^/]+)/(.*)$")


@dataclass(frozen=True)
class TableSession:
    """What an erasure of an Iceberg archive commits through: the Spark session (the archive's catalog is set on
    it) and how its AWS clients reach S3 and Glue."""

    spark: Any
    endpoint: S3Endpoint


class TableEraser:
    """The Iceberg side of one erasure of one topic. Windows are erased one at a time (one Spark session)."""

    def __init__(self, table: TableSession, s3: S3Client, cfg: ArchiveConfig, request: EraseRequest,
                 erasure_id: str) -> None:
        self.spark, self.s3, self.cfg, self.request, self.id = table.spark, s3, cfg, request, erasure_id
        use_catalog(self.spark, cfg, table.endpoint)
        self.ident = table_ident(cfg, request.topic)
        try:
            exists = self.spark.catalog.tableExists(self.ident)
        except Exception as e:
            if (gone := missing_metadata(e, self.ident, cfg)) is not None:
                raise gone from None
            raise
        if not exists:
            raise ErasureRefused(f"archive {cfg.name!r} has format iceberg, but the table {self.ident} of topic "
                                 f"{request.topic!r} is not in its catalog: its windows' data cannot be erased")
        self._guard = threading.Lock()
        self.commits = 0  # the windows whose rows this erasure committed again
        self.snapshots: dict[str, int | None] = {}  # window key -> the table's snapshot after its erasure

    def erase_window(self, w: OffsetWindow, offsets: list[int]) -> list[ManifestObject]:
        """Steps 1-3 of the module docstring: the erased `offsets` of window `w` gone from the table (or nulled);
        the window's data files now."""
        from pyspark.sql import functions as F

        from s3_archive.archive.driver.iceberg_commit import (  # pyspark: not when the definitions load
            ATTEMPTS,
            commit_conflict,
            current_snapshot,
            table_data_files,
            table_window_stats,
            window_filter,
        )

        with self._guard:
            for _ in range(ATTEMPTS):
                base = current_snapshot(self.spark, self.ident)
                if base is None:
                    break  # a table without a snapshot holds no row
                rows = self.spark.sql(f"SELECT * FROM {self.ident} VERSION AS OF {base}").where(window_filter([w]))
                hit = F.col("offset").isin(offsets)
                if not self._still_there(rows.where(hit)):
                    break
                try:
                    self._overwrite(rows, w, hit, base)
                except Exception as e:
                    if not commit_conflict(e):
                        raise
                    continue  # another commit of the window's rows: look again
                self.commits += 1
                break
            else:
                raise ArchiveIntegrityError(f"{self.ident}: the erasure of window {w.key} conflicted with another "
                                            f"commit of its rows {ATTEMPTS} times; run the erasure again")
            self.snapshots[w.key] = current_snapshot(self.spark, self.ident)
            stats = table_window_stats(self.spark, self.ident, [w], self.spark.table(self.ident).columns)
            return table_data_files(self.spark, self.s3, self.cfg.bucket, self.ident, [w], stats)[w.key]

    def _still_there(self, rows: Any) -> bool:
        """Whether a row of `rows` (those at the erased offsets) still matches the request."""
        columns = self.request.columns()
        got = rows.select(*columns).collect()
        return bool(self.request.matching({c: [r[c] for r in got] for c in columns}))

    def _overwrite(self, rows: Any, w: OffsetWindow, hit: Any, base: int) -> None:
        from pyspark.sql import functions as F

        from s3_archive.archive.driver.iceberg_commit import window_filter

        if self.cfg.erasure.mode == "drop":
            new = rows.where(~hit)
        else:
            fixed = [f.name for f in rows.schema.fields if f.name not in ENVELOPE_KEPT and not f.nullable]
            if fixed:
                raise ErasureRefused(f"{self.ident}: column {fixed[0]!r} cannot be null in the table's schema; "
                                     "erase with erasure.mode drop")
            new = rows.select(*[F.col(f.name) if f.name in ENVELOPE_KEPT else
                                F.when(hit, F.lit(None).cast(f.dataType)).otherwise(F.col(f.name)).alias(f.name)
                                for f in rows.schema.fields])
        (new.repartition(1).sortWithinPartitions("offset").writeTo(self.ident)
         .option(f"snapshot-property.{ERASURE_PROPERTY}", f"{self.id}:{w.key}")
         .option("isolation-level", "serializable").option("validate-from-snapshot-id", str(base))
         .overwrite(window_filter([w])))

    def expire(self, versioned: bool) -> dict[str, int]:
        """The replaced data files deleted (module docstring, last paragraph); how many files of each kind, and
        on a versioned bucket how many object versions."""
        catalog, name = self.ident.split(".", 1)
        self.spark.sql(f"CALL {catalog}.system.rewrite_manifests(table => '{name}')").collect()
        out = expire_snapshots(self.spark, self.ident, datetime.now(UTC) + timedelta(seconds=1), 1)
        if versioned:
            out["versions_deleted"] = self._purge_deleted_versions()
        return out

    def _purge_deleted_versions(self) -> int:
        """Every version of each object under the table's location whose newest version is a delete marker (what
        Iceberg's FileIO deleted: a delete marker alone would keep the bytes)."""
        location = next(r["data_type"] for r in self.spark.sql(f"DESCRIBE TABLE EXTENDED {self.ident}").collect()
                        if r["col_name"] == "Location")
        m = _LOCATION.match(location)
        if m is None:
            raise ArchiveIntegrityError(f"{self.ident}: its location {location!r} is not an s3:// URI")
        bucket, prefix = m[1], m[2].rstrip("/") + "/"
        versions: dict[str, list[str]] = {}
        deleted: set[str] = set()
        for page in self.s3.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
            for v in page.get("Versions", []):
                versions.setdefault(v["Key"], []).append(v["VersionId"])
            for d in page.get("DeleteMarkers", []):
                versions.setdefault(d["Key"], []).append(d["VersionId"])
                if d.get("IsLatest"):
                    deleted.add(d["Key"])
        count = 0
        for key in sorted(deleted):
            for version in versions[key]:
                self.s3.delete_object(Bucket=bucket, Key=key, VersionId=version)
                count += 1
        return count
