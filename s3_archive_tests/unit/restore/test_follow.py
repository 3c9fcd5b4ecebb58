"""Which windows a following restore target restores next: the range from the first window not restored, in
creation order, up to the first window the archive has not committed."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from s3_archive.restore.follow import plan_follow

KEYS = ["p0-a", "p1-a", "p0-b", "p1-b", "p0-c"]


def test_caught_up_restores_nothing():
    plan = plan_follow(KEYS, set(KEYS), set(KEYS))
    assert (plan.keys, plan.behind, plan.blocked_by) == ([], 0, None)


def test_the_committed_windows_after_the_last_restored_one_are_one_run():
    plan = plan_follow(KEYS, set(KEYS[:4]), set(KEYS[:1]))
    assert (plan.keys, plan.behind, plan.blocked_by) == (KEYS[1:4], 3, None)


def test_a_window_not_committed_holds_back_later_committed_ones():
    plan = plan_follow(KEYS, {KEYS[0], KEYS[1], KEYS[3], KEYS[4]}, {KEYS[0]})
    assert (plan.keys, plan.behind, plan.blocked_by) == ([KEYS[1]], 3, KEYS[2])


def test_a_restored_window_in_between_is_restored_again_rather_than_split_the_range():
    plan = plan_follow(KEYS, set(KEYS), {KEYS[0], KEYS[2]})
    assert plan.keys == KEYS[1:] and plan.behind == 3


def test_a_backlog_is_cut_into_runs_of_at_most_max_windows():
    assert plan_follow(KEYS, set(KEYS), set(), max_windows=2).keys == KEYS[:2]


@given(st.lists(st.tuples(st.booleans(), st.booleans()), max_size=30))
def test_a_run_never_holds_a_window_the_archive_has_not_committed_and_starts_at_the_first_not_restored(flags):
    keys = [f"w{i}" for i in range(len(flags))]
    archived = {k for k, (a, _) in zip(keys, flags) if a}
    restored = {k for k, (a, r) in zip(keys, flags) if a and r}
    plan = plan_follow(keys, archived, restored)
    assert set(plan.keys) <= archived
    first = next((k for k in keys if k not in restored), None)
    assert plan.keys[:1] == ([first] if first in archived else [])
    if plan.keys:  # consecutive in creation order
        i = keys.index(plan.keys[0])
        assert plan.keys == keys[i:i + len(plan.keys)]
