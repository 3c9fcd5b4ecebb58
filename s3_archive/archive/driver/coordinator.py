"""Archive the windows of one run, on the driver: which are committed already, does Kafka still have the rest,
one Spark job that writes them all (spark_job.py; iceberg_commit.py for format iceberg), then each window's commit
(commit.py).

This is the whole materialization of a run's Dagster partitions; the asset (defs/archive/assets.py) only maps
partition keys to windows and reports the results.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from s3_archive.archive.driver.archive_run import (
    NO_HOOKS,
    ArchiveContext,
    ArchiveHooks,
    ArchiveRun,
    PendingWindow,
)
from s3_archive.archive.driver.commit import CommitResult, Outcome, adopt, commit_window, open_uploads, remove_objects
from s3_archive.archive.driver.dead_letter_topic import publish as publish_dead_letters
from s3_archive.archive.driver.group_offsets import advance_group_offsets
from s3_archive.archive.driver.manifest_chain import commit_in_chain_order, listed_link, run_manifests
from s3_archive.archive.driver.manifest_draft import manifest_draft
from s3_archive.archive.driver.output import Output
from s3_archive.archive.protocol import (
    DecodePlan,
    JobOutput,
    JobTemplate,
    KafkaConnection,
    RecordStats,
    slices_of,
    splittable,
    window_stats,
)
from s3_archive.config.archive import ArchiveConfig
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.s3 import read_manifest, verify_manifest
from s3_archive.io.store_probe import ensure_conditional_writes, ensure_object_lock
from s3_archive.keys.objects import DEAD_LETTER, WindowLocation
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
from s3_archive.model.manifest import Manifest, ManifestLink, ManifestObject
from s3_archive.model.windows import OffsetWindow

if TYPE_CHECKING:  # pyspark is imported by a run that writes (_write), not when the definitions load
    from pyspark.sql import DataFrame

    from s3_archive.archive.driver.registry_plan import SchemasKept


@dataclass(frozen=True)
class WindowResult:
    where: WindowLocation
    manifest: Manifest
    outcome: Outcome
    seconds: float

    @property
    def window(self) -> OffsetWindow:
        return self.where.window

    def metadata(self) -> dict[str, Any]:
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
            "manifest": self.where.url(self.where.manifest_key),
        }


WindowOutcome = WindowResult | BaseException  # a window's result, or what failed it


def _loss(run: ArchiveRun, topic: str, window: OffsetWindow, lost_to: int, earliest: int) -> list[int]:
    msg = (f"topic {topic!r} partition {window.partition}: offsets [{window.start}, {lost_to}) of window "
           f"{window.key} are no longer in Kafka (deleted by retention); earliest available offset is {earliest}")
    if run.cfg.on_data_loss == "fail":
        raise DataLoss(msg + ". To archive what is left and record the gap, set on_data_loss: record_gap")
    run.ctx.log.warning(msg + "; recording the gap in the manifest (on_data_loss: record_gap)")
    return [window.start, lost_to]


def _committed(run: ArchiveRun, where: WindowLocation, listed: Container[str]) -> WindowResult | None:
    """Step 0: the window's manifest, if an earlier run committed it (`listed`: the partition's manifest keys the
    run listed, manifest_chain.py::run_manifests), with its objects checked."""
    window, s3 = where.window, run.ctx.s3
    if where.manifest_key not in listed:
        return None
    existing = read_manifest(s3, where.bucket, where.manifest_key)
    if existing is None:
        return None
    problems = verify_manifest(s3, where.bucket, existing)
    if problems:
        raise ArchiveIntegrityError(
            f"window {window.key} of {where.topic!r} is committed ({where.url(where.manifest_key)}) but its objects "
            f"do not match the manifest: {'; '.join(problems[:5])}. Restore the objects, or delete the manifest to "
            "archive the window again")
    return WindowResult(where, existing, Outcome.ALREADY_COMMITTED, run.seconds())


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


def archive_windows(ctx: ArchiveContext, cfg: ArchiveConfig, topic: str, windows: list[OffsetWindow],
                    hooks: ArchiveHooks = NO_HOOKS) -> dict[OffsetWindow, WindowOutcome]:
    """Archive `windows` of `topic` in one Spark job; each window's WindowResult, or the exception that failed it.
    Then each committed window's dead letters go to the archive's dead_letter_topic (dead_letter_topic.py), and
    the archive's consumer group offsets follow its committed windows (group_offsets.py).

    `ctx`: what the run reaches the world with (archive_run.py); `hooks`: the tests' and benchmarks' levers."""
    run = ArchiveRun.start(ctx, cfg, hooks)
    results = _archive_windows(run, topic, windows)
    if cfg.dead_letter_topic is not None:
        for w, r in list(results.items()):
            if isinstance(r, WindowResult) and r.manifest.dead_letter_objects:
                try:
                    publish_dead_letters(ctx.kafka, ctx.s3, cfg, topic, r.manifest, ctx.log)
                except Exception as e:  # the window stays committed; its run is retried and publishes them then
                    results[w] = e
    committed = [w for w, r in results.items() if isinstance(r, WindowResult)]
    advance_group_offsets(ctx.kafka, ctx.s3, cfg, topic, committed, ctx.log)
    return results


def _archive_windows(run: ArchiveRun, topic: str, windows: list[OffsetWindow]) -> dict[OffsetWindow, WindowOutcome]:
    """Step 0 for every window, then the others planned, written and committed."""
    cfg = run.cfg
    manifests = run_manifests(run.ctx.s3, cfg.bucket, cfg.prefix, topic, windows)  # the run's bucket check too
    listed = {k for keys in manifests.values() for k in keys}
    results: dict[OffsetWindow, WindowOutcome] = {
        w: r for w, r in _each(lambda w: _committed(run, cfg.location(topic, w), listed), windows).items()
        if r is not None}
    todo = [w for w in windows if w not in results]
    if not todo:
        return results
    ensure_conditional_writes(run.ctx.s3, run.cfg.bucket, run.cfg.prefix)  # before anything is written
    if run.cfg.retention_lock is not None:
        ensure_object_lock(run.ctx.s3, run.cfg.bucket, run.cfg.name)
    parts = sorted({w.partition for w in todo})
    pending = _plan(run, topic, todo, parts, results)
    decode = None
    if run.out.registry and pending:
        try:
            decode = _decode_plan(run, topic)
        except Exception as e:  # nothing is written: every window of the run fails with the registry's error
            return results | {p.window: e for p in pending}
    if FORMATS[run.cfg.format].table:
        # Spark + Iceberg: imported by a run that writes, not at load
        from s3_archive.archive.driver.iceberg_commit import commit_windows

        done = commit_windows(run, topic, pending, decode)
        for p in pending:
            r = done[p.window]
            results[p.window] = r if isinstance(r, BaseException) else WindowResult(p.where, *r, run.seconds())
        return results
    written = _write(run, topic, pending, results, decode)
    after = _offsets(run, topic, "earliest", parts)
    uploads = open_uploads(run.ctx.s3, run.cfg.bucket, [f"{run.cfg.prefix}{topic}/"] + (
        [f"{run.cfg.prefix}{DEAD_LETTER}/{topic}/"] if run.out.dead_letters else []))
    ready = {p.window: p for p in pending if p.window not in results}
    kept: SchemasKept | None = None
    if decode is not None:  # each schema object put once per run, not once per window
        from s3_archive.archive.driver.registry_plan import SchemasKept

        kept = SchemasKept(decode)
    return results | commit_in_chain_order(
        lambda w, previous: _commit_one(run, ready[w], written[w], after[w.partition], uploads, kept, previous,
                                        manifests[w.partition]),
        list(ready))


def _offsets(run: ArchiveRun, topic: str, spec: str, parts: list[int]) -> dict[int, int]:
    """Kafka's offsets, waited for through a broker outage of up to the archive's broker_outage_seconds."""
    kafka = run.ctx.kafka
    return kafka.riding(run.cfg.broker_outage_seconds, lambda: kafka.offsets(topic, spec, parts), run.ctx.log)


def _plan(run: ArchiveRun, topic: str, todo: list[OffsetWindow], parts: list[int],
          results: dict[OffsetWindow, WindowOutcome]) -> list[PendingWindow]:
    """Where Kafka has each window's records: its slices and what retention deleted before the run looked; a window
    Kafka has not reached yet, or whose loss the archive does not accept, fails (in `results`)."""
    earliest = _offsets(run, topic, "earliest", parts)
    latest = _offsets(run, topic, "latest", parts)
    from s3_archive.io.spark import KAFKA_MIN_PARTITIONS_CONF

    min_partitions = run.ctx.spark.conf.get(KAFKA_MIN_PARTITIONS_CONF, None)
    split = splittable(run.cfg.layout, run.out.rotates, run.cfg.format)
    pending: list[PendingWindow] = []
    for w in todo:
        try:
            if w.end > latest[w.partition]:
                raise WindowNotAvailable(f"window {w.key} of {topic!r} ends at offset {w.end}, but partition "
                                         f"{w.partition} has only reached offset {latest[w.partition]} (high "
                                         "watermark)")
            lost, read_start = [], w.start
            if earliest[w.partition] > w.start:
                lost.append(_loss(run, topic, w, min(earliest[w.partition], w.end), earliest[w.partition]))
                read_start = lost[0][1]
            count = slice_count(run.out, min_partitions, w.end - read_start) if split else 1
            slices = slices_of(w, read_start, count) if read_start < w.end else []
            pending.append(PendingWindow(run.cfg.location(topic, w), read_start, lost, slices))
        except Exception as e:
            results[w] = e
    return pending


def _decode_plan(run: ArchiveRun, topic: str) -> DecodePlan:
    """The run's Schema Registry decoding plan (driver/registry_plan.py)."""
    if run.ctx.registry is None:
        parts = ", ".join(f"{part}_decoding.type {kind!r}" for part, kind, _, _ in run.out.registry_parts(topic))
        raise InvalidConfig(f"{parts} needs a Schema Registry: set $S3_ARCHIVE_SCHEMA_REGISTRY_URL "
                            "(docs/configuration.md, 'Environment')")
    from s3_archive.archive.driver.registry_plan import decode_plan

    return decode_plan(run.ctx.registry, run.out, topic)


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


def _task_reads(kafka: KafkaResource) -> KafkaConnection:
    from s3_archive.archive.driver.task_read_job import kafka_connection

    return kafka_connection(kafka)


def _write(run: ArchiveRun, topic: str, pending: list[PendingWindow], results: dict[OffsetWindow, WindowOutcome],
           decode: DecodePlan | None = None) -> dict[OffsetWindow, JobOutput]:
    """Run the write job(s) of the pending windows: one job, or one per distinct inferred JSON schema. A failed job
    fails its windows (their objects stay until a re-run replaces or removes them)."""
    # Imported here, not at load: pyspark and pyarrow cost every process that loads the definitions over a second.
    from s3_archive.archive.driver.spark_job import infer_json_ddls, read_slices, run_write_job
    from s3_archive.archive.driver.task_read_job import envelope_frame, run_task_read_job

    spark, out = run.ctx.spark, run.out
    slices = [s for p in pending for s in p.slices]
    if out.read_path == "librdkafka":
        base = run.template(topic, kafka=_task_reads(run.ctx.kafka))

        def records(job: JobTemplate) -> DataFrame:
            return envelope_frame(spark, job)

        def write(job: JobTemplate, ddl: str | None) -> JobOutput:
            return run_task_read_job(spark, job, out, ddl, decode=decode)
    else:
        base, options = run.template(topic), run.ctx.kafka.spark_options()

        def records(job: JobTemplate) -> DataFrame:
            return read_slices(spark, options, job.topic, job.slices)

        def write(job: JobTemplate, ddl: str | None) -> JobOutput:
            return run_write_job(spark, options, job, out, ddl, decode=decode)

    groups: dict[str | None, list[PendingWindow]] = {}
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
            job_out = write(replace(base, slices=job_slices), ddl) if job_slices else JobOutput([], "{}")
        except Exception as e:
            for p in group:
                results[p.window] = e
            continue
        for p in group:
            written[p.window] = job_out.of_window(p.window)
    return written


def _commit_one(run: ArchiveRun, p: PendingWindow, job_out: JobOutput, earliest_after: int, uploads: list[dict],
                kept: SchemasKept | None = None, previous: ManifestLink | None = None,
                manifests: list[str] | None = None) -> WindowResult:
    """Commit one written window (commit.py): unless another attempt did, or a record policy refuses it, or Kafka
    deleted records before the write read them that the archive does not accept losing (then nothing of this
    attempt's is left behind). `previous`: the link to the manifest this run committed just before, in the chain
    (None: looked up, in `manifests` first: the partition's manifest keys the run listed before it wrote). `kept`:
    with Schema Registry decoding, the run's plan and the schema objects its windows have put (registry_plan.py)."""
    s3 = run.ctx.s3
    stats: RecordStats = window_stats(p.slices, job_out.slice_rows())
    if stats.committed_elsewhere and (won := adopt(s3, p.where)) is not None:
        return _result(run, p.where, won)
    try:
        _refuse(run.out, p.where, stats)
        p = _lost_while_reading(run, p, stats, earliest_after)
    except (UndecodableValue, UnplaceableRecord, DataLoss):
        remove_objects(s3, p.where, uploads)
        raise
    schemas = None
    if kept is not None:
        schemas = kept.keep(s3, run.cfg.bucket, run.cfg.prefix, stats.schema_ids)
    if previous is None and manifests:
        previous = listed_link(s3, p.where, manifests)[1]  # else put_manifest looks it up
    draft = manifest_draft(run.cfg, p, stats, job_out.schema_json, run.attempt, schemas).model_copy(
        update={"previous_manifest": previous})
    _report_dropped(run.ctx.log, p.where, stats, job_out)
    objects = [ManifestObject(key=r["key"], size=r["size"], etag=r["etag"], offset=r["record_offset"],
                              sha256=r.get("sha256")) for r in job_out.objects("object")]
    dead = [ManifestObject(key=r["key"], size=r["size"], etag=r["etag"], sha256=r.get("sha256"))
            for r in job_out.objects("dead")]
    run.ctx.still_running()  # the run this step belongs to has not ended (an orphaned step commits nothing)
    result = commit_window(s3, p.where, draft, objects, dead, uploads, run.hooks.fault,
                           dead_letters=run.out.dead_letters)
    return _result(run, p.where, result)


def _refuse(out: Output, where: WindowLocation, stats: RecordStats) -> None:
    """Raise when the record policies refuse to commit the window: undecodable values (value_decoding.on_error
    fail) or records the layout cannot place (layout.on_missing fail)."""
    window = where.window
    what = f"topic {where.topic!r} partition {window.partition}"
    if stats.undecodable and out.on_error == "fail" and stats.first_undecodable_reason:
        raise UndecodableValue(
            f"{what}: {stats.undecodable} record(s) in window {window.key} do not decode, the first at offset "
            f"{stats.first_undecodable_offset}: {stats.first_undecodable_reason}. Nothing was committed. To keep "
            "such records under the dead-letter prefix and archive the rest, set value_decoding.on_error: "
            "dead_letter")
    if stats.undecodable and out.on_error == "fail":
        raise UndecodableValue(
            f"{what}: {stats.undecodable} record(s) in window {window.key} have a value that is not "
            f"{'UTF-8' if out.decoding == 'utf8' else 'a UTF-8 JSON object'}, the first at offset "
            f"{stats.first_undecodable_offset}. Nothing was committed. To keep such records under the dead-letter "
            "prefix and archive the rest, set value_decoding.on_error: dead_letter")
    if stats.unplaceable and out.layout is not None and out.layout.on_missing == "fail":
        raise UnplaceableRecord(
            f"{what}: {stats.unplaceable} record(s) in window {window.key} lack a value the layout places them by "
            f"(partition_by or {{{{key}}}}), the first at offset {stats.first_unplaceable_offset}. Nothing was "
            "committed. To archive them in the (null) bucket, skip them or keep them as dead letters, set "
            "layout.on_missing: bucket, skip or dead_letter")


def _lost_while_reading(run: ArchiveRun, p: PendingWindow, stats: RecordStats, earliest_after: int) -> PendingWindow:
    """Retention may have moved while Spark read: records before the first one the tasks got may be gone. Such a
    loss is recorded (or fails the window, on_data_loss: fail), and the window's absent ranges start after it."""
    window, read_start = p.window, p.read_start
    first_seen = stats.first_offset if stats.first_offset is not None else window.end
    if not (earliest_after > read_start and first_seen > read_start and read_start < window.end):
        return p
    lost_to = min(earliest_after, first_seen)
    lost = [*p.lost, _loss(run, p.where.topic, OffsetWindow(window.partition, read_start, window.end), lost_to,
                           earliest_after)]
    stats.absent = [[a, b] for a, b in stats.absent if b > lost_to]
    if stats.absent and stats.absent[0][0] < lost_to:
        stats.absent[0][0] = lost_to
    return replace(p, read_start=lost_to, lost=lost)


def _report_dropped(log: Logger, where: WindowLocation, stats: RecordStats, job_out: JobOutput) -> None:
    """Log the records the window's objects do not hold: skipped tombstones, undecodable or unplaceable ones."""
    window, topic = where.window, where.topic
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


def _result(run: ArchiveRun, where: WindowLocation, r: CommitResult) -> WindowResult:
    outcome = Outcome.COMMITTED if r.committed_by_us else Outcome.COMMITTED_BY_CONCURRENT_ATTEMPT
    return WindowResult(where, r.manifest, outcome, run.seconds())


def archive_window(ctx: ArchiveContext, cfg: ArchiveConfig, topic: str, window: OffsetWindow,
                   hooks: ArchiveHooks = NO_HOOKS) -> WindowResult:
    """Archive one window (archive_windows for a run of one); raises what failed it."""
    r = archive_windows(ctx, cfg, topic, [window], hooks)[window]
    if isinstance(r, BaseException):
        raise r
    return r
