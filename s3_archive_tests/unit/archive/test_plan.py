from collections import Counter

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from s3_archive.archive.plan import (
    DEFAULT_BYTES_PER_RECORD,
    MAX_WINDOWS_PER_TICK,
    Cut,
    PartitionState,
    archive_progress,
    bytes_per_record,
    plan_windows,
    retention_headroom,
    run_chunks,
    window_size,
)
from s3_archive.config.archive import FlushPolicy
from s3_archive.model.windows import OffsetWindow, check_contiguous, next_offsets

PROPS = settings(max_examples=300, deadline=None)


def st_(p: int, nxt: int, end: int, size: int, aged: int | None = None, topic: str = "t") -> PartitionState:
    return PartitionState(topic, p, nxt, end, size, "count", aged)


def spans(cuts: list[Cut]) -> list[tuple[str, int, int, int, str]]:
    return [(c.topic, c.window.partition, c.window.start, c.window.end, c.reason) for c in cuts]


# --- examples ----------------------------------------------------------------------------------------------------


def test_full_windows_only_while_records_are_fresh():
    assert spans(plan_windows([st_(0, 0, 25, 10)])) == [("t", 0, 0, 10, "count"), ("t", 0, 10, 20, "count")]


def test_the_rest_is_cut_once_its_oldest_record_is_old_enough():
    # aged_until 21: the record at 20 (first after the full windows) is older than the interval
    assert spans(plan_windows([st_(0, 0, 25, 10, aged=21)]))[-1] == ("t", 0, 20, 25, "age")
    # aged_until 20: only records before 20 are old; the oldest unarchived one (at 20) is not
    assert len(plan_windows([st_(0, 0, 25, 10, aged=20)])) == 2
    assert spans(plan_windows([st_(0, 7, 9, 1000, aged=8)])) == [("t", 0, 7, 9, "age")]


def test_nothing_pending_or_kafka_behind_the_windows_cuts_nothing():
    assert plan_windows([st_(0, 10, 10, 5, aged=10)]) == []
    assert plan_windows([st_(0, 30, 25, 5, aged=25)]) == []


def test_round_robin_keeps_a_backlog_from_starving_other_partitions():
    cuts = plan_windows([st_(0, 0, 10_000, 10), st_(1, 0, 20, 10), st_(0, 0, 10, 10, topic="u")], limit=6)
    assert Counter((c.topic, c.window.partition) for c in cuts) == {("t", 0): 3, ("t", 1): 2, ("u", 0): 1}


def test_limit_bounds_a_huge_backlog_without_enumerating_it():
    cuts = plan_windows([st_(0, 0, 2**62, 1)])
    assert len(cuts) == MAX_WINDOWS_PER_TICK and cuts[-1].window == OffsetWindow(0, 99, 100)
    assert plan_windows([st_(0, 0, 100, 1)], limit=0) == []


def test_bad_inputs_name_the_value():
    with pytest.raises(ValueError, match="limit must be >= 0, got -1"):
        plan_windows([], limit=-1)
    with pytest.raises(ValueError, match="t partition 2: offsets must be >= 0, got next_offset=-5"):
        st_(2, -5, 10, 1)
    with pytest.raises(ValueError, match="t partition 0: window_size must be >= 1, got 0"):
        st_(0, 0, 10, 0)
    with pytest.raises(ValueError, match="t partition 0 is listed twice"):
        plan_windows([st_(0, 0, 10, 1), st_(0, 5, 10, 1)])


def test_window_size_from_count_and_bytes():
    assert window_size(FlushPolicy(count=500), 10_000.0) == (500, "count")
    assert window_size(FlushPolicy(count=500, bytes=100_000), 1000.0) == (100, "bytes")
    assert window_size(FlushPolicy(count=50, bytes=100_000), 1000.0) == (50, "count")
    # No archived window yet: the default estimate
    assert window_size(FlushPolicy(count=500, bytes=10 * 1024), None) == (10 * 1024 // DEFAULT_BYTES_PER_RECORD,
                                                                          "bytes")
    # A record bigger than the cap still makes a window of one record
    assert window_size(FlushPolicy(count=500, bytes=10), 1e6) == (1, "bytes")
    # Empty records are counted as 1 byte, not 0 (no division by zero, no unbounded window)
    assert window_size(FlushPolicy(count=10**9, bytes=1000), 0.0) == (1000, "bytes")


def test_the_shipped_windows_are_sized_by_bytes():
    flush = FlushPolicy()
    assert (flush.count, flush.bytes, flush.interval_seconds) == (1_000_000, 64 << 20, 600)
    # 500-byte records: a window of 64 MiB of them, not 10,000 records
    assert window_size(flush, 500.0) == ((64 << 20) // 500, "bytes")
    # tiny records: the count caps the window
    assert window_size(flush, 2.0) == (1_000_000, "count")


def _cuts(*sizes: int) -> list[Cut]:
    out, pos = [], 0
    for n in sizes:
        out.append(Cut("t", OffsetWindow(0, pos, pos + n), "bytes"))
        pos += n
    return out


def test_runs_are_packed_by_windows_and_estimated_bytes():
    cuts = _cuts(10, 10, 10, 10, 10)
    assert [len(c) for c in run_chunks(cuts, 2, None, 100.0)] == [2, 2, 1]
    # 100 bytes a record: 1,000 bytes a window; 2,500 bytes a run takes two windows
    assert [len(c) for c in run_chunks(cuts, 100, 2_500, 100.0)] == [2, 2, 1]
    # a window larger than the cap is a run of its own; the order is kept
    big = _cuts(5, 100, 5, 5)
    assert [[w.window.start for w in c] for c in run_chunks(big, 100, 1_000, 100.0)] == [[0], [5], [105, 110]]
    # before any window is archived: DEFAULT_BYTES_PER_RECORD
    assert [len(c) for c in run_chunks(_cuts(1, 1, 1), 100, int(2 * DEFAULT_BYTES_PER_RECORD), None)] == [2, 1]
    assert run_chunks([], 8, None, None) == []
    with pytest.raises(ValueError, match="windows_per_run must be >= 1, got 0"):
        run_chunks(cuts, 0, None, None)


@given(st.lists(st.integers(1, 10_000), max_size=60), st.integers(1, 20), st.none() | st.integers(1, 10**7),
       st.none() | st.floats(0, 5000))
@PROPS
def test_run_chunks_keep_every_cut_once_in_order_within_their_caps(sizes, per_run, bytes_cap, bpr):
    cuts = _cuts(*sizes)
    chunks = run_chunks(cuts, per_run, bytes_cap, bpr)
    assert [c for chunk in chunks for c in chunk] == cuts
    est = max(1.0, DEFAULT_BYTES_PER_RECORD if bpr is None else bpr)
    for i, chunk in enumerate(chunks):
        assert 1 <= len(chunk) <= per_run
        size = sum((c.window.end - c.window.start) * est for c in chunk)
        if bytes_cap is not None and len(chunk) > 1:
            assert size <= bytes_cap
        if i + 1 < len(chunks) and len(chunk) < per_run:  # a run ends early only when the next window would not fit
            nxt = chunks[i + 1][0]
            assert bytes_cap is not None and size + (nxt.window.end - nxt.window.start) * est > bytes_cap


def test_bytes_per_record_is_weighted_by_records_and_skips_empty_windows():
    assert bytes_per_record([]) is None
    assert bytes_per_record([(0, 0)]) is None
    assert bytes_per_record([(1000, 10), (0, 0), (9000, 90)]) == 100.0
    assert bytes_per_record([(100, 1), (100_000, 1000)]) == pytest.approx(100_100 / 1001)


def test_archive_progress_examples():
    ws = [OffsetWindow(0, 0, 10), OffsetWindow(0, 10, 20), OffsetWindow(0, 20, 30)]
    committed = {ws[0], ws[2]}
    # log start 15: half of the uncommitted window [10, 20) is gone
    (p,) = archive_progress(ws, committed, {0: 15}, {0: 42})
    assert p.lost == ((10, 15),) and p.first_unarchived == 10 and p.lag == 10 + 12
    # log start 35: that window and [30, 35) past the last window are gone, reported as one range
    (p,) = archive_progress(ws, committed, {0: 35}, {0: 42})
    assert p.lost == ((10, 20), (30, 35))
    (p,) = archive_progress(ws, set(ws), {0: 30}, {0: 30})
    assert p.lost == () and p.lag == 0 and p.first_unarchived == 30
    # A partition without windows starts at the log start: nothing lost, everything is lag
    (p,) = archive_progress([], set(), {0: 100}, {0: 130})
    assert (p.lost, p.lag, p.first_unarchived) == ((), 30, 100)
    # Windows of a partition Kafka does not report are ignored
    assert archive_progress([OffsetWindow(5, 0, 10)], set(), {0: 0}, {0: 0})[0].partition == 0


# --- properties --------------------------------------------------------------------------------------------------


@st.composite
def existing_and_states(draw):
    """Contiguous existing windows per partition (as the sensor leaves them), and the states derived from them."""
    existing: dict[tuple[str, int], list[OffsetWindow]] = {}
    states = []
    keys = draw(st.sets(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 4)), min_size=1, max_size=6))
    for topic, p in sorted(keys):
        pos = draw(st.integers(0, 1000))
        ws = []
        for length in draw(st.lists(st.integers(1, 50), max_size=4)):
            ws.append(OffsetWindow(p, pos, pos + length))
            pos += length
        existing[(topic, p)] = ws
        nxt = next_offsets(ws).get(p, pos)  # no windows: the log start
        end = nxt + draw(st.integers(0, 800))
        aged = draw(st.none() | st.integers(0, end + 5))
        states.append(PartitionState(topic, p, nxt, end, draw(st.integers(1, 120)), "count", aged))
    return existing, states


def by_partition(cuts: list[Cut]) -> dict[tuple[str, int], list[OffsetWindow]]:
    out: dict[tuple[str, int], list[OffsetWindow]] = {}
    for c in cuts:
        out.setdefault((c.topic, c.window.partition), []).append(c.window)
    return out


@PROPS
@given(existing_and_states(), st.integers(0, 150))
def test_cut_windows_are_contiguous_within_caps_and_never_overlap_existing(data, limit):
    existing, states = data
    cuts = plan_windows(states, limit)
    assert len(cuts) <= limit
    got = by_partition(cuts)
    for s in states:
        ws = got.get((s.topic, s.partition), [])
        # Contiguous from the end of the last existing window, and together with the existing windows still a
        # tiling: no overlap, no hole.
        assert check_contiguous(existing[(s.topic, s.partition)] + ws) == []
        if ws:
            assert ws[0].start == s.next_offset and all(a.end == b.start for a, b in zip(ws, ws[1:]))
        assert all(w.end <= s.end_offset and w.size <= s.window_size for w in ws)
        reasons = [c.reason for c in cuts if (c.topic, c.window.partition) == (s.topic, s.partition)]
        # Full windows are exactly window_size; only the last may be shorter, and only for age.
        assert all(w.size == s.window_size for w, r in zip(ws, reasons) if r != "age")
        assert "age" not in reasons[:-1]
        if reasons and reasons[-1] == "age":
            assert ws[-1].end == s.end_offset and s.aged_until is not None and s.aged_until > ws[-1].start


@PROPS
@given(existing_and_states(), st.integers(0, 150))
def test_below_the_limit_everything_due_is_cut_and_at_the_limit_partitions_share_fairly(data, limit):
    _, states = data
    cuts = plan_windows(states, limit)
    got = by_partition(cuts)
    counts = {(s.topic, s.partition): len(got.get((s.topic, s.partition), [])) for s in states}
    everything = by_partition(plan_windows(states, 10**9))
    exhausted = {k for k in counts if counts[k] == len(everything.get(k, []))}
    if len(cuts) < limit:
        assert exhausted == set(counts)
        for s in states:
            last = got[(s.topic, s.partition)][-1].end if got.get((s.topic, s.partition)) else s.next_offset
            rest = s.end_offset - last
            assert rest < s.window_size
            assert rest <= 0 or s.aged_until is None or s.aged_until <= last
    most = max(counts.values())
    assert all(k in exhausted or c >= most - 1 for k, c in counts.items())


@PROPS
@given(existing_and_states(), st.integers(1, 40))
def test_ticks_with_a_limit_cut_what_one_unlimited_tick_cuts_and_a_repeat_cuts_nothing(data, limit):
    _, states = data
    everything = plan_windows(states, 10**9)
    done: list[Cut] = []
    current = states
    for _ in range(10**4):
        cuts = plan_windows(current, limit)
        if not cuts:
            break
        done += cuts
        # What the next tick sees: the new windows exist, so each partition continues at their end.
        ends = {(c.topic, c.window.partition): c.window.end for c in cuts}
        current = [PartitionState(s.topic, s.partition, ends.get((s.topic, s.partition), s.next_offset),
                                  s.end_offset, s.window_size, s.size_reason, s.aged_until) for s in current]
    assert sorted(done) == sorted(everything)
    assert plan_windows(current, limit) == []


@PROPS
@given(existing_and_states(), st.integers(0, 150), st.randoms(use_true_random=False))
def test_planning_is_deterministic_whatever_the_order_of_partitions(data, limit, rnd):
    _, states = data
    shuffled = list(states)
    rnd.shuffle(shuffled)
    assert plan_windows(shuffled, limit) == plan_windows(states, limit)


@PROPS
@given(st.integers(1, 10**6), st.none() | st.integers(1, 10**8), st.none() | st.floats(0, 10**6))
@example(15490, 17039, 1.1)  # 17039 / 1.1 rounds down to 15489.99…, yet 15490 x 1.1 fits the cap
def test_window_size_respects_count_and_byte_caps_and_is_the_largest_that_does(count, cap, bpr):
    size, reason = window_size(FlushPolicy(count=count, bytes=cap), bpr)
    assert 1 <= size <= count
    if cap is None:
        assert (size, reason) == (count, "count")
        return
    est = max(1.0, DEFAULT_BYTES_PER_RECORD if bpr is None else bpr)
    assert size * est <= cap or size == 1
    assert size == count or (size + 1) * est > cap
    assert reason == ("count" if size == count else "bytes")


@st.composite
def progress_case(draw):
    pos = draw(st.integers(0, 30))
    ws = []
    for length in draw(st.lists(st.integers(1, 10), max_size=5)):
        ws.append(OffsetWindow(0, pos, pos + length))
        pos += length
    committed = {w for w in ws if draw(st.booleans())}
    log_start = draw(st.integers(0, pos + 20))
    end = max(log_start, draw(st.integers(0, pos + 30)))
    return ws, committed, log_start, end


@PROPS
@given(progress_case())
def test_lost_offsets_are_exactly_those_deleted_and_in_no_committed_window(case):
    ws, committed, log_start, end = case
    (p,) = archive_progress(ws, committed, {0: log_start}, {0: end})
    lost = {o for a, b in p.lost for o in range(a, b)}
    tail = ws[-1].end if ws else log_start
    first = ws[0].start if ws else log_start

    def unarchived(o: int) -> bool:
        return o >= tail or any(w.start <= o < w.end for w in ws if w not in committed)

    assert lost == {o for o in range(first, log_start) if unarchived(o)}
    assert p.lag == sum(1 for o in range(first, end) if unarchived(o))
    assert p.first_unarchived == min([o for o in range(first, tail) if unarchived(o)] + [tail])
    assert all(a < b for a, b in p.lost) and all(x[1] < y[0] for x, y in zip(p.lost, p.lost[1:]))


# --- cron mode and retention headroom ----------------------------------------------------------------------------


def test_cut_rest_also_cuts_every_young_rest_up_to_the_end():
    states = [st_(0, 0, 25, 10), st_(1, 5, 8, 10), st_(2, 4, 4, 10), st_(3, 0, 13, 10, aged=11)]
    assert spans(plan_windows(states, cut_rest=True)) == [
        ("t", 0, 0, 10, "count"), ("t", 1, 5, 8, "cron"), ("t", 3, 0, 10, "count"),
        ("t", 0, 10, 20, "count"), ("t", 3, 10, 13, "age"), ("t", 0, 20, 25, "cron")]
    # Without cut_rest the same states give only the full windows and the aged rest.
    assert [c.reason for c in plan_windows(states)] == ["count", "count", "count", "age"]
    # Kafka behind the windows, or nothing pending: still nothing.
    assert plan_windows([st_(0, 30, 25, 5), st_(1, 7, 7, 5)], cut_rest=True) == []


@given(existing_and_states(), st.integers(0, 150))
@PROPS
def test_cut_rest_leaves_nothing_below_the_end_and_a_repeat_cuts_nothing(data, limit):
    _, states = data
    cuts = plan_windows(states, limit, cut_rest=True)
    ends = {(s.topic, s.partition): s.next_offset for s in states}
    for c in cuts:
        assert c.window.start == ends[(c.topic, c.window.partition)]
        ends[(c.topic, c.window.partition)] = c.window.end
    if len(cuts) < limit:  # below the limit, every partition is cut up to its end
        assert set(plan_windows(states, limit)) <= set(cuts)  # the sensor's windows, and only rests added
        assert all(c.reason == "cron" for c in set(cuts) - set(plan_windows(states, limit)))
        assert all(ends[(s.topic, s.partition)] == max(s.end_offset, s.next_offset) for s in states)
        after = [PartitionState(s.topic, s.partition, ends[(s.topic, s.partition)],
                                max(s.end_offset, s.next_offset), s.window_size) for s in states]
        assert plan_windows(after, limit, cut_rest=True) == []


def test_retention_headroom_warns_past_the_fraction_and_never_with_infinite_retention():
    now = 10_000_000
    rooms = retention_headroom({1: now - 3_000_000, 0: now - 2_900_000, 2: now + 5}, 3_600_000, 0.8, now)
    assert [(h.partition, h.age_ms, h.warn) for h in rooms] == [(0, 2_900_000, True), (1, 3_000_000, True),
                                                                 (2, 0, False)]
    assert not retention_headroom({0: now - 2_880_000}, 3_600_000, 0.8, now)[0].warn  # exactly 0.8: not past it
    assert not any(h.warn for h in retention_headroom({0: 0}, -1, 0.8, now))
    with pytest.raises(ValueError, match="fraction must be in"):
        retention_headroom({}, 1000, 0, now)
