"""The benchmark's pure helpers (bench/stats.py): summaries, paired ratios, the page and the JSON."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.stats import (
    Measure,
    Summary,
    best_of,
    build_json,
    growth,
    paired_ratios,
    render_markdown,
    slower_of,
    verdict,
)

secs = st.lists(st.floats(min_value=0.01, max_value=1e4, allow_nan=False), min_size=1, max_size=9)


def test_summary_is_min_median_max():
    s = Summary.of([3.0, 1.0, 2.0, 10.0])
    assert (s.min, s.median, s.max) == (1.0, 2.5, 10.0)
    assert s.fmt(1) == "1.0 / 2.5 / 10.0"
    assert s.as_dict(1) == {"min": 1.0, "median": 2.5, "max": 10.0}


def test_summary_of_nothing_is_an_error():
    with pytest.raises(ValueError, match="at least one value"):
        Summary.of([])


def test_paired_ratios_divide_round_by_round():
    # archive 10 s and 20 s; limit 5 s and 20 s -> 0.5 and 1.0 (a ratio of medians would say 12.5/15)
    r = paired_ratios([10.0, 20.0], [5.0, 20.0])
    assert (r.min, r.median, r.max) == (0.5, 0.75, 1.0)


@given(secs)
def test_a_contender_against_itself_is_one(xs):
    r = paired_ratios(xs, xs)
    assert r.min == pytest.approx(1.0) and r.max == pytest.approx(1.0)


@given(secs, st.floats(min_value=0.1, max_value=10))
def test_twice_as_slow_is_half_the_throughput(xs, k):
    assert paired_ratios([x * k for x in xs], xs).median == pytest.approx(1 / k)


@pytest.mark.parametrize(("a", "b"), [([], []), ([1.0], [1.0, 2.0]), ([0.0], [1.0])])
def test_paired_ratios_reject_unpaired_or_zero(a, b):
    with pytest.raises(ValueError):
        paired_ratios(a, b)


def test_slower_of_and_verdict_and_growth():
    assert slower_of([1.0, 5.0], [2.0, 3.0]) == [2.0, 5.0]
    with pytest.raises(ValueError, match="as many rounds"):
        slower_of([1.0], [])
    assert verdict(0.7, 0.7) == "reached" and verdict(0.69, 0.7) == "NOT reached"
    assert verdict(14.9, 15, higher_is_better=False) == "reached"
    assert verdict(15.1, 15, higher_is_better=False) == "NOT reached"
    assert growth({100: 1000.0, 400: 1100.0, 1600: 1050.0}) == pytest.approx(1.1)


def test_measure_rates():
    m = Measure("x", "x", seconds=[2.0, 4.0, 1.0], records=1000, bytes=4_000_000)
    assert m.rate().median == 500 and m.rate().max == 1000
    assert m.mb_per_s().min == 1.0


def _result() -> dict:
    m = {"a": Measure("a", "contender A", seconds=[1.0, 2.0], records=10, bytes=2_000_000, note="n")}
    return {
        "command": "make bench", "repeats": 2, "started": "2026-01-01T00:00:00+00:00", "wall_s": 600.0,
        "machine": {"cpu": "CPU", "nproc": 2, "mem_gb": 24.0, "kernel": "Linux 6", "load_start": ["1", "1", "1"],
                    "load_end": ["2", "2", "2"], "other_work": "nothing else", "software": "sw"},
        "workload": {"records": 10, "bytes": 2_000_000, "mb": 2, "value_bytes": 500, "produce_s": 1.0,
                     "size_note": "small."},
        "measures": m, "throughput_order": ["a"],
        "targets": {"a / b": {"value_fmt": "0.50 / 0.60 / 0.70", "target_fmt": "≥ 0.7×", "verdict": "NOT reached"}},
        "sections": [{"title": "Extra", "body": "body text"}],
        "json": {"archive_vs_limit": 0.6, "archive_vs_aiven": None},
    }


def test_page_has_every_figure_and_the_command():
    page = render_markdown(_result())
    assert page.startswith("# Benchmarks\n")
    assert "`make bench`" in page and "`nproc` = 2" in page and "nothing else" in page
    assert "| contender A | 5 / 8 / 10 | 1.0 / 1.5 / 2.0 | 1.00 / 1.50 / 2.00 | n |" in page
    assert "| a / b | 0.50 / 0.60 / 0.70 | ≥ 0.7× | NOT reached |" in page
    assert "## Extra\n\nbody text" in page


def test_json_keeps_the_named_keys_and_every_contender():
    j = build_json(_result())
    assert j["archive_vs_limit"] == 0.6 and j["archive_vs_aiven"] is None
    assert j["contenders"]["a"]["seconds"] == {"min": 1.0, "median": 1.5, "max": 2.0}
    assert j["contenders"]["a"]["records_per_s"]["median"] == 8
    assert j["workload"] == {"records": 10, "bytes": 2_000_000, "mb": 2, "value_bytes": 500}


def test_lead_sections_come_before_the_throughput_and_the_other_sections():
    r = _result() | {"lead_sections": [{"title": "Deployed", "body": "deployed body"}]}
    page = render_markdown(r)
    assert page.index("## Deployed\n\ndeployed body") < page.index("## Throughput") < page.index("## Extra")
    assert "## Deployed" not in render_markdown(_result())


def test_best_of_takes_the_fastest_variant_round_by_round():
    m = {"consume": Measure("consume", "one", seconds=[3.0, 2.0]),
         "consume_x2": Measure("consume_x2", "two", seconds=[1.5, 2.5]),
         "consume_x4": Measure("consume_x4", "four", seconds=[2.0, 1.8]),
         "consumer_other": Measure("consumer_other", "not a variant", seconds=[0.1, 0.1])}
    assert best_of(m, "consume") == [1.5, 1.8]
    assert best_of(m, "consume", parallel_only=True) == [1.5, 1.8]
    m["consume"].seconds = [1.0, 1.0]
    assert best_of(m, "consume") == [1.0, 1.0] and best_of(m, "consume", parallel_only=True) == [1.5, 1.8]
    with pytest.raises(ValueError, match="no contender 'produce' in parallel"):
        best_of(m, "produce", parallel_only=True)
