"""What the metrics exporter (docs/metrics.md) reads of the Dagster instance, incrementally: each archive asset's
materializations (one per committed window, with its metadata), each restore asset's, and the archive runs that
ended. A refresh reads only what was added since the last one: its cost follows what changed, not the history.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime

import dagster as dg

from s3_archive.defs.archive.partitions import ASSET_PREFIX, RUN_ATTEMPT_TAG, TOPIC_TAG, archive_asset_key
from s3_archive.model.windows import InvalidWindow, OffsetWindow

PAGE = 1000
_ENDED = [dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]


@dataclass
class PartitionTotals:
    """One Kafka partition's committed windows, as counted from their materializations."""

    windows: int = 0
    records: int = 0
    bytes: int = 0
    dead_letters: int = 0  # undecodable and unplaceable records (kept as dead letters)
    skipped: int = 0  # records skipped by a policy (on_error skip, skip_tombstones)
    end: int = 0  # end of the newest committed window (exclusive)
    newest_record_ms: int | None = None  # timestamp of the newest record committed


@dataclass
class RunTotals:
    failed: int = 0
    retried: int = 0  # runs that archive again the windows of a failed run (run_attempt > 1)
    last_success: float | None = None  # end time (unix seconds) of the newest successful run


@dataclass
class History:
    """The counts so far; `refresh` adds what the instance recorded since the last call."""

    topics: dict[str, str]  # topic -> archive name
    windows: dict[tuple[str, int], PartitionTotals] = field(default_factory=lambda: defaultdict(PartitionTotals))
    runs: dict[str, RunTotals] = field(default_factory=lambda: defaultdict(RunTotals))  # per topic
    restored: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))  # (asset key, target)
    restored_windows: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    _cursors: dict[str, str | None] = field(default_factory=dict)
    _runs_seen: set[str] = field(default_factory=set)
    _runs_after: datetime | None = None

    def refresh(self, instance: dg.DagsterInstance, restore_keys: list[dg.AssetKey]) -> None:
        for topic in self.topics:
            for r in self._new_materializations(instance, archive_asset_key(topic)):
                self._add_window(topic, r)
        for key in restore_keys:
            for r in self._new_materializations(instance, key):
                meta = _values(r)
                target = str(meta.get("target_topic", ""))
                self.restored[(key.to_user_string(), target)] += int(meta.get("records_restored", 0))
                self.restored_windows[(key.to_user_string(), target)] += 1
        self._read_runs(instance)

    def _new_materializations(self, instance: dg.DagsterInstance, key: dg.AssetKey) -> list[dg.EventLogRecord]:
        out: list[dg.EventLogRecord] = []
        cursor = self._cursors.get(key.to_user_string())
        while True:
            page = instance.fetch_materializations(key, limit=PAGE, cursor=cursor, ascending=True)
            out += page.records
            cursor = page.cursor if page.records else cursor
            if not page.has_more:
                break
        self._cursors[key.to_user_string()] = cursor
        return out

    def _add_window(self, topic: str, r: dg.EventLogRecord) -> None:
        try:
            w = OffsetWindow.parse(r.partition_key or "")
        except InvalidWindow:
            return
        meta = _values(r)
        t = self.windows[(topic, w.partition)]
        t.windows += 1
        t.records += int(meta.get("records", 0))
        t.bytes += int(meta.get("bytes_written", meta.get("bytes", 0)))
        t.dead_letters += int(meta.get("undecodable_records", 0)) + int(meta.get("unplaceable_records", 0))
        t.skipped += int(meta.get("skipped_records", 0)) + int(meta.get("tombstones_skipped", 0))
        t.end = max(t.end, w.end)
        newest = meta.get("max_timestamp")
        if isinstance(newest, str) and newest:
            ms = int(datetime.fromisoformat(newest).timestamp() * 1000)
            t.newest_record_ms = ms if t.newest_record_ms is None else max(t.newest_record_ms, ms)

    def _read_runs(self, instance: dg.DagsterInstance) -> None:
        """The archive runs that ended since the last read (a run is counted once, when it ended)."""
        now = datetime.now(UTC)
        records = instance.get_run_records(filters=dg.RunsFilter(statuses=_ENDED, updated_after=self._runs_after))
        for rec in records:
            run = rec.dagster_run
            topic = _run_topic(run)
            if run.run_id in self._runs_seen or topic not in self.topics:
                continue
            self._runs_seen.add(run.run_id)
            totals = self.runs[topic]
            if run.status == dg.DagsterRunStatus.FAILURE:
                totals.failed += 1
            elif run.status == dg.DagsterRunStatus.SUCCESS and rec.end_time is not None:
                totals.last_success = max(totals.last_success or 0.0, rec.end_time)
            if int(run.tags.get(RUN_ATTEMPT_TAG, "1")) > 1:
                totals.retried += 1
        # Runs updated in the same second as the last read are read again (and skipped as seen).
        self._runs_after = now.replace(microsecond=0)


def _values(r: dg.EventLogRecord) -> dict[str, object]:
    m = r.asset_materialization
    return {k: v.value for k, v in (m.metadata if m else {}).items()}


def _run_topic(run: dg.DagsterRun) -> str | None:
    """The topic an archive run archives: its tag (the offsets sensor's runs), else its one archive asset."""
    if TOPIC_TAG in run.tags:
        return run.tags[TOPIC_TAG]
    keys = [k for k in (run.asset_selection or set()) if k.path[0] == ASSET_PREFIX]
    return keys[0].path[-1] if len(keys) == 1 else None
