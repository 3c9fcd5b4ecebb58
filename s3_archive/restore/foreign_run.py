"""A foreign source's restore run: the sink's objects (foreign_sources.py), then, when an archive took over from the
sink (`ForeignSource.archive`), that archive's committed windows of the topic (run.py), in one order and under one
ledger; summed up as any restore run is (summary.py's `RunSummary`), with what only a foreign source has: its
objects in cold storage, and those ignored or skipped."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.foreign import ForeignSource
from s3_archive.io.s3 import check_bucket
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.cold import ColdOptions, ColdReport
from s3_archive.restore.foreign_sources import SHOWN_IGNORED, Plan, discover, restore_foreign, shown_ignored
from s3_archive.restore.request import RestoreContext, RestoreRequest, WindowReport
from s3_archive.restore.run import restore_windows
from s3_archive.restore.sources import ArchiveSource, archived_windows, splits_windows
from s3_archive.restore.summary import RunSummary


@dataclass
class ForeignRun:
    """What a foreign source's run did (dry run: would do): the windows restored (the sink's objects, then the
    archive's windows), the cold-storage report, the plan (its ignored objects), the objects skipped as unreadable
    (`error_tolerance: skip`), and with an archive that took over, how many of its windows the run covered."""

    summary: RunSummary
    planned: Plan
    cold: ColdReport = field(default_factory=ColdReport)
    archive_windows: int | None = None

    def metadata(self) -> dict[str, Any]:
        """Plain values, the run's metadata."""
        s = self.summary
        return {"target_topic": s.request.target_topic, "dry_run": s.request.dry_run, "windows": len(s.windows),
                "records_restored": s.restored, "records_skipped_already_present": s.skipped,
                "records_filtered": s.filtered, "bytes": s.bytes, "transactions": s.transactions,
                "timestamps_replaced": s.timestamps_replaced,
                **({"archive_windows": self.archive_windows} if self.archive_windows is not None else {}),
                "cold_objects": self.cold.cold, "cold_restores_requested": self.cold.requested,
                # Objects under the prefix not restored, and why (out-of-range names listed first).
                "ignored_objects": len(self.planned.ignored),
                "ignored": shown_ignored(self.planned),
                # error_tolerance: skip: objects whose records could not be read, and why (the first 20).
                "skipped_objects": len(self.planned.skipped),
                "skipped": dict(list(self.planned.skipped.items())[:SHOWN_IGNORED]),
                "per_target_partition": {str(p): {"records": r, "bytes": b}
                                         for p, (r, b) in sorted(s.partitions.items())}}

    def line(self) -> str:
        s = self.summary
        return (f"{'would restore' if s.request.dry_run else 'restored'} {s.restored} records of {len(s.windows)} "
                f"objects into {s.request.target_topic!r} ({s.skipped} already present)")


def first_starts(windows: list[OffsetWindow]) -> dict[int, int]:
    """Per Kafka partition, where the first of `windows` starts."""
    return {p: min(w.start for w in windows if w.partition == p) for p in {w.partition for w in windows}}


def restore_foreign_run(ctx: RestoreContext, source: ForeignSource, successor: ArchiveConfig | None,
                        request: RestoreRequest, cold: ColdOptions, sink_cold: ColdOptions) -> ForeignRun:
    """Restore `source`'s objects, then, with `successor` (the restorable archive that took over from the sink), its
    committed windows of the topic: the sink's objects named at or past where the archive starts are the archive's
    own and left out, and the same ledger (it is the topic's) restores each offset once, the sink's part of a
    partition first. `cold`: for the archive's objects; `sink_cold`: for the sink's."""
    check_bucket(ctx.s3, source.bucket, source.key_prefix)
    ours: list[OffsetWindow] = []
    if successor is not None:
        check_bucket(ctx.s3, successor.bucket, successor.prefix)
        ours = archived_windows(ctx.s3, successor.bucket, successor.prefix, source.topic)
    run = ForeignRun(RunSummary(request), discover(ctx.s3, source, first_starts(ours)),
                     archive_windows=None if successor is None else len(ours))
    reports: Iterator[WindowReport | ColdReport] = restore_foreign(ctx, source, request, sink_cold, run.planned)
    if successor is not None and ours:
        reports = itertools.chain(reports, restore_windows(
            ctx, ArchiveSource(successor.bucket, successor.prefix, splits_windows(successor)), request, ours, cold))
    for rep in reports:
        if isinstance(rep, ColdReport):
            run.cold = rep
        else:
            run.summary.add(rep)
    return run
