"""`format: iceberg`: a run's windows appended to the topic's Iceberg table in one Iceberg commit, exactly once.

The commit of a window is the Iceberg snapshot whose summary lists it (`s3archive.windows`, WINDOWS_PROPERTY):
1. the windows the table's snapshots already list are not written again (a re-run after a crash between the
   snapshot and the manifest finds them there);
2. the others are written by one `overwrite` whose filter is exactly their rows (partition and offset range),
   with serializable isolation validated from the snapshot that step 1 read: a concurrent commit of any of these
   windows since then adds rows matching the filter, so Iceberg refuses ours (ValidationException), and we go back
   to step 1, which now finds them. Overwriting exactly a window's rows is idempotent besides: were the validation
   skipped, the window would still be in the table once;
3. then each window's manifest is written with `If-None-Match: *` as for the other formats (commit.py's
   put_manifest, manifest_draft.py's draft), recording the table and the snapshot: checks, partition status,
   retirement and restore keep reading manifests, and the manifest outlives the snapshot summary (snapshot
   expiration drops old summaries; the manifest is what step 0, the manifest check in
   archive/driver/coordinator.py, finds first).
docs/commit-protocol.md ("Iceberg") tells the whole protocol.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from s3_archive.archive.driver.archive_run import ArchiveRun, PendingWindow
from s3_archive.archive.driver.commit import CommitStep, Outcome, put_manifest
from s3_archive.archive.driver.manifest_draft import manifest_draft
from s3_archive.archive.driver.output import Output
from s3_archive.archive.driver.spark_job import (
    JSON_COLUMN,
    decodable,
    decoded_table_rows,
    infer_json_ddls,
    read_slices,
    record_bytes,
    run_write_job,
    stored_columns,
    with_parsed_json,
)
from s3_archive.archive.driver.task_read_job import envelope_frame, kafka_connection
from s3_archive.archive.protocol import DecodePlan, KafkaConnection, RecordStats, Slice
from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.iceberg import PARTITION_TRANSFORM, IcebergOptions
from s3_archive.io.iceberg_catalog import (
    TOPIC_PROPERTY,
    WINDOWS_PROPERTY,
    missing_metadata,
    table_ident,
    use_catalog,
    warehouse,
)
from s3_archive.io.s3 import S3Client, list_objects
from s3_archive.keys.objects import WindowLocation
from s3_archive.model.errors import ArchiveIntegrityError, MissingJars, UndecodableValue
from s3_archive.model.manifest import Manifest, ManifestObject, ManifestSchema
from s3_archive.model.windows import OffsetWindow

ATTEMPT_PROPERTY = "s3archive.attempt"
_UNDECODABLE = "s3archive-undecodable:"
_CONFLICTS = ("ValidationException", "CommitFailedException", "AlreadyExistsException", "Found conflicting files")
ATTEMPTS = 4  # commits tried before giving up (each a conflict with another attempt that then committed)

# Table properties: no shuffle before the write (a Kafka task's rows are one window of one partition already),
# any number of open files per task (fanout), schema merging for inferred JSON fields.
TABLE_PROPERTIES = {"format-version": "2", "write.distribution-mode": "none", "write.spark.fanout.enabled": "true",
                    "write.spark.accept-any-schema": "true"}


def window_filter(windows: list[OffsetWindow]) -> Column:
    """Exactly the rows of `windows` (the overwrite's filter, and the reads of restore and stats)."""
    return reduce(lambda a, b: a | b, [(F.col("partition") == w.partition) & (F.col("offset") >= w.start)
                                       & (F.col("offset") < w.end) for w in windows])


def committed_windows(spark: SparkSession, ident: str) -> dict[str, tuple[int, str]]:
    """window key -> (snapshot id, attempt) of every snapshot of the table whose summary lists windows."""
    rows = spark.sql(f"SELECT snapshot_id, summary['{WINDOWS_PROPERTY}'] AS w, summary['{ATTEMPT_PROPERTY}'] AS a "
                     f"FROM {ident}.snapshots WHERE summary['{WINDOWS_PROPERTY}'] IS NOT NULL").collect()
    return {key: (r["snapshot_id"], r["a"] or "") for r in rows for key in r["w"].split(",")}


def current_snapshot(spark: SparkSession, ident: str) -> int | None:
    rows = spark.sql(f"SELECT snapshot_id FROM {ident}.history WHERE is_current_ancestor "
                     "ORDER BY made_current_at DESC LIMIT 1").collect()
    return rows[0]["snapshot_id"] if rows else None


def partition_spec(options: IcebergOptions) -> list[Column]:
    """`iceberg.partition_by` as the transforms of DataFrameWriterV2.partitionedBy."""
    from pyspark.sql.functions import partitioning

    out = []
    for t in options.partition_by:
        m = PARTITION_TRANSFORM.fullmatch(t)
        assert m is not None  # checked by IcebergOptions
        if m["time"]:
            out.append(getattr(partitioning, m["time"])(F.col("timestamp")))
        elif m["bucket"]:
            out.append(partitioning.bucket(int(m["buckets"]), F.col(m["bucket"])))
        else:
            out.append(F.col(m["identity"] or m["identity2"]))
    return out


def _ensure_table(spark: SparkSession, ident: str, frame: DataFrame, codec: str, options: IcebergOptions,
                  location: str) -> None:
    """Create the topic's table from the frame's schema and `iceberg.partition_by` unless it exists, at
    `location` (explicit: a database's own location, e.g. set by another tool, must not move it out of the
    archive's bucket)."""
    if spark.catalog.tableExists(ident):
        return
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {ident.rsplit('.', 1)[0]}")
    writer = spark.createDataFrame([], frame.schema).writeTo(ident).using("iceberg")
    for k, v in (TABLE_PROPERTIES | {"write.parquet.compression-codec": codec, "location": location}).items():
        writer = writer.tableProperty(k, v)
    try:
        spec = partition_spec(options)
        (writer.partitionedBy(*spec) if spec else writer).create()
    except Exception as e:  # another attempt created it first
        if "AlreadyExists" not in str(e) and "already exists" not in str(e):
            raise


def _rows(df: DataFrame, out: Output, columns: list[Column], topic: str) -> DataFrame:
    """The table's rows: with dead letters the records whose value decodes (the others are the dead letters'),
    else every record."""
    if out.decoding != "bytes" and out.on_error == "dead_letter":
        return df.where(decodable(out.decoding)).select(*columns)
    return df.select(*_checked(df, out, columns, topic))


def _checked(df: DataFrame, out: Output, columns: list[Column], topic: str) -> list[Column]:
    """The stored columns, the first of which fails the write at a record whose value does not decode (so the
    job fails before Iceberg's commit; value_decoding.on_error: fail)."""
    if out.decoding == "bytes":
        return columns
    what = "UTF-8" if out.decoding == "utf8" else "a UTF-8 JSON object"
    msg = F.concat(F.lit(f"{_UNDECODABLE}topic {topic!r} partition "), F.col("partition").cast("string"),
                   F.lit(" offset "), F.col("offset").cast("string"), F.lit(f": the value is not {what}"))
    first = columns[0]
    name = df.select(first).columns[0]
    return [F.when(decodable(out.decoding), first).otherwise(F.raise_error(msg)).alias(name), *columns[1:]]


def _undecodable(e: Exception) -> UndecodableValue | None:
    text = str(e)
    if _UNDECODABLE not in text:
        return None
    detail = text.split(_UNDECODABLE, 1)[1].split("\n", 1)[0].split(" SQLSTATE", 1)[0].rstrip(" .'\"")
    return UndecodableValue(f"{detail}. Nothing was committed (format iceberg, value_decoding.on_error: fail)")


# A JVM that misses an Iceberg class (the runtime jar): the JDK's errors and Spark's for a catalog's plugin class.
_NO_ICEBERG = re.compile(r"(?:ClassNotFoundException|NoClassDefFoundError|Cannot find catalog plugin class for "
                         r"catalog '[^']*')[:\s]+(org[./]apache[./]iceberg[\w./$]*)")


def _explained(e: Exception, ident: str = "", cfg: ArchiveConfig | None = None) -> Exception:
    """A JVM error whose cause is a jar set, as an error that says which jars; one because the metadata file the
    catalog names for the table `ident` is gone, as an error that names it and what to do (the rest unchanged)."""
    text = str(e)
    if cfg is not None and (gone := missing_metadata(e, ident, cfg)) is not None:
        return gone
    if (m := _NO_ICEBERG.search(text)) is not None:
        missing = m[1].replace("/", ".").rstrip(".")
        return MissingJars(
            f"Iceberg's Spark runtime is not on the classpath of a Spark JVM (class {missing} not found): "
            "`format: iceberg` needs the jars of jvm/iceberg (`scripts/fetch-jars` puts them in "
            "$S3_ARCHIVE_HOME/jars/iceberg) on the Spark driver's classpath, which is a Spark Connect server's own "
            "(start it with them), and on every executor's (SparkResource.worker_jars_dir: the spark and the iceberg "
            "directories, ':'-separated; or leave it unset to ship them); docs/deployment.md, \"Spark\"")
    if "ADAPTIVE_V2" in text:
        return MissingJars("Iceberg's Glue catalog needs the AWS SDK v2 >= 2.25 on Spark's classpath (it sets "
                           "RetryMode.ADAPTIVE_V2); jvm/spark/pom.xml pins the SDK bundle: run `scripts/fetch-jars` "
                           "(a Spark Connect server or cluster needs that bundle too)")
    return e


def commit_conflict(e: Exception) -> bool:
    return any(c in str(e) for c in _CONFLICTS)


def _commit(run: ArchiveRun, topic: str, ident: str, frame: DataFrame, windows: list[OffsetWindow],
            ) -> tuple[dict[str, tuple[int, str]], set[str]]:
    """Steps 1-2 of the module docstring for `windows`, retried on a conflict: window key -> (snapshot, attempt),
    and the keys that were committed before this run looked."""
    spark, attempt, fault = run.ctx.spark, run.attempt, run.hooks.fault
    keys = {w.key for w in windows}
    before: set[str] | None = None
    for _ in range(ATTEMPTS):
        base = current_snapshot(spark, ident)
        done = committed_windows(spark, ident)
        before = keys & done.keys() if before is None else before
        todo = [w for w in windows if w.key not in done]
        if not todo:
            return {k: v for k, v in done.items() if k in keys}, before
        fault(CommitStep.ICEBERG_CHECKED)
        writer = (frame.where(window_filter(todo)).writeTo(ident)
                  .option(f"snapshot-property.{WINDOWS_PROPERTY}", ",".join(w.key for w in todo))
                  .option(f"snapshot-property.{TOPIC_PROPERTY}", topic)
                  .option(f"snapshot-property.{ATTEMPT_PROPERTY}", attempt)
                  .option("isolation-level", "serializable").option("mergeSchema", "true"))
        if base is not None:
            writer = writer.option("validate-from-snapshot-id", str(base))
        try:
            writer.overwrite(window_filter(todo))
        except Exception as e:
            if (bad := _undecodable(e)) is not None:
                raise bad from None
            if not commit_conflict(e):
                raise
            continue  # another attempt committed rows of these windows: look again
        fault(CommitStep.ICEBERG_COMMITTED)
    done = committed_windows(spark, ident)
    missing = sorted(keys - done.keys())
    if missing:
        raise ArchiveIntegrityError(f"{ident}: windows {missing} of {topic!r} were not committed after {ATTEMPTS} "
                                    "attempts that each conflicted with another commit; run them again")
    return {k: v for k, v in done.items() if k in keys}, before or set()


def table_window_stats(spark: SparkSession, ident: str, windows: list[OffsetWindow], columns: list[str],
           ) -> dict[str, dict[str, Any]]:
    """Per window key: records, offsets, timestamps and record bytes of the window's rows in the table."""
    key = reduce(lambda acc, w: F.when((F.col("partition") == w.partition) & (F.col("offset") >= w.start)
                                       & (F.col("offset") < w.end), F.lit(w.key)).otherwise(acc),
                 windows, F.lit(None).cast("string"))
    size = record_bytes() if {"key", "value", "headers"} <= set(columns) else F.lit(0)
    rows = (spark.table(ident).where(window_filter(windows)).groupBy(key.alias("w"))
            .agg(F.count(F.lit(1)).alias("n"), F.min("offset").alias("first"), F.max("offset").alias("last"),
                 F.min(F.unix_millis("timestamp")).alias("t0"), F.max(F.unix_millis("timestamp")).alias("t1"),
                 F.sum(size).alias("bytes")).collect())
    return {r["w"]: r.asDict() for r in rows}


def table_data_files(spark: SparkSession, s3: S3Client, bucket: str, ident: str, windows: list[OffsetWindow],
                stats: dict[str, dict[str, Any]]) -> dict[str, list[ManifestObject]]:
    """Per window key: the table's data files that hold its rows (a write task reads one slice of one window, so a
    file never holds two windows), by the files' partition and offset bounds, in offset order; checked against
    the window's row count. The manifest lists them like any format's objects: checks verify them, restore reads
    them as Parquet."""
    rows = spark.sql(f"SELECT file_path, file_size_in_bytes AS size, record_count AS n, "
                     f"readable_metrics.`partition`.lower_bound AS p0, readable_metrics.`partition`.upper_bound AS p1, "
                     f"readable_metrics.`offset`.lower_bound AS lo, readable_metrics.`offset`.upper_bound AS hi "
                     f"FROM {ident}.files WHERE content = 0").collect()
    prefix = f"s3://{bucket}/"
    out: dict[str, list[ManifestObject]] = {}
    for w in windows:
        mine = sorted((r for r in rows if r["p0"] == r["p1"] == w.partition and r["lo"] is not None
                       and w.start <= r["lo"] and r["hi"] < w.end), key=lambda r: r["lo"])
        expected = (stats.get(w.key) or {}).get("n") or 0
        if sum(r["n"] for r in mine) != expected:
            raise ArchiveIntegrityError(
                f"{ident}: the data files within window {w.key} hold {sum(r['n'] for r in mine)} rows, the table "
                f"{expected} of the window: a data file holds rows of more than one window (rewritten by a "
                "compaction?)")
        objects = []
        for r in mine:
            if not r["file_path"].startswith(prefix):
                raise ArchiveIntegrityError(f"{ident}: data file {r['file_path']} is outside {prefix}")
            key = r["file_path"][len(prefix):]
            etag = s3.head_object(Bucket=bucket, Key=key)["ETag"]
            objects.append(ManifestObject(key=key, size=r["size"], etag=etag))
        out[w.key] = objects
    return out


def _records(run: ArchiveRun, topic: str, source: dict[str, str] | KafkaConnection, slices: list[Slice],
             ) -> DataFrame:
    """The envelope of `slices`: read by Spark's Kafka source (its options), or by tasks with librdkafka."""
    if isinstance(source, KafkaConnection):
        return envelope_frame(run.ctx.spark, run.template(topic, slices, kafka=source))
    return read_slices(run.ctx.spark, source, topic, slices)


def _dead_letters(run: ArchiveRun, topic: str, source: dict[str, str] | KafkaConnection, slices: list[Slice],
                  decode: DecodePlan | None = None) -> dict[str, list[dict[str, Any]]]:
    """Write the undecodable records of `slices` as dead letters, where the other formats put them
    (`<prefix>_dead_letter/`, one raw-envelope Parquet object per slice at a key fixed by the window and slice, so
    a re-run writes the same objects again, never more), before the table's commit. Per window key: the write
    job's result rows (its dead objects, and per slice the count, bytes, offsets and timestamps of those records)."""
    by_window: dict[str, list[dict[str, Any]]] = {}
    for r in run_write_job(run.ctx.spark, {}, run.template(topic, slices), run.out, None, undecodable_only=True,
                           decode=decode, envelope=_records(run, topic, source, slices)).rows:
        by_window.setdefault(r["window"], []).append(r)
    return by_window


def _table_stats(p: PendingWindow, stats: dict[str, Any] | None, dead: list[dict[str, Any]]) -> RecordStats:
    """A window's table statistics (table_window_stats) plus those of its dead letters: the manifest counts every
    record. The table's rows are the record of gaps: they are counted, not listed (`absent_truncated` when there are
    some)."""
    s = stats or {}
    out = RecordStats(s.get("n") or 0, s.get("bytes") or 0, s.get("first"), s.get("last"), s.get("t0"), s.get("t1"))
    for r in (r for r in dead if r["kind"] == "slice"):
        out.add(RecordStats.of_row(r | {"absent": None}))
    out.absent, out.absent_truncated = [], out.records < p.window.end - p.read_start
    return out


def _remove_stray_dead_letters(s3: S3Client, where: WindowLocation, manifest: Manifest) -> None:
    """Dead letters of the window that its manifest does not list (an earlier attempt's, cut into other slices)."""
    listed = {o.key for o in manifest.dead_letter_objects}
    stray = [o["Key"] for o in list_objects(s3, where.bucket, where.dead_letter_stem) if o["Key"] not in listed]
    if stray:
        s3.delete_objects(Bucket=where.bucket, Delete={"Objects": [{"Key": k} for k in stray], "Quiet": True})


def commit_windows(run: ArchiveRun, topic: str, pending: list[PendingWindow], decode: DecodePlan | None = None,
                   ) -> dict[OffsetWindow, tuple[Manifest, Outcome] | BaseException]:
    """Write the `pending` windows, each reading its slices (with Spark's Kafka source, or the tasks' librdkafka);
    per window its manifest and outcome (committed | already_committed | committed_by_concurrent_attempt), or what
    failed it. `decode`: the run's Schema Registry decoding (driver/registry_plan.py), decoded in Python tasks."""
    source = run.ctx.kafka.spark_options() if run.out.read_path == "spark" else kafka_connection(run.ctx.kafka)
    use_catalog(run.ctx.spark, run.cfg, run.ctx.endpoint)
    table = _Table(table_ident(run.cfg, topic))
    try:
        _write_table(run, topic, pending, decode, table, source)
    except Exception as e:
        return dict.fromkeys([p.window for p in pending], _explained(e, table.ident, run.cfg))
    results: dict[OffsetWindow, tuple[Manifest, Outcome] | BaseException] = {}
    for p in pending:
        try:
            results[p.window] = _commit_manifest(run, p, table)
        except Exception as e:
            results[p.window] = e
    return results


@dataclass
class _Table:
    """What steps 1-2 left for the manifests, per window key: which snapshot (and attempt) committed it, whether
    before this run looked (`earlier`), the statistics and data files of its rows, its dead letters (the write job's
    rows); and the table, its rows' schema, the registry schemas."""

    ident: str
    done: dict[str, tuple[int, str]] = field(default_factory=dict)
    earlier: set[str] = field(default_factory=set)
    schema: str = "{}"
    stats: dict[str, dict[str, Any]] = field(default_factory=dict)
    files: dict[str, list[ManifestObject]] = field(default_factory=dict)
    dead: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    schemas: list[ManifestSchema] | None = None


def _write_table(run: ArchiveRun, topic: str, pending: list[PendingWindow], decode: DecodePlan | None, table: _Table,
                 source: dict[str, str] | KafkaConnection) -> None:
    """Steps 1-2 for the run's windows (their dead letters first) read from `source` (Spark's Kafka source options,
    or the tasks' librdkafka connection), then what their manifests need, into `table`."""
    spark, cfg, out = run.ctx.spark, run.cfg, run.out
    slices = [s for p in pending for s in p.slices]
    windows = [p.window for p in pending]
    if slices and out.decoding != "bytes" and out.on_error == "dead_letter":
        table.dead = _dead_letters(run, topic, source, slices, decode)
    df = with_parsed_json(_records(run, topic, source, slices), out.decoding) if slices else None
    groups: dict[str | None, list[OffsetWindow]] = {out.json_schema: windows}
    if df is not None and out.decoding == "json" and out.json_schema is None:
        ddls = infer_json_ddls(df.drop(JSON_COLUMN), slices)
        groups = {}
        for w in windows:
            groups.setdefault(ddls.get(w.key), []).append(w)
    for ddl, group in groups.items():
        if df is None:
            break
        if decode is not None:
            frame = decoded_table_rows(df, out, decode, None if out.on_error == "dead_letter" else _UNDECODABLE)
        else:
            frame = _rows(df, out, stored_columns(df, out, ddl), topic)
        table.schema = frame.schema.json()
        _ensure_table(spark, table.ident, frame, cfg.codec, cfg.iceberg or IcebergOptions(),
                      f"{warehouse(cfg)}/{table.ident.split('.', 1)[1].replace('.', '/')}")
        run.ctx.still_running()  # an orphaned step (its run ended) neither writes nor commits
        committed, before = _commit(run, topic, table.ident, frame, group)
        table.done |= committed
        table.earlier |= before
    if df is not None:
        table.stats = table_window_stats(spark, table.ident, windows, list(out.columns))
        table.files = table_data_files(spark, run.ctx.s3, cfg.bucket, table.ident, windows, table.stats)
    if decode is not None:  # the table's rows do not say which versions they used: every version is listed
        from s3_archive.archive.driver.registry_plan import keep_schemas

        table.schemas = keep_schemas(run.ctx.s3, cfg.bucket, cfg.prefix, decode,
                                     {p.part: [v.id for v in p.schemas] for p in decode.parts})


def _window_manifest(cfg: ArchiveConfig, p: PendingWindow, table: _Table, attempt: str) -> Manifest:
    """Window `p`'s manifest: the statistics and data files of its rows in the table, its dead letters, the table
    and the snapshot that committed it (and that snapshot's attempt; this run's, `attempt`, when nothing was
    written: the window was lost)."""
    w = p.window
    snapshot, by = table.done.get(w.key, (None, attempt))
    dead = table.dead.get(w.key, [])
    dead_objects = sorted((ManifestObject(key=r["key"], size=r["size"], etag=r["etag"])
                           for r in dead if r["kind"] == "dead"), key=lambda o: o.key)
    draft = manifest_draft(cfg, p, _table_stats(p, table.stats.get(w.key), dead), table.schema, by, table.schemas)
    return draft.with_objects(table.files.get(w.key, []), dead_objects).model_copy(
        update={"iceberg_table": table.ident, "iceberg_snapshot_id": snapshot})


def _commit_manifest(run: ArchiveRun, p: PendingWindow, table: _Table) -> tuple[Manifest, Outcome]:
    """Step 3 for window `p`: its manifest (_window_manifest) written; the window's outcome."""
    draft = _window_manifest(run.cfg, p, table, run.attempt)
    run.ctx.still_running()
    result = put_manifest(run.ctx.s3, p.where, draft, fault=run.hooks.fault)
    if result.committed_by_us and run.out.on_error == "dead_letter":
        _remove_stray_dead_letters(run.ctx.s3, p.where, result.manifest)
    if not result.committed_by_us:
        return result.manifest, Outcome.COMMITTED_BY_CONCURRENT_ATTEMPT
    return result.manifest, (Outcome.COMMITTED if draft.attempt == run.attempt else Outcome.ALREADY_COMMITTED
                             if p.window.key in table.earlier else Outcome.COMMITTED_BY_CONCURRENT_ATTEMPT)
