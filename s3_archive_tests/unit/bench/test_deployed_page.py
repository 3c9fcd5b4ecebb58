"""The deployed shape's section of the benchmark page (bench/deployed.py): figures, targets, section; and the lag
slope that says whether a rate was kept up with."""

from __future__ import annotations

import pytest

from bench.deployed import _slope, lag_trend, troughs
from bench.deployed_page import figures, marks, section, targets

SPLIT = {"launch → run start": 2.0, "run start → step start": 0.1, "step": 1.5, "step end → run end": 0.05}


def arm(catchup: float = 9.0, sustained: bool = True) -> dict:
    out = {"catch_up": {"records": 366_972, "produce_s": 9.0, "seconds": catchup, "runs": 1, "statuses": ["SUCCESS"],
                        "sensor_start_to_first_run_s": 4.0, "queued_to_launch_s": 1.2, "partitions": 12,
                        "runs_detail": [SPLIT]},
           "one_launcher": [{"status": "SUCCESS", "launch_to_end_s": 3.9, "process_s": 3.6,
                             "launch_to_process_start_s": 0.1, "split": SPLIT},
                            {"status": "SUCCESS", "launch_to_end_s": 4.4, "process_s": None,
                             "launch_to_process_start_s": None, "split": SPLIT}],
           "one_cli": [{"seconds": 5.5}, {"seconds": 6.5}]}
    if sustained:
        out["sustained"] = {"hold_s": 90, "best_mb_s": 25, "steps": [
            {"rate_mb_s": 25, "produced_mb_s": 25.0, "lag_slope_mb_s": 0.1, "lag_max_mb": 80, "lag_end_mb": 40,
             "kept": True, "lag_mb": []},
            {"rate_mb_s": 50, "produced_mb_s": 49.0, "lag_slope_mb_s": 12.0, "lag_max_mb": 900, "lag_end_mb": 900,
             "kept": False, "lag_mb": []}]}
    return out


def fig(local: dict | None = None, connect: dict | None = None, warm: float = 3.0) -> dict:
    return {"arms": {"local": local or arm(), "connect": connect or arm(catchup=6.0, sustained=False)},
            "warm": {"seconds": warm, "records": 366_972, "windows": 4}}


def test_figures_are_the_ratio_to_warm_and_medians_per_arm_and_the_default_arms_as_headline():
    f = figures(fig(), 200)
    assert f["deployed_catchup_vs_warm"] == f["deployed_local_catchup_vs_warm"] == 3.0
    assert f["deployed_connect_catchup_vs_warm"] == 2.0 and f["deployed_catchup_vs_warm_target"] == 4.0
    assert figures(fig(), 1000)["deployed_catchup_vs_warm_target"] == 2.0
    # the process's lifetime where it was seen, else launch → run end
    assert f["deployed_one_record_launcher_s"] == pytest.approx((3.6 + 4.4) / 2)
    assert f["deployed_one_record_cli_s"] == 6.0 and f["deployed_sustained_mb_s"] == 25
    assert f["deployed_connect_sustained_mb_s"] is None


def test_targets_judge_each_figure_of_each_arm_default_first():
    t = targets(fig(), 200)
    assert next(iter(t)).startswith("deployed (local)")
    assert t["deployed (local) catch-up / warm archive, same bytes"]["verdict"] == "reached"
    slow = targets(fig(local=arm(catchup=13.0)), 200)
    assert slow["deployed (local) catch-up / warm archive, same bytes"]["verdict"] == "NOT reached"
    assert targets(fig(), 1000)["deployed (local) catch-up / warm archive, same bytes"]["verdict"] == "NOT reached"
    assert t["deployed (local) one-record run through the daemon's launcher"]["verdict"] == "reached"  # 4.0, at most 4
    late = arm()
    late["one_launcher"][0]["process_s"] = 5.0
    assert targets(fig(local=late), 200)["deployed (local) one-record run through the daemon's launcher"][
        "verdict"] == "NOT reached"
    assert t["deployed (local) one-record run through `dagster asset materialize`"]["verdict"] == "reached"
    assert t["deployed (local) sustained rate, lag bounded"]["verdict"] == "NOT reached"
    assert "deployed (connect) sustained rate, lag bounded" not in t
    assert t["deployed (connect) catch-up / warm archive, same bytes"]["value_fmt"] == "2.00"


def test_a_sustained_search_that_kept_no_rate_says_none_and_the_lowest_rate_tried():
    behind = arm()
    behind["sustained"]["best_mb_s"] = None
    for step in behind["sustained"]["steps"]:
        step["kept"] = False
    row = targets(fig(local=behind), 200)["deployed (local) sustained rate, lag bounded"]
    assert row["value_fmt"] == "none (not even 25 MB/s)" and row["verdict"] == "NOT reached"
    assert targets(fig(), 200)["deployed (local) sustained rate, lag bounded"]["value_fmt"] == "25 MB/s"


def test_section_shows_every_figure_and_a_failure():
    body = section(fig(), 200)["body"]
    assert "**9.0 s**, against 3.0 s warm: **3.00×**" in body and "**6.0 s**, against 3.0 s warm: **2.00×**" in body
    assert "### local:" in body and "### connect:" in body
    assert "Highest rate kept: **25 MB/s**" in body and "| 50 | 49 | 12 | 900 | 900 | NOT kept |" in body
    assert "5.5 s, 6.5 s" in body
    failed = section({"arms": {"local": {"error": "RuntimeError: dagster-daemon exited"}}}, 200)["body"]
    assert "**Failed**: RuntimeError: dagster-daemon exited" in failed
    assert section({"skipped": "--no-deployed"}, 200)["body"] == "Not measured here: --no-deployed."


def test_lag_slope_tells_a_growing_lag_from_a_sawtooth():
    growing = [(t, 10_000_000 * t) for t in range(30)]
    assert _slope(growing) == pytest.approx(10_000_000)
    sawtooth = [(t, (t % 5) * 1_000_000) for t in range(30)]
    assert abs(_slope(sawtooth)) < 200_000
    assert _slope([(1.0, 5)]) == 0.0


def _saw(period: int, peak_mb: float, floor_mb: float, rise_mb_s: float, hold_s: int = 90) -> list[tuple[float, int]]:
    """A lag sampled each second that rises by `peak_mb` a period and drops back to a floor that rises."""
    return [(float(t), int(((floor_mb + rise_mb_s * t) + peak_mb * (t % period) / period) * 1e6))
            for t in range(hold_s)]


def test_lag_trend_reads_a_bounded_sawtooth_as_bounded_whatever_its_phase():
    # A 27 s sawtooth (a window cut and committed each 27 s) over a 90 s hold: the slope of the second half's samples
    # depends on where in its period the half begins; the troughs' slope does not.
    for shift in range(27):
        saw = [(t, b) for t, b in _saw(27, 270, 40, 0.0, 90 + shift)[shift:]]
        saw = [(t - shift, b) for t, b in saw]
        assert abs(lag_trend(saw, 90)) < 0.05e6
    growing = _saw(27, 270, 40, 2.0)
    assert lag_trend(growing, 90) == pytest.approx(2.0e6, rel=0.05)
    assert [t for t, _ in troughs(growing)] == [27.0, 54.0, 81.0]


def test_lag_trend_without_drops_in_the_second_half_is_the_second_halfs_slope():
    stalled = [(float(t), int((min(t, 50) % 20 if t < 50 else t - 40) * 1e6)) for t in range(90)]
    assert troughs(stalled) and troughs(stalled)[-1][0] < 45
    assert lag_trend(stalled, 90) == pytest.approx(1e6)
    assert lag_trend([(float(t), 0) for t in range(90)], 90) == 0.0


def test_the_continuous_arm_judges_produce_to_materialized_against_the_one_record_target():
    cont = arm(catchup=4.5, sustained=False)
    del cont["one_launcher"], cont["one_cli"]
    cont["one_continuous"] = [{"produce_to_materialized_s": 1.5, "window_seconds": 0.9},
                              {"produce_to_materialized_s": 4.5, "window_seconds": 1.1}]
    both = {"arms": {"local": arm(), "continuous": cont}, "warm": {"seconds": 3.0, "records": 1, "windows": 1}}
    f = figures(both, 200)
    assert f["deployed_continuous_one_record_launcher_s"] == 3.0 and f["deployed_continuous_one_record_cli_s"] is None
    assert f["deployed_continuous_catchup_vs_warm"] == 1.5
    t = targets(both, 200)
    assert t["deployed (continuous) one-record window, produce → committed and materialized"]["verdict"] == "reached"
    assert "deployed (continuous) one-record run through the daemon's launcher" not in t
    body = section(both, 200)["body"]
    assert "### continuous: `continuous: {}`" in body and "1.50 s (0.9 s), 4.50 s (1.1 s)" in body


CONTINUOUS_TIMELINE = [
    [0.0, "PIPELINE_ENQUEUED", ""], [1.0, "PIPELINE_STARTING", ""], [2.9, "PIPELINE_START", ""],
    [3.3, "STEP_START", ""], [7.0, "log", "topic 'dep_continuous_backlog': cut 8 windows (age)"],
    [8.5, "ASSET_MATERIALIZATION", ""], [8.6, "log", "topic 't': consumer group 'g' offsets now p0: 10"],
    [9.5, "ASSET_MATERIALIZATION", ""], [9.6, "log", "topic 't': consumer group 'g' offsets now p1: 10"]]


def test_a_long_lived_runs_catch_up_shows_its_milestones_after_its_launch():
    assert marks(CONTINUOUS_TIMELINE) == [
        ("step start", 2.3), ("windows cut", 6.0), ("first window materialized", 7.5),
        ("last window materialized", 8.5), ("last consumer-group commit", 8.6)]
    assert marks([[0.0, "STEP_START", ""]]) == []  # no launch event: nothing to measure from
    cont = arm(sustained=False)
    cont["catch_up"] |= {"runs_detail": [{**SPLIT, "step": None}], "timelines": [CONTINUOUS_TIMELINE]}
    body = section({"arms": {"continuous": cont}, "warm": {"seconds": 2.0, "windows": 4}}, 200)["body"]
    assert "Run 1's step does not end (a long-lived run); its milestones after its launch (seconds): step start " \
           "2.30; windows cut 6.00; first window materialized 7.50" in body
    ended = arm(sustained=False)  # a run whose step ended has its split; no milestones line
    ended["catch_up"]["timelines"] = [CONTINUOUS_TIMELINE + [[10.0, "STEP_SUCCESS", ""]]]
    assert "milestones" not in section({"arms": {"local": ended}, "warm": {"seconds": 2.0}}, 200)["body"]
