"""Erasure, pure: which records a request matches, the refusals, the next manifest generation, the audit record, the
generation in object names; and a Parquet table rewritten without (or with nulled) records."""

import json
from datetime import UTC, datetime

import pyarrow as pa
import pytest

from s3_archive.archive.integrity import Committed, link_findings, link_to, sha256_hex
from s3_archive.config.archive import ArchiveConfig
from s3_archive.erasure.erasure import (
    EraseRequest,
    FieldEquals,
    WindowErasure,
    audit_record,
    check_allowed,
    completed_intent,
    intent_record,
    merged_ranges,
    next_generation,
    offset_ranges,
    parse_equals,
    refusal,
    salted_hash,
)
from s3_archive.erasure.rewrite import _table_without as _without
from s3_archive.keys.layout import OutputLayout
from s3_archive.keys.objects import WindowLocation, generation_key, generation_of_key, manifest_key
from s3_archive.model.errors import ErasureRefused, InvalidManifest
from s3_archive.model.manifest import ManifestObject, parse_manifest
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.manifests import hand_manifest

W = OffsetWindow(2, 100, 110)


def _cfg(**kw) -> ArchiveConfig:
    return ArchiveConfig(name="a", topics=["t"], bucket="bkt-one", prefix="p/", **kw)


def test_a_request_matches_by_key_or_by_a_decoded_field():
    by_key = EraseRequest("t", (b"alice", b"bob"))
    assert by_key.columns() == ["offset", "key"]
    assert by_key.matching({"offset": [1, 2, 3, 4], "key": [b"alice", None, b"carol", b"bob"]}) == [0, 3]
    by_field = EraseRequest("t", predicate=FieldEquals("user_id", 42))
    assert by_field.columns() == ["offset", "user_id"]
    # 42 matches 42, not "42", not 42.5, not True (a bool is not the int it equals in Python)
    assert by_field.matching({"offset": [0, 1, 2, 3, 4], "user_id": [42, "42", 42.5, None, 42]}) == [0, 4]
    assert EraseRequest("t", predicate=FieldEquals("ok", True)).matching({"ok": [1, True, False]}) == [1]


@pytest.mark.parametrize("keys, predicate", [((), None), ((b"k",), FieldEquals("f", 1))])
def test_a_request_names_records_one_way_exactly(keys, predicate):
    with pytest.raises(ErasureRefused, match="exactly one of the two"):
        EraseRequest("t", keys, predicate)


def test_equals_is_json_when_it_parses_as_a_scalar():
    assert [parse_equals(t) for t in ("42", "true", '"42"', "alice", "[1]", "4.5")] == [42, True, "42", "alice",
                                                                                       "[1]", 4.5]


def test_refusals_name_why():
    assert refusal(_cfg()) is None
    compliance = refusal(_cfg(retention_lock={"mode": "compliance", "days": 30}))
    assert "compliance" in compliance and "nobody" in compliance
    governance = _cfg(retention_lock={"mode": "governance", "days": 30})
    assert "erasure.allow_governance_bypass: true" in refusal(governance)
    allowed = _cfg(retention_lock={"mode": "governance", "days": 30}, erasure={"allow_governance_bypass": True})
    assert refusal(allowed) is None
    assert "s3:BypassGovernanceRetention" in refusal(allowed, with_bypass_permission=False)
    for fmt in ("avro", "jsonl", "json", "csv", "iceberg"):  # iceberg: committed again to the table
        assert refusal(_cfg(format=fmt)) is None, fmt
    for fmt in ("text", "bytes"):  # neither keeps a key nor an offset
        assert f"format {fmt!r}" in refusal(_cfg(format=fmt)) and "no key and no offset" in refusal(_cfg(format=fmt))
    assert "without 'offset'" in refusal(_cfg(format="csv", csv_fields=["key", "value"]))
    with pytest.raises(ErasureRefused, match="erasure refused: archive 'a' has retention_lock mode compliance"):
        check_allowed(_cfg(retention_lock={"mode": "compliance", "days": 1}))


def test_erasure_mode_is_drop_or_null():
    assert _cfg().erasure.mode == "drop" and _cfg(erasure={"mode": "null"}).erasure.mode == "null"
    with pytest.raises(ValueError, match="erasure.mode"):
        _cfg(erasure={"mode": "shred"})


def test_offsets_become_ranges_and_ranges_merge():
    assert offset_ranges([5, 3, 4, 9, 3]) == [[3, 6], [9, 10]]
    assert merged_ranges([[1, 3], [8, 9]], [[3, 4], [6, 7]]) == [[1, 4], [6, 7], [8, 9]]


def _committed(objects=None, **fields):
    objs = [{"key": "p/t/o1.parquet", "size": 10, "etag": "e1", "sha256": "a" * 64},
            {"key": "p/t/o2.parquet", "size": 20, "etag": "e2", "sha256": "b" * 64}] if objects is None else objects
    return hand_manifest("t", W, objs, **fields)


def test_the_next_generation_lists_erased_offsets_and_supersedes_the_old_manifest():
    old = _committed()
    body = old.dumps()
    link = link_to(manifest_key("p/", "t", W), body)
    new_obj = ManifestObject(key="p/t/o2.g2-abc.parquet", size=15, etag="e3", sha256="c" * 64)
    now = datetime(2026, 1, 2, tzinfo=UTC)
    new = next_generation(old, link, [old.objects[0], new_obj], [], [104, 103, 107], "abc", now)
    assert (new.generation, new.supersedes, new.erased_offsets) == (2, [link], [[103, 105], [107, 108]])
    assert (new.record_count, new.bytes_written, new.erased_count, new.erasure_records) == (7, 25, 3, 3)
    assert [o.key for o in new.objects] == ["p/t/o1.parquet", "p/t/o2.g2-abc.parquet"]
    assert (new.attempt, new.committed_at, new.previous_manifest) == ("abc", now.isoformat(), old.previous_manifest)
    assert [o for o in range(W.start, W.end) if new.is_erased(o)] == [103, 104, 107]
    # written and read back: the erased offsets are in the JSON, no key is
    again = parse_manifest(new.dumps())
    assert again == new and json.loads(new.dumps())["erased_offsets"] == [[103, 105], [107, 108]]
    # a third generation keeps the earlier erasures and supersedes both
    third = next_generation(new, link_to(manifest_key("p/", "t", W), new.dumps()), new.objects, [], [100], "def", now)
    assert third.generation == 3 and [s.generation for s in third.supersedes] == [1, 2]
    assert third.erased_offsets == [[100, 101], [103, 105], [107, 108]]


def test_erased_offsets_are_a_field_of_version_3_only():
    with pytest.raises(InvalidManifest, match="`erased_offsets` is a field of manifest_version 3"):
        parse_manifest(json.dumps({**json.loads(_committed(manifest_version=1, generation=None, objects=[]).dumps()),
                                   "erased_offsets": [[1, 2]]}))
    assert "erased_offsets" not in json.loads(_committed().dumps())


def test_the_chain_accepts_a_rewritten_window_that_supersedes_the_linked_generation():
    old = _committed()
    link = link_to(manifest_key("p/", "t", W), old.dumps())
    new = next_generation(old, link, old.objects, [], [101], "x", datetime.now(UTC))
    nxt = hand_manifest("t", OffsetWindow(2, 110, 120), previous_manifest=link)
    target = Committed(link.key, sha256_hex(new.dumps()), new)
    assert link_findings(nxt, target, older_exist=False) == []
    edited = Committed(link.key, sha256_hex(b"other"), old)
    assert [f.differs for f in link_findings(nxt, edited, older_exist=False)] == ["manifest_edited"]


def test_the_audit_record_keeps_salted_hashes_never_the_key():
    when = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
    req = EraseRequest("t", (b"alice@example.com",))
    started = datetime(2026, 3, 4, 5, 6, 0, tzinfo=UTC)
    intent = intent_record(req, b"salt", "drop", started, "id1")
    assert b"alice" not in intent
    assert json.loads(intent) == {"erasure_id": "id1", "topic": "t", "state": "open", "started_at": started.isoformat(),
                                  "mode": "drop", "matched_by": "key",
                                  "subject_sha256": [salted_hash(b"salt", b"alice@example.com")]}
    record = audit_record(req, b"salt", [WindowErasure(W.key, 2, 3), WindowErasure("x", 4, 1)], "drop", started,
                          when, "id1")
    assert b"alice" not in record
    data = json.loads(record)
    assert data == {**json.loads(intent), "state": "complete", "erased_at": when.isoformat(), "records": 4,
                    "windows": [{"window": W.key, "generation": 2, "records": 3},
                                {"window": "x", "generation": 4, "records": 1}]}
    # a later erasure completes the record a killed one left open, with the windows its manifests name
    later = json.loads(completed_intent(json.loads(intent), [WindowErasure(W.key, 2, 3)], when, "id9"))
    assert (later["state"], later["records"], later["completed_by"], later["started_at"]) == (
        "complete", 3, "id9", started.isoformat())
    assert data["subject_sha256"] == [salted_hash(b"salt", b"alice@example.com")] != [salted_hash(b"pepper",
                                                                                                  b"alice@example.com")]
    assert (data["records"], data["erased_at"], data["mode"], data["matched_by"]) == (4, when.isoformat(), "drop", "key")
    assert data["windows"][0] == {"window": W.key, "generation": 2, "records": 3}
    by_field = json.loads(audit_record(EraseRequest("t", predicate=FieldEquals("email", "a@b")), b"s", [], "null",
                                       started, when, "id2"))
    assert by_field["matched_by"] == "field email" and by_field["subject_sha256"] == [salted_hash(b"s", b'email="a@b"')]


def test_object_names_carry_the_generation_and_the_attempt():
    key = "p/t/kafka_partition=2/t+2+0000000000000000100-0000000000000000110+00000.parquet"
    g2 = generation_key(key, ".parquet", 2, "abc123")
    assert g2 == key.removesuffix(".parquet") + ".g2-abc123.parquet"
    assert generation_key(g2, ".parquet", 3, "def") == key.removesuffix(".parquet") + ".g3-def.parquet"
    assert generation_key(g2, ".parquet", 1) == key
    assert [generation_of_key(k, ".parquet") for k in (key, g2)] == [1, 2]
    # the window still owns its rewritten objects, in the default layout and in a template layout
    assert WindowLocation("b", "p/", "t", W, ".parquet").owns(g2)
    layout = OutputLayout(template="{{topic}}/p{{partition}}/{{start_offset}}-{{end_offset}}-{{part}}")
    where = WindowLocation("b", "p/", "t", W, ".parquet", layout)
    named = where.object_key(0)
    assert where.owns(named) and where.owns(generation_key(named, ".parquet", 2, "abc"))
    assert not WindowLocation("b", "p/", "t", OffsetWindow(2, 110, 120), ".parquet", layout).owns(
        generation_key(named, ".parquet", 2, "abc"))


def _table():
    headers = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    return pa.table({"key": pa.array([b"a", b"b", b"a"]), "value": pa.array([b"1", b"2", b"3"]),
                     "headers": pa.array([[{"key": "h", "value": b"x"}], [], []], headers),
                     "offset": pa.array([10, 11, 12], pa.int64()), "user": pa.array(["u1", "u2", "u1"])})


def test_a_table_loses_the_erased_rows_or_has_them_nulled():
    dropped = _without(_table(), [0, 2], "drop")
    assert dropped.column("offset").to_pylist() == [11] and dropped.schema == _table().schema
    nulled = _without(_table(), [0, 2], "null").to_pydict()
    assert nulled["offset"] == [10, 11, 12]
    for col in ("key", "value", "headers", "user"):
        assert nulled[col][0] is None and nulled[col][2] is None and nulled[col][1] is not None

