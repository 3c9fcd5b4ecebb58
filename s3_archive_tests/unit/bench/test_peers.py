"""The peers' steady rate (bench/peers/common.py): records per second between the first and the last commit."""

from __future__ import annotations

from bench.peers.common import steady_rate


def test_steady_rate_is_taken_between_the_first_and_last_commit():
    # start-up (before the first commit at 10 s) and the total are left out: (300 - 100) / (30 - 10)
    assert steady_rate([(10.0, 100), (20.0, 200), (30.0, 300)]) == 10.0


def test_one_commit_gives_no_steady_rate():
    assert steady_rate([(12.0, 500)]) is None
    assert steady_rate([(5.0, 0), (12.0, 500)]) is None  # a commit that added nothing is not a commit of data
    assert steady_rate([]) is None
