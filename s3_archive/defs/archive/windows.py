"""A topic's windows as the Dagster instance knows them: the live ones (dynamic partition keys) and the retired
ones (a range of offsets per Kafka partition, recorded on the archive asset).

Windows older than the archive's `retire_after_days` are retired from the dynamic partition set once their manifests
are verified (retire.py), so the set, the UI's partition status and every range run stay the size of the horizon
while the archive grows for years. The manifests in S3 stay the record of every window; the instance keeps, per
Kafka partition, the one contiguous range of offsets whose windows were retired. It is the newest
`AssetObservation` of `kafka_archive/<topic>` with metadata `retired_ranges`, written before the partitions are
deleted: a retirement cut short leaves windows both retired and live, never a hole.
"""

from __future__ import annotations

from dataclasses import dataclass

import dagster as dg

from s3_archive.defs.archive.partitions import archive_asset_key, window_partitions
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


@dataclass
class Retired:
    """Per Kafka partition, the offsets whose windows were retired (as one window spanning them), and how many
    windows that was in all."""

    ranges: dict[int, OffsetWindow]
    windows: int = 0

    def covers(self, w: OffsetWindow) -> bool:
        r = self.ranges.get(w.partition)
        return r is not None and r.start <= w.start and w.end <= r.end


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
