"""The typed manifest: every shape written so far parses and writes back byte for byte; anything else is refused
with one error naming what is wrong.

The files in manifests/ were written by the archive itself against the local stack (not typed by hand):
v1*.json by today's code (parquet; json with dead letters; the bytes format, whose objects carry their offset),
before-output-options.json by the code before value decoding and output options existed (commit a2b9322^).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from s3_archive.model.errors import InvalidManifest
from s3_archive.model.manifest import PLAIN_VERSION, Manifest, ManifestObject, parse_manifest
from s3_archive.model.windows import OffsetWindow

HERE = Path(__file__).parent / "manifests"
WRITTEN = sorted(p.name for p in HERE.glob("*.json"))
LATER_FIELDS = ("envelope", "value_decoding", "undecodable_records", "restorable")


def raw(name: str) -> bytes:
    return (HERE / name).read_bytes()


def test_every_shape_written_so_far_is_here():
    assert {"v1.json", "v1-dead-letters.json", "v1-bytes.json", "before-output-options.json"} <= set(WRITTEN)


@pytest.mark.parametrize("name", WRITTEN)
def test_written_manifests_parse_and_write_back_byte_for_byte(name):
    m = parse_manifest(raw(name), name)
    assert m.manifest_version == PLAIN_VERSION
    assert m.dumps() == raw(name)  # same keys, same values, same layout (indent=1, sort_keys)
    assert parse_manifest(m.dumps()) == m == parse_manifest(json.loads(raw(name)))  # bytes, str or mapping
    assert m.window == OffsetWindow.parse(m.window_key)
    assert m.bytes_written == sum(o.size for o in m.objects)


def test_todays_manifest_reads_as_typed_fields():
    m = parse_manifest(raw("v1.json"))
    assert (m.format, m.compression, m.value_decoding, m.restorable, m.undecodable_records) == (
        "parquet", "snappy", "bytes", True, 0)
    assert m.envelope == ["key", "value", "headers", "topic", "partition", "offset", "timestamp", "timestamp_type"]
    assert (m.record_count, m.first_offset, m.last_offset, m.absent_offsets, m.lost_offsets) == (4, 0, 3, [], [])
    assert json.loads(m.spark_schema)["type"] == "struct"
    assert [type(o) for o in m.objects] == [ManifestObject] and m.objects[0].offset is None
    assert m.dead_letter_objects == [] and m.all_objects == m.objects
    assert m.committed_time.tzinfo is not None


def test_dead_letters_and_per_record_objects():
    dead = parse_manifest(raw("v1-dead-letters.json"))
    assert dead.undecodable_records == 2 and len(dead.dead_letter_objects) == 1
    assert dead.all_objects == dead.objects + dead.dead_letter_objects
    per_record = parse_manifest(raw("v1-bytes.json"))
    assert [o.offset for o in per_record.objects] == list(range(per_record.record_count))
    assert not per_record.restorable


def test_a_manifest_from_before_the_output_options_has_none_of_their_fields():
    old = parse_manifest(raw("before-output-options.json"))
    assert all(getattr(old, f) is None for f in LATER_FIELDS) and old.dead_letter_objects == []
    written = json.loads(old.dumps())
    assert not set(LATER_FIELDS) & set(written) and "dead_letter_objects" not in written
    assert all("offset" not in o for o in written["objects"])


def test_with_objects_fills_in_what_the_commit_publishes():
    m = parse_manifest(raw("v1.json"))
    objs = [ManifestObject(key="a", size=3, etag="e"), ManifestObject(key="b", size=4, etag="f")]
    done = m.with_objects(objs, [ManifestObject(key="d", size=9, etag="g")])
    assert (done.bytes_written, [o.key for o in done.all_objects]) == (7, ["a", "b", "d"])
    assert json.loads(done.dumps())["dead_letter_objects"] == [{"etag": "g", "key": "d", "size": 9}]
    assert "dead_letter_objects" not in json.loads(m.with_objects(objs, []).dumps())


def _v1(**changes) -> dict:
    d = json.loads(raw("v1.json"))
    d.update(changes)
    return d


def _without(key: str) -> dict:
    d = _v1()
    del d[key]
    return d


@pytest.mark.parametrize("data,message", [
    (_v1(manifest_version=4), "has manifest_version 4; this s3-archive reads versions 1, 2, 3; it was written by a "
                              "newer s3-archive: upgrade to read it"),
    (_v1(manifest_version="1"), "has manifest_version '1'; this s3-archive reads versions 1, 2, 3$"),
    (_v1(manifest_version=True), "has manifest_version True"),
    (_without("manifest_version"), "has no manifest_version; this s3-archive reads versions 1, 2, 3"),
    (_without("record_count"), r"is malformed: `record_count` is missing"),
    (_without("schema"), r"is malformed: `schema` is missing"),
    (_v1(record_count="4"), r"is malformed: `record_count`: Input should be a valid integer \(got '4'\)"),
    (_v1(restorable="yes"), r"`restorable`: Input should be a valid boolean"),
    (_v1(records=4), r"`records` is not a field of manifest_version 1"),
    (_v1(objects=[{"key": "k", "size": -1, "etag": "e"}]), r"`objects.0.size`: Input should be greater than or "
                                                            r"equal to 0"),
    (_v1(objects=[{"key": "k", "size": 1}]), r"`objects.0.etag` is missing"),
    (_v1(lost_offsets=[[0, 1, 2]]), r"`lost_offsets.0`: List should have at most 2 items"),
    (_v1(committed_at="yesterday"), r"`committed_at`: Invalid isoformat string"),
    (_v1(window_key="p00000-0000000000000000000-0000000000000000009"),
     r"window_key 'p00000-0000000000000000000-0000000000000000009' is not the window of partition 0 offsets "
     r"\[0, 4\)"),
    (_v1(start_offset=4), r"window offsets must satisfy 0 <= start < end"),
    (b"{not json", "is not JSON"),
    (b"[1, 2]", "is not a JSON object but list"),
])
def test_unknown_versions_and_malformed_manifests_are_refused_naming_what_is_wrong(data, message):
    data = data if isinstance(data, bytes) else json.dumps(data)
    with pytest.raises(InvalidManifest, match=message) as e:
        parse_manifest(data, "s3://bucket/_manifests/t/kafka_partition=0/p.json")
    assert str(e.value).startswith("manifest s3://bucket/_manifests/t/kafka_partition=0/p.json ")


def test_every_problem_is_named_at_once():
    data = _v1(record_count=None, writer=1, extra=True)
    del data["topic"], data["attempt"]
    with pytest.raises(InvalidManifest) as e:
        parse_manifest(json.dumps(data))
    assert str(e.value).startswith("manifest (manifest_version 1) is malformed: `topic`, `attempt` are "
                                   "missing; ")
    assert all(f"`{f}`" in str(e.value) for f in ("record_count", "writer", "extra"))


def test_a_manifest_is_immutable():
    m = parse_manifest(raw("v1.json"))
    with pytest.raises(Exception, match="frozen"):
        m.record_count = 5  # type: ignore[misc]
    assert isinstance(m, Manifest)
