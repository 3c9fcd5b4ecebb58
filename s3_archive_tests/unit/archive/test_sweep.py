"""The offsets sensor's sweeps (archive/sweep.py) on plain values: where each partition's uncommitted offsets start,
which windows inside the gaps are lost rather than expired, and a sweep that cannot read S3 gives no verdict; and
the take-over boundary's pure parts (archive/health.py)."""

from datetime import UTC, datetime, timedelta

from botocore.exceptions import ClientError

from s3_archive.archive.cursor import Open, SensorCursor, Tail, open_windows
from s3_archive.archive.health import WindowsView, archive_starts, take_over_verdict
from s3_archive.archive.plan import PartitionState
from s3_archive.archive.retirement import Retired
from s3_archive.archive.sweep import lost_windows, sweep_manifests, uncommitted
from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.foreign import ForeignSource
from s3_archive.config.lifecycle import LifecyclePolicy
from s3_archive.model.windows import OffsetWindow

NOW = datetime(2026, 3, 1, tzinfo=UTC)


def cfg(**kw) -> ArchiveConfig:
    return ArchiveConfig(**{"name": "a", "topics": ["t"], "bucket": "bkt", "prefix": "p/", **kw})


class View(WindowsView):
    """What the instance knows, as plain values."""

    def __init__(self, windows: list[OffsetWindow], retired: Retired | None = None,
                 materialized_at: dict[str, datetime] | None = None) -> None:
        self.windows, self.bad, self.retired = windows, [], retired or Retired({})
        self.materialized = {w.key for w in windows}
        self.times = materialized_at or {}
        self.asked: list[list[str]] = []

    def materialized_at(self, keys: list[str]) -> dict[str, datetime]:
        self.asked.append(keys)
        return {k: self.times[k] for k in keys if k in self.times}


def test_open_windows_are_the_cursors_keys_per_partition_in_offset_order():
    cursor = SensorCursor(open={"t": Open(keys=[OffsetWindow(1, 5, 9).key, "not-a-window", OffsetWindow(0, 10, 20).key,
                                                 OffsetWindow(0, 0, 10).key])})
    assert open_windows(cursor, "t") == {0: [OffsetWindow(0, 0, 10), OffsetWindow(0, 10, 20)],
                                         1: [OffsetWindow(1, 5, 9)]}
    assert open_windows(cursor, "other") == {}


def test_uncommitted_offsets_start_at_the_first_open_window_else_at_the_next_window():
    cursor = SensorCursor(open={"t": Open(keys=[OffsetWindow(0, 10, 20).key, OffsetWindow(0, 20, 30).key])})
    states = [PartitionState("t", 0, 30, 50, 10), PartitionState("t", 1, 7, 9, 10), PartitionState("u", 0, 3, 3, 10)]
    assert uncommitted(cursor, states) == {"t": {0: 10, 1: 7}, "u": {0: 3}}


def test_lost_windows_are_the_live_windows_inside_the_gaps_but_those_s3_may_have_expired():
    old, young, outside = OffsetWindow(0, 0, 10), OffsetWindow(0, 10, 20), OffsetWindow(0, 20, 30)
    gaps = {0: [(0, 20)]}
    view = View([old, young, outside], materialized_at={old.key: NOW - timedelta(days=40),
                                                          young.key: NOW - timedelta(days=2)})
    assert lost_windows(view, cfg(), gaps, NOW.timestamp()) == [old, young]
    assert view.asked == []  # nothing expires: no read of when they were materialized
    expiring = cfg(lifecycle=LifecyclePolicy(expiration_days=30))
    assert lost_windows(view, expiring, gaps, NOW.timestamp()) == [young]
    assert view.asked == [[old.key, young.key]]
    assert lost_windows(view, expiring, {1: [(0, 99)]}, NOW.timestamp()) == []


class Unreadable:
    """An S3 client whose every listing is refused."""

    def get_paginator(self, name: str):
        raise ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "ListObjectsV2")


def test_a_sweep_that_cannot_read_s3_gives_no_verdict_and_says_why():
    cursor = SensorCursor(tails={"t": Tail(None, {0: 30}, {0: 0})})
    swept = sweep_manifests({"t": View([OffsetWindow(0, 0, 10)])}, None, Unreadable(), cfg(), cursor,
                            NOW.timestamp())
    assert (swept.verdicts, swept.rearchive) == ({}, {})
    assert swept.unreadable is not None and "AccessDenied" in swept.unreadable


def test_a_topic_without_windows_passes_the_sweep_without_a_listing():
    swept = sweep_manifests({}, None, Unreadable(), cfg(), SensorCursor(), NOW.timestamp())
    assert swept.unreadable is None and swept.verdicts["t"].passed and swept.rearchive == {}


def test_the_archive_starts_at_each_partitions_first_window_live_or_retired():
    view = View([OffsetWindow(0, 50, 60), OffsetWindow(0, 40, 50), OffsetWindow(2, 7, 9)],
                Retired({0: OffsetWindow(0, 10, 40), 1: OffsetWindow(1, 0, 5)}))
    assert archive_starts(view) == {0: 10, 1: 0, 2: 7}


class NoOffsets:
    def offsets(self, topic: str, spec: str, partitions=None) -> dict[int, int]:
        return {}


def test_sink_objects_past_the_boundary_overlap_unless_the_archive_shares_the_sinks_prefix():
    sink = ForeignSource(name="s", layout="confluent", bucket="bkt", prefix="topics/", topic="t", format="avro",
                         archive="a")
    taken = ["topics/t/partition=0/t+0+0000000010.avro"]
    apart = take_over_verdict(NoOffsets(), cfg(), "t", sink, View([]), {}, taken)
    assert apart.problems == [f"topic 't': s3://bkt/{taken[0]} is named at or past where the archive starts: its "
                              "records are in both places"]
    shared = take_over_verdict(NoOffsets(), cfg(prefix="topics/t/"), "t", sink, View([]), {}, taken)
    assert shared.problems == []
