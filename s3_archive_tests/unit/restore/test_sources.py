"""Downloading an archived object for a restore (restore/sources.py `spool`), against moto in-process."""

from __future__ import annotations

import threading

import boto3
import pytest
from moto import mock_aws

import s3_archive.restore.sources as sources
from s3_archive.model.errors import ArchiveIntegrityError
from s3_archive.model.manifest import ManifestObject
from s3_archive.restore.sources import spool

DATA = bytes(range(256)) * 40_000  # 10 MB: over the transfer manager's default 8 MB multipart threshold


@pytest.fixture
def s3():
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="restore-b")
        client.put_object(Bucket="restore-b", Key="a", Body=DATA)
        gets: list[str | None] = []  # the Range header of each GetObject sent

        def seen(request, **_):
            rng = request.headers.get("Range")
            gets.append(rng.decode() if isinstance(rng, bytes) else rng)

        client.meta.events.register("before-send.s3.GetObject", seen)
        client.gets = gets
        yield client


def test_an_object_is_one_get_and_its_size_is_checked(s3):
    with spool(s3, "restore-b", ManifestObject(key="a", size=len(DATA), etag="x")) as f:
        assert f.read() == DATA
    assert s3.gets == [None]  # one GET of the whole object, no ranges
    with pytest.raises(ArchiveIntegrityError, match=f"is {len(DATA)} bytes, its manifest says 5"):
        spool(s3, "restore-b", ManifestObject(key="a", size=5, etag="x"))


def test_an_object_over_the_one_get_size_is_read_in_ranged_parts(s3, monkeypatch):
    monkeypatch.setattr(sources, "ONE_GET_BYTES", 1 << 20)
    with spool(s3, "restore-b", ManifestObject(key="a", size=len(DATA), etag="x")) as f:
        assert f.read() == DATA
    assert len(s3.gets) > 1 and all(r and r.startswith("bytes=") for r in s3.gets), s3.gets


def _recorded_downloads(monkeypatch) -> list[str]:
    """The keys `sources.spool` is asked to download, in order (the download itself is the key)."""
    downloads: list[str] = []
    lock = threading.Lock()

    def spool(s3, bucket, obj):
        with lock:
            downloads.append(obj.key)
        return obj.key

    monkeypatch.setattr(sources, "spool", spool)
    return downloads


def test_prefetch_keeps_one_object_ahead_per_lane_and_hands_each_over_once(monkeypatch):
    """Two producer groups read their source partitions (lanes) side by side: each object is downloaded once,
    the next of a lane goes ahead when one is taken, and a finished lane starts the next one not started."""
    downloads = _recorded_downloads(monkeypatch)
    objs = {lane: [ManifestObject(key=f"p{lane}-{i}", size=1, etag="e") for i in range(3)] for lane in (0, 1, 2)}
    pf = sources.Prefetch(None, "b", [(lane, o) for lane, os_ in objs.items() for o in os_])
    try:
        out: dict[int, list[str]] = {}

        def read(lanes):
            for lane in lanes:
                for o in objs[lane]:
                    out.setdefault(lane, []).append(pf(o))

        threads = [threading.Thread(target=read, args=(ls,)) for ls in ([0, 2], [1])]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        pf.close()
    assert out == {lane: [o.key for o in os_] for lane, os_ in objs.items()}
    assert sorted(downloads) == sorted(o.key for os_ in objs.values() for o in os_)  # each exactly once


def test_a_groups_reader_asks_for_its_next_windows_object_ahead(monkeypatch):
    """Groups read lanes 0, 2 and 1, 3: a finished lane starts the next one not started (lane 2), so the reader of
    lane 1 asks for lane 3's object ahead itself; an object already downloading, taken, or not next in its lane is
    not downloaded again."""
    downloads = _recorded_downloads(monkeypatch)
    objs = {lane: [ManifestObject(key=f"p{lane}-{i}", size=1, etag="e") for i in range(2)] for lane in range(4)}
    pf = sources.Prefetch(None, "b", [(lane, o) for lane, os_ in objs.items() for o in os_])
    try:
        assert pf(objs[0][0]) == "p0-0" and pf(objs[1][0]) == "p1-0"
        pf.ahead(objs[3][1])  # not the next of its lane
        pf.ahead(objs[1][1])  # already downloading (the next of a lane taken from)
        pf.ahead(objs[3][0])
        for fut in list(pf.pending.values()):  # every download asked for so far has run
            fut.result()
        assert sorted(downloads) == ["p0-0", "p0-1", "p1-0", "p1-1", "p3-0"]
        pf.ahead(objs[3][0])  # downloaded already
        assert [pf(o) for o in objs[1][1:] + objs[3]] == ["p1-1", "p3-0", "p3-1"]
    finally:
        pf.close()
    # each once (lane 2's object, started when lane 1 was finished, may have been cancelled by `close`)
    assert len(downloads) == len(set(downloads)) and set(downloads) - {"p2-0"} == {
        "p0-0", "p0-1", "p1-0", "p1-1", "p3-0", "p3-1"}
