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
from s3_archive.defs.metadata import archive_links
from s3_archive.defs.restore.config import RestoreConfig
from s3_archive.defs.restore.foreign_assets import build_foreign_restore_assets
from s3_archive.defs.restore.run import restore_events
from s3_archive.defs.restore.targets import build_target_assets
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.s3_resource import S3Resource
from s3_archive.model.errors import UserError

RESTORE_PREFIX = "kafka_restore"


def restore_asset_key(topic: str) -> dg.AssetKey:
    return dg.AssetKey([RESTORE_PREFIX, topic])


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
                        "Kafka topic chosen at launch (launchpad: `target_topic`), exactly once (transactions + a "
                        "restore ledger). Declared targets (`restore_targets`) launch with no config.\n\n"
                        + archive_links(cfg, topic, "docs/restore.md"),
        )

    @restore_asset
    def _restore(context: dg.AssetExecutionContext, config: RestoreConfig, kafka: KafkaResource,
                 s3: S3Resource) -> Iterator[dg.AssetMaterialization | dg.AssetObservation]:
        try:
            request, cold = config.request(topic), config.cold()
        except UserError as e:
            raise dg.Failure(description=f"{type(e).__name__}: {e}") from None
        yield from restore_events(context, cfg, topic, request, cold, kafka, s3)

    return _restore


def build_restore_assets(settings: Settings) -> list[dg.AssetsDefinition]:
    """Only for restorable archives (`ArchiveConfig.restorable`: a lossless format, the whole envelope, values
    not decoded to text); windows archived under another config are refused when a run reads their manifest."""
    return [build_restore_asset(a, t) for a in settings.archives if a.restorable for t in a.topics]


def build_restore_defs(settings: Settings) -> dg.Definitions:
    """The restore assets (ours: ad hoc and the declared `restore_targets`; `foreign_sources`); they use the
    `kafka` and `s3` resources of the main definitions."""
    return dg.Definitions(assets=[*build_restore_assets(settings), *build_target_assets(settings),
                                  *build_foreign_restore_assets(settings)])
