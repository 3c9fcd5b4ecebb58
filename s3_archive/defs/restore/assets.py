"""The restore asset: one per archived topic; materializing a window partition replays it into a Kafka topic.

Same partitions as the archive asset, so a UI backfill over a window range restores that range (in one run, so
windows of a partition are replayed in offset order). What to restore into, and how, is chosen at launch
(`RestoreConfig`); the work is `s3_archive.restore.run.restore_windows`.
"""

import warnings
from collections.abc import Iterator

import dagster as dg

from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.settings import Settings
from s3_archive.defs.archive.partitions import archive_asset_key, window_partitions
from s3_archive.defs.restore.config import RestoreConfig
from s3_archive.defs.restore.foreign_assets import build_foreign_restore_assets
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.s3 import check_bucket
from s3_archive.io.s3_resource import S3Resource
from s3_archive.model.errors import UserError
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.run import restore_windows

RESTORE_PREFIX = "kafka_restore"


def restore_asset_key(topic: str) -> dg.AssetKey:
    return dg.AssetKey([RESTORE_PREFIX, topic])



def splits_windows(cfg: ArchiveConfig) -> bool:
    """Whether the archive's layout splits a window's records into buckets (objects whose offsets interleave)."""
    return cfg.layout is not None and bool(cfg.layout.partition_by or cfg.layout.template_slots)


def build_restore_asset(cfg: ArchiveConfig, topic: str) -> dg.AssetsDefinition:
    with warnings.catch_warnings():
        # backfill_policy is beta; we need it to keep a backfill in one run (below). Silenced here only, so run
        # logs are not flooded with it.
        warnings.simplefilter("ignore", dg.BetaWarning)
        restore_asset = dg.asset(
            key=restore_asset_key(topic),
            deps=[archive_asset_key(topic)],
            partitions_def=window_partitions(topic),
            # One run per backfill: windows of a partition must reach the target in offset order, and runs of one
            # restore fence each other (one transactional.id).
            backfill_policy=dg.BackfillPolicy.single_run(),
            group_name=f"restore_{cfg.name}",
            kinds={"kafka", "s3"},
            output_required=False,
            metadata={"source_topic": topic, "bucket": cfg.bucket, "prefix": cfg.prefix},
            description=f"Archived windows of `{topic}` (s3://{cfg.bucket}/{cfg.prefix}{topic}/) produced back into a "
                        "Kafka topic chosen at launch, exactly once (transactions + a restore ledger).",
        )

    @restore_asset
    def _restore(context: dg.AssetExecutionContext, config: RestoreConfig, kafka: KafkaResource,
                 s3: S3Resource) -> Iterator[dg.AssetMaterialization | dg.AssetObservation]:
        try:
            request, cold = config.request(topic), config.cold()
            windows = [OffsetWindow.parse(k) for k in context.partition_keys]
            client = s3.get_client()
            check_bucket(client, cfg.bucket, cfg.prefix)
            totals: dict[int, list[int]] = {}
            for rep in restore_windows(kafka, client, cfg.bucket, cfg.prefix, request, windows, context.log,
                                       cold=cold, interleaved=splits_windows(cfg)):
                for p, c in rep.partitions.items():
                    t = totals.setdefault(p, [0, 0])
                    t[0], t[1] = t[0] + c.records, t[1] + c.bytes
                meta = {"target_topic": request.target_topic, **rep.metadata()}
                context.log.info(f"window {rep.window.key}: {rep.restored} restored, {rep.skipped} already "
                                 f"present, {rep.filtered} filtered" + (" [dry run]" if request.dry_run else ""))
                if request.dry_run:
                    # An observation, not a materialization: nothing was restored.
                    yield dg.AssetObservation(asset_key=context.asset_key, partition=rep.window.key, metadata=meta)
                else:
                    yield dg.AssetMaterialization(asset_key=context.asset_key, partition=rep.window.key,
                                                  metadata=meta)
            context.log.info(f"{'would restore' if request.dry_run else 'restored'} into "
                             f"{request.target_topic!r}, per target partition (records, bytes): "
                             + (", ".join(f"{p}: {r}, {b}" for p, (r, b) in sorted(totals.items())) or "nothing"))
        except UserError as e:
            raise dg.Failure(description=f"{type(e).__name__}: {e}") from None

    return _restore


def build_restore_assets(settings: Settings) -> list[dg.AssetsDefinition]:
    """Only for restorable archives (`ArchiveConfig.restorable`: a lossless format, the whole envelope, values
    not decoded to text); windows archived under another config are refused when a run reads their manifest."""
    return [build_restore_asset(a, t) for a in settings.archives if a.restorable for t in a.topics]


def build_restore_defs(settings: Settings) -> dg.Definitions:
    """The restore assets (ours and `foreign_sources`); they use the `kafka` and `s3` resources of the main
    definitions."""
    return dg.Definitions(assets=[*build_restore_assets(settings), *build_foreign_restore_assets(settings)])
