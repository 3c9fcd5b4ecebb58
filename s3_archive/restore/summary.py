"""A restore run summed up: what a dry run plans (windows, objects, records, target partitions, and what the ledger
says is already restored), or what a run did. Pure; the assets turn `metadata()` into Dagster metadata."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from s3_archive.restore.ledger import RangeSet
from s3_archive.restore.request import RestoreRequest, WindowReport


@dataclass
class RunSummary:
    request: RestoreRequest
    windows: list[str] = field(default_factory=list)
    objects: int = 0
    archived: int = 0
    restored: int = 0
    skipped: int = 0
    filtered: int = 0
    erased: int = 0
    bytes: int = 0
    transactions: int = 0
    timestamps_replaced: int = 0
    partitions: dict[int, list[int]] = field(default_factory=dict)  # target partition -> [records, bytes]
    ledger: dict[int, RangeSet] = field(default_factory=dict)  # as the run found it, per source partition
    sources: set[int] = field(default_factory=set)  # source partitions of the windows

    def ledger_seen(self, ledger: dict[int, RangeSet]) -> None:
        self.ledger = ledger

    def add(self, rep: WindowReport) -> None:
        self.windows.append(rep.window.key)
        self.sources.add(rep.window.partition)
        self.objects += rep.objects
        self.archived += rep.archived
        self.restored += rep.restored
        self.skipped += rep.skipped
        self.filtered += rep.filtered
        self.erased += rep.erased
        self.bytes += rep.bytes
        self.transactions += rep.transactions
        self.timestamps_replaced += rep.timestamps_replaced
        for p, c in rep.partitions.items():
            t = self.partitions.setdefault(p, [0, 0])
            t[0], t[1] = t[0] + c.records, t[1] + c.bytes

    def metadata(self) -> dict[str, Any]:
        """Plain values; `ledger_ranges` only for the source partitions of the run's windows."""
        return {
            "target_topic": self.request.target_topic,
            "dry_run": self.request.dry_run,
            "ledger_id": self.request.ledger_id,
            "windows": len(self.windows),
            "objects": self.objects,
            "records_archived": self.archived,
            "records_to_restore" if self.request.dry_run else "records_restored": self.restored,
            "records_skipped_already_present": self.skipped,
            "records_filtered": self.filtered,
            "records_erased": self.erased,
            "bytes": self.bytes,
            "per_target_partition": {str(p): {"records": r, "bytes": b}
                                     for p, (r, b) in sorted(self.partitions.items())},
            "ledger_ranges": {str(p): self.ledger[p].ranges() for p in sorted(self.sources) if p in self.ledger},
            "plan": self.table(),
        }

    def table(self) -> str:
        """The plan as a Markdown table, one row per target partition."""
        rows = [f"| {p} | {r} | {b} |" for p, (r, b) in sorted(self.partitions.items())]
        verb = "would restore" if self.request.dry_run else "restored"
        return (f"{len(self.windows)} windows, {self.objects} objects, {self.archived} records archived: "
                f"{verb} {self.restored} into `{self.request.target_topic}`, {self.skipped} already restored "
                f"(ledger `{self.request.ledger_id}`), {self.filtered} filtered, {self.erased} erased.\n\n"
                "| target partition | records | bytes |\n|---:|---:|---:|\n" + ("\n".join(rows) or "| - | 0 | 0 |"))

    def summary(self) -> str:
        verb = "would restore" if self.request.dry_run else "restored"
        per = ", ".join(f"{p}: {r}, {b}" for p, (r, b) in sorted(self.partitions.items())) or "nothing"
        return (f"{verb} into {self.request.target_topic!r} ({len(self.windows)} windows, {self.objects} objects, "
                f"{self.skipped} records already restored), per target partition (records, bytes): {per}")
