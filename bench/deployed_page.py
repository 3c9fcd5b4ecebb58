"""The page's first section, "Deployed: daemon, sensor, run processes", its targets and JSON keys, from
bench/deployed.py's figures (pure: no I/O, no s3_archive import)."""

from __future__ import annotations

from typing import Any

from bench.config import DEPLOYED_DEFAULT_ARM as DEFAULT_ARM
from bench.config import DEPLOYED_TARGETS
from bench.stats import Summary, verdict

TITLE = "Deployed: daemon, sensor, run processes"


def catchup_target(mb: float) -> float:
    """Catch-up over the warm archive of the same bytes, at most: 2× from 1 GB up, 4× below."""
    return DEPLOYED_TARGETS["catchup_vs_warm_1gb" if mb >= 1000 else "catchup_vs_warm"]


ARM_LABELS = {"local": "a Spark session per run (SparkResource's default)",
              "connect": "a Spark Connect server the deployment keeps (runs are thin clients)",
              "continuous": "`continuous: {}`: one long-lived run per topic cuts and archives in a loop"}


def arm_figures(fig: dict[str, Any], warm: dict[str, Any] | None, mb: float) -> dict[str, Any]:
    """One arm's figures, None where not measured."""
    out: dict[str, Any] = {}
    c, w = fig.get("catch_up"), warm
    out["catchup_s"] = round(c["seconds"], 2) if c else None
    out["catchup_vs_warm"] = round(c["seconds"] / w["seconds"], 2) if c and w else None
    one = fig.get("one_launcher")
    out["one_record_launcher_s"] = (
        round(Summary.of([r["process_s"] if r["process_s"] is not None else r["launch_to_end_s"]
                          for r in one]).median, 2) if one else None)
    cont = fig.get("one_continuous")
    if cont:  # no run per window: produce → the window materialized, the topic's run up
        out["one_record_launcher_s"] = round(Summary.of([r["produce_to_materialized_s"] for r in cont]).median, 2)
    cli = fig.get("one_cli")
    out["one_record_cli_s"] = round(Summary.of([r["seconds"] for r in cli]).median, 2) if cli else None
    s = fig.get("sustained")
    out["sustained_mb_s"] = s["best_mb_s"] if s else None
    if "error" in fig:
        out["error"] = fig["error"]
    return out


def figures(fig: dict[str, Any], mb: float) -> dict[str, Any]:
    """The JSON keys (all `deployed_…`): the default arm's figures as `deployed_<figure>`, every arm's as
    `deployed_<arm>_<figure>`."""
    arms = fig.get("arms", {})
    warm = fig.get("warm")
    out: dict[str, Any] = {"deployed_warm_s": round(warm["seconds"], 2) if warm else None,
                           "deployed_catchup_vs_warm_target": catchup_target(mb), "deployed_default_arm": DEFAULT_ARM}
    for arm, f in arms.items():
        for k, v in arm_figures(f, warm, mb).items():
            if arm == DEFAULT_ARM:
                out[f"deployed_{k}"] = v
            out[f"deployed_{arm}_{k}"] = v
    return out


def targets(fig: dict[str, Any], mb: float) -> dict[str, dict[str, Any]]:
    """Every arm's targets, the default arm's first."""

    def row(value: float | None, fmt: str, target: float, higher: bool, unit: str, note: str) -> dict[str, Any]:
        return {"value_fmt": "—" if value is None else fmt.format(value),
                "target_fmt": f"{'≥' if higher else '≤'} {target:g}{unit}",
                "verdict": "not measured" if value is None else verdict(value, target, higher), "note": note}

    out = {}
    arms = sorted(fig.get("arms", {}).items(), key=lambda a: a[0] != DEFAULT_ARM)
    for arm, a in arms:
        f = arm_figures(a, fig.get("warm"), mb)
        tag = f"deployed ({arm})"
        out |= {
            f"{tag} catch-up / warm archive, same bytes": row(
                f["catchup_vs_warm"], "{:.2f}", catchup_target(mb), False, "×",
                "first run's launch → lag 0, over the warm archive of the same records in the same run"),
        }
        if a.get("one_continuous"):
            out[f"{tag} one-record window, produce → committed and materialized"] = row(
                f["one_record_launcher_s"], "{:.1f} s", DEPLOYED_TARGETS["one_record_launcher_s"], False, " s",
                "no run per window: the topic's long-lived run cuts, writes and commits it")
        else:
            out |= {
                f"{tag} one-record run through the daemon's launcher": row(
                    f["one_record_launcher_s"], "{:.1f} s", DEPLOYED_TARGETS["one_record_launcher_s"], False, " s",
                    "the run's process, start to exit"),
                f"{tag} one-record run through `dagster asset materialize`": row(
                    f["one_record_cli_s"], "{:.1f} s", DEPLOYED_TARGETS["one_record_cli_s"], False, " s",
                    "the whole command"),
            }
        if a.get("sustained"):
            s = a["sustained"]
            out[f"{tag} sustained rate, lag bounded"] = row(
                f["sustained_mb_s"] or 0.0, "{:g} MB/s", DEPLOYED_TARGETS["sustained_mb_s"], True, " MB/s",
                f"highest rate of the search held {s['hold_s']:g} s each")
            if not f["sustained_mb_s"] and s.get("steps"):
                out[f"{tag} sustained rate, lag bounded"]["value_fmt"] = \
                    f"none (not even {s['steps'][0]['rate_mb_s']:g} MB/s)"
    return out


def section(fig: dict[str, Any], mb: float) -> dict[str, str]:
    """The section's title and body: what was run, then each arm."""
    if "skipped" in fig:
        return {"title": TITLE, "body": f"Not measured here: {fig['skipped']}."}
    w = fig.get("warm")
    parts = [
        "The archive as a deployment runs it (bench/deployed.py): `dagster-daemon run -w workspace.yaml` (the code "
        "server is its child) on the shipped deploy/dagster.postgres.yaml (PostgreSQL, the queued run coordinator, "
        "DefaultRunLauncher: each run its own process), the archive's offsets sensor turned on with `dagster "
        "sensor start`, every archive setting at its default (the topics and the bucket aside). One deployment per "
        "arm, one after the other: " + "; ".join(f"**{a}**: {ARM_LABELS.get(a, a)}" for a in fig.get("arms", {}))
        + f" (the default arm, whose figures are the headline keys: {DEFAULT_ARM})."
        + ("" if not w else f" The warm archive of the same records in the same run (bench/worker.py, a warm "
                            f"session, {w.get('windows', '?')} windows): **{w['seconds']:.1f} s**.")]
    for arm, a in fig.get("arms", {}).items():
        parts.append(f"### {arm}: {ARM_LABELS.get(arm, arm)}")
        parts += _arm(a, w, mb)
    return {"title": TITLE, "body": "\n\n".join(parts)}


def _cells(values: Any) -> str:
    return " | ".join("—" if v is None else f"{v:.2f}" for v in values)


def marks(timeline: list[list[Any]]) -> list[tuple[str, float]]:
    """A run's milestones after its launch (its PIPELINE_STARTING event), seconds: the step's start, the first log
    that cut windows (a continuous run cuts its own), the first and the last window materialized, the last
    consumer-group commit (lag 0 follows it)."""
    launch = next((t for t, kind, _ in timeline if kind == "PIPELINE_STARTING"), None)
    if launch is None:
        return []
    found: dict[str, float] = {}

    def mark(label: str, t: float, first: bool = True) -> None:
        if not first or label not in found:
            found[label] = round(t - launch, 2)

    for t, kind, msg in timeline:
        if kind == "STEP_START":
            mark("step start", t)
        elif kind == "log" and ": cut " in msg:
            mark("windows cut", t)
        elif kind == "ASSET_MATERIALIZATION":
            mark("first window materialized", t)
            mark("last window materialized", t, first=False)
        elif kind == "log" and "consumer group" in msg and "offsets now" in msg:
            mark("last consumer-group commit", t, first=False)
    return sorted(found.items(), key=lambda m: m[1])


def _arm(a: dict[str, Any], w: dict[str, Any] | None, mb: float) -> list[str]:
    parts = []
    if "error" in a:
        parts.append(f"**Failed**: {a['error'][:1500]}")
    c = a.get("catch_up")
    if c:
        labels = list(c["runs_detail"][0]) if c["runs_detail"] else []
        detail = "\n".join(f"| {i + 1} | {_cells(d.values())} |" for i, d in enumerate(c["runs_detail"]))
        ratio = "" if not w else (f", against {w['seconds']:.1f} s warm: **{c['seconds'] / w['seconds']:.2f}×** "
                                  f"(target ≤ {catchup_target(mb):g}×)")
        parts.append(
            f"**Catch-up.** {c['records']:,} records ({mb:g} MB) produced an hour old (a backlog: older than "
            "flush.interval_seconds, so each partition's rest is cut too), then the sensor turned on. From the "
            f"first run's launch (its RUN_STARTING event) to lag 0 in the archive's consumer group: "
            f"**{c['seconds']:.1f} s**{ratio}. The sensor cut {c['partitions']} windows into {c['runs']} run(s) "
            f"({', '.join(c['statuses'])}); the first run was requested {c['sensor_start_to_first_run_s']:.1f} s after "
            f"`dagster sensor start` began (a process loading the workspace) and launched {c['queued_to_launch_s']:.1f} s after it was queued (the "
            "daemon's dequeue). Each run's events (seconds):\n\n"
            "| run | " + " | ".join(labels) + " |\n|" + " --- |" * (len(labels) + 1) + "\n" + detail)
        for i, tl in enumerate(c.get("timelines", [])):
            ms = marks(tl)
            if ms and not any(kind in ("STEP_SUCCESS", "STEP_FAILURE") for _, kind, _ in tl):
                parts.append(f"Run {i + 1}'s step does not end (a long-lived run); its milestones after its launch "
                             "(seconds): " + "; ".join(f"{label} {t:.2f}" for label, t in ms) + ".")
    one, cli = a.get("one_launcher"), a.get("one_cli")
    if one:
        labels = list(one[0]["split"])
        rows = "\n".join(f"| {i + 1} | {_cells([r['process_s'], r['launch_to_end_s']])} | {_cells(r['split'].values())} |"
                         for i, r in enumerate(one))
        parts.append(
            "**A one-record window, fresh.** Through the daemon's launcher (the sensor cuts it, the daemon "
            "dequeues and launches it): the run's process from its start to its exit, and its events' split "
            "(seconds):\n\n| run | process | launch → run end | " + " | ".join(labels) + " |\n|"
            + " --- |" * (len(labels) + 3) + "\n" + rows)
    cont = a.get("one_continuous")
    if cont:
        parts.append(
            "**A one-record window, continuous.** Produced an hour old into a topic whose long-lived run is up: "
            "from the produce call to the window's materialization event (its manifest committed first), and the "
            "window's own write and commit (its metadata `seconds`): "
            + ", ".join(f"{r['produce_to_materialized_s']:.2f} s ({r['window_seconds']} s)" for r in cont) + ".")
    if cli:
        parts.append("Through `dagster asset materialize -m s3_archive.definitions --select kafka_archive/<topic> "
                     "--partition <window>` (the whole command, a fresh process): "
                     + ", ".join(f"{r['seconds']:.1f} s" for r in cli) + ".")
    s = a.get("sustained")
    if s:
        rows = "\n".join(f"| {st['rate_mb_s']:g} | {st['produced_mb_s']:g} | {st['lag_slope_mb_s']:g} | "
                         f"{st['lag_max_mb']:g} | {st['lag_end_mb']:g} | {'kept' if st['kept'] else 'NOT kept'} |"
                         for st in s["steps"])
        parts.append(
            f"**Sustained.** Records produced at a fixed rate for {s['hold_s']:g} s per rate, rates rising until "
            "one is not kept up with: kept means the produce rate was reached (≥ 90 %) and the lag's trend stayed "
            "under 10 % of the produce rate (the lag is a sawtooth: the slope of its lowest points after each drop; "
            "without two drops, of the hold's second half). Highest rate kept: "
            + (f"**{s['best_mb_s']:g} MB/s**" if s["best_mb_s"] is not None else
               f"**none** (not even the lowest, {s['steps'][0]['rate_mb_s']:g} MB/s)") + ". The lag is never 0 here: a "
            "partition's rest waits for a full window or flush.interval_seconds.\n\n"
            "| rate (MB/s) | produced (MB/s) | lag trend (MB/s) | lag max (MB) | lag at end (MB) | |\n"
            "| --- | --- | --- | --- | --- | --- |\n" + rows)
    return parts
