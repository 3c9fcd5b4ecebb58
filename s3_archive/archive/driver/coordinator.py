"""Archive the windows of one run, on the driver: which are committed already, does Kafka still have the rest,
one Spark job that writes them all (spark_job.py; iceberg_commit.py for format iceberg), then each window's commit
(commit.py).

This is the whole materialization of a run's Dagster partitions; the asset (defs/archive/assets.py) only maps
partition keys to windows and reports the results.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from s3_archive.__init__ import __version__
from s3_archive.archive.driver.commit import (
    CommitResult,
    Fault,
    Outcome,
    adopt,
    commit_window,
    no_fault,
    open_uploads,
    remove_objects,
)
from s3_archive.archive.driver.dead_letter_topic import publish as publish_dead_letters
from s3_archive.archive.driver.group_offsets import advance_group_offsets
from s3_archive.archive.driver.output import Output
from s3_archive.archive.executor.upload import S3Connection
from s3_archive.archive.protocol import JobOutput, RecordStats, Slice, WriteJob, slices_of, splittable, window_stats
from s3_archive.config.archive import ArchiveConfig
from s3_archive.io.iceberg_catalog import S3Endpoint
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.registry_client import RegistryConnection
from s3_archive.io.s3 import S3Client, read_manifest, verify_manifest
from s3_archive.io.store_probe import ensure_conditional_writes
from s3_archive.keys.objects import DEAD_LETTER
from s3_archive.model.errors import (
    ArchiveIntegrityError,
    DataLoss,
    InvalidConfig,
    UndecodableValue,
    UnplaceableRecord,
    WindowNotAvailable,
)
from s3_archive.model.formats import FORMATS
from s3_archive.model.logger import Logger
from s3_archive.model.manifest import MANIFEST_VERSION, REGISTRY_VERSION, Manifest, ManifestObject
from s3_archive.model.windows import OffsetWindow


@dataclass(frozen=True)
class WindowResult:
    window: OffsetWindow
    manifest: Manifest
    outcome: Outcome
    seconds: float

    def metadata(self, bucket: str, manifest_key: str) -> dict[str, Any]:
        """Plain values, the same keys and types for every window and outcome (no None: -1 and "" when the window
        holds no record). `records`, `bytes`, `seconds`, `records_per_second`, `lag_seconds` are the plot keys
        shared with the restore asset; lag = from the window's newest record to its commit (the manifest's)."""
        m = self.manifest
        records = m.record_count
        lag = 0.0
        if m.max_timestamp_ms is not None:
            lag = max(m.committed_time.timestamp() - m.max_timestamp_ms / 1000, 0.0)
        return {
            "outcome": Outcome(self.outcome).value,
            "attempt": m.attempt,  # the attempt whose manifest is the commit (this run's when outcome is committed)
            "records": records,
            "bytes": m.bytes_written,
            "bytes_read": m.bytes_read,
            "bytes_written": m.bytes_written,
            "objects": len(m.objects),
            "first_offset": -1 if m.first_offset is None else m.first_offset,
            "last_offset": -1 if m.last_offset is None else m.last_offset,
            "min_timestamp": m.min_timestamp or "",
            "max_timestamp": m.max_timestamp or "",
            "absent_offsets": m.absent_offset_count,
            "lost_offsets": m.lost_offset_count,
            "undecodable_records": m.undecodable_records or 0,
            "unplaceable_records": m.unplaceable_records or 0,
            "skipped_records": m.skipped_records or 0,
            "tombstones_skipped": m.tombstones_skipped or 0,
            "seconds": round(self.seconds, 3),
            "records_per_second": round(records / self.seconds, 1) if self.seconds > 0 else 0.0,
            "lag_seconds": round(lag, 3),
            "manifest": f"s3://{bucket}/{manifest_key}",
        }


def _iso(ms: int | None) -> str | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def _loss(cfg: ArchiveConfig, topic: str, window: OffsetWindow, lost_to: int, earliest: int, log: Logger) -> list[int]:
    msg = (f"topic {topic!r} partition {window.partition}: offsets [{window.start}, {lost_to}) of window "
           f"{window.key} are no longer in Kafka (deleted by retention); earliest available offset is {earliest}")
    if cfg.on_data_loss == "fail":
        raise DataLoss(msg + ". To archive what is left and record the gap, set on_data_loss: record_gap")
    log.warning(msg + "; recording the gap in the manifest (on_data_loss: record_gap)")
    return [window.start, lost_to]


@dataclass
class _Pending:
    """A window this run writes."""

    window: OffsetWindow
    read_start: int
    lost: list[list[int]]
    slices: list[Slice]


WindowOutcome = WindowResult | BaseException  # a window's result, or what failed it


def _committed(s3: S3Client, cfg: ArchiveConfig, topic: str, window: OffsetWindow, t0: float) -> WindowResult | None:
    mkey = cfg.location(topic, window).manifest_key
    existing = read_manifest(s3, cfg.bucket, mkey)
    if existing is None:
        return None
    problems = verify_manifest(s3, cfg.bucket, existing)
    if problems:
        raise ArchiveIntegrityError(
            f"window {window.key} of {topic!r} is committed (s3://{cfg.bucket}/{mkey}) but its objects do not "
            f"match the manifest: {'; '.join(problems[:5])}. Restore the objects, or delete the manifest to "
            "archive the window again")
    return WindowResult(window, existing, Outcome.ALREADY_COMMITTED, time.monotonic() - t0)


def _each(fn: Callable[[OffsetWindow], Any], windows: list[OffsetWindow]) -> dict[OffsetWindow, Any]:
    """fn(window) for every window, 16 at a time; an exception is the window's result."""
    def safe(w: OffsetWindow) -> Any:
        try:
            return fn(w)
        except Exception as e:  # reported per window: the other windows still commit
            return e

    if not windows:
        return {}
    with ThreadPoolExecutor(min(16, len(windows))) as pool:
        return dict(zip(windows, pool.map(safe, windows), strict=True))


def archive_windows(spark: Any, kafka: KafkaResource, s3: S3Client, cfg: ArchiveConfig, topic: str,
                    windows: list[OffsetWindow], log: Logger, fault: Fault = no_fault,
                    conn: S3Connection | None = None, write_fault: str | None = None,
                    job_options: dict[str, Any] | None = None,
                    endpoint: S3Endpoint | None = None,
                    registry: RegistryConnection | None = None) -> dict[OffsetWindow, WindowOutcome]:
    """Archive `windows` of `topic` in one Spark job; each window's WindowResult, or the exception that failed it.
    Then each committed window's dead letters go to the archive's dead_letter_topic (dead_letter_topic.py), and
    the archive's consumer group offsets follow its committed windows (group_offsets.py).

    `s3`: the driver's boto3 client; `conn`: how the executors reach S3 (default: the client's own connection);
    `endpoint`: how an Iceberg catalog's JVM clients reach S3 and Glue (default: the client's endpoint).
    `fault` stops the driver's commit after a step, `write_fault` a write task (tests); `job_options` overrides
    WriteJob fields (multipart_threshold, part_size) for tests and benchmarks; `registry`: the Schema Registry of
    an archive that decodes registry payloads."""
    results = _archive_windows(spark, kafka, s3, cfg, topic, windows, log, fault, conn, write_fault, job_options,
                               endpoint, registry)
    if cfg.dead_letter_topic is not None:
        for w, r in list(results.items()):
            if isinstance(r, WindowResult) and r.manifest.dead_letter_objects:
                try:
                    publish_dead_letters(kafka, s3, cfg, topic, r.manifest, log)
                except Exception as e:  # the window stays committed; its run is retried and publishes them then
                    results[w] = e
    committed = sorted({w.partition for w, r in results.items() if isinstance(r, WindowResult)})
    advance_group_offsets(kafka, s3, cfg, topic, committed, log)
    return results


def _archive_windows(spark: Any, kafka: KafkaResource, s3: S3Client, cfg: ArchiveConfig, topic: str,
                     windows: list[OffsetWindow], log: Logger, fault: Fault, conn: S3Connection | None,
                     write_fault: str | None, job_options: dict[str, Any] | None,
                     endpoint: S3Endpoint | None,
                     registry: RegistryConnection | None) -> dict[OffsetWindow, WindowOutcome]:
    t0 = time.monotonic()
    results: dict[OffsetWindow, WindowOutcome] = {}
    for w, r in _each(lambda w: _committed(s3, cfg, topic, w, t0), windows).items():
        if r is not None:
            results[w] = r
    todo = [w for w in windows if w not in results]
    if not todo:
        return results
    ensure_conditional_writes(s3, cfg.bucket, cfg.prefix)  # before anything is written: no weaker commit

    parts = sorted({w.partition for w in todo})
    earliest = kafka.offsets(topic, "earliest", parts)
    latest = kafka.offsets(topic, "latest", parts)
    out = Output.of(cfg)
    from s3_archive.io.spark import KAFKA_MIN_PARTITIONS_CONF

    min_partitions = spark.conf.get(KAFKA_MIN_PARTITIONS_CONF, None)
    split = splittable(cfg.layout, out.rotates, cfg.format)
    pending: list[_Pending] = []
    for w in todo:
        try:
            if w.end > latest[w.partition]:
                raise WindowNotAvailable(f"window {w.key} of {topic!r} ends at offset {w.end}, but partition "
                                         f"{w.partition} has only reached offset {latest[w.partition]} (high "
                                         "watermark)")
            lost, read_start = [], w.start
            if earliest[w.partition] > w.start:
                lost.append(_loss(cfg, topic, w, min(earliest[w.partition], w.end), earliest[w.partition], log))
                read_start = lost[0][1]
            count = slice_count(out, min_partitions, w.end - read_start) if split else 1
            slices = slices_of(w, read_start, count) if read_start < w.end else []
            pending.append(_Pending(w, read_start, lost, slices))
        except Exception as e:
            results[w] = e

    attempt = f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    decode = None
    if out.registry and pending:
        try:
            decode = _decode_plan(registry, out, topic)
        except Exception as e:  # nothing is written: every window of the run fails with the registry's error
            return results | {p.window: e for p in pending}
    if FORMATS[cfg.format].table:
        # Spark + Iceberg: imported by a run that writes, not at load
        from s3_archive.archive.driver.iceberg_commit import commit_windows

        ready = [p for p in pending if p.window not in results]
        done = commit_windows(spark, kafka.spark_options() if out.read_path == "spark" else _task_reads(kafka),
                              s3, cfg, topic, [(p.window, p.read_start, p.lost) for p in ready],
                              [s for p in ready for s in p.slices], endpoint or S3Endpoint.of_client(s3),
                              attempt, fault, conn, decode)
        for w, r in done.items():
            results[w] = r if isinstance(r, BaseException) else WindowResult(w, r[0], r[1], time.monotonic() - t0)
        return results
    conn = conn or S3Connection.of_client(s3)
    base = WriteJob(topic=topic, bucket=cfg.bucket, prefix=cfg.prefix, fmt=None, conn=conn,  # type: ignore[arg-type]
                    slices=(), fault=write_fault, **(job_options or {}))
    written = _write(spark, kafka, base, out, pending, results, decode)

    after = kafka.offsets(topic, "earliest", parts)
    uploads = open_uploads(s3, cfg.bucket, [f"{cfg.prefix}{topic}/"]
                           + ([f"{cfg.prefix}{DEAD_LETTER}/{topic}/"] if out.dead_letters else []))

    def commit(p: _Pending) -> WindowResult:
        job_out = written[p.window]
        return _commit_one(s3, cfg, topic, p, job_out, after[p.window.partition], attempt, uploads, log, fault, t0,
                           decode)

    ready = [p for p in pending if p.window not in results]
    by_window = {p.window: p for p in ready}
    results |= _each(lambda w: commit(by_window[w]), [p.window for p in ready])
    return results


def _decode_plan(registry: RegistryConnection | None, out: Output, topic: str) -> Any:
    """The run's Schema Registry decoding plan (driver/registry_plan.py)."""
    if registry is None:
        parts = ", ".join(f"{part}_decoding.type {kind!r}" for part, kind, _, _ in out.registry_parts(topic))
        raise InvalidConfig(f"{parts} needs a Schema Registry: set $S3_ARCHIVE_SCHEMA_REGISTRY_URL "
                            "(docs/configuration.md, 'Environment')")
    from s3_archive.archive.driver.registry_plan import decode_plan

    return decode_plan(registry, out, topic)


# read_path librdkafka: a window is cut into one slice per SLICE_RECORDS offsets, at most MAX_SLICES, so that a run
# of few windows still keeps every core reading (docs/performance.md, "Slices").
SLICE_RECORDS = 40_000
MAX_SLICES = 4


def slice_count(out: Output, min_partitions: str | None, offsets: int) -> int:
    """The slices (tasks, objects) a splittable window of `offsets` offsets is cut into:
    SparkResource.kafka_min_partitions when set; with read_path librdkafka one per SLICE_RECORDS, at most
    MAX_SLICES; else one. A function of the window and the settings only, never of the run it is in: every attempt
    of a window (a re-run, a concurrent run of other windows) cuts it alike and writes the same objects."""
    if min_partitions:
        return int(min_partitions)
    if out.read_path != "librdkafka":
        return 1
    return max(1, min(MAX_SLICES, offsets // SLICE_RECORDS))


def _task_reads(kafka: KafkaResource) -> Any:
    from s3_archive.archive.driver.task_read_job import kafka_connection

    return kafka_connection(kafka)


def _write(spark: Any, kafka: KafkaResource, base: WriteJob, out: Output, pending: list[_Pending],
           results: dict[OffsetWindow, WindowOutcome], decode: Any = None) -> dict[OffsetWindow, JobOutput]:
    """Run the write job(s) of the pending windows: one job, or one per distinct inferred JSON schema. A failed job
    fails its windows (their objects stay until a re-run replaces or removes them)."""
    # Imported here, not at load: pyspark and pyarrow cost every process that loads the definitions over a second.
    from s3_archive.archive.driver.spark_job import infer_json_ddls, read_slices, run_write_job
    from s3_archive.archive.driver.task_read_job import envelope_frame, run_task_read_job

    slices = [s for p in pending for s in p.slices]
    if out.read_path == "librdkafka":
        base = replace(base, kafka=_task_reads(kafka))

        def records(job: WriteJob) -> Any:
            return envelope_frame(spark, job)

        def run(job: WriteJob, ddl: str | None) -> JobOutput:
            return run_task_read_job(spark, job, out, ddl, decode=decode)
    else:
        options = kafka.spark_options()

        def records(job: WriteJob) -> Any:
            return read_slices(spark, options, job.topic, job.slices)

        def run(job: WriteJob, ddl: str | None) -> JobOutput:
            return run_write_job(spark, options, job, out, ddl, decode=decode)

    groups: dict[str | None, list[_Pending]] = {}
    if out.decoding == "json" and out.json_schema is None and slices:
        try:
            ddls = infer_json_ddls(records(replace(base, slices=tuple(slices))), slices)
        except Exception as e:
            for p in pending:
                results[p.window] = e
            return {}
        for p in pending:
            groups.setdefault(ddls.get(p.window.key), []).append(p)
    else:
        groups[out.json_schema] = pending
    written: dict[OffsetWindow, JobOutput] = {}
    for ddl, group in groups.items():
        job_slices = tuple(s for p in group for s in p.slices)
        try:
            job_out = run(replace(base, slices=job_slices), ddl) if job_slices else JobOutput([], "{}")
        except Exception as e:
            for p in group:
                results[p.window] = e
            continue
        for p in group:
            written[p.window] = job_out.of_window(p.window)
    return written


def _commit_one(s3: S3Client, cfg: ArchiveConfig, topic: str, p: _Pending, job_out: JobOutput, earliest_after: int,
                attempt: str, uploads: list[dict], log: Logger, fault: Fault, t0: float, decode: Any = None,
                ) -> WindowResult:
    window, out = p.window, Output.of(cfg)
    where = cfg.location(topic, window)
    stats: RecordStats = window_stats(p.slices, job_out.slice_rows())

    def give_up() -> None:
        remove_objects(s3, where, uploads)

    if stats.committed_elsewhere and (won := adopt(s3, cfg.bucket, where.manifest_key)) is not None:
        return _result(won, t0)
    if stats.undecodable and out.on_error == "fail" and stats.first_undecodable_reason:
        give_up()
        raise UndecodableValue(
            f"topic {topic!r} partition {window.partition}: {stats.undecodable} record(s) in window {window.key} "
            f"do not decode, the first at offset {stats.first_undecodable_offset}: "
            f"{stats.first_undecodable_reason}. Nothing was committed. To keep such records under the dead-letter "
            "prefix and archive the rest, set value_decoding.on_error: dead_letter")
    if stats.undecodable and out.on_error == "fail":
        give_up()
        raise UndecodableValue(
            f"topic {topic!r} partition {window.partition}: {stats.undecodable} record(s) in window {window.key} "
            f"have a value that is not {'UTF-8' if out.decoding == 'utf8' else 'a UTF-8 JSON object'}, the first "
            f"at offset {stats.first_undecodable_offset}. Nothing was committed. To keep such records under the "
            "dead-letter prefix and archive the rest, set value_decoding.on_error: dead_letter")
    if stats.unplaceable and out.layout is not None and out.layout.on_missing == "fail":
        give_up()
        raise UnplaceableRecord(
            f"topic {topic!r} partition {window.partition}: {stats.unplaceable} record(s) in window {window.key} "
            f"lack a value the layout places them by (partition_by or {{{{key}}}}), the first at offset "
            f"{stats.first_unplaceable_offset}. Nothing was committed. To archive them in the (null) bucket, skip "
            "them or keep them as dead letters, set layout.on_missing: bucket, skip or dead_letter")

    # Retention may have moved while Spark read: records before the first one we got may be gone.
    lost, read_start = list(p.lost), p.read_start
    first_seen = stats.first_offset if stats.first_offset is not None else window.end
    if earliest_after > read_start and first_seen > read_start and read_start < window.end:
        lost_to = min(earliest_after, first_seen)
        try:
            lost.append(_loss(cfg, topic, OffsetWindow(window.partition, read_start, window.end), lost_to,
                              earliest_after, log))
        except DataLoss:
            give_up()
            raise
        stats.absent = [[a, b] for a, b in stats.absent if b > lost_to]
        if stats.absent and stats.absent[0][0] < lost_to:
            stats.absent[0][0] = lost_to
        read_start = lost_to

    expected = window.end - read_start
    schemas = None
    if decode is not None:
        from s3_archive.archive.driver.registry_plan import keep_schemas

        schemas = keep_schemas(s3, cfg.bucket, cfg.prefix, decode, stats.schema_ids)
    draft = Manifest(
        manifest_version=MANIFEST_VERSION if schemas is None else REGISTRY_VERSION,
        schemas=schemas,
        writer=f"s3-archive {__version__}",
        topic=topic,
        partition=window.partition,
        start_offset=window.start,
        end_offset=window.end,
        window_key=window.key,
        format=cfg.format,
        compression=cfg.codec,
        envelope=list(out.columns),
        value_decoding=cfg.value_decoding.type,
        undecodable_records=stats.undecodable,
        unplaceable_records=stats.unplaceable or None,
        skipped_records=stats.skipped or None,
        tombstones_skipped=stats.tombstones_skipped if out.skip_tombstones else None,
        restorable=cfg.restorable,
        record_count=stats.records - stats.skipped,
        bytes_read=stats.bytes_read,
        bytes_written=0,  # commit_window fills in the objects
        first_offset=stats.first_offset,
        last_offset=stats.last_offset,
        min_timestamp_ms=stats.min_timestamp_ms,
        max_timestamp_ms=stats.max_timestamp_ms,
        min_timestamp=_iso(stats.min_timestamp_ms),
        max_timestamp=_iso(stats.max_timestamp_ms),
        absent_offsets=stats.absent,
        absent_offsets_truncated=stats.absent_truncated,
        absent_offset_count=expected - stats.records,
        lost_offsets=lost,
        spark_schema=job_out.schema_json,
        attempt=attempt,
        committed_at=datetime.now(UTC).isoformat(),
        objects=[],
    )
    if stats.tombstones_skipped:
        log.info(f"window {window.key} of {topic!r}: {stats.tombstones_skipped} tombstone(s) not written "
                 "(sink_output.skip_tombstones)")
    if stats.undecodable or stats.unplaceable:
        what = ", ".join(f"{n} record(s) {why} (first at offset {first})" for n, why, first in (
            (stats.undecodable, "with an undecodable value", stats.first_undecodable_offset),
            (stats.unplaceable, "the layout cannot place", stats.first_unplaceable_offset)) if n)
        where_to = (f"were skipped ({stats.skipped}; counted in the manifest's skipped_records)" if stats.skipped
                    and not job_out.objects("dead") else f"go to {where.url(where.dead_letter_stem)}…")
        log.warning(f"window {window.key} of {topic!r}: {what} {where_to}")
    objects = [ManifestObject(key=r["key"], size=r["size"], etag=r["etag"], offset=r["record_offset"])
               for r in job_out.objects("object")]
    dead = [ManifestObject(key=r["key"], size=r["size"], etag=r["etag"]) for r in job_out.objects("dead")]
    result: CommitResult = commit_window(s3, where, draft, objects, dead, uploads, fault,
                                         dead_letters=out.dead_letters)
    return _result(result, t0)


def _result(r: CommitResult, t0: float) -> WindowResult:
    outcome = Outcome.COMMITTED if r.committed_by_us else Outcome.COMMITTED_BY_CONCURRENT_ATTEMPT
    return WindowResult(r.manifest.window, r.manifest, outcome, time.monotonic() - t0)


def archive_window(spark: Any, kafka: KafkaResource, s3: S3Client, cfg: ArchiveConfig, topic: str,
                   window: OffsetWindow, log: Logger, fault: Fault = no_fault, **kw: Any) -> WindowResult:
    """Archive one window (archive_windows for a run of one); raises what failed it."""
    r = archive_windows(spark, kafka, s3, cfg, topic, [window], log, fault, **kw)[window]
    if isinstance(r, BaseException):
        raise r
    return r
