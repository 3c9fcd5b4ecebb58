import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from s3_archive.model.windows import (
    MAX_OFFSET,
    MAX_PARTITION,
    OFFSET_DIGITS,
    PARTITION_DIGITS,
    InvalidWindow,
    OffsetWindow,
    check_contiguous,
)

FAST = settings(max_examples=200, deadline=None)
LISTS = settings(max_examples=100, deadline=None)  # list-valued examples cost more each

KEY_LEN = 1 + PARTITION_DIGITS + 1 + OFFSET_DIGITS + 1 + OFFSET_DIGITS
EXPECTED_FORMAT = f"p<{PARTITION_DIGITS} digits>-<{OFFSET_DIGITS} digits>-<{OFFSET_DIGITS} digits>"
EXAMPLE_KEY = "p00003-0000000000000001000-0000000000000002000"

partitions = st.integers(min_value=0, max_value=MAX_PARTITION)


@st.composite
def windows(draw, partition=partitions, max_offset=MAX_OFFSET):
    p = draw(partition)
    start = draw(st.integers(min_value=0, max_value=max_offset - 1))
    end = draw(st.integers(min_value=start + 1, max_value=max_offset))
    return OffsetWindow(p, start, end)


def as_tuple(w: OffsetWindow) -> tuple[int, int, int]:
    return (w.partition, w.start, w.end)


# --- the key codec -----------------------------------------------------------------------------------------------


def test_constants_match_kafka_limits():
    assert MAX_OFFSET == 9223372036854775807
    assert len(str(MAX_OFFSET)) == OFFSET_DIGITS
    assert MAX_PARTITION == 99999
    assert len(str(MAX_PARTITION)) == PARTITION_DIGITS


def test_key_of_known_window():
    w = OffsetWindow(3, 1000, 2000)
    assert w.key == EXAMPLE_KEY
    assert OffsetWindow.parse(EXAMPLE_KEY) == w
    assert w.size == 1000
    assert str(w) == "p3 [1000, 2000)"


def test_key_of_extreme_windows():
    assert OffsetWindow(0, 0, 1).key == "p00000-0000000000000000000-0000000000000000001"
    top = OffsetWindow(MAX_PARTITION, MAX_OFFSET - 1, MAX_OFFSET)
    assert top.key == "p99999-9223372036854775806-9223372036854775807"
    assert OffsetWindow.parse(top.key) == top


@FAST
@given(windows())
@example(OffsetWindow(0, 0, 1))
@example(OffsetWindow(MAX_PARTITION, 0, MAX_OFFSET))
@example(OffsetWindow(MAX_PARTITION, MAX_OFFSET - 1, MAX_OFFSET))
def test_key_round_trip(w):
    key = w.key
    assert len(key) == KEY_LEN
    parsed = OffsetWindow.parse(key)
    assert parsed == w
    assert as_tuple(parsed) == as_tuple(w)
    assert parsed.key == key


@FAST
@given(windows(), windows())
def test_key_order_is_window_order_for_pairs(a, b):
    assert (a.key < b.key) == (as_tuple(a) < as_tuple(b))
    assert (a.key == b.key) == (as_tuple(a) == as_tuple(b))
    # the dataclass ordering agrees too
    assert (a < b) == (as_tuple(a) < as_tuple(b))


@LISTS
@given(st.lists(windows(), max_size=30))
def test_sorting_keys_sorts_windows(ws):
    assert sorted(w.key for w in ws) == [w.key for w in sorted(ws, key=as_tuple)]


@LISTS
@given(st.lists(windows(partition=st.integers(0, 12), max_offset=10**6), max_size=30))
def test_sorting_keys_sorts_windows_with_small_numbers(ws):
    # small numbers of different lengths are where unpadded keys would sort wrongly (p10 < p9, 100 < 99)
    assert sorted(w.key for w in ws) == [w.key for w in sorted(ws, key=as_tuple)]


def test_key_order_with_numbers_of_different_widths():
    ws = [OffsetWindow(10, 0, 1), OffsetWindow(9, 100, 1000), OffsetWindow(9, 99, 100), OffsetWindow(9, 99, 1000)]
    assert [OffsetWindow.parse(k) for k in sorted(w.key for w in ws)] == [
        OffsetWindow(9, 99, 100), OffsetWindow(9, 99, 1000), OffsetWindow(9, 100, 1000), OffsetWindow(10, 0, 1)]


# --- invalid windows ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("start,end", [(5, 5), (6, 5), (0, 0), (MAX_OFFSET, MAX_OFFSET), (-1, 5), (-10, -5),
                                       (0, MAX_OFFSET + 1), (MAX_OFFSET, MAX_OFFSET + 1)])
def test_bad_offsets_rejected_naming_them(start, end):
    with pytest.raises(InvalidWindow) as e:
        OffsetWindow(0, start, end)
    msg = str(e.value)
    assert f"[{start}, {end})" in msg
    assert str(MAX_OFFSET) in msg  # the allowed range


@FAST
@given(st.integers(0, MAX_OFFSET), st.integers(0, MAX_OFFSET))
def test_start_not_before_end_rejected(a, b):
    start, end = max(a, b), min(a, b)  # start >= end
    with pytest.raises(InvalidWindow, match=re.escape(f"got [{start}, {end})")):
        OffsetWindow(1, start, end)


@pytest.mark.parametrize("partition", [-1, MAX_PARTITION + 1, 10**9])
def test_bad_partition_rejected_naming_it(partition):
    with pytest.raises(InvalidWindow) as e:
        OffsetWindow(partition, 0, 10)
    msg = str(e.value)
    assert f"got {partition}" in msg
    assert f"0..{MAX_PARTITION}" in msg


def test_invalid_window_is_a_value_error():
    assert issubclass(InvalidWindow, ValueError)


def test_window_is_immutable():
    w = OffsetWindow(0, 0, 10)
    with pytest.raises(AttributeError):
        w.start = 5  # type: ignore[misc]


# --- parse() -----------------------------------------------------------------------------------------------------

MALFORMED = [
    "",
    "p3-1000-2000",  # not padded
    "p00003-000000000000001000-0000000000000002000",  # 18-digit start
    "p00003-0000000000000001000-00000000000000002000",  # 20-digit end
    "p0003-0000000000000001000-0000000000000002000",  # 4-digit partition
    "P00003-0000000000000001000-0000000000000002000",  # capital P
    "00003-0000000000000001000-0000000000000002000",  # no p
    "p00003_0000000000000001000_0000000000000002000",  # wrong separator
    "p00003-0000000000000001000-0000000000000002000x",  # trailing junk
    " p00003-0000000000000001000-0000000000000002000",  # leading space
    "p00003-0000000000000001000-0000000000000002000 ",  # trailing space
    "p-0003-0000000000000001000-0000000000000002000",  # sign in partition
    "p00003-+000000000000001000-0000000000000002000",  # sign in offset
    "p00003-0000000000000001000",  # no end
    "p3 [1000, 2000)",  # str(window), not a key
]


@pytest.mark.parametrize("key", MALFORMED)
def test_parse_rejects_malformed_key_naming_it_and_the_format(key):
    with pytest.raises(InvalidWindow) as e:
        OffsetWindow.parse(key)
    msg = str(e.value)
    assert repr(key) in msg
    assert EXPECTED_FORMAT in msg
    assert EXAMPLE_KEY in msg  # an example of a good key


@pytest.mark.parametrize("key", [
    EXAMPLE_KEY + "\n",  # re's `$` also matches before a trailing newline
    "p0000\u0663-0000000000000001000-0000000000000002000",  # ARABIC-INDIC DIGIT THREE: `\d` is Unicode
    "p\uff10\uff10\uff10\uff10\uff13-0000000000000001000-0000000000000002000",  # FULLWIDTH digits
])
def test_parse_rejects_non_canonical_keys(key):
    # A key is the window's one canonical spelling: anything parse() accepts must render back to itself,
    # otherwise two different Dagster partition keys name the same window.
    with pytest.raises(InvalidWindow):
        OffsetWindow.parse(key)


@pytest.mark.parametrize("key,bad", [
    ("p00000-0000000000000000005-0000000000000000005", "[5, 5)"),
    ("p00000-0000000000000000006-0000000000000000005", "[6, 5)"),
    ("p00000-0000000000000000000-9999999999999999999", "[0, 9999999999999999999)"),
])
def test_parse_rejects_well_formed_key_of_invalid_window(key, bad):
    with pytest.raises(InvalidWindow) as e:
        OffsetWindow.parse(key)
    assert bad in str(e.value)


# --- check_contiguous --------------------------------------------------------------------------------------------

W = OffsetWindow


def test_check_contiguous_empty_and_single():
    assert check_contiguous([]) == []
    assert check_contiguous([W(0, 0, 10)]) == []


def test_check_contiguous_contiguous_in_any_order():
    ws = [W(0, 20, 30), W(0, 0, 10), W(0, 10, 20)]
    before = list(ws)
    assert check_contiguous(ws) == []
    assert ws == before  # the input is not reordered


def test_check_contiguous_reports_hole():
    assert check_contiguous([W(0, 0, 10), W(0, 20, 30)]) == ["partition 0: offsets [10, 20) are in no window"]


def test_check_contiguous_reports_overlap():
    assert check_contiguous([W(4, 0, 10), W(4, 5, 15)]) == ["partition 4: p4 [0, 10) overlaps p4 [5, 15)"]


def test_check_contiguous_reports_duplicate_as_overlap():
    assert check_contiguous([W(1, 0, 10), W(1, 0, 10)]) == ["partition 1: p1 [0, 10) overlaps p1 [0, 10)"]


def test_check_contiguous_reports_overlap_and_hole_together():
    problems = check_contiguous([W(0, 0, 10), W(0, 5, 15), W(0, 30, 40)])
    assert problems == ["partition 0: p0 [0, 10) overlaps p0 [5, 15)",
                        "partition 0: offsets [15, 30) are in no window"]


def test_check_contiguous_is_per_partition():
    # each partition is contiguous on its own; offsets of different partitions are unrelated
    assert check_contiguous([W(0, 0, 10), W(1, 500, 600), W(0, 10, 20), W(1, 600, 700)]) == []
    # a hole in one partition is reported for that partition only, partitions in order
    problems = check_contiguous([W(3, 0, 10), W(3, 11, 20), W(1, 0, 10), W(1, 5, 20), W(2, 0, 10)])
    assert problems == ["partition 1: p1 [0, 10) overlaps p1 [5, 20)",
                        "partition 3: offsets [10, 11) are in no window"]


def test_check_contiguous_partitions_need_not_start_at_zero_or_align():
    assert check_contiguous([W(0, 1000, 1001), W(1, 7, 9)]) == []


def test_check_contiguous_no_false_hole_inside_a_covering_window():
    # [0, 100) covers [20, 50); only overlaps are wrong here, no offset is "in no window".
    problems = check_contiguous([W(0, 0, 100), W(0, 10, 20), W(0, 50, 60)])
    assert problems, "the overlaps must be reported"
    assert not [p for p in problems if "in no window" in p], problems


@st.composite
def chains(draw):
    """Contiguous windows of a few partitions, shuffled."""
    out = []
    for p in draw(st.sets(st.integers(0, 20), min_size=1, max_size=4)):
        start = draw(st.integers(0, 10**9))
        for size in draw(st.lists(st.integers(1, 1000), min_size=1, max_size=8)):
            out.append(W(p, start, start + size))
            start += size
    return draw(st.permutations(out))


@LISTS
@given(chains())
def test_check_contiguous_accepts_any_contiguous_set(ws):
    assert check_contiguous(ws) == []


@LISTS
@given(chains(), st.data())
def test_check_contiguous_finds_a_removed_interior_window(ws, data):
    by_p = sorted(ws, key=as_tuple)
    interior = [i for i in range(1, len(by_p) - 1)
                if by_p[i - 1].partition == by_p[i].partition == by_p[i + 1].partition]
    if not interior:
        return
    i = data.draw(st.sampled_from(interior))
    gone = by_p[i]
    rest = by_p[:i] + by_p[i + 1:]
    assert check_contiguous(rest) == [
        f"partition {gone.partition}: offsets [{gone.start}, {gone.end}) are in no window"]


@LISTS
@given(st.lists(windows(partition=st.integers(0, 2), max_offset=200), max_size=8))
@example([W(0, 0, 3), W(0, 1, 2), W(0, 3, 4)])  # a window nested in another
def test_check_contiguous_reported_holes_are_really_uncovered(ws):
    hole = re.compile(r"^partition (\d+): offsets \[(\d+), (\d+)\) are in no window$")
    for problem in check_contiguous(ws):
        m = hole.match(problem)
        if m is None:
            continue
        p, lo, hi = int(m[1]), int(m[2]), int(m[3])
        assert lo < hi
        covering = [w for w in ws if w.partition == p and w.start < hi and lo < w.end]
        assert not covering, f"{problem!r} but {covering} cover part of it"


@LISTS
@given(st.lists(windows(partition=st.integers(0, 2), max_offset=200), max_size=8))
def test_check_contiguous_empty_iff_each_partition_is_one_exact_chain(ws):
    expected_ok = True
    for p in {w.partition for w in ws}:
        chain = sorted((w for w in ws if w.partition == p), key=as_tuple)
        expected_ok &= all(a.end == b.start for a, b in zip(chain, chain[1:]))
    assert (check_contiguous(ws) == []) == expected_ok
