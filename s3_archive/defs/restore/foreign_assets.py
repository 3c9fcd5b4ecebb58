"""Restore assets for archives written by Kafka Connect S3 sinks (`foreign_sources:` in the archive YAML).

One unpartitioned asset per source. A sink keeps adding objects, so the windows are discovered when the run
starts (listing the prefix) instead of being Dagster partitions; the restore ledger makes every run incremental:
a re-run restores only what earlier runs did not (and a crashed run's leftovers exactly once).
"""

import itertools
from collections.abc import Iterator

import dagster as dg

from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.foreign import ForeignSource
from s3_archive.config.settings import Settings
from s3_archive.defs.metadata import typed
from s3_archive.defs.restore.config import ForeignRestoreConfig
from s3_archive.defs.restore.window_restore import splits_windows
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.s3 import check_bucket
from s3_archive.io.s3_resource import S3Resource
from s3_archive.model.errors import UserError
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.cold import ColdReport
from s3_archive.restore.foreign_sources import SHOWN_IGNORED, discover, restore_foreign, shown_ignored
from s3_archive.restore.request import RestoreContext, WindowReport
from s3_archive.restore.run import restore_windows
from s3_archive.restore.sources import ArchiveSource, archived_windows

FOREIGN_PREFIX = "kafka_restore_foreign"


def foreign_asset_key(name: str) -> dg.AssetKey:
    return dg.AssetKey([FOREIGN_PREFIX, name])


def build_foreign_restore_asset(source: ForeignSource, successor: ArchiveConfig | None = None,
                                ) -> dg.AssetsDefinition:
    """`successor`: the archive that took over from the sink (`source.archive`); a run restores the sink's objects,
    then the archive's committed windows of the topic, in one order and under one ledger. An archive that is not
    restorable (a lossy format or sink_output) is not chained: the run restores the sink's objects only."""
    where = f"s3://{source.bucket}/{source.key_prefix}"
    if successor is not None and not successor.restorable:
        then = (f" Archive {successor.name!r}, which took over from the sink, is not restorable (format "
                f"{successor.format!r}, or a lossy sink_output), so a run restores the sink's objects only.")
        successor = None
    else:
        then = (f" Then the windows archive {successor.name!r} wrote since it took over from the sink "
                f"(s3://{successor.bucket}/{successor.prefix}), so one run restores the topic's whole history."
                if successor is not None else "")

    @dg.asset(
        key=foreign_asset_key(source.name),
        group_name="restore_foreign",
        kinds={"kafka", "s3"},
        output_required=False,
        metadata={"source_topic": source.topic, "bucket": source.bucket, "prefix": source.key_prefix,
                  "layout": source.layout, "format": source.format,
                  **({"successor_archive": successor.name} if successor is not None else {})},
        description=f"Records of `{source.topic}` archived by the {source.layout} S3 sink under {where}, produced "
                    "into a Kafka topic chosen at launch, exactly once (transactions + a restore ledger); each run "
                    f"restores what earlier runs did not.{then}",
    )
    def _restore(context: dg.AssetExecutionContext, config: ForeignRestoreConfig, kafka: KafkaResource,
                 s3: S3Resource) -> Iterator[dg.AssetObservation | dg.MaterializeResult]:
        try:
            request = config.request(source.topic)
            cold_options = config.cold(source.cold_restore_days, source.cold_restore_tier)  # checks tier and days
            client = s3.get_client()
            check_bucket(client, source.bucket, source.key_prefix)
            totals: dict[str, int] = {"windows": 0, "records_restored": 0, "records_skipped_already_present": 0,
                                      "records_filtered": 0, "bytes": 0, "transactions": 0,
                                      "timestamps_replaced": 0}
            per_partition: dict[int, list[int]] = {}
            cold = ColdReport()
            ours: list[OffsetWindow] = []
            if successor is not None:
                check_bucket(client, successor.bucket, successor.prefix)
                ours = archived_windows(client, successor.bucket, successor.prefix, source.topic)
            boundary = {p: min(w.start for w in ours if w.partition == p) for p in {w.partition for w in ours}}
            planned = discover(client, source, boundary)
            skipped = planned.skipped
            run = RestoreContext(kafka, client, context.log)
            reports: Iterator[WindowReport | ColdReport] = restore_foreign(run, source, request, cold_options, planned)
            if successor is not None and ours:
                # The same ledger (it is the topic's): each offset once, the sink's part of a partition first.
                reports = itertools.chain(reports, restore_windows(
                    run, ArchiveSource(successor.bucket, successor.prefix, splits_windows(successor)), request, ours,
                    config.cold()))
            for rep in reports:
                if isinstance(rep, ColdReport):
                    cold = rep
                    continue
                totals["windows"] += 1
                totals["records_restored"] += rep.restored
                totals["records_skipped_already_present"] += rep.skipped
                totals["records_filtered"] += rep.filtered
                totals["bytes"] += rep.bytes
                totals["transactions"] += rep.transactions
                totals["timestamps_replaced"] += rep.timestamps_replaced
                for p, c in rep.partitions.items():
                    t = per_partition.setdefault(p, [0, 0])
                    t[0], t[1] = t[0] + c.records, t[1] + c.bytes
            meta = {"target_topic": request.target_topic, "dry_run": request.dry_run, **totals,
                    **({"archive_windows": len(ours)} if successor is not None else {}),
                    "cold_objects": cold.cold, "cold_restores_requested": cold.requested,
                    # Objects under the prefix not restored, and why (out-of-range names listed first).
                    "ignored_objects": len(planned.ignored),
                    "ignored": dg.MetadataValue.json(shown_ignored(planned)),
                    # error_tolerance: skip: objects whose records could not be read, and why (the first 20).
                    "skipped_objects": len(skipped),
                    "skipped": dg.MetadataValue.json(dict(list(skipped.items())[:SHOWN_IGNORED])),
                    "per_target_partition": {str(p): {"records": r, "bytes": b}
                                             for p, (r, b) in sorted(per_partition.items())}}
            context.log.info(f"{'would restore' if request.dry_run else 'restored'} {totals['records_restored']} "
                             f"records of {totals['windows']} objects into {request.target_topic!r} "
                             f"({totals['records_skipped_already_present']} already present)")
            if request.dry_run:
                yield dg.AssetObservation(asset_key=context.asset_key, metadata=typed(meta))
            else:
                yield dg.MaterializeResult(metadata=typed(meta))
        except UserError as e:
            raise dg.Failure(description=f"{type(e).__name__}: {e}") from None

    return _restore


def build_foreign_restore_assets(settings: Settings) -> list[dg.AssetsDefinition]:
    archives = {a.name: a for a in settings.archives}
    return [build_foreign_restore_asset(s, archives.get(s.archive or "")) for s in settings.foreign_sources]
