"""The archive asset: one per topic; each partition is one offset window written to S3 exactly once."""

import traceback
import warnings
from collections.abc import Iterator

import dagster as dg

from s3_archive.archive.driver.coordinator import archive_windows
from s3_archive.archive.executor.upload import S3Connection
from s3_archive.config.archive import ArchiveConfig
from s3_archive.defs.archive.partitions import archive_asset_key, window_partitions
from s3_archive.defs.metadata import archive_links, typed, ui_page
from s3_archive.defs.restore.assets import restore_asset_key
from s3_archive.defs.restore.targets import target_asset_key
from s3_archive.io.iceberg_catalog import S3Endpoint
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.s3 import check_bucket
from s3_archive.io.s3_resource import S3Resource
from s3_archive.io.schema_registry import SchemaRegistryResource
from s3_archive.io.spark import SparkResource
from s3_archive.keys.objects import manifest_key, partition_dir
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


def build_archive_asset(cfg: ArchiveConfig, topic: str) -> dg.AssetsDefinition:
    with warnings.catch_warnings():
        # backfill_policy is beta: we use it so that a UI backfill runs windows_per_run windows per run (one Spark
        # session each), not one run per window. Silenced here only, so run logs are not flooded with it.
        warnings.simplefilter("ignore", dg.BetaWarning)
        archive_asset = dg.asset(
            key=archive_asset_key(topic),
            partitions_def=window_partitions(topic),
            backfill_policy=dg.BackfillPolicy.multi_run(max_partitions_per_run=cfg.windows_per_run),
            group_name=f"archive_{cfg.name}",
            kinds={"kafka", "spark", "s3"},
            output_required=False,
            metadata={"topic": topic, "bucket": cfg.bucket, "prefix": cfg.prefix, "format": cfg.format,
                      "compression": cfg.codec, "layout": partition_dir(cfg.prefix, topic, 0) + "…"},
            description=f"Kafka topic `{topic}` archived to s3://{cfg.bucket}/{cfg.prefix}{topic}/ as {cfg.format}. "
                        "Each partition is one offset window, written exactly once (manifest = commit point).\n\n"
                        + _where_to_look(cfg, topic) + archive_links(cfg, topic, "docs/commit-protocol.md"),
        )

    def run(context: dg.AssetExecutionContext, spark: SparkResource, kafka: KafkaResource, s3: S3Resource,
            registry: SchemaRegistryResource | None) -> Iterator[dg.AssetMaterialization]:
        windows = [OffsetWindow.parse(k) for k in context.partition_keys]
        client = s3.get_client()
        check_bucket(client, cfg.bucket, cfg.prefix)
        partitions = kafka.partitions(topic)
        for w in windows:
            if w.partition not in partitions:
                raise dg.Failure(f"window {w.key}: topic {topic!r} has no partition {w.partition} "
                                 f"(partitions: {partitions[0]}..{partitions[-1]})")
        results = archive_windows(spark.session(), kafka, client, cfg, topic, windows, context.log,
                                  conn=S3Connection.of_resource(s3), endpoint=S3Endpoint.of_resource(s3),
                                  registry=registry.connection() if registry is not None else None)
        failures: list[str] = []
        for w in windows:
            r = results[w]
            if isinstance(r, BaseException):
                # The whole traceback: the run's failure only lists each window's message.
                context.log.error(f"window {w.key} failed:\n" + "".join(traceback.format_exception(r)))
                failures.append(f"{w.key}: {type(r).__name__}: {r}")
                continue
            mkey = manifest_key(cfg.prefix, topic, w)
            context.log.info(f"window {w.key}: {r.outcome}, {r.manifest.record_count} records")
            yield dg.AssetMaterialization(asset_key=context.asset_key, partition=w.key,
                                          metadata=typed(r.metadata(cfg.bucket, mkey)))
        if failures:
            raise dg.Failure(description=f"{len(failures)} of {len(windows)} windows failed:\n" + "\n".join(failures))

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
