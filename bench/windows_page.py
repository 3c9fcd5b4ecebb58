"""The "Years of windows" section of docs/benchmarks.md and its targets, from the figures of bench/windows_scale.py."""

from __future__ import annotations

import re
from typing import Any

from bench.config import WINDOWS_TARGET_S as TARGET_S


def _worst(fig: dict[str, Any], state: str) -> tuple[float, float]:
    """The slowest sensor tick and the slowest partition-status query of a state."""
    s, q = fig[state]["sensor"], fig[state]["ui_query"]
    return (max(s["lost_cursor_s"], s["same_cursor_s"], s["next_tick_s"]),
            max(q["first_s"], q["repeat_s"], q["after_new_partition_s"]))


def targets(fig: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The two targets, for the default (retired) state; the all-live state in the note."""
    out = {}
    for i, name in enumerate(("sensor tick", "partition status query")):
        value, live = _worst(fig, "retired")[i], _worst(fig, "all_live")[i]
        out[f"{name}, {fig['windows']:,} windows"] = {
            "value_fmt": f"{value:.2f} s", "target_fmt": f"< {TARGET_S:g} s",
            "verdict": "reached" if value < TARGET_S else "NOT reached",
            "note": f"slowest of three, windows retired after {fig['live_days']:g} days (the default); "
                    f"{live:.1f} s with retirement off (all windows dynamic partitions): NOT reached"}
    return out


def figures(fig: dict[str, Any]) -> dict[str, Any]:
    """The figures for bench/results/benchmarks.json (no profiles)."""
    def strip(v: Any) -> Any:
        return {k: strip(x) for k, x in v.items() if not k.endswith("profile")} if isinstance(v, dict) else v

    return strip({k: v for k, v in fig.items() if k != "machine"})


def section(fig: dict[str, Any]) -> dict[str, str]:
    """The "Years of windows" section of docs/benchmarks.md."""
    r, a = fig["retired"], fig["all_live"]

    def row(label: str, get: Any, fmt: str = "{:.2f} s") -> str:
        return f"| {label} | {fmt.format(get(r))} | {fmt.format(get(a))} |"

    rows = [
        row("sensor tick, steady (its cursor; the previous tick's windows added)", lambda x: x["sensor"]["next_tick_s"]),
        row("sensor tick, same cursor again", lambda x: x["sensor"]["same_cursor_s"]),
        row("sensor tick, lost cursor (reads every live key)", lambda x: x["sensor"]["lost_cursor_s"]),
        row("the four checks, one step", lambda x: x["checks"]["total_s"]),
        row("… of which objects_match_manifests", lambda x: x["checks"]["objects_match_manifests_s"]),
        row("partition status query, first", lambda x: x["ui_query"]["first_s"]),
        row("partition status query, repeat", lambda x: x["ui_query"]["repeat_s"]),
        row("partition status query, after a change of the partition set", lambda x: x["ui_query"]["after_new_partition_s"]),
        row("… its response", lambda x: x["ui_query"]["bytes"] / 1e6, "{:.1f} MB"),
        row("… partition keys in it", lambda x: x["ui_query"]["partition_keys"], "{:,}"),
        row("a range run of 8 windows resolving its keys", lambda x: x["range_run_keys"]["seconds"]),
        row("definitions load (fresh process)", lambda x: x["definitions_load_s"]),
    ]
    lines = a["status_cache_profile"].strip().splitlines()
    total = re.search(r"in ([\d.]+) seconds", lines[0])
    rows_ = [ln.split() for ln in lines if ln.endswith("(get_existing_dynamic_partitions)")]
    held = (total.group(1), rows_[-1][3]) if total and rows_ else None
    ran = (f" Run as `{fig['command']}`; {fig['machine']['other_work']} (at the end: "
           f"{fig['machine']['other_work_end']}); load average at start / end {fig['machine']['load_start']} / "
           f"{fig['machine']['load_end']}; {fig['machine']['cpu']}, nproc {fig['machine']['nproc']}."
           if "machine" in fig else "")
    body = (
        f"bench/windows_scale.py: {fig['windows']:,} archived windows of a {fig['partitions']}-partition topic "
        f"({fig['windows'] // fig['partitions'] * fig['window_minutes'] / 60 / 24:,.0f} days of "
        f"{fig['window_minutes']}-minute windows) in a Dagster instance on PostgreSQL (deploy/dagster.postgres.yaml, "
        f"{fig['postgres_mib']:,.0f} MiB at the end), in two states of the same windows: **retired** (the default "
        f"`retire_after_days: {fig['live_days']:g}`: {fig['live_windows']:,} live windows are dynamic partitions with "
        "their materializations, the older ones one range per Kafka partition in the retirement record) and **all "
        "live** (`retire_after_days: null`: every window a dynamic partition). "
        "The partition status query is the asset page's `PartitionHealthQuery` over HTTP from a `dagster-webserver` "
        "on the instance. Filling took "
        f"{fig['fill_live_materializations_s'] + fig['fill_old_materializations_s']:,.0f} s for the materializations "
        f"(event log batch writes, 2 processes) and {fig['fill_live_partitions_s'] + fig['fill_old_partitions_s']:,.0f}"
        " s for the partitions (`add_dynamic_partitions`, 10 000 a call)"
        + (f"; the whole section {fig['seconds'] / 60:.0f} min" if "seconds" in fig else "") + ". moto holds no manifest, so "
        "objects_match_manifests fails (\"no manifest\" for every live window) and measures its instance side only."
        + ran + "\n\n| figure | retired (default) | all live |\n| --- | --- | --- |\n" + "\n".join(rows) + "\n\n"
        + " ".join(f"{name}: {t['value_fmt']} ({t['verdict']}; target {t['target_fmt']}); {t['note']}."
                   for name, t in targets(fig).items()) + "\n\n"
        "With every window a dynamic partition, whatever Dagster does with the partition set reads all of it: the "
        "first status query after a change of the partition set rebuilds the asset's status cache (all live, cProfile "
        "of that rebuild in the bench process"
        + (f": `get_existing_dynamic_partitions`, every key from Postgres, {held[1]} of its {held[0]} s" if held else "")
        + "; docs/performance.md); the sensor's lost-cursor tick reads every key too, and a range run slices its 8 "
        "keys out of the whole set. Retirement keeps that set to the live horizon, so these costs stop growing with "
        "the history.")
    return {"title": f"Years of windows: {fig['windows']:,} windows in a Postgres instance", "body": body}
