"""Tamper evidence, pure: the chain links, the objects listed against a manifest, the rotation."""

import json

import pytest

from s3_archive.archive.integrity import (
    Committed,
    Differs,
    Listed,
    head_findings,
    link_findings,
    link_to,
    object_findings,
    pick_previous,
    rotation,
    sha256_hex,
    window_of_manifest_key,
)
from s3_archive.keys.objects import manifest_key
from s3_archive.model.errors import InvalidManifest
from s3_archive.model.manifest import ManifestLink, parse_manifest
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.manifests import hand_manifest

W0, W1, W2 = OffsetWindow(3, 0, 10), OffsetWindow(3, 10, 20), OffsetWindow(3, 20, 30)
K0, K1, K2 = (manifest_key("p/", "t", w) for w in (W0, W1, W2))


def test_the_previous_manifest_is_the_window_ending_last_before_ours():
    other = manifest_key("p/", "t", OffsetWindow(4, 0, 15))
    assert pick_previous([K0, K1, other, "p/_manifests/t/kafka_partition=3/notes.txt"], W2) == K1
    assert pick_previous([K0, K2], W1) == K0  # W1 not committed yet when W2 committed: its link skips it
    assert pick_previous([K1, K2], W0) is None
    assert window_of_manifest_key(K1) == W1 and window_of_manifest_key("p/x.json") is None


def _chained(window: OffsetWindow, previous: bytes | None, prev_key: str | None = None, **fields):
    link = None if previous is None else link_to(prev_key, previous).model_dump()
    m = hand_manifest("t", window, [{"key": f"p/t/{window.key}.parquet", "size": 3, "etag": "e",
                                     "sha256": sha256_hex(b"abc")}], previous_manifest=link, **fields)
    return m, m.dumps()


def test_a_link_checks_the_previous_manifest_bytes_as_committed():
    m0, b0 = _chained(W0, None)
    m1, b1 = _chained(W1, b0, K0)
    assert m1.previous_manifest == ManifestLink(key=K0, generation=1, sha256=sha256_hex(b0))
    assert link_findings(m1, Committed(K0, sha256_hex(b0), m0), older_exist=False) == []
    edited = b0.replace(b'"record_count": 10', b'"record_count": 9')
    [f] = link_findings(m1, Committed(K0, sha256_hex(edited), parse_manifest(edited)), older_exist=False)
    assert (f.window, f.differs, f.key, f.failure) == (W0.key, Differs.MANIFEST_EDITED, K0, True)
    assert m1.window_key in f.detail and sha256_hex(b0) in f.detail


def test_a_manifest_removed_from_the_middle_of_a_chain_names_its_window():
    _, b0 = _chained(W0, None)
    _, b1 = _chained(W1, b0, K0)
    m2, _ = _chained(W2, b1, K1)
    [f] = link_findings(m2, None, older_exist=True)
    assert (f.window, f.differs, f.key) == (W1.key, Differs.MANIFEST_MISSING, K1)
    assert link_findings(m2, None, older_exist=False) == []  # the chain's start, expired with all before it


def test_a_later_generation_that_supersedes_the_linked_one_keeps_the_chain():
    m0, b0 = _chained(W0, None)
    _, b1 = _chained(W1, b0, K0)
    m1 = parse_manifest(b1)
    rewritten, rb = _chained(W0, None, generation=2, supersedes=[link_to(K0, b0).model_dump()])
    assert link_findings(m1, Committed(K0, sha256_hex(rb), rewritten), older_exist=False) == []
    other, ob = _chained(W0, None, generation=2, supersedes=[{"key": K0, "generation": 1, "sha256": "0" * 64}])
    assert [f.differs for f in link_findings(m1, Committed(K0, sha256_hex(ob), other), older_exist=False)] == [
        Differs.MANIFEST_EDITED]


def test_the_newest_manifest_is_checked_against_the_last_run():
    _, b = _chained(W2, None)
    assert head_findings(K2, sha256_hex(b), Committed(K2, sha256_hex(b), None)) == []
    [gone] = head_findings(K2, sha256_hex(b), None)
    [edited] = head_findings(K2, sha256_hex(b), Committed(K2, "1" * 64, None))
    assert (gone.window, gone.differs, edited.differs) == (W2.key, Differs.MANIFEST_MISSING, Differs.MANIFEST_EDITED)


def _m(objects):
    return hand_manifest("t", W1, objects)


def test_objects_against_their_manifest_each_difference_named():
    a, b, c = (f"p/t/{W1.key}+{i}.parquet" for i in range(3))
    m = _m([{"key": a, "size": 3, "etag": "ea", "sha256": sha256_hex(b"abc")},
            {"key": b, "size": 3, "etag": "eb", "sha256": sha256_hex(b"def")},
            {"key": c, "size": 3, "etag": "ec", "sha256": sha256_hex(b"ghi")}])
    listed = {a: Listed(a, 3, "x"), b: Listed(b, 4, "eb"), "p/t/stray": Listed("p/t/stray", 7, "s")}
    found = object_findings(m, listed, {a: sha256_hex(b"abd")})
    assert [(f.differs, f.key) for f in found] == [(Differs.CHANGED, a), (Differs.RESIZED, b), (Differs.MISSING, c),
                                                   (Differs.ADDED, "p/t/stray")]
    assert all(f.window == W1.key and f.failure for f in found)
    assert object_findings(m, {k: Listed(k, 3, "z") for k in (a, b, c)},
                           {a: sha256_hex(b"abc"), b: sha256_hex(b"def"), c: sha256_hex(b"ghi")}) == []


def test_an_old_manifest_without_hashes_is_unhashed_not_failed():
    a = f"p/t/{W1.key}.parquet"
    old = hand_manifest("t", W1, [{"key": a, "size": 3, "etag": "ea"}], manifest_version=1)
    [f] = object_findings(old, {a: Listed(a, 3, "ea")}, {})
    assert (f.differs, f.failure, f.window) == (Differs.UNHASHED, False, W1.key)
    assert "manifest_version 1" in f.detail and "size and ETag" in f.detail
    changed = object_findings(old, {a: Listed(a, 3, "other")}, {})
    assert [x.differs for x in changed] == [Differs.CHANGED, Differs.UNHASHED]
    quoted = hand_manifest("t", W1, [{"key": a, "size": 3, "etag": '"ea"'}])  # as format iceberg keeps it
    assert [x.differs for x in object_findings(quoted, {a: Listed(a, 3, "ea")}, {})] == [Differs.UNHASHED]


def test_the_rotation_goes_on_after_the_cursor_and_wraps():
    keys = ["c", "a", "d", "b"]
    assert rotation(keys, None) == ["a", "b", "c", "d"]
    assert rotation(keys, "b") == ["c", "d", "a", "b"]
    assert rotation(keys, "bb") == ["c", "d", "a", "b"]  # the cursor's window is gone: the next one on


def test_version_3_fields_are_refused_in_older_versions_and_generation_required():
    m = json.loads(hand_manifest("t", W0).dumps())
    assert m["manifest_version"] == 3 and m["generation"] == 1
    with pytest.raises(InvalidManifest, match="`generation` is a field of manifest_version 3; this manifest is version 1"):
        parse_manifest({**m, "manifest_version": 1})
    with pytest.raises(InvalidManifest, match="`generation` is required in manifest_version 3"):
        parse_manifest({k: v for k, v in m.items() if k != "generation"})
    hashed = hand_manifest("t", W0, [{"key": "k", "size": 1, "etag": "e", "sha256": "a" * 64}])
    assert parse_manifest(hashed.dumps()) == hashed and hashed.hashed
    with pytest.raises(InvalidManifest, match="sha256"):
        parse_manifest({**json.loads(hashed.dumps()), "objects": [{"key": "k", "size": 1, "etag": "e",
                                                                   "sha256": "not-hex"}]})
