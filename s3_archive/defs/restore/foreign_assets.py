"""Restore assets for archives written by Kafka Connect S3 sinks (`foreign_sources:` in the archive YAML).

One unpartitioned asset per source. A sink keeps adding objects, so the windows are discovered when the run
starts (listing the prefix) instead of being Dagster partitions; the restore ledger makes every run incremental:
a re-run restores only what earlier runs did not (and a crashed run's leftovers exactly once). The run is
restore/foreign_run.py's; this is its Dagster side.
"""

from collections.abc import Iterator

import dagster as dg

from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.foreign import ForeignSource
from s3_archive.config.settings import Settings
from s3_archive.defs.metadata import typed
from s3_archive.defs.restore.config import ForeignRestoreConfig
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.s3_resource import S3Resource
from s3_archive.model.errors import UserError
from s3_archive.restore.foreign_run import restore_foreign_run
from s3_archive.restore.request import RestoreContext

FOREIGN_PREFIX = "kafka_restore_foreign"


def foreign_asset_key(name: str) -> dg.AssetKey:
    return dg.AssetKey([FOREIGN_PREFIX, name])


def chained(source: ForeignSource, successor: ArchiveConfig | None) -> tuple[ArchiveConfig | None, str]:
    """The archive a run restores after the sink's objects (`successor` if it is restorable: a lossy format or
    sink_output is not chained), and what the asset's description says of it."""
    if successor is not None and not successor.restorable:
        return None, (f" Archive {successor.name!r}, which took over from the sink, is not restorable (format "
                      f"{successor.format!r}, or a lossy sink_output), so a run restores the sink's objects only.")
    return successor, (f" Then the windows archive {successor.name!r} wrote since it took over from the sink "
                       f"(s3://{successor.bucket}/{successor.prefix}), so one run restores the topic's whole history."
                       if successor is not None else "")


def foreign_restore_events(context: dg.AssetExecutionContext, config: ForeignRestoreConfig, kafka: KafkaResource,
                           s3: S3Resource, source: ForeignSource, successor: ArchiveConfig | None,
                           ) -> Iterator[dg.AssetObservation | dg.MaterializeResult]:
    """One run of the source's asset: its metadata as a materialization, or a dry run's as an observation."""
    try:
        request = config.request(source.topic)
        sink_cold = config.cold(source.cold_restore_days, source.cold_restore_tier)  # checks the tier and days
        run = restore_foreign_run(RestoreContext(kafka, s3.get_client(), context.log), source, successor, request,
                                  config.cold(), sink_cold)
        context.log.info(run.line())
        meta = typed(run.metadata())
        if request.dry_run:
            yield dg.AssetObservation(asset_key=context.asset_key, metadata=meta)
        else:
            yield dg.MaterializeResult(metadata=meta)
    except UserError as e:
        raise dg.Failure(description=f"{type(e).__name__}: {e}") from None


def build_foreign_restore_asset(source: ForeignSource, successor: ArchiveConfig | None = None,
                                ) -> dg.AssetsDefinition:
    """`successor`: the archive that took over from the sink (`source.archive`); a run restores the sink's objects,
    then the archive's committed windows of the topic, in one order and under one ledger. An archive that is not
    restorable (a lossy format or sink_output) is not chained: the run restores the sink's objects only."""
    where = f"s3://{source.bucket}/{source.key_prefix}"
    successor, then = chained(source, successor)

    @dg.asset(
        key=foreign_asset_key(source.name),
        group_name="restore_foreign",
        kinds={"kafka", "s3"},
        output_required=False,
        metadata={"source_topic": source.topic, "bucket": source.bucket, "prefix": source.key_prefix,
                  "layout": source.layout, "format": source.format,
                  **({"successor_archive": successor.name} if successor is not None else {})},
        description=f"Records of {source.topic} archived by the {source.layout} S3 sink under {where}, produced "
                    "into a Kafka topic chosen at launch, exactly once (transactions + a restore ledger); each run "
                    f"restores what earlier runs did not.{then}",
    )
    def _restore(context: dg.AssetExecutionContext, config: ForeignRestoreConfig, kafka: KafkaResource,
                 s3: S3Resource) -> Iterator[dg.AssetObservation | dg.MaterializeResult]:
        yield from foreign_restore_events(context, config, kafka, s3, source, successor)

    return _restore


def build_foreign_restore_assets(settings: Settings) -> list[dg.AssetsDefinition]:
    archives = {a.name: a for a in settings.archives}
    return [build_foreign_restore_asset(s, archives.get(s.archive or "")) for s in settings.foreign_sources]
