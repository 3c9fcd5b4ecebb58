"""The restore drill, pure: when it is due, the rotating sample within its budget, the comparison naming the first
differing record, the scratch topic's name, the report's metadata."""

from datetime import UTC, datetime, timedelta

import pytest

from s3_archive.config.names import TOPIC
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.drill_plan import (
    Archived,
    DrillReport,
    DrillState,
    Restored,
    first_mismatch,
    sample,
    scratch_topic_name,
    stale_scratch_topics,
)

NOW = datetime(2026, 3, 1, 6, 0, tzinfo=UTC)
WINDOWS = [OffsetWindow(p, s, s + 10) for p in (0, 1) for s in (0, 10, 20)]  # six windows, two partitions


def test_a_drill_is_due_at_first_after_a_failure_and_every_days_after_a_pass():
    assert DrillState().due(NOW, 7)
    passed = DrillState(last_drill=NOW.isoformat(), last_passed=True)
    assert not passed.due(NOW + timedelta(days=6), 7)
    assert passed.due(NOW + timedelta(days=7) - timedelta(minutes=30), 7)  # the schedule's jitter
    assert passed.next_due(7) == NOW + timedelta(days=7, hours=-1)
    assert DrillState(last_drill=NOW.isoformat(), last_passed=False).due(NOW + timedelta(minutes=1), 7)
    assert DrillState(last_drill="yesterday", last_passed=True).due(NOW, 7)


def test_the_state_round_trips_and_an_unreadable_one_starts_again():
    s = DrillState("p00000-0000000000000000010-0000000000000000020", NOW.isoformat(), True)
    assert DrillState.parse(s.dumps()) == s
    assert DrillState.parse(b"{not json") == DrillState() == DrillState.parse(None) == DrillState.parse(b"[]")


def test_the_sample_rotates_within_its_budget_and_covers_every_window_in_turn():
    sizes = {w: 100 for w in WINDOWS}
    asked: list[OffsetWindow] = []

    def size(w):
        asked.append(w)
        return sizes[w]

    first = sample(WINDOWS, None, size, 250)
    assert first.windows == WINDOWS[:3] and first.cursor == WINDOWS[2].key
    assert asked == WINDOWS[:3]  # manifests read only as the sample grows
    second = sample(WINDOWS, first.cursor, size, 250)
    assert second.windows == WINDOWS[3:] and second.cursor == WINDOWS[5].key
    third = sample(reversed(WINDOWS), second.cursor, size, 150)  # wraps round to the first
    assert third.windows == WINDOWS[:2]
    covered, cursor = set(), None
    for _ in range(6):  # one window a drill: six drills restore each window once
        s = sample(WINDOWS, cursor, size, 1)
        assert len(s.windows) == 1
        covered |= set(s.windows)
        cursor = s.cursor
    assert covered == set(WINDOWS)


def test_the_sample_takes_one_window_over_the_budget_and_is_in_restore_order():
    s = sample(WINDOWS, WINDOWS[4].key, lambda w: 10**9, 1)
    assert s.windows == [WINDOWS[5]]
    wrapped = sample(WINDOWS, WINDOWS[4].key, lambda w: 1, 3)
    assert wrapped.windows == [WINDOWS[0], WINDOWS[1], WINDOWS[5]] and wrapped.cursor == WINDOWS[1].key
    assert sample([], None, lambda w: 1, 10) == ([], None)


def test_scratch_topic_names_are_valid_and_a_day_old_one_is_stale():
    name = scratch_topic_name("orders.v1", NOW)
    assert name == "s3-archive-drill-orders.v1-20260301T060000"
    long = scratch_topic_name("t" * 249, NOW)
    assert TOPIC.fullmatch(long) and len(long) == 249
    old, young = scratch_topic_name("orders.v1", NOW - timedelta(days=2)), scratch_topic_name("orders.v1", NOW)
    other = scratch_topic_name("orders.v1-eu", NOW - timedelta(days=2))  # another topic's, though it starts alike
    names = [old, young, other, "orders.v1", "s3-archive-drill-orders.v1-yesterday"]
    assert stale_scratch_topics(names, "orders.v1", NOW + timedelta(hours=1)) == [old]
    assert stale_scratch_topics([scratch_topic_name("t" * 249, NOW - timedelta(days=3))], "t" * 300, NOW) == [
        scratch_topic_name("t" * 249, NOW - timedelta(days=3))]


W = OffsetWindow(0, 0, 10)
W2 = OffsetWindow(0, 10, 20)


def _arch(n, window=W, **kw):
    base = dict(window=window, offset=n, key=f"k{n}".encode(), value=f"v{n}".encode(), headers=[("h", b"x")],
                timestamp_ms=1000 + n)
    return Archived(**{**base, **kw})


def _back(a: Archived, scratch_offset: int, **kw):
    base = dict(offset=scratch_offset, key=a.key, value=a.value, headers=list(a.headers), timestamp_ms=a.timestamp_ms)
    return Restored(**{**base, **kw})


def test_records_that_came_back_byte_for_byte_and_in_order_pass():
    archived = [_arch(i) for i in range(3)] + [_arch(i, W2) for i in (10, 12)]
    assert first_mismatch(archived, iter(_back(a, 2 * i) for i, a in enumerate(archived))) == (None, 5)
    # a timestamp <= 0 cannot be kept (the producer stamps it): not compared
    neg = [_arch(0, timestamp_ms=-1)]
    assert first_mismatch(neg, iter([_back(neg[0], 0, timestamp_ms=1234)])) == (None, 1)


@pytest.mark.parametrize(("change", "said"), [
    ({"value": b"v1!"}, "value differs: archived 2 bytes 7631, restored 3 bytes 763121"),
    ({"key": None}, "key differs: archived 2 bytes 6b31, restored null"),
    ({"headers": [("h", b"y")]}, "headers differ: archived [h=1 bytes 78], restored [h=1 bytes 79]"),
    ({"headers": []}, "headers differ: archived [h=1 bytes 78], restored []"),
    ({"timestamp_ms": 5}, "timestamp differs: archived 1001, restored 5"),
])
def test_the_first_differing_record_is_named_with_what_differs(change, said):
    archived = [_arch(i) for i in range(3)]
    back = [_back(archived[0], 0), _back(archived[1], 1, **change), _back(archived[2], 2, value=b"also wrong")]
    mismatch, compared = first_mismatch(archived, iter(back))
    assert compared == 1
    assert mismatch.text() == f"window {W.key}: record at offset 1: {said} (scratch offset 1)"


def test_order_missing_and_extra_records_are_named():
    archived = [_arch(i) for i in range(3)]
    swapped = [_back(archived[0], 0), _back(archived[2], 1), _back(archived[1], 2)]
    m, _ = first_mismatch(archived, iter(swapped))
    assert m.offset == 1 and "key differs: archived 2 bytes 6b31, restored 2 bytes 6b32" in m.text()
    m, n = first_mismatch(archived, iter(_back(a, i) for i, a in enumerate(archived[:2])))
    assert (m.offset, n) == (2, 2) and "missing from the scratch topic" in m.text()
    m, n = first_mismatch(archived, iter([*(_back(a, i) for i, a in enumerate(archived)), _back(archived[0], 7)]))
    assert n == 3 and m.text() == (f"window {W.key}: after its last record: the scratch topic holds a record more, "
                                   "at scratch offset 7 (2 bytes 7630)")


def test_the_report_plots_seconds_per_gb_as_a_float_and_says_when_the_next_drill_is():
    r = DrillReport("t", "b", 6, drilled=[W.key], scratch_topic="s", object_bytes=500_000_000, records=10,
                    restore_seconds=2.0, state_key="_drill/t.json")
    assert r.ran and r.seconds_per_gb == 4.0
    meta = r.metadata()
    assert isinstance(meta["restore_seconds_per_gb"], float) and meta["restore_seconds_per_gb"] == 4.0
    assert meta["windows_drilled"] == 1 and meta["state"] == "s3://b/_drill/t.json"
    assert "1 of 6 window(s) (500000000 bytes of objects, 10 records) restored into 's'" in r.ok
    assert DrillReport("t", "b", 0).ok == "topic 't' has no committed window in s3://b/ to drill yet"
    idle = DrillReport("t", "b", 6, next_due=NOW, last_drill="2026-02-22T06:00:00+00:00", state_key="k")
    assert not idle.ran and idle.metadata()["drilled"] is False
    assert idle.ok == "the last drill (2026-02-22T06:00:00+00:00) passed; the next is due at 2026-03-01T06:00+00:00"
