"""Restore targets declared in the archive config (`restore_targets:`): one asset per (target, topic),
`kafka_restore_target/<target>/<topic>`, with the archive's window partitions and a run config whose every key has
a default, so the UI's Materialize / Backfill over selected windows launches it as it is.

The target's options are the declaration (reviewed with the config); the run config only asks for a plan
(`dry_run`). The run is the ad-hoc restore asset's (`restore_events`), so both share the ledger of a
(source, target) pair and together restore each record once.
"""

from collections.abc import Iterator

import dagster as dg
from pydantic import Field

from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.restore import RestoreTarget
from s3_archive.config.settings import Settings
from s3_archive.defs.restore.window_restore import restore_asset_spec, restore_events
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.s3_resource import S3Resource
from s3_archive.io.schema_registry import SchemaRegistryResource
from s3_archive.model.errors import InvalidRestore, UserError
from s3_archive.restore.cold import ColdOptions
from s3_archive.restore.request import Filters, RestoreRequest
from s3_archive.restore.routing import PartitionMapping
from s3_archive.restore.schema_ids import SchemaRewrite

TARGET_PREFIX = "kafka_restore_target"


def target_asset_key(target: str, topic: str) -> dg.AssetKey:
    return dg.AssetKey([TARGET_PREFIX, target, topic])


class TargetRunConfig(dg.Config):
    """Launch-time choice of a declared restore target: only whether to plan."""

    dry_run: bool = Field(default=False, description="plan only: count windows, objects, records per target "
                                                     "partition and what the ledger already holds; produce "
                                                     "nothing (a target with dry_run: true always plans)")


def target_request(t: RestoreTarget, topic: str, dry_run: bool = False) -> RestoreRequest:
    """The request of target `t` for source topic `topic` (`dry_run` or the target's own)."""
    return RestoreRequest(
        source_topic=topic,
        target_topic=t.target_for(topic),
        mapping=PartitionMapping.parse(t.partition_mapping, t.partition_map),
        filters=Filters(t.from_timestamp_ms, t.to_timestamp_ms, t.from_offset, t.to_offset),
        provenance_headers=t.provenance_headers,
        dry_run=t.dry_run or dry_run,
        allow_source_topic=t.allow_source_topic,
        transaction_records=t.transaction_records,
        broker_outage_seconds=t.broker_outage_seconds,
        producers=t.producers,
        producer=t.producer,
    )


def _describe(t: RestoreTarget, topic: str) -> str:
    opts = [f"partition_mapping {t.partition_mapping}"]
    if t.provenance_headers:
        opts.append("provenance headers")
    if t.from_timestamp_ms is not None or t.to_timestamp_ms is not None:
        opts.append(f"timestamps [{t.from_timestamp_ms}, {t.to_timestamp_ms})")
    if t.from_offset is not None or t.to_offset is not None:
        opts.append(f"offsets [{t.from_offset}, {t.to_offset})")
    if t.dry_run:
        opts.append("**dry run only** (plans, never produces)")
    return ", ".join(opts)


def _how_to(t: RestoreTarget) -> str:
    """What to click, as the launch dialog is: it opens with no window selected, whatever the asset's definition
    (Dagster offers no default selection for it)."""
    launch = ("click *Materialize*; the dialog opens with no window selected: click **All** (or pick windows), "
              "then **Launch backfill**. The windows run as one run, each partition's in offset order")
    if t.dry_run:
        return (f"**To plan**: {launch}. This target only plans (`dry_run: true`): nothing is produced; each run's "
                "plan is an observation on the *Events* tab.")
    return (f"**To restore**: {launch}; each window restored shows as materialized here. **To plan first**: in the "
            "dialog open *Config* → *Add config*, set `dry_run: true`, then launch: the plan is an observation on "
            "the *Events* tab.")


def build_target_asset(cfg: ArchiveConfig, topic: str, t: RestoreTarget) -> dg.AssetsDefinition:
    target_topic = t.target_for(topic)
    spec = restore_asset_spec(
        cfg, topic, target_asset_key(t.name, topic),
        metadata={"source_topic": topic, "target_topic": target_topic, "restore_target": t.name,
                  "bucket": cfg.bucket, "prefix": cfg.prefix, "dry_run_only": t.dry_run},
        description=f"Archived windows of {topic} restored into {target_topic} (restore target "
                    f"{t.name} of archive {cfg.name}: {_describe(t, topic)}), exactly once, with no config.\n\n"
                    + _how_to(t),
    )

    def run(context: dg.AssetExecutionContext, config: TargetRunConfig, kafka: KafkaResource, s3: S3Resource,
            registry: SchemaRegistryResource | None) -> Iterator[dg.AssetMaterialization | dg.AssetObservation]:
        try:
            request = target_request(t, topic, config.dry_run)
            cold = ColdOptions(t.wait_for_cold_seconds, t.cold_restore_days, t.cold_restore_tier)
            schemas = None
            if registry is not None:
                conn = registry.connection()
                if conn is None:
                    raise InvalidRestore(f"schema_subjects {t.schema_subjects!r} needs the target's Schema "
                                         "Registry: set $S3_ARCHIVE_SCHEMA_REGISTRY_URL")
                schemas = SchemaRewrite(conn, t.schema_subjects, t.unlisted_schema_ids)
        except (UserError, ValueError) as e:
            kind = type(e).__name__ if isinstance(e, UserError) else InvalidRestore.__name__
            raise dg.Failure(description=f"{kind}: restore target {t.name!r} of topic {topic!r}: {e}") from None
        yield from restore_events(context, cfg, topic, request, cold, kafka, s3, schemas)

    if t.schema_subjects != "keep_ids":
        @spec
        def _restore_registering(context: dg.AssetExecutionContext, config: TargetRunConfig, kafka: KafkaResource,
                                 s3: S3Resource, schema_registry: SchemaRegistryResource,
                                 ) -> Iterator[dg.AssetMaterialization | dg.AssetObservation]:
            yield from run(context, config, kafka, s3, schema_registry)

        return _restore_registering

    @spec
    def _restore(context: dg.AssetExecutionContext, config: TargetRunConfig, kafka: KafkaResource,
                 s3: S3Resource) -> Iterator[dg.AssetMaterialization | dg.AssetObservation]:
        yield from run(context, config, kafka, s3, None)

    return _restore


def build_target_assets(settings: Settings) -> list[dg.AssetsDefinition]:
    return [build_target_asset(a, topic, t) for a in settings.archives for t in a.restore_targets
            for topic in a.topics if t.applies_to(topic)]
