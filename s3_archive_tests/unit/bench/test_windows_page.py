"""The years-of-windows section of the benchmark page (bench/windows_scale.py): targets, section, JSON."""

from __future__ import annotations

from bench.windows_page import figures, section, targets

PROFILE = """         12 function calls in 51.353 seconds

   ncalls  tottime  percall  cumtime  percall filename:lineno(function)
        1    0.624    0.624   38.556   38.556 /x/lib/python3.11/site-packages/dagster/_core/storage/event_log/sql_event_log.py:2327(get_existing_dynamic_partitions)
"""


def state(tick: float, query: float) -> dict:
    return {"sensor": {"lost_cursor_s": tick, "same_cursor_s": 0.1, "next_tick_s": 0.1},
            "checks": {"total_s": 3.5, "objects_match_manifests_s": 2.6},
            "ui_query": {"first_s": query, "repeat_s": 0.5, "after_new_partition_s": 0.5, "bytes": 3_164_480,
                         "partition_keys": 32_320},
            "range_run_keys": {"seconds": 0.2, "keys": 8}, "definitions_load_s": 6.0, "status_cache_profile": PROFILE}


def fig(retired_tick: float = 0.9) -> dict:
    return {"windows": 1_000_000, "partitions": 32, "window_minutes": 10, "live_days": 7.0, "live_windows": 32_256,
            "fill_live_materializations_s": 17.5, "fill_old_materializations_s": 500.6, "fill_live_partitions_s": 2.4,
            "fill_old_partitions_s": 75.0, "postgres_mib": 1947.2, "seconds": 1000.0,
            "retired": state(retired_tick, 1.4), "all_live": state(11.7, 39.9)}


def test_targets_judge_the_slowest_of_the_default_state():
    t = targets(fig())
    assert t["sensor tick, 1,000,000 windows"]["verdict"] == "reached"
    assert t["sensor tick, 1,000,000 windows"]["value_fmt"] == "0.90 s"
    assert "11.7 s with retirement off" in t["sensor tick, 1,000,000 windows"]["note"]
    assert t["partition status query, 1,000,000 windows"]["value_fmt"] == "1.40 s"
    assert targets(fig(retired_tick=2.5))["sensor tick, 1,000,000 windows"]["verdict"] == "NOT reached"


def test_section_has_both_states_and_the_profile_share():
    body = section(fig())["body"]
    assert "| sensor tick, lost cursor (reads every live key) | 0.90 s | 11.70 s |" in body
    assert "`get_existing_dynamic_partitions`, every key from Postgres, 38.556 of its 51.353 s" in body
    assert "site-packages" not in body


def test_figures_leave_out_the_profiles():
    out = figures(fig())
    assert "status_cache_profile" not in out["retired"] and out["retired"]["checks"]["total_s"] == 3.5


def test_the_page_holds_no_raw_profile():
    f = fig()
    f["all_live"]["sensor"]["next_tick_profile"] = PROFILE
    body = section(f)["body"]
    assert "```" not in body and "cumtime" not in body and "ncalls" not in body
    assert "next_tick_profile" not in figures(f)["all_live"]["sensor"]
