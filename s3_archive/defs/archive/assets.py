"""The archive asset: one per topic; each partition is one offset window written to S3 exactly once.

A failed run's step is retried with backoff (Dagster's RetryPolicy, `retries`), unless every failure is one no
retry can fix (archive/failures.py): then the run fails at once with that error, tagged so that the offsets sensor
does not request it again either (docs/sensors.md, "Retries").
"""

import traceback
import warnings
from collections.abc import Callable, Iterator

import dagster as dg

from s3_archive.archive.archive_lineage import archive_datasets
from s3_archive.archive.driver.archive_run import ArchiveContext
from s3_archive.archive.driver.coordinator import archive_windows
from s3_archive.archive.failures import permanent
from s3_archive.archive.protocol import S3Connection
from s3_archive.config.archive import ArchiveConfig, Retries
from s3_archive.defs.archive.partitions import GAVE_UP_TAG, RUN_ATTEMPT_TAG, archive_asset_key, window_partitions
from s3_archive.defs.metadata import archive_links, typed, ui_page
from s3_archive.defs.restore.assets import restore_asset_key
from s3_archive.defs.restore.targets import target_asset_key
from s3_archive.io.iceberg_catalog import S3Endpoint
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.lineage import LineageRun, glue_account, lineage_run, run_uuid
from s3_archive.io.s3_resource import S3Resource
from s3_archive.io.schema_registry import SchemaRegistryResource
from s3_archive.io.spark import SparkResource
from s3_archive.keys.objects import partition_dir
from s3_archive.model.errors import RunEnded, WindowNotAvailable
from s3_archive.model.windows import OffsetWindow


def _where_to_look(cfg: ArchiveConfig, topic: str) -> str:
    """Description lines: the windows and their metadata, the checks, the topic's restores."""
    key = archive_asset_key(topic)
    restores = [ui_page(target_asset_key(t.name, topic)) for t in cfg.restore_targets if t.applies_to(topic)]
    if cfg.restorable:
        restores.append(ui_page(restore_asset_key(topic)) + " (any target, from the launchpad)")
    lines = [f"- Windows: {ui_page(key, 'partitions', 'Partitions')} (click a window for its metadata: outcome, "
             f"records, offsets, manifest); checks: {ui_page(key, 'checks', 'Checks')}",
             "- To archive windows by hand (the offsets sensor cuts and archives them when it is on): click "
             "*Materialize…*; the dialog opens with no window selected: click **Failed and missing** (or **All**, or "
             f"pick windows), then **Launch backfill** ({cfg.windows_per_run} windows a run; a committed window is "
             "only verified again)"]
    if restores:
        lines.append(f"- Restore: {', '.join(restores)}")
    return "\n".join(lines) + "\n"


def retry_policy(retries: Retries) -> dg.RetryPolicy | None:
    """The step's retries: the n-th after (2^n - 1) x backoff_seconds, each +/- backoff_seconds at random (so the
    runs of many windows failed by one outage do not all come back at once)."""
    if retries.max == 0:
        return None
    return dg.RetryPolicy(max_retries=retries.max, delay=retries.backoff_seconds, backoff=dg.Backoff.EXPONENTIAL,
                          jitter=dg.Jitter.PLUS_MINUS)


def failure(context: dg.AssetExecutionContext, lines: list[str], hopeless: bool) -> dg.Failure:
    """The run's failure: retried (by the step's retry policy, then the offsets sensor) unless `hopeless`."""
    text = "\n".join(lines)
    if not hopeless:
        return dg.Failure(description=text)
    # The sensor reads this tag: a run that failed this way is not requested again.
    context.instance.add_run_tags(context.run_id, {GAVE_UP_TAG: "true"})
    return dg.Failure(description=text + "\n\nNot retried: trying again cannot fix this (docs/sensors.md, Retries).",
                      allow_retries=False)


ENDED = (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED, dg.DagsterRunStatus.CANCELING)


def still_running(instance: dg.DagsterInstance, run_id: str) -> Callable[[], None]:
    """What the step asks before each window's commit: RunEnded once Dagster has marked its run failed or canceled
    (its run process died, monitoring gave up on it, a person canceled it). A step outlives its run process when
    only that process is killed; without this it would commit windows of a run whose failure already had them
    requested again. One read of the run's status per commit."""

    def check() -> None:
        run = instance.get_run_by_id(run_id)
        if run is not None and run.status in ENDED:
            raise RunEnded(f"run {run_id} is {run.status.value} (its process died or it was canceled); this step "
                           "of it commits nothing more. The offsets sensor requests its windows again")

    return check


def attempt_metadata(context: dg.AssetExecutionContext) -> dict[str, int]:
    """`run_attempt`: which run of these windows this is (1, or more when the sensor requested them again);
    `step_retry`: which retry of the run's step (0: the first try)."""
    return {"run_attempt": int(context.run.tags.get(RUN_ATTEMPT_TAG, "1")), "step_retry": context.retry_number}


def _archive_asset_decorator(cfg: ArchiveConfig, topic: str) -> Callable:
    """`dg.asset(...)` with the archive asset's key, partitions, policies and description."""
    with warnings.catch_warnings():
        # backfill_policy is beta: we use it so that a UI backfill runs windows_per_run windows per run (one Spark
        # session each), not one run per window. Silenced here only, so run logs are not flooded with it.
        warnings.simplefilter("ignore", dg.BetaWarning)
        return dg.asset(
            key=archive_asset_key(topic),
            partitions_def=window_partitions(topic),
            backfill_policy=dg.BackfillPolicy.multi_run(max_partitions_per_run=cfg.windows_per_run),
            group_name=f"archive_{cfg.name}",
            kinds={"kafka", "spark", "s3"},
            output_required=False,
            retry_policy=retry_policy(cfg.retries),
            metadata={"topic": topic, "bucket": cfg.bucket, "prefix": cfg.prefix, "format": cfg.format,
                      "compression": cfg.codec, "layout": partition_dir(cfg.prefix, topic, 0) + "…"},
            description=f"Kafka topic {topic} archived to s3://{cfg.bucket}/{cfg.prefix}{topic}/ as {cfg.format}. "
                        "Each partition is one offset window, written exactly once (manifest = commit point).\n\n"
                        + _where_to_look(cfg, topic) + archive_links(cfg, topic, "docs/commit-protocol.md"),
        )


def build_archive_asset(cfg: ArchiveConfig, topic: str) -> dg.AssetsDefinition:
    archive_asset = _archive_asset_decorator(cfg, topic)
    iceberg_in_glue = cfg.format == "iceberg" and (cfg.iceberg is None or cfg.iceberg.catalog == "glue")

    def run(context: dg.AssetExecutionContext, spark: SparkResource, kafka: KafkaResource, s3: S3Resource,
            registry: SchemaRegistryResource | None) -> Iterator[dg.AssetMaterialization]:
        windows = [OffsetWindow.parse(k) for k in context.partition_keys]
        inputs, outputs = archive_datasets(cfg, topic, kafka.bootstrap_servers, windows)
        # An Iceberg table in Glue is named by the catalog's account: asked only when lineage is on, once per process
        glue = glue_account(s3.glue_account, context.log) if iceberg_in_glue else None
        with lineage_run(f"archive.{cfg.name}.{topic}", "ARCHIVE", run_uuid(context.run_id, context.retry_number),
                         inputs, outputs, context.log) as lineage:
            yield from archive_run(context, windows, spark, kafka, s3, registry, lineage, glue)

    def archive_run(context: dg.AssetExecutionContext, windows: list[OffsetWindow], spark: SparkResource,
                    kafka: KafkaResource, s3: S3Resource, registry: SchemaRegistryResource | None,
                    lineage: LineageRun, glue: tuple[str, str] | None) -> Iterator[dg.AssetMaterialization]:
        try:
            client = s3.get_client()  # the bucket is checked by the run's first listing (manifest_chain.py)
            # a broker restarting as the run starts: wait for it (broker_outage_seconds) rather than fail the step
            partitions = kafka.riding(cfg.broker_outage_seconds, lambda: kafka.partitions(topic), context.log)
            missing = [w for w in windows if w.partition not in partitions]
            if missing:
                raise WindowNotAvailable(f"window {missing[0].key}: topic {topic!r} has no partition "
                                         f"{missing[0].partition} (partitions: {partitions[0]}..{partitions[-1]})")
            ctx = ArchiveContext(spark.session(), kafka, client, S3Connection.of_resource(s3),
                                 S3Endpoint.of_resource(s3), context.log,
                                 registry.connection() if registry is not None else None,
                                 still_running(context.instance, context.run_id))
            results = archive_windows(ctx, cfg, topic, windows)
        except Exception as e:
            raise failure(context, [f"{type(e).__name__}: {e}"], permanent(e)) from e
        done = {w: r.manifest for w, r in results.items() if not isinstance(r, BaseException)}
        lineage.inputs, lineage.outputs = archive_datasets(cfg, topic, kafka.bootstrap_servers, windows, done, glue)
        failed: list[BaseException] = []
        lines: list[str] = []
        attempts = attempt_metadata(context)
        for w in windows:
            r = results[w]
            if isinstance(r, BaseException):
                # The whole traceback: the run's failure only lists each window's message.
                context.log.error(f"window {w.key} failed:\n" + "".join(traceback.format_exception(r)))
                failed.append(r)
                lines.append(f"{w.key}: {type(r).__name__}: {r}")
                continue
            context.log.info(f"window {w.key}: {r.outcome}, {r.manifest.record_count} records")
            yield dg.AssetMaterialization(asset_key=context.asset_key, partition=w.key,
                                          metadata=typed(r.metadata() | attempts))
        if failed:
            raise failure(context, [f"{len(failed)} of {len(windows)} windows failed:", *lines],
                          all(permanent(e) for e in failed))

    if cfg.value_decoding.registry or cfg.key_decoding.registry:
        @archive_asset
        def _archive_decoded(context: dg.AssetExecutionContext, spark: SparkResource, kafka: KafkaResource,
                             s3: S3Resource, schema_registry: SchemaRegistryResource,
                             ) -> Iterator[dg.AssetMaterialization]:
            yield from run(context, spark, kafka, s3, schema_registry)

        return _archive_decoded

    @archive_asset
    def _archive(context: dg.AssetExecutionContext, spark: SparkResource, kafka: KafkaResource,
                 s3: S3Resource) -> Iterator[dg.AssetMaterialization]:
        yield from run(context, spark, kafka, s3, None)

    return _archive


def build_archive_assets(archives: list[ArchiveConfig]) -> list[dg.AssetsDefinition]:
    return [build_archive_asset(a, t) for a in archives for t in a.topics]
