"""A topic's windows as the Dagster instance knows them: the live ones (dynamic partition keys), the retired ones
(a range of offsets per Kafka partition, recorded on the archive asset), and which were materialized. The one
place that reads and writes the instance for the archive's sensors, checks and retirement.

Windows older than the archive's `retire_after_days` are retired from the dynamic partition set once their manifests
are verified (`retire_topic`), so the set, the UI's partition status and every range run stay the size of the horizon
while the archive grows for years. The manifests in S3 stay the record of every window; the instance keeps, per
Kafka partition, the one contiguous range of offsets whose windows were retired. It is the newest
`AssetObservation` of `kafka_archive/<topic>` with metadata `retired_ranges`, written before the partitions are
deleted: a retirement cut short leaves windows both retired and live, never a hole.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cached_property

import dagster as dg

from s3_archive.archive.health import WindowsView
from s3_archive.archive.retirement import Retired, choose, extend, verdict
from s3_archive.config.archive import ArchiveConfig
from s3_archive.defs.archive.partitions import archive_asset_key, window_partitions
from s3_archive.io.s3 import S3Client
from s3_archive.model.logger import Logger
from s3_archive.model.windows import InvalidWindow, OffsetWindow

RETIRED_RANGES = "retired_ranges"  # metadata key: {"<kafka partition>": [first offset, retired until]}
RETIRED_WINDOWS = "retired_windows"  # metadata key: how many windows were retired in all
PAGE = 10_000  # partition keys per read of the instance


@dataclass
class KeysRead:
    """Partition keys read from the instance in insertion order: the windows, the keys that are not windows, and
    the position after the last key read (an opaque cursor of the instance)."""

    windows: list[OffsetWindow]
    bad: list[str]
    after: str | None


def parse_keys(keys: list[str], into: KeysRead) -> None:
    for key in keys:
        try:
            into.windows.append(OffsetWindow.parse(key))
        except InvalidWindow:
            into.bad.append(key)


def read_keys(instance: dg.DagsterInstance, topic: str, after: str | None = None) -> KeysRead:
    """The topic's partition keys added after position `after` (None: all of them), page by page."""
    out = KeysRead([], [], after)
    while True:
        page = instance.get_paginated_dynamic_partitions(window_partitions(topic).name, limit=PAGE, ascending=True,
                                                         cursor=out.after)
        parse_keys(list(page.results), out)
        out.after = page.cursor
        if not page.has_more:
            return out


def read_windows(instance: dg.DagsterInstance, topic: str) -> tuple[list[OffsetWindow], list[str]]:
    """The topic's live windows (its dynamic partition keys), and the keys that are not windows."""
    got = KeysRead([], [], None)
    parse_keys(list(instance.get_dynamic_partitions(window_partitions(topic).name)), got)
    return got.windows, got.bad


def read_retired(instance: dg.DagsterInstance, topic: str) -> Retired:
    """The newest retirement record of the topic (none: nothing retired). One read of the instance."""
    for r in instance.fetch_observations(archive_asset_key(topic), limit=50).records:
        meta = r.asset_observation.metadata if r.asset_observation else {}
        if RETIRED_RANGES in meta:
            ranges = {int(p): OffsetWindow(int(p), int(a), int(b)) for p, (a, b) in meta[RETIRED_RANGES].value.items()}
            return Retired(ranges, int(meta[RETIRED_WINDOWS].value) if RETIRED_WINDOWS in meta else 0)
    return Retired({})



def record_retired(instance: dg.DagsterInstance, topic: str, retired: Retired, note: str) -> None:
    """Write the cumulative retirement record (the newest one is the one read)."""
    instance.report_runless_asset_event(dg.AssetObservation(
        asset_key=archive_asset_key(topic), description=note,
        metadata={RETIRED_RANGES: dg.MetadataValue.json({str(p): [w.start, w.end]
                                                         for p, w in sorted(retired.ranges.items())}),
                  RETIRED_WINDOWS: retired.windows,
                  "retired_offsets": sum(w.size for w in retired.ranges.values())}))


def materialization_times(instance: dg.DagsterInstance, topic: str, keys: list[str]) -> dict[str, datetime]:
    """When each window (partition key) was last materialized: the newest, so a window is never taken for older
    than its objects may be."""
    out: dict[str, datetime] = {}
    for i in range(0, len(keys), 500):
        chunk = keys[i:i + 500]
        cursor = None
        while True:
            page = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=archive_asset_key(topic),
                                                                         asset_partitions=chunk),
                                                   limit=1000, cursor=cursor)
            for r in page.records:  # newest first
                if r.partition_key is not None and r.partition_key not in out:
                    out[r.partition_key] = datetime.fromtimestamp(r.timestamp, UTC)
            if not page.has_more:
                break
            cursor = page.cursor
    return out


def materialized_windows(instance: dg.DagsterInstance, topic: str, keys: list[str]) -> set[str]:
    """The windows (partition keys) materialized at least once, i.e. committed.

    The asset's partition status answers for most windows in one cached read; it reports a window whose latest run
    is in progress or failed as such, even if an earlier run committed it, so those few are looked up in their
    materialization records (a re-run of a committed window must not make it look uncommitted)."""
    status = instance.get_status_by_partition(archive_asset_key(topic), keys, window_partitions(topic)) or {}
    done = {k for k, s in status.items() if s == dg.AssetPartitionStatus.MATERIALIZED}
    unsure = [k for k, s in status.items()
              if s in (dg.AssetPartitionStatus.IN_PROGRESS, dg.AssetPartitionStatus.FAILED)]
    return done | set(materialization_times(instance, topic, unsure) if unsure else {})


class TopicView(WindowsView):
    """What the checks of one topic read from the Dagster instance, each read at most once per check step."""

    def __init__(self, instance: dg.DagsterInstance, topic: str) -> None:
        self.instance, self.topic = instance, topic

    @cached_property
    def _keys(self) -> tuple[list[OffsetWindow], list[str]]:
        return read_windows(self.instance, self.topic)

    @property
    def windows(self) -> list[OffsetWindow]:  # type: ignore[override]
        """The live windows (dynamic partition keys)."""
        return self._keys[0]

    @property
    def bad(self) -> list[str]:  # type: ignore[override]
        """Partition keys that are not windows."""
        return self._keys[1]

    @cached_property
    def retired(self) -> Retired:  # type: ignore[override]
        return read_retired(self.instance, self.topic)

    @cached_property
    def materialized(self) -> set[str]:  # type: ignore[override]
        """The live windows' keys materialized at least once (committed)."""
        return materialized_windows(self.instance, self.topic, [w.key for w in self.windows])

    def materialized_at(self, keys: list[str]) -> dict[str, datetime]:
        return materialization_times(self.instance, self.topic, keys)


BATCH = 1000  # windows per retirement record + deletes: a run cut short keeps what it did


@dataclass
class Retirement:
    retired: int  # windows retired by this run
    kept: dict[int, str]  # per Kafka partition with candidates left: why the next one stays
    runs_deleted: int = 0


def retired_runs(instance: dg.DagsterInstance, topic: str, retired: Retired, keys: list[str]) -> list[str]:
    """The finished runs that materialized any of `keys` and nothing but windows of `topic` now retired."""
    asset_key = archive_asset_key(topic)
    run_ids: set[str] = set()
    for i in range(0, len(keys), 500):
        cursor = None
        while True:
            page = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=asset_key,
                                                                         asset_partitions=keys[i:i + 500]),
                                                   limit=1000, cursor=cursor)
            run_ids |= {r.run_id for r in page.records if r.run_id}
            if not page.has_more:
                break
            cursor = page.cursor
    out = []
    for run_id in sorted(run_ids):
        run = instance.get_run_by_id(run_id)
        if run is None or not run.is_finished:
            continue
        records = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION,
                                               limit=10_000).records
        if all(r.asset_key == asset_key and r.partition_key is not None and _retired_key(retired, r.partition_key)
               for r in records):
            out.append(run_id)
    return out


def _retired_key(retired: Retired, key: str) -> bool:
    try:
        return retired.covers(OffsetWindow.parse(key))
    except InvalidWindow:
        return False


def retire_topic(instance: dg.DagsterInstance, s3: S3Client, cfg: ArchiveConfig, topic: str, now: datetime,
                 log: Logger) -> Retirement:
    """Retire the topic's windows committed before now - retire_after_days whose objects are intact
    (archive/retirement.py decides which), then delete the runs that materialized only retired windows: Dagster
    reads an asset's materializations whole whenever its partition set changes, so the event log must stay the
    horizon's size too, not only the partition set. Reads every live key once, and for the windows it may retire
    one manifest GET and one HEAD per object, so a day's windows cost a day's requests."""
    assert cfg.retire_after_days is not None
    horizon = now - timedelta(days=cfg.retire_after_days)
    windows, _ = read_windows(instance, topic)
    retired = read_retired(instance, topic)
    accepted, kept = choose(windows, retired, lambda w: verdict(s3, cfg, topic, w, horizon))
    name = window_partitions(topic).name
    ranges = dict(retired.ranges)
    count = retired.windows
    for i in range(0, len(accepted), BATCH):
        chunk = accepted[i:i + BATCH]
        count += sum(not Retired(ranges).covers(w) for w in chunk)  # a window added back was counted already
        for w in chunk:
            ranges[w.partition] = extend(ranges.get(w.partition), w)
        # The record first: a run cut short between the two leaves windows retired and live, never a hole.
        record_retired(instance, topic, Retired(ranges, count),
                       f"{len(chunk)} windows committed before {horizon.isoformat()} retired from the partition set "
                       "(their manifests stay the record)")
        for w in chunk:
            instance.delete_dynamic_partition(name, w.key)
        log.info(f"topic {topic!r}: retired {i + len(chunk)} of {len(accepted)} windows")
    runs = retired_runs(instance, topic, Retired(ranges, count), [w.key for w in accepted]) if accepted else []
    for run_id in runs:
        instance.delete_run(run_id)
    if runs:
        log.info(f"topic {topic!r}: deleted {len(runs)} runs that materialized only retired windows")
    return Retirement(len(accepted), kept, len(runs))
