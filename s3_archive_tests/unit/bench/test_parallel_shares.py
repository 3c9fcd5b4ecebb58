"""How the parallel contenders share the workload (bench/parallel.py): every record and byte exactly once."""

from __future__ import annotations

import pytest

from bench import workload as wl
from bench.parallel import put_shares, shares

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("n", [1, 2, 3, 4, 8])
def test_shares_cover_every_offset_once(n):
    ends = {0: 101, 1: 100, 2: 99, 3: 100}
    got = shares(ends, n)
    assert len(got) == n and all(got)
    covered = {p: [] for p in ends}
    for share in got:
        assert len({p for p, _, _ in share}) == len(share)  # one consumer, one range per partition
        for p, lo, hi in share:
            covered[p] += range(lo, hi)
    assert {p: sorted(v) for p, v in covered.items()} == {p: list(range(e)) for p, e in ends.items()}


def test_a_producers_share_is_the_records_at_those_offsets():
    every = list(wl.records(40))
    mine = list(wl.records(40, pieces=[(1, 2, 5)]))
    assert mine == [every[9], every[13], every[17]]  # offsets 2, 3, 4 of partition 1


def test_put_shares_deal_the_same_objects():
    got = put_shares(10_000, 3_000, 2, "p/", "b")
    assert got == [{"bucket": "b", "prefix": "p/", "indices": [0, 2], "sizes": [3000, 3000]},
                   {"bucket": "b", "prefix": "p/", "indices": [1, 3], "sizes": [3000, 1000]}]
