"""`erase` against moto in-process (S3's conditional writes, no server): a concurrent erasure that commits first makes
ours redo the window on top of it (both erasures kept); an archive attempt that finds the window rewritten adopts it,
deletes what it wrote and leaves the erasure's objects alone. The integration twin: integration/erasure/test_erase.py."""

from __future__ import annotations

import io
import json
import uuid
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from moto import mock_aws

from s3_archive.archive.driver.commit import commit_window, window_objects
from s3_archive.archive.integrity import sha256_hex
from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.compliance import RetentionLock
from s3_archive.erasure.erase_lineage import traced_erase
from s3_archive.erasure.erase_run import erase
from s3_archive.erasure.erasure import EraseRequest
from s3_archive.io.s3 import read_manifest
from s3_archive.keys.objects import manifest_key, object_key
from s3_archive.model.errors import ErasureRefused
from s3_archive.model.manifest import ManifestObject
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.lineage_events import capture_lineage, read_events, validate_event
from s3_archive_tests.manifests import hand_manifest

BUCKET, PREFIX, TOPIC, W = "erase-races", "p/", "t", OffsetWindow(0, 0, 4)
W2 = OffsetWindow(1, 0, 6)  # a window of two objects (test_an_erasure_that_loses_the_race_...)
KEYS = [b"a", b"victim", b"b", b"victim"]
CFG = ArchiveConfig(name="a", topics=[TOPIC], bucket=BUCKET, prefix=PREFIX)


def _parquet_of(keys: list[bytes], offsets: range) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({"key": pa.array(keys, pa.binary()),
                             "value": pa.array([b"v%d" % o for o in offsets], pa.binary()),
                             "offset": pa.array(offsets, pa.int64()),
                             "timestamp": pa.array([1000 + o for o in offsets], pa.timestamp("ms", "UTC"))}), buf)
    return buf.getvalue()


def _parquet() -> bytes:
    return _parquet_of(KEYS, range(4))


@pytest.fixture
def s3():
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        data = _parquet()
        key = object_key(PREFIX, TOPIC, W, 0, ".parquet")
        etag = client.put_object(Bucket=BUCKET, Key=key, Body=data)["ETag"].strip('"')
        m = hand_manifest(TOPIC, W, [{"key": key, "size": len(data), "etag": etag, "sha256": sha256_hex(data)}],
                          compression="snappy")
        client.put_object(Bucket=BUCKET, Key=manifest_key(PREFIX, TOPIC, W), Body=m.dumps())
        yield client


class ConcurrentErasure:
    """A client whose first conditional manifest PUT is preceded by another erasure of the same window."""

    def __init__(self, s3: Any, erases: int = 1) -> None:
        self.s3, self.raced, self.erases = s3, False, erases

    def __getattr__(self, name: str) -> Any:
        return getattr(self.s3, name)

    def put_object(self, **kw: Any) -> dict:
        if "IfMatch" in kw and not self.raced:
            self.raced = True
            assert erase(self.s3, CFG, EraseRequest(TOPIC, (b"a",))).records == self.erases
        return self.s3.put_object(**kw)


def _keys_in(s3: Any, key: str) -> list[bytes | None]:
    return pq.read_table(io.BytesIO(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())).column("key").to_pylist()


def test_a_concurrent_erasure_that_commits_first_is_kept_and_ours_redone_on_top(s3):
    report = erase(ConcurrentErasure(s3), CFG, EraseRequest(TOPIC, (b"victim",)))

    assert report.records == 2
    m = read_manifest(s3, BUCKET, manifest_key(PREFIX, TOPIC, W))
    assert (m.generation, m.erased_offsets, m.record_count) == (3, [[0, 2], [3, 4]], 1)
    assert [s.generation for s in m.supersedes] == [1, 2]
    assert [_keys_in(s3, o.key) for o in m.objects] == [[b"b"]]
    # nothing else of the window is left: the first generation, the lost attempt's objects, the second generation
    assert sorted(window_objects(s3, CFG.location(TOPIC, W), True)) == [o.key for o in m.objects]
    audits = s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{PREFIX}_erasure/{TOPIC}/")["Contents"]
    assert len(audits) == 2


def test_an_archive_attempt_that_finds_the_window_erased_adopts_it_and_deletes_what_it_wrote(s3):
    erase(s3, CFG, EraseRequest(TOPIC, (b"victim",)))
    erased = read_manifest(s3, BUCKET, manifest_key(PREFIX, TOPIC, W))
    # a late attempt of the first archive run puts the window's original object back, then commits
    key = object_key(PREFIX, TOPIC, W, 0, ".parquet")
    data = _parquet()
    etag = s3.put_object(Bucket=BUCKET, Key=key, Body=data)["ETag"].strip('"')
    result = commit_window(s3, CFG.location(TOPIC, W), hand_manifest(TOPIC, W, attempt="late"),
                           [ManifestObject(key=key, size=len(data), etag=etag)], [], [])

    assert not result.committed_by_us and result.manifest == erased
    assert read_manifest(s3, BUCKET, manifest_key(PREFIX, TOPIC, W)) == erased
    assert sorted(window_objects(s3, CFG.location(TOPIC, W), True)) == [o.key for o in erased.objects]
    assert [_keys_in(s3, o.key) for o in erased.objects] == [[b"a", b"b"]]


def test_an_erasure_that_loses_the_race_deletes_only_the_objects_it_wrote(s3):
    """A window of two objects; the second holds no match for either erasure, so both keep it as it is. The
    erasure that loses the If-Match race deletes its own new object, never the second one, which the winner's
    manifest still lists."""
    data = _parquet_of([b"c", b"d"], range(4, 6))
    second = object_key(PREFIX, TOPIC, W2, 1, ".parquet")
    first = object_key(PREFIX, TOPIC, W2, 0, ".parquet")
    objects = []
    for key, body in ((first, _parquet_of(KEYS, range(4))), (second, data)):
        etag = s3.put_object(Bucket=BUCKET, Key=key, Body=body)["ETag"].strip('"')
        objects.append({"key": key, "size": len(body), "etag": etag, "sha256": sha256_hex(body)})
    s3.put_object(Bucket=BUCKET, Key=manifest_key(PREFIX, TOPIC, W2),
                  Body=hand_manifest(TOPIC, W2, objects, compression="snappy").dumps())

    erase(ConcurrentErasure(s3, erases=2), CFG, EraseRequest(TOPIC, (b"victim",)))  # "a" is in both windows

    m = read_manifest(s3, BUCKET, manifest_key(PREFIX, TOPIC, W2))
    assert m.generation == 3 and second in [o.key for o in m.objects]
    assert _keys_in(s3, second) == [b"c", b"d"]  # still there, as it was
    assert sorted(window_objects(s3, CFG.location(TOPIC, W2), True)) == sorted(o.key for o in m.objects)


def test_the_bounds_of_a_window_are_those_of_the_records_it_keeps(s3):
    erase(s3, CFG, EraseRequest(TOPIC, (b"a",)))  # offset 0
    m = read_manifest(s3, BUCKET, manifest_key(PREFIX, TOPIC, W))
    assert (m.first_offset, m.last_offset) == (1, 3)
    assert (m.min_timestamp_ms, m.max_timestamp_ms) == (1001, 1003)
    assert m.min_timestamp == "1970-01-01T00:00:01.001+00:00"


def test_a_window_whose_every_record_is_erased_keeps_its_manifest_and_no_object(s3):
    report = erase(s3, CFG, EraseRequest(TOPIC, (b"a", b"b", b"victim")))
    m = read_manifest(s3, BUCKET, manifest_key(PREFIX, TOPIC, W))
    assert (report.records, m.objects, m.record_count, m.erased_offsets, m.first_offset) == (4, [], 0, [[0, 4]], None)
    assert window_objects(s3, CFG.location(TOPIC, W), True) == {}


class Log:
    def warning(self, msg: str) -> None:
        raise AssertionError(f"lineage not sent: {msg}")


def test_an_erasure_emits_start_and_complete_with_the_windows_rewritten_never_the_key(s3, tmp_path, monkeypatch):
    lineage = capture_lineage(monkeypatch, tmp_path / "lineage.jsonl")
    run_id = str(uuid.uuid4())
    assert traced_erase(s3, CFG, EraseRequest(TOPIC, (b"victim",)), run_id, Log(), dry_run=True).records == 2
    assert not lineage.exists()  # a dry run writes nothing and emits nothing

    report = traced_erase(s3, CFG, EraseRequest(TOPIC, (b"victim",)), run_id, Log())

    assert report.records == 2
    start, complete = read_events(lineage)
    for e in (start, complete):
        validate_event(e)
        assert e["job"]["name"] == f"erase.{CFG.name}.{TOPIC}" and e["run"]["runId"] == run_id
        assert e["job"]["facets"]["jobType"]["jobType"] == "ERASE"
        datasets = [(d["namespace"], d["name"]) for d in e["inputs"] + e["outputs"]]
        assert datasets == [(f"s3://{BUCKET}", f"{PREFIX}{TOPIC}")] * 2
        assert b"victim".decode() not in json.dumps(e)
    assert (start["eventType"], complete["eventType"]) == ("START", "COMPLETE")
    assert "s3archive_erasure" not in start["outputs"][0].get("outputFacets", {})
    assert complete["outputs"][0]["outputFacets"]["s3archive_erasure"]["records"] == 2
    assert complete["outputs"][0]["outputFacets"]["s3archive_erasure"]["windows"] == [
        {"key": W.key, "generation": 2, "records": 2}]


def test_a_refused_erasure_emits_fail(s3, tmp_path, monkeypatch):
    lineage = capture_lineage(monkeypatch, tmp_path / "lineage.jsonl")
    locked = CFG.model_copy(update={"retention_lock": RetentionLock(mode="compliance", days=1)})
    with pytest.raises(ErasureRefused):
        traced_erase(s3, locked, EraseRequest(TOPIC, (b"victim",)), str(uuid.uuid4()), Log())
    start, fail = read_events(lineage)
    validate_event(fail)
    assert (start["eventType"], fail["eventType"]) == ("START", "FAIL")
    assert "archive 'a' has retention_lock mode compliance" in fail["run"]["facets"]["errorMessage"]["message"]
