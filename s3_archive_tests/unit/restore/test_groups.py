"""Producer groups of a restore run (restore/groups.py): who owns which source partitions and ledger entries, and
the transactional ids every run initialises."""

import pytest

from s3_archive.model.errors import InvalidRestore
from s3_archive.restore.groups import MAX_PRODUCERS, group_count, group_of, plan_groups, transactional_ids
from s3_archive.restore.ledger import RangeSet, encode_ledger
from s3_archive.restore.request import RestoreRequest

pytestmark = pytest.mark.unit


def test_a_group_owns_whole_ledger_entries_and_every_partition_once():
    n, producers = 4, 3
    plan = plan_groups(range(10), n, producers)
    assert sorted(sp for sps in plan.values() for sp in sps) == list(range(10))
    owner = {}
    for g, sps in plan.items():
        for sp in sps:
            # the ledger entry (bucket sp % n) of a source partition is written by its group only
            assert owner.setdefault(sp % n, g) == g
    assert plan == {0: [0, 3, 4, 7, 8], 1: [1, 5, 9], 2: [2, 6]}
    # the entries a group commits name only its own source partitions
    ledger = {sp: RangeSet([[0, 10]]) for sp in range(10)}
    for g, sps in plan.items():
        for b in {sp % n for sp in sps}:
            (entry,) = encode_ledger("t", ledger, n, [b]).values()
            assert all(int(sp) in sps for sp in __import__("json").loads(entry[1])["ranges"])


def test_no_more_groups_than_target_partitions():
    assert group_count(8, 2) == 2
    assert plan_groups([0, 1, 2, 3], 2, 8) == {0: [0, 2], 1: [1, 3]}
    assert plan_groups([0, 2], 2, 8) == {0: [0, 2]}  # one bucket: one group, whatever `producers` says
    assert plan_groups([5], 4, 1) == {0: [5]}
    assert group_of(5, 4, 2) == 1


def test_every_run_initialises_the_same_ids_whatever_its_producers():
    ids = transactional_ids("s3-archive-restore.a.b", 4)
    assert ids == ["s3-archive-restore.a.b", "s3-archive-restore.a.b.p1", "s3-archive-restore.a.b.p2",
                   "s3-archive-restore.a.b.p3"]
    assert transactional_ids("x", 1) == ["x"]
    assert len(transactional_ids("x", 100)) == MAX_PRODUCERS


@pytest.mark.parametrize("bad", [0, -1, MAX_PRODUCERS + 1, True, 2.0])
def test_producers_out_of_range_is_refused_naming_the_value(bad):
    with pytest.raises(InvalidRestore, match=rf"producers must be an integer from 1 to {MAX_PRODUCERS}, got "
                                             rf"{bad!r}"):
        RestoreRequest("a", "b", producers=bad)
