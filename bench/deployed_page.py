"""The page's first section, "Deployed: daemon, sensor, run processes", its targets and JSON keys, from
bench/deployed.py's figures (pure: no I/O, no s3_archive import)."""

from __future__ import annotations

from typing import Any

from bench.config import DEPLOYED_TARGETS
from bench.stats import Summary, verdict

TITLE = "Deployed: daemon, sensor, run processes"


def catchup_target(mb: float) -> float:
    """Catch-up over the warm archive of the same bytes, at most: 2× from 1 GB up, 4× below."""
    return DEPLOYED_TARGETS["catchup_vs_warm_1gb" if mb >= 1000 else "catchup_vs_warm"]


def figures(fig: dict[str, Any], mb: float) -> dict[str, Any]:
    """The JSON keys (all `deployed_…`), None where not measured."""
    out: dict[str, Any] = {}
    c, w = fig.get("catch_up"), fig.get("warm")
    out["deployed_catchup_s"] = round(c["seconds"], 2) if c else None
    out["deployed_warm_s"] = round(w["seconds"], 2) if w else None
    out["deployed_catchup_vs_warm"] = round(c["seconds"] / w["seconds"], 2) if c and w else None
    out["deployed_catchup_vs_warm_target"] = catchup_target(mb)
    one = fig.get("one_launcher")
    out["deployed_one_record_launcher_s"] = (
        round(Summary.of([r["process_s"] if r["process_s"] is not None else r["launch_to_end_s"]
                          for r in one]).median, 2) if one else None)
    cli = fig.get("one_cli")
    out["deployed_one_record_cli_s"] = round(Summary.of([r["seconds"] for r in cli]).median, 2) if cli else None
    s = fig.get("sustained")
    out["deployed_sustained_mb_s"] = s["best_mb_s"] if s else None
    if "error" in fig:
        out["deployed_error"] = fig["error"]
    return out


def targets(fig: dict[str, Any], mb: float) -> dict[str, dict[str, Any]]:
    f = figures(fig, mb)

    def row(value: float | None, fmt: str, target: float, higher: bool, unit: str, note: str) -> dict[str, Any]:
        return {"value_fmt": "—" if value is None else fmt.format(value),
                "target_fmt": f"{'≥' if higher else '≤'} {target:g}{unit}",
                "verdict": "not measured" if value is None else verdict(value, target, higher), "note": note}

    out = {
        "deployed catch-up / warm archive, same bytes": row(
            f["deployed_catchup_vs_warm"], "{:.2f}", catchup_target(mb), False, "×",
            "first run's launch → lag 0, over the warm archive of the same records in the same run"),
        "deployed one-record run through the daemon's launcher": row(
            f["deployed_one_record_launcher_s"], "{:.1f} s", DEPLOYED_TARGETS["one_record_launcher_s"], False, " s",
            "the run's process, start to exit"),
        "deployed one-record run through `dagster asset materialize`": row(
            f["deployed_one_record_cli_s"], "{:.1f} s", DEPLOYED_TARGETS["one_record_cli_s"], False, " s",
            "the whole command"),
    }
    if fig.get("sustained"):
        out["deployed sustained rate, lag bounded"] = row(
            f["deployed_sustained_mb_s"] or 0.0, "{:g} MB/s", DEPLOYED_TARGETS["sustained_mb_s"], True, " MB/s",
            f"highest rate of the search held {fig['sustained']['hold_s']:g} s each")
    return out


def section(fig: dict[str, Any], mb: float) -> dict[str, str]:
    """The section's title and body."""
    if "skipped" in fig:
        return {"title": TITLE, "body": f"Not measured here: {fig['skipped']}."}
    parts = [
        "The archive as a deployment runs it (bench/deployed.py): `dagster-daemon run -w workspace.yaml` (the code "
        "server is its child) on the shipped deploy/dagster.postgres.yaml (PostgreSQL, the queued run coordinator, "
        "DefaultRunLauncher: each run its own process), the archive's offsets sensor turned on with `dagster "
        "sensor start`, every archive setting at its default (the topics and the bucket aside)."]
    if "error" in fig:
        parts.append(f"**Failed**: {fig['error'][:1500]}")
    c, w = fig.get("catch_up"), fig.get("warm")
    if c and w:
        detail = "\n".join(
            f"| {i + 1} | " + " | ".join("—" if v is None else f"{v:.2f}" for v in d.values()) + " |"
            for i, d in enumerate(c["runs_detail"]))
        labels = list(c["runs_detail"][0]) if c["runs_detail"] else []
        parts.append(
            f"**Catch-up.** {c['records']:,} records ({mb:g} MB) produced an hour old (a backlog: older than "
            f"flush.interval_seconds, so each partition's rest is cut too), then the sensor turned on. From the "
            f"first run's launch (its RUN_STARTING event) to lag 0 in the archive's consumer group: "
            f"**{c['seconds']:.1f} s**, against **{w['seconds']:.1f} s** for the warm archive of the same records "
            f"in the same run (bench/worker.py, a warm session, windows of {w.get('windows', '?')}): "
            f"**{c['seconds'] / w['seconds']:.2f}×** (target ≤ {catchup_target(mb):g}×). The sensor cut "
            f"{c['partitions']} windows into {c['runs']} run(s) ({', '.join(c['statuses'])}); its first run was "
            f"requested {c['sensor_on_to_first_run_s']:.1f} s after the sensor was turned on and launched "
            f"{c['queued_to_launch_s']:.1f} s after it was queued (the daemon's dequeue).\n\n"
            "| run | " + " | ".join(labels) + " |\n|" + " --- |" * (len(labels) + 1) + "\n" + detail)
    one, cli = fig.get("one_launcher"), fig.get("one_cli")
    if one:
        rows = "\n".join(
            f"| {i + 1} | {'—' if r['process_s'] is None else format(r['process_s'], '.2f')} | "
            f"{r['launch_to_end_s']:.2f} | " + " | ".join("—" if v is None else f"{v:.2f}" for v in r["split"].values())
            + " |" for i, r in enumerate(one))
        labels = list(one[0]["split"])
        parts.append(
            "**A one-record window, fresh.** Through the daemon's launcher (the sensor cuts it, the daemon "
            "dequeues and launches it): the run's process from its start to its exit, and its events' split "
            "(seconds):\n\n| run | process | launch → run end | " + " | ".join(labels) + " |\n|"
            + " --- |" * (len(labels) + 3) + "\n" + rows)
    if cli:
        parts.append("Through `dagster asset materialize -m s3_archive.definitions --select kafka_archive/<topic> "
                     "--partition <window>` (the whole command, a fresh process): "
                     + ", ".join(f"{r['seconds']:.1f} s" for r in cli) + ".")
    s = fig.get("sustained")
    if s:
        rows = "\n".join(f"| {st['rate_mb_s']:g} | {st['produced_mb_s']:g} | {st['lag_slope_mb_s']:g} | "
                         f"{st['lag_max_mb']:g} | {st['lag_end_mb']:g} | {'kept' if st['kept'] else 'NOT kept'} |"
                         for st in s["steps"])
        parts.append(
            f"**Sustained.** Records produced at a fixed rate for {s['hold_s']:g} s per rate, rates rising until "
            "one is not kept up with: kept means the produce rate was reached (≥ 90 %) and the lag's slope over the "
            "hold's second half stayed under 10 % of the produce rate. Highest rate kept: "
            f"**{s['best_mb_s'] if s['best_mb_s'] is not None else 'none'} MB/s**. The lag is never 0 here: a "
            "partition's rest waits for a full window or flush.interval_seconds.\n\n"
            "| rate (MB/s) | produced (MB/s) | lag slope (MB/s) | lag max (MB) | lag at end (MB) | |\n"
            "| --- | --- | --- | --- | --- | --- |\n" + rows)
    return {"title": TITLE, "body": "\n\n".join(parts)}
