"""The page's "Many topics" section and its targets, from bench/many_topics.py's figures (pure: no I/O, no
s3_archive import)."""

from __future__ import annotations

from typing import Any

from bench.config import MANY_TOPICS_PARTITIONS, MANY_TOPICS_TARGET_S

RECORDS_PER_PARTITION = 10  # bench/many_topics.py produces this many per partition

FIGURES = (("definitions load", "definitions_load_s"), ("discovery tick", "discovery_tick_s"),
           ("offsets-sensor tick, first", "offsets_tick_first_s"),
           ("offsets-sensor tick, steady", "offsets_tick_steady_s"))


def targets(fig: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The page's targets: each figure under MANY_TOPICS_TARGET_S, and the asset catalog's query."""
    n = fig.get("topics", fig.get("topics_wanted"))
    out = {}
    shown = [*FIGURES, ("asset catalog query", "catalog_query_s")]
    for label, key in shown:
        value = max(fig[key]) if isinstance(fig[key], list) else fig[key]
        out[f"{label}, {n:,} topics"] = {
            "value_fmt": f"{value:.2f} s", "target_fmt": f"< {MANY_TOPICS_TARGET_S:g} s",
            "verdict": "reached" if value < MANY_TOPICS_TARGET_S else "NOT reached",
            "note": f"{MANY_TOPICS_PARTITIONS} partitions each" + ("; slowest of three" if key == "catalog_query_s"
                                                                   else "")}
    return out


def section(fig: dict[str, Any]) -> str:
    """The page's "Many topics" section."""
    if "error" in fig or "skipped" in fig:
        return f"Not measured: {fig.get('error') or fig.get('skipped')}"
    n = fig["topics"]
    rows = "\n".join(f"| {label} | {fig[key]:.2f} |" for label, key in FIGURES)
    cat = fig["catalog_query_s"]
    return (f"A `topic_pattern` matching {n:,} topics of {MANY_TOPICS_PARTITIONS} partitions, created by the bench on "
            f"its broker ({RECORDS_PER_PARTITION} records per partition), against a temporary sqlite Dagster "
            "instance (bench/many_topics.py).\n\n| step | seconds |\n| --- | --- |\n" + rows +
            f"\n| asset catalog query ({fig['catalog_assets']:,} assets; webserver up in {fig['webserver_up_s']:.1f} "
            f"s) | {min(cat):.2f} / {max(cat):.2f} |\n\n"
            "The discovery tick is the first one, finding every topic; one finding nothing new took "
            f"{fig['discovery_tick_nothing_new_s']:.2f} s. Definitions load in a fresh process, as a code server does "
            f"at a reload ({fig['assets']:,} assets; the process took {fig['definitions_process_s']:.1f} s with its "
            f"imports). The first offsets-sensor tick has no cursor and cut {fig['offsets_tick_first_windows']} "
            "windows (100 at most per tick); the steady tick has its cursor, the first tick's windows added, and "
            f"cut {fig['offsets_tick_steady_windows']}.")
