"""The restore asset: one per archived topic; materializing a window partition replays it into a Kafka topic.

Same partitions as the archive asset, so a UI backfill over a window range restores that range (in one run, so
windows of a partition are replayed in offset order). What to restore into, and how, is chosen at launch
(`RestoreConfig`); the work is `s3_archive.restore.run.restore_windows`.
"""

from collections.abc import Iterator

import dagster as dg

from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.settings import Settings
from s3_archive.defs.restore.config import RestoreConfig
from s3_archive.defs.restore.foreign_assets import build_foreign_restore_assets
from s3_archive.defs.restore.sensors import build_follow_sensors, build_foreign_follow_sensors
from s3_archive.defs.restore.targets import build_target_assets
from s3_archive.defs.restore.window_restore import restore_asset_spec, restore_events
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.s3_resource import S3Resource
from s3_archive.model.errors import UserError

RESTORE_PREFIX = "kafka_restore"


def restore_asset_key(topic: str) -> dg.AssetKey:
    return dg.AssetKey([RESTORE_PREFIX, topic])


def build_restore_asset(cfg: ArchiveConfig, topic: str) -> dg.AssetsDefinition:
    restore_asset = restore_asset_spec(
        cfg, topic, restore_asset_key(topic),
        metadata={"source_topic": topic, "bucket": cfg.bucket, "prefix": cfg.prefix},
        description=f"Archived windows of {topic} (s3://{cfg.bucket}/{cfg.prefix}{topic}/) produced back into a "
                    "Kafka topic chosen at launch (launchpad: target_topic), exactly once (transactions + a "
                    "restore ledger). Declared targets (restore_targets) launch with no config.",
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
    """The restore assets (ours: ad hoc and the declared `restore_targets`; `foreign_sources`) and the follow
    sensors of the targets with `mode: follow`; they use the `kafka` and `s3` resources of the main definitions."""
    return dg.Definitions(assets=[*build_restore_assets(settings), *build_target_assets(settings),
                                  *build_foreign_restore_assets(settings)],
                          sensors=[*build_follow_sensors(settings.archives),
                                   *build_foreign_follow_sensors(settings.foreign_sources)])
