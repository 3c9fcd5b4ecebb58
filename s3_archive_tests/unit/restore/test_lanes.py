"""Lanes of a restore (restore/lanes.py) and the prefetch they share (restore/sources.py)."""

from __future__ import annotations

import io
import threading
import time

import pytest

from s3_archive.model.errors import ArchiveIntegrityError
from s3_archive.model.manifest import ManifestObject
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.lanes import LANES, Stopped, lane_ids, plan_lanes, run_lanes
from s3_archive.restore.routing import PartitionMapping
from s3_archive.restore.sources import Prefetch, lane_order, spool

pytestmark = pytest.mark.unit

SAME, MURMUR = PartitionMapping(), PartitionMapping("murmur2")


def test_lane_ids_keep_the_ledger_id_first():
    assert lane_ids("s3-archive-restore.a.b", 3) == ["s3-archive-restore.a.b", "s3-archive-restore.a.b.lane1",
                                                      "s3-archive-restore.a.b.lane2"]
    assert len(lane_ids("x")) == LANES


def test_same_mapping_runs_a_lane_per_partition_up_to_the_limit():
    assert plan_lanes(SAME, [2, 0, 1, 0], 4) == [[0], [1], [2]]
    assert plan_lanes(SAME, range(6), 8, lanes=4) == [[0, 4], [1, 5], [2], [3]]
    assert plan_lanes(SAME, [3], 4) == [[3]]
    assert plan_lanes(SAME, [], 4) == []
    assert plan_lanes(SAME, [0, 1], 4, lanes=1) == [[0, 1]]


def test_lanes_own_whole_ledger_buckets():
    # source partitions 1 and 5 share the ledger entry of target partition 1 (sp % 4): one lane
    lanes = plan_lanes(PartitionMapping.parse("map", {"0": 0, "1": 1, "5": 2}), [0, 1, 5], 4)
    assert lanes == [[0], [1, 5]]


def test_lanes_that_could_share_a_target_partition_run_as_one():
    assert plan_lanes(MURMUR, [0, 1, 2], 4) == [[0, 1, 2]]
    assert plan_lanes(PartitionMapping.parse("map", {"0": 2, "1": 2}), [0, 1], 4) == [[0, 1]]
    assert plan_lanes(PartitionMapping.parse("map", {"0": 1, "1": 0}), [0, 1], 4) == [[0], [1]]


def test_run_lanes_yields_what_every_lane_emits():
    def lane(name):
        def work(stop, emit):
            for i in range(3):
                emit((name, i))
        return work

    got = list(run_lanes([lane("a"), lane("b")]))
    assert sorted(got) == [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1), ("b", 2)]
    assert [x for x in got if x[0] == "a"] == [("a", 0), ("a", 1), ("a", 2)]  # a lane's order is kept


def test_a_failing_lane_stops_the_others_and_its_error_is_raised_after_they_stopped():
    stopped = threading.Event()

    def failing(stop, emit):
        emit("before")
        raise ValueError("lane 0 broke")

    def slow(stop, emit):
        while not stop.is_set():
            time.sleep(0.01)
        stopped.set()
        raise Stopped

    got = []
    with pytest.raises(ValueError, match="lane 0 broke"):
        for x in run_lanes([failing, slow]):
            got.append(x)
    assert got == ["before"] and stopped.is_set()


def test_closing_the_lanes_early_stops_them():
    ended = threading.Event()

    def endless(stop, emit):
        try:
            while not stop.is_set():
                emit(1)
                time.sleep(0.005)
            raise Stopped
        finally:
            ended.set()

    gen = run_lanes([endless])
    assert next(gen) == 1
    gen.close()
    assert ended.is_set()


def test_lane_order_takes_each_partitions_windows_in_turn():
    ws = [OffsetWindow(0, 0, 10), OffsetWindow(0, 10, 20), OffsetWindow(1, 0, 5), OffsetWindow(2, 0, 5),
          OffsetWindow(2, 5, 9), OffsetWindow(2, 9, 12)]
    assert lane_order(list(reversed(ws))) == [OffsetWindow(0, 0, 10), OffsetWindow(1, 0, 5), OffsetWindow(2, 0, 5),
                                              OffsetWindow(0, 10, 20), OffsetWindow(2, 5, 9),
                                              OffsetWindow(2, 9, 12)]


class _S3:
    """Enough of an S3 client for `spool`: objects in memory, GETs counted."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects, self.gets, self.lock = objects, [], threading.Lock()

    def get_object(self, Bucket: str, Key: str) -> dict:  # noqa: N803 - boto3's names
        with self.lock:
            self.gets.append(Key)
        return {"Body": io.BytesIO(self.objects[Key])}


def _obj(key: str, data: bytes) -> ManifestObject:
    return ManifestObject(key=key, size=len(data), etag="x")


def test_spool_is_one_get_and_checks_the_size():
    s3 = _S3({"a": b"x" * 3_000_000})
    with spool(s3, "b", _obj("a", s3.objects["a"])) as f:
        assert f.read() == s3.objects["a"]
    assert s3.gets == ["a"]
    with pytest.raises(ArchiveIntegrityError, match="is 3000000 bytes, its manifest says 5"):
        spool(s3, "b", ManifestObject(key="a", size=5, etag="x"))


def test_prefetch_serves_lanes_side_by_side_each_object_fetched_once():
    data = {f"k{i}": f"object {i}".encode() * 100 for i in range(8)}
    s3 = _S3(data)
    objs = [_obj(k, v) for k, v in data.items()]
    prefetch = Prefetch(s3, "b", objs, depth=4)
    got: dict[str, bytes] = {}

    def lane(mine):
        for o in mine:
            with prefetch(o) as f:
                got[o.key] = f.read()

    threads = [threading.Thread(target=lane, args=(objs[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    prefetch.close()
    assert got == data
    assert sorted(s3.gets) == sorted(data)  # none downloaded twice


def test_prefetch_close_drops_what_nobody_read():
    data = {f"k{i}": b"z" * 10 for i in range(3)}
    s3 = _S3(data)
    prefetch = Prefetch(s3, "b", [_obj(k, v) for k, v in data.items()], depth=2)
    prefetch.close()
    assert len(s3.gets) <= 2


def test_an_object_asked_for_out_of_turn_is_not_downloaded_again():
    data = {f"k{i}": b"y" * 10 for i in range(4)}
    s3 = _S3(data)
    objs = [_obj(k, v) for k, v in data.items()]
    prefetch = Prefetch(s3, "b", objs, depth=1)  # k0 pending
    for o in (objs[3], objs[0], objs[1], objs[2]):
        prefetch(o).close()
    prefetch.close()
    assert sorted(s3.gets) == sorted(data)


def test_side_by_side_only_where_each_target_partition_has_one_source():
    from s3_archive.restore.lanes import side_by_side

    assert side_by_side(SAME, [0, 1]) and not side_by_side(MURMUR, [0, 1])
    assert side_by_side(PartitionMapping.parse("map", {"0": 1, "1": 0}), [0, 1])
    assert not side_by_side(PartitionMapping.parse("map", {"0": 1, "1": 1}), [0, 1])
    assert not side_by_side(PartitionMapping.parse("map", {"0": 1}), [0, 1])  # unmapped: refused later
