"""The asset decorator and the run of a restore asset over its window partitions, shared by the ad-hoc asset
and the declared targets (defs/restore/targets.py)."""

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import dagster as dg

from s3_archive.config.archive import ArchiveConfig
from s3_archive.defs.archive.partitions import archive_asset_key, window_partitions
from s3_archive.defs.metadata import archive_links, typed, ui_page
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.lineage import LineageRun, lineage_run, run_uuid
from s3_archive.io.s3 import check_bucket
from s3_archive.io.s3_resource import S3Resource
from s3_archive.model.errors import UserError
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.cold import ColdOptions
from s3_archive.restore.request import RestoreContext, RestoreRequest
from s3_archive.restore.restore_lineage import restore_datasets
from s3_archive.restore.run import restore_windows
from s3_archive.restore.schema_ids import SchemaRewrite
from s3_archive.restore.sources import ArchiveSource, splits_windows
from s3_archive.restore.summary import RunSummary


def restore_asset_spec(cfg: ArchiveConfig, topic: str, key: dg.AssetKey, metadata: dict[str, Any],
                  description: str) -> Callable[..., dg.AssetsDefinition]:
    """The asset decorator of a restore asset of `topic` (ad hoc or a declared target): the archive's window
    partitions, one run per backfill, the archive's group; `description` is followed by a link to the archived
    windows and the archive's links."""
    with warnings.catch_warnings():
        # backfill_policy is beta; we need it to keep a backfill in one run (below). Silenced here only, so run
        # logs are not flooded with it.
        warnings.simplefilter("ignore", dg.BetaWarning)
        return dg.asset(
            key=key,
            deps=[archive_asset_key(topic)],
            partitions_def=window_partitions(topic),
            # One run per backfill: windows of a partition must reach the target in offset order, and runs of one
            # restore fence each other (one transactional.id per source and target).
            backfill_policy=dg.BackfillPolicy.single_run(),
            group_name=f"restore_{cfg.name}",
            kinds={"kafka", "s3"},
            output_required=False,
            metadata=metadata,
            description=description + "\n\n- Archived windows: " + ui_page(archive_asset_key(topic), "partitions")
            + f"; this asset's runs and plans: {ui_page(key, 'events', 'Events')}\n"
            + archive_links(cfg, topic, "docs/restore.md"),
        )


def _source(cfg: ArchiveConfig, request: RestoreRequest) -> tuple[str, str]:
    """The restored archive's S3 location: its bucket and the source topic's folder."""
    return cfg.bucket, f"{cfg.prefix}{request.source_topic}"


def restore_events(context: dg.AssetExecutionContext, cfg: ArchiveConfig, topic: str, request: RestoreRequest,
                   cold: ColdOptions, kafka: KafkaResource, s3: S3Resource,
                   schemas: SchemaRewrite | None = None) -> Iterator[dg.AssetMaterialization | dg.AssetObservation]:
    """The run of a restore asset (ad hoc or a declared target) over the run's window partitions: a
    materialization per window once committed; a dry run records an observation per window and the plan. A run
    that is not a dry run emits its lineage (io/lineage.py)."""
    windows = [OffsetWindow.parse(k) for k in context.partition_keys]
    if request.dry_run:
        yield from _restore_run(context, cfg, request, cold, kafka, s3, schemas, None)
        return
    inputs, outputs = restore_datasets(_source(cfg, request), kafka.bootstrap_servers, request.target_topic, windows)
    with lineage_run(f"restore.{cfg.name}.{topic}.{request.target_topic}", "RESTORE",
                     run_uuid(context.run_id, context.retry_number), inputs, outputs, context.log) as lineage:
        yield from _restore_run(context, cfg, request, cold, kafka, s3, schemas, lineage)


def _restore_run(context: dg.AssetExecutionContext, cfg: ArchiveConfig, request: RestoreRequest, cold: ColdOptions,
                 kafka: KafkaResource, s3: S3Resource, schemas: SchemaRewrite | None,
                 lineage: LineageRun | None) -> Iterator[dg.AssetMaterialization | dg.AssetObservation]:
    windows = [OffsetWindow.parse(k) for k in context.partition_keys]
    try:
        client = s3.get_client()
        check_bucket(client, cfg.bucket, cfg.prefix)
        plan = RunSummary(request)
        reports = []
        for rep in restore_windows(RestoreContext(kafka, client, context.log, schemas),
                                   ArchiveSource(cfg.bucket, cfg.prefix, splits_windows(cfg)), request, windows,
                                   cold, plan.ledger_seen):
            plan.add(rep)
            reports.append(rep)
            if lineage is not None:
                lineage.inputs, lineage.outputs = restore_datasets(_source(cfg, request), kafka.bootstrap_servers,
                                                                   request.target_topic, windows, reports)
            ids = schemas.counts.get(rep.window) if schemas is not None else None
            meta = typed({"target_topic": request.target_topic, **rep.metadata(),
                          **(ids.metadata() if ids is not None else {})})
            context.log.info(f"window {rep.window.key}: {rep.restored} restored, {rep.skipped} already "
                             f"present, {rep.filtered} filtered" + (" [dry run]" if request.dry_run else ""))
            if request.dry_run:
                # An observation, not a materialization: nothing was restored.
                yield dg.AssetObservation(asset_key=context.asset_key, partition=rep.window.key, metadata=meta)
            else:
                yield dg.AssetMaterialization(asset_key=context.asset_key, partition=rep.window.key, metadata=meta)
        context.log.info(plan.summary())
        if request.dry_run:
            yield dg.AssetObservation(asset_key=context.asset_key, metadata=typed(plan.metadata()))
    except UserError as e:
        raise dg.Failure(description=f"{type(e).__name__}: {e}") from None
