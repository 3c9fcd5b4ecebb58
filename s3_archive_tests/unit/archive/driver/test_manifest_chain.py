"""A run's windows committed in chain order: a partition's one after the other, each linked to the one before."""

from dataclasses import dataclass

from s3_archive.archive.driver.manifest_chain import commit_in_chain_order
from s3_archive.archive.integrity import link_to
from s3_archive.keys.objects import WindowLocation
from s3_archive.model.manifest import Manifest
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.manifests import hand_manifest


@dataclass
class _Result:
    where: WindowLocation
    manifest: Manifest
    outcome: str


def test_each_window_gets_the_link_to_the_one_this_run_committed_before_it():
    a0, a1, a2, a3 = (OffsetWindow(0, i * 10, i * 10 + 10) for i in range(4))
    b0 = OffsetWindow(1, 0, 10)
    seen: list[tuple[OffsetWindow, object]] = []

    def commit(w: OffsetWindow, previous):
        seen.append((w, previous))
        if w == a1:
            raise RuntimeError("a1 failed")
        m = hand_manifest("t", w, previous_manifest=previous)
        return _Result(WindowLocation("b", "p/", "t", w, ".parquet"), m, "committed_by_concurrent_attempt"
                       if w == a2 else "committed")

    out = commit_in_chain_order(commit, [a3, b0, a2, a1, a0])

    got = dict(seen)
    assert [w for w, _ in seen if w.partition == 0] == [a0, a1, a2, a3]  # in offset order, one after the other
    assert got[a0] is None and got[b0] is None
    first = out[a0]
    assert got[a1] == link_to(first.where.manifest_key, first.manifest.dumps())
    assert isinstance(out[a1], RuntimeError) and got[a2] is None  # after a failure: looked up by put_manifest
    assert got[a3] is None  # a2 was adopted, not ours: its bytes are looked up
