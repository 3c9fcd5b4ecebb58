"""The page of `make bench`: targets, sections and the JSON keys, from what bench/run.py measured (no I/O here). The
page holds the generated figures, their targets and what they mean; docs/performance.md explains where the time goes."""

from __future__ import annotations

import argparse
from typing import Any

from bench import deployed_page, many_topics_page, windows_page
from bench import workload as wl
from bench.config import (
    BYTES_FORMAT_RECORDS,
    JVM_PEAK_GROWTH_TARGET,
    REQUESTS_OVER_OBJECTS_PER_WINDOW,
    RUN_OVERHEAD_TARGET_S,
    TARGETS,
)
from bench.peers.common import PeerResult
from bench.stats import Measure, Summary, best_of, growth, paired_ratios, verdict

PERFORMANCE_PAGE = "docs/performance.md"  # where the run's time and CPU go (written from the profiles by hand)
PEER_LABELS = {
    "connect_iceberg": ("archive_vs_connect_iceberg", TARGETS["archive_vs_connect_iceberg"],
                        "Kafka Connect 4.1.1 + Iceberg sink 1.12.0"),
    "flink": ("archive_vs_flink", TARGETS["archive_vs_flink"], "Flink 2.0.0 SQL, Kafka → Parquet on s3://"),
    "spark_streaming": ("archive_vs_spark_streaming", TARGETS["archive_vs_spark_streaming"],
                        "Spark Structured Streaming, availableNow"),
}
PEER_NOTES = {
    "connect_iceberg": (
        "Kafka Connect 4.1.1 standalone (jvm/bench-connect) with Apache Iceberg's sink 1.12.0 as a plugin "
        "(jvm/bench-iceberg: S3FileIO on the AWS SDK v2 with its url-connection client, "
        "`iceberg.catalog.http-client.type=urlconnection`; a JDBC catalog on SQLite; hadoop-common 3.4.1), "
        "2 tasks, values as schemaless JSON (the sink needs a struct or a map), `KafkaMetadataTransform` adding "
        "topic, partition, offset and timestamp, commit interval 5 s. Visible: a table snapshot holds every "
        "record (the run polls the catalog every 0.5 s). Steady: between the first and last snapshot."),
    "flink": (
        "Flink 2.0.0 in one JVM (MiniCluster; jvm/bench-flink: flink-connector-kafka 4.0.0-2.0, "
        "flink-s3-fs-hadoop, flink-parquet, hadoop-common and hadoop-mapreduce-client-core 3.4.1) running "
        "bench/peers/FlinkSqlJob.java: a Kafka table (key and value raw bytes, headers, partition, offset, "
        "timestamp as metadata) bounded at the end offsets, inserted into a Parquet filesystem table on "
        "`s3://`, parallelism 2, checkpoints every 5 s. Visible: the job has finished (its last files are "
        "committed at the end of the input). Steady: between the first and last committed files."),
    "spark_streaming": (
        "Spark Structured Streaming in the benchmark's warm Spark session: `readStream` from Kafka (the envelope "
        "columns) → Parquet on s3a:// with its checkpoint on s3a://, `trigger(availableNow=True)` in 4 "
        "micro-batches (`maxOffsetsPerTrigger`), each a commit. Visible: the query has terminated. Steady: "
        "between the first and last batch commits."),
}


def _peer_seconds(n: int, res: PeerResult) -> float:
    """A peer's seconds for the workload at its steady rate, or until visible when it committed only once."""
    return n / res.steady_records_per_s if res.steady_records_per_s else res.visible_s


def _fmt_target(v: Summary | None, target: float, higher: bool = True, unit: str = "×") -> dict[str, Any]:
    return {"value": v, "value_fmt": "—" if v is None else v.fmt(2), "target": target,
            "target_fmt": f"{'≥' if higher else '≤'} {target}{unit}",
            "verdict": "not measured" if v is None else verdict(v.median, target, higher)}


def report(args: argparse.Namespace, x: dict[str, Any], command: str, wall_s: float) -> dict[str, Any]:
    m: dict[str, Measure] = x["measures"]
    n = x["n"]
    arch = m["archive"].seconds
    base = {"limit": m["limit"].seconds, "spark_read": m["spark_read"].seconds, "naive": best_of(m, "naive")}
    vs_limit = paired_ratios(arch, base["limit"])
    vs_read = paired_ratios(arch, base["spark_read"])
    vs_naive = paired_ratios(arch, base["naive"])
    vs_produce = paired_ratios(m["restore"].seconds, m["produce"].seconds)
    vs_produce_n = paired_ratios(m["restore"].seconds, best_of(m, "produce", parallel_only=True))
    targets: dict[str, dict[str, Any]] = {
        "archive / limit": _fmt_target(vs_limit, TARGETS["archive_vs_limit"])
        | {"note": f"the best of one and N parallel bare consumers and PUTs; stretch {TARGETS['archive_vs_limit_stretch']}"},
        "archive / Spark's own read": _fmt_target(vs_read, TARGETS["archive_vs_spark_read"]),
        "archive / naive": _fmt_target(vs_naive, TARGETS["archive_vs_naive"])
        | {"note": "the best of the naive script once and in N processes, per round"},
    }
    vs_one = paired_ratios(arch, m["consume"].seconds)
    targets["archive / one bare consumer"] = {"value": vs_one, "value_fmt": vs_one.fmt(2), "target_fmt": "",
                                              "verdict": "", "note": "the limit before it had parallel consumers"}
    json_out: dict[str, Any] = {"archive_vs_limit": round(vs_limit.median, 3),
                                "archive_vs_spark_read": round(vs_read.median, 3),
                                "archive_vs_naive": round(vs_naive.median, 3),
                                "archive_vs_one_consumer": round(vs_one.median, 3)}
    ratios: dict[str, Any] = {"archive_vs_limit": vs_limit.as_dict(), "archive_vs_spark_read": vs_read.as_dict(),
                              "archive_vs_naive": vs_naive.as_dict(), "restore_vs_produce": vs_produce.as_dict(),
                              "restore_vs_parallel_produce": vs_produce_n.as_dict(),
                              "archive_vs_one_consumer": vs_one.as_dict()}
    # read_path spark beside the default (librdkafka), in the same rounds; new over old is a speed-up
    old = m["archive_spark"].seconds
    for key, label in (("limit", "limit"), ("spark_read", "Spark's own read"), ("naive", "naive")):
        r = paired_ratios(old, base[key])
        targets[f"archive (read_path spark) / {label}"] = _fmt_target(r, TARGETS[f"archive_vs_{key}"])
        json_out[f"archive_spark_vs_{key}"] = round(r.median, 3)
        ratios[f"archive_spark_vs_{key}"] = r.as_dict()
    speedup = paired_ratios(arch, old)
    targets["read_path librdkafka / read_path spark"] = {"value": speedup, "value_fmt": speedup.fmt(2),
                                                         "target_fmt": "", "verdict": "",
                                                         "note": "the archive's speed-up from its read path"}
    json_out["archive_vs_archive_spark"] = round(speedup.median, 3)
    ratios["archive_vs_archive_spark"] = speedup.as_dict()
    # task_reader python beside the default (native), in the same rounds: the archive's and the readers' alone
    for key, new, old_key, label in (("archive_vs_archive_python", "archive", "archive_python", "archive"),
                                     ("read_native_vs_read_python", "read_native", "read_python", "reader alone")):
        r = paired_ratios(m[new].seconds, m[old_key].seconds)
        targets[f"task_reader native / task_reader python, {label}"] = {
            "value": r, "value_fmt": r.fmt(2), "target_fmt": "", "verdict": "",
            "note": "the speed-up of the native reader (no Python object per record)"}
        json_out[key] = round(r.median, 3)
        ratios[key] = r.as_dict()

    # --- peers ---
    peers = x["peers"]
    peer_rows, peer_json = [], {}
    fresh_short = x["fresh_full"]["short"]["process_s"]
    for name, (key, target, label) in PEER_LABELS.items():
        results: list[PeerResult] = peers.results.get(name, [])
        if not results:
            reason = peers.failed.get(name, "not selected (--peers)" if name not in peers.names else "no result")
            targets[f"archive / {label}"] = _fmt_target(None, target) | {"note": reason[:300]}
            json_out[key] = None
            json_out[f"{key}_reason"] = reason
            continue
        k = len(results)
        ratio = paired_ratios(arch[:k], [_peer_seconds(n, r) for r in results])
        basis = ("steady rate" if all(r.steady_records_per_s for r in results)
                 else "time until visible (fewer than two commits in some round)")
        # visible: the JVM peers start a JVM, as a fresh process of ours does; the streaming peer is warm, as ours
        own_visible = fresh_short if name != "spark_streaming" else Summary.of(arch).median
        visible = Summary.of([r.visible_s for r in results])
        targets[f"archive / {label}"] = _fmt_target(ratio, target) | {"note": f"{basis}; {k} round(s)"}
        json_out[key] = round(ratio.median, 3)
        json_out[f"{key}_visible"] = round(visible.median / own_visible, 3)
        ratios[key] = ratio.as_dict()
        steady = [r.steady_records_per_s for r in results if r.steady_records_per_s]
        peer_json[name] = {"visible_s": visible.as_dict(2),
                           "steady_records_per_s": Summary.of(steady).as_dict(0) if steady else None,
                           "commits": [r.commits for r in results], "objects": results[0].objects,
                           "bytes_written": results[0].bytes_written, "extra": results[0].extra,
                           "error_after": peers.failed.get(name)}
        peer_rows.append(
            f"| {label} | {visible.fmt(1)} | {Summary.of(steady).fmt(0) if steady else '—'} | "
            f"{Summary.of([len(r.commits) for r in results]).fmt(0)} | {results[0].objects} | "
            f"{results[0].bytes_written / 1e6:,.0f} | {ratio.fmt(2)} | {visible.median / own_visible:.2f} |")

    targets["restore / bare produce"] = _fmt_target(vs_produce, TARGETS["restore_vs_produce"])
    json_out["restore_vs_produce"] = round(vs_produce.median, 3)
    targets["restore / N parallel bare producers"] = _fmt_target(vs_produce_n, TARGETS["restore_vs_parallel_produce"]) \
        | {"note": "the best of the parallel producers (processes), per round"}
    json_out["restore_vs_parallel_produce"] = round(vs_produce_n.median, 3)
    python = m["restore_python"].seconds
    for key, label, base_s in (("produce", "bare produce", m["produce"].seconds),
                               ("parallel_produce", "N parallel bare producers",
                                best_of(m, "produce", parallel_only=True))):
        r = paired_ratios(python, base_s)
        targets[f"restore (producer python) / {label}"] = _fmt_target(r, TARGETS[f"restore_vs_{key}"]) \
            | {"note": "the same restore with `producer: python`, in the same rounds"}
        json_out[f"restore_python_vs_{key}"] = round(r.median, 3)
        ratios[f"restore_python_vs_{key}"] = r.as_dict()

    # --- run overhead, per JVM variant ---
    ov = x["overhead"]
    default = next(v for v in ov if v.endswith("(default)"))
    overhead = Summary.of([o["seconds"] for o in ov[default]])
    targets["run overhead (one-record window, fresh process)"] = {
        "value_fmt": overhead.fmt(1) + " s", "target_fmt": f"≤ {RUN_OVERHEAD_TARGET_S} s",
        "verdict": verdict(overhead.median, RUN_OVERHEAD_TARGET_S, False),
        "note": "the run, Spark session start included; default JVM flags (jvm_profile short)"}
    json_out["run_overhead_s"] = round(overhead.median, 2)
    json_out["run_overhead_process_s"] = round(Summary.of([o["process_to_done_s"] for o in ov[default]]).median, 2)
    json_out["run_overhead_by_jvm_flags_s"] = {v: round(Summary.of([o["seconds"] for o in os_]).median, 2)
                                               for v, os_ in ov.items()}
    if x.get("overhead_remote"):
        json_out["run_overhead_connect_s"] = round(Summary.of([o["seconds"] for o in x["overhead_remote"]]).median, 2)
    else:
        json_out["run_overhead_connect_s"] = None
        json_out["run_overhead_connect_reason"] = "no Spark Connect server given (--spark-remote)"
    ov_rows = "\n".join(
        f"| {v} | `{os_[0]['java_options'] or '(none)'}` | {Summary.of([o['seconds'] for o in os_]).fmt(1)} | "
        f"{Summary.of([o['process_to_done_s'] for o in os_]).fmt(1)} | {Summary.of([o['import_s'] for o in os_]).fmt(1)} |"
        for v, os_ in ov.items())

    # --- S3 requests per window ---
    rq = x["requests"]
    per_window = Summary.of([q["requests"] / q["windows"] for q in rq])
    objects_per_window = Summary.of([q["objects"] / q["windows"] for q in rq])
    allowed = objects_per_window.median + REQUESTS_OVER_OBJECTS_PER_WINDOW
    targets["S3 requests per window"] = {
        "value_fmt": per_window.fmt(1),
        "target_fmt": f"≤ objects + {REQUESTS_OVER_OBJECTS_PER_WINDOW} = {allowed:.1f}",
        "verdict": verdict(per_window.median, allowed, False),
        "note": f"every request moto logged during the run (s3a's and boto3's), over its windows; "
                f"{objects_per_window.median:.1f} objects per window"}
    json_out["s3_requests_per_window"] = round(per_window.median, 2)
    json_out["objects_per_window"] = round(objects_per_window.median, 2)

    # --- memory ---
    peaks = {k * x["memory_base"]: v["jvm_peak_mb"] for k, v in x["memory"].items()}
    py_peaks = {k * x["memory_base"]: v["python_peak_mb"] for k, v in x["memory"].items()}
    worker_peaks = {k * x["memory_base"]: v.get("workers_peak_mb", 0.0) for k, v in x["memory"].items()}
    json_out["workers_peak_mb"] = {f"{k}x": round(v.get("workers_peak_mb", 0.0), 1) for k, v in sorted(x["memory"].items())}
    if all(worker_peaks.values()):
        json_out["workers_peak_16x_over_1x"] = round(growth(worker_peaks), 3)
        targets["PySpark worker peak memory, 16× vs 1× window"] = {
            "value_fmt": f"{growth(worker_peaks):.2f}×", "target_fmt": f"≤ {JVM_PEAK_GROWTH_TARGET}×",
            "verdict": verdict(growth(worker_peaks), JVM_PEAK_GROWTH_TARGET, False),
            "note": "the largest write task's Python worker (VmHWM): with read_path librdkafka it reads its "
                    "slice, holding the read-ahead, a batch and a Parquet row group"}
    mem_growth = growth(peaks)
    targets["JVM peak memory, 16× vs 1× window"] = {
        "value_fmt": f"{mem_growth:.2f}×", "target_fmt": f"≤ {JVM_PEAK_GROWTH_TARGET}×",
        "verdict": verdict(mem_growth, JVM_PEAK_GROWTH_TARGET, False),
        "note": f"JVM peak resident set (VmHWM); Python driver {growth(py_peaks):.2f}×, largest PySpark worker "
                f"{growth(worker_peaks):.2f}×" if all(worker_peaks.values()) else
                f"JVM peak resident set (VmHWM); Python driver {growth(py_peaks):.2f}×"}
    json_out["jvm_peak_16x_over_1x"] = round(mem_growth, 3)
    json_out["python_peak_16x_over_1x"] = round(growth(py_peaks), 3)
    json_out["ratios_min_median_max"] = ratios
    json_out["peers"] = peer_json

    # --- formats ---
    fmt_rows, fmt_json = [], {}
    for fmt, out in x["formats"].items():
        if "error" in out:
            fmt_rows.append(f"| {fmt} | — | — | — | — | — | — | {out['error'][:200]} |")
            fmt_json[fmt] = {"error": out["error"]}
            continue
        rps = out["records"] / out["seconds"]
        fmt_json[fmt] = {"seconds": round(out["seconds"], 2), "records": out["records"], "records_per_s": round(rps),
                         "mb_per_s": round(out["payload"] / out["seconds"] / 1e6, 2), "objects": out["objects"],
                         "bytes_written": out["bytes_written"], "s3_requests": out["requests"],
                         "read_path_spark_seconds": round(out["spark_seconds"], 2)}
        fmt_rows.append(f"| {fmt} | {out['records']:,} | {out['seconds']:.2f} | {out['spark_seconds']:.2f} | {rps:,.0f} | "
                        f"{out['payload'] / out['seconds'] / 1e6:.1f} | {out['objects']:,} | "
                        f"{out['bytes_written'] / 1e6:,.1f} MB, {out['requests']:,} S3 requests |")
    json_out["formats"] = fmt_json
    reg_body = _registry(x.get("registry"), targets, json_out)
    from bench.integrity import section as integrity_section

    integrity_body = integrity_section(x.get("integrity"), targets, json_out)

    c, tick = x["catchup"], x["tick"]
    json_out |= {"catchup_100_spark_sessions": c["spark_sessions"], "catchup_100_runs": c["runs"],
                 "catchup_100_s": round(c["seconds"], 1), "sensor_tick_s_100k": round(Summary.of(tick["tick_s"]).median, 3),
                 "driver_peak_mb": {f"{k}x": round(v["jvm_peak_mb"], 1) for k, v in sorted(x["memory"].items())},
                 "fresh_process_whole_workload_s": {p: round(o["process_s"], 2) for p, o in x["fresh_full"].items()},
                 "windows_scale": (windows_page.figures(x["windows_figures"]["figures"])
                                   if "figures" in x["windows_figures"] else x["windows_figures"])}
    if "figures" in x["windows_figures"]:
        targets |= windows_page.targets(x["windows_figures"]["figures"])
    many = x.get("many_topics", {"skipped": "not run"})
    json_out["many_topics"] = many
    try:
        many_body = many_topics_page.section(many)
        if "error" not in many and "skipped" not in many:
            targets |= many_topics_page.targets(many)
    except (KeyError, TypeError, ValueError) as e:  # a figure missing: the rest of the page still gets written
        many_body = f"Not shown: the many-topics figures lack {e}"
    json_out["disaster_recovery"] = x.get("recovery", {"skipped": "not run"})

    prof = x["profile"]
    stage, commit = Summary.of([p["stage_s"] for p in prof]), Summary.of([p["commit_s"] for p in prof])
    mem_rows = "\n".join(
        f"| {k}× | {k * x['memory_base']:,} | {k * x['memory_base'] * wl.record_bytes() / 1e6:,.0f} | "
        f"{v['jvm_peak_mb']:,.0f} | {v['jvm_rss_max_mb']:,.0f} | {v['python_peak_mb']:,.0f} | "
        f"{v.get('workers_peak_mb', 0):,.0f} | {v['seconds']:.1f} |"
        for k, v in sorted(x["memory"].items()))
    ff = x["fresh_full"]
    sections = [
        {"title": "Peers", "body": (
            "Each peer reads the same topic from the same broker and writes to the same moto S3, once per round, "
            "right after the other contenders of that round. Commit cadence dominates small runs, so two figures "
            "each: the time until every record is visible to a reader (from the peer's process start: it starts "
            "a JVM, as a fresh run process of ours does), and the steady rate between its first and last commit. "
            "The ratio `archive_vs_<peer>` is s3-archive's warm-session throughput over the peer's steady rate "
            "(its time until visible when it committed only once); `archive_vs_<peer>_visible` (JSON) is the "
            "peer's time until visible over s3-archive's whole workload in a fresh process "
            f"({fresh_short:.1f} s; the warm run for the streaming peer, which runs in the warm session).\n\n"
            "| peer | until visible (s) | steady records/s | commits | objects | MB written | archive / peer "
            "(steady) | peer visible / ours |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n"
            + "\n".join(peer_rows) + "\n\n"
            + "\n".join(f"- **{PEER_LABELS[k][2]}**: {PEER_NOTES[k]}" for k in PEER_LABELS)
            + "".join(f"\n- **{PEER_LABELS[k][2]} failed**: {v}" for k, v in peers.failed.items())
            + "\n- Aiven's and Confluent's S3 sinks cannot be had here (not on Maven Central), so "
              "`archive_vs_aiven` is gone: one ratio per peer above.")},
        {"title": "Every format", "body": (
            "The rounds' windows archived once per format in the warm session (format `bytes` writes one object "
            f"per record, so it archives {BYTES_FORMAT_RECORDS} records per partition), through the same asset, "
            "on the default read path (librdkafka), then with read_path spark (seconds only).\n\n"
            "| format | records | seconds | seconds, read_path spark | records/s | MB/s | objects | written |\n"
            "| --- | --- | --- | --- | --- | --- | --- | --- |\n" + "\n".join(fmt_rows))},
        {"title": "Schema Registry decoding", "body": reg_body},
        {"title": "Tamper evidence", "body": integrity_body},
        {"title": "Run overhead, one JVM flag at a time", "body": (
            "A one-record window materialized first thing in a fresh process (`dg.materialize`, commit included): "
            "the seconds of that run (the Spark session starts inside it, as in a deployed run), and from the "
            "process's start (Python imports included) to the run's end, per variant of the driver's JVM flags "
            f"({args.overhead_repeats} fresh processes each, min / median / max). The AppCDS archive is built by "
            "`scripts/setup` (`python -m s3_archive.local.cds`) from a training run; `jvm_profile` short (C1 only) "
            "is SparkResource's default, long keeps C2 for a long-lived session.\n\n"
            "| variant | driver JVM options | run (s) | process start → done (s) | Python imports (s) |\n"
            "| --- | --- | --- | --- | --- |\n" + ov_rows + "\n\n"
            f"The whole workload ({n:,} records, {len(x['windows'])} windows) in one fresh process: jvm_profile "
            f"short {ff['short']['seconds']:.1f} s in the run ({ff['short']['process_s']:.1f} s process), long "
            f"{ff['long']['seconds']:.1f} s ({ff['long']['process_s']:.1f} s process): what C1-only costs a large "
            "run against what it saves a small one.")},
        {"title": "Profile of the archive run", "body": (
            "s3-archive's run, split with timers wrapped around the two heavy calls of `archive_windows` "
            "(bench/worker.py): the run's Spark job, whose tasks read Kafka and write every object, and the "
            "windows' commits (LIST, strays, manifest; summed: they run at once, so the sum may exceed their wall "
            f"time): the Spark job took {stage.fmt(1)} s, the commits {commit.fmt(1)} s, per run of "
            f"{len(x['windows'])} windows; the run's wall time was {Summary.of(arch).fmt(1)} s.\n\n"
            "Where the run's time and CPU go, why each target is or is not met, and the commands that measure them: "
            f"{PERFORMANCE_PAGE}.")},
        {"title": "Catch-up of 100 windows", "body": (
            f"100 windows of {args.catchup_window_records:,} records (25 per partition) behind: one tick of the "
            f"offsets sensor cut them in {c['tick_s']:.2f} s and requested {c['runs']} runs of at most "
            f"windows_per_run = {c['windows_per_run']} windows. Executing those runs one after the other with "
            f"`dg.materialize`, stopping the Spark session after each run, took {c['seconds']:.1f} s in all, with "
            f"{c['spark_sessions']} Spark sessions started (one per run).")},
        {"title": "Memory as the window grows", "body": (
            "One window of partition 1, materialized in a fresh process per size (default JVM flags). In local mode "
            "the driver and the executors are one JVM. Peak resident set from /proc (VmHWM of the JVM; the 0.2 "
            "s-sampled maximum during this window's run; the Python driver's VmHWM; the largest VmHWM of the JVM's "
            "PySpark workers, the write tasks, which read the records with `read_path: librdkafka`).\n\n"
            "| window | records | MB | JVM peak RSS (MB) | JVM RSS sampled max (MB) | Python driver peak (MB) | "
            "PySpark worker peak (MB) | seconds |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n" + mem_rows)},
        {"title": "Sensor tick with 100k windows", "body": (
            f"{tick['windows']:,} windows (dynamic partitions) of a 4-partition topic in a temporary sqlite Dagster "
            f"instance (adding them took {tick['add_partitions_s']:.1f} s); the offsets sensor evaluated "
            f"{len(tick['tick_s'])} times: {Summary.of(tick['tick_s']).fmt(2)} s per tick.")},
        {"title": "Many topics", "body": many_body},
        {"title": "Disaster recovery", "body": _recovery(json_out["disaster_recovery"])},
        {"title": "Years of windows", "body": _windows_body(x["windows_figures"])},
        {"title": "What the figures mean", "body": (
            "- The limit is the slower of the best bare consume (one consumer, or N in parallel processes, each a "
            "share of the partitions) and the best bare PUT of the same bytes (threads, or N processes), per round; "
            "the naive baseline is the best of the script once and in N processes. Everything "
            "(broker, moto, the contender) shares the same 2 cores, so none of the contenders reaches it.\n"
            "- moto is a Python server keeping objects in memory on the same cores; every contender writes to it.\n"
            "- Spark's own read is a batch `count()` of the same offset ranges with the archive's source options: "
            "the floor of any design on Spark's Kafka source.\n"
            "- The s3-archive figure is a run in a warm Spark session (after one archive of the whole workload, not "
            "counted) of the JIT a kept "
            "session of its read path wants (docs/performance.md): jvm_profile short (C1 only, SparkResource's "
            "default) for the default read path and the line formats, long (C2) where the records pass through "
            "Spark's JVM (read_path spark, iceberg, Spark's own read, the streaming peer); the cost of a session "
            "start is in the run-overhead figures.\n"
            "- Records/s and MB/s are over the workload's records and their key + value + header bytes.")},
    ]
    # The deployed shape leads: its targets, its JSON keys and its section come first.
    dep = x.get("deployed") or {"skipped": "not run"}
    if "skipped" not in dep:
        targets = deployed_page.targets(dep, args.mb) | targets
        json_out = deployed_page.figures(dep, args.mb) | {"deployed": dep} | json_out
    lead = [deployed_page.section(dep, args.mb)]
    workload = {
        "records": n, "bytes": x["payload"], "mb": f"{args.mb:g}", "value_bytes": wl.VALUE_BYTES,
        "produce_s": x["produce_s"],
        "size_note": ("The default 200 MB keeps `make bench` within about 30 minutes here; "
                      "`BENCH_ARGS=\"--mb 1000\"` runs 1 GB.")}
    return {"command": command, "repeats": args.repeats, "started": x["started"], "wall_s": wall_s,
            "machine": x["machine"], "workload": workload, "measures": m,
            "throughput_order": list(m),
            "targets": targets, "lead_sections": lead, "sections": sections, "json": json_out}


def _windows_body(w: dict[str, Any]) -> str:
    if "figures" in w:
        return windows_page.section(w["figures"])["body"]
    return f"Not measured here: {w.get('skipped') or 'bench/windows_scale.py failed: ' + w['error']}."


SIZE_KEYS = ("archive_vs_limit", "archive_vs_spark_read", "archive_vs_naive", "archive_spark_vs_limit",
             "archive_spark_vs_spark_read", "archive_spark_vs_naive", "archive_vs_archive_spark",
             "archive_vs_archive_python", "read_native_vs_read_python",
             "archive_vs_connect_iceberg",
             "archive_vs_flink", "archive_vs_spark_streaming", "restore_vs_produce", "restore_vs_parallel_produce",
             "restore_python_vs_produce", "restore_python_vs_parallel_produce",
             "archive_vs_one_consumer", "run_overhead_s",
             "s3_requests_per_window", "jvm_peak_16x_over_1x", "deployed_catchup_s", "deployed_warm_s",
             "deployed_catchup_vs_warm", "deployed_connect_catchup_vs_warm", "deployed_one_record_launcher_s",
             "deployed_connect_one_record_launcher_s", "deployed_one_record_cli_s", "deployed_sustained_mb_s")


def sizes_section(runs: list[tuple[argparse.Namespace, dict[str, Any]]], json_dir: str) -> dict[str, str]:
    """The headline figures of every size run by this command, side by side; `json_dir`: where the JSON went."""
    head = "| figure | " + " | ".join(f"{a.mb:g} MB ({a.repeats} repeat{'s' * (a.repeats > 1)})" for a, _ in runs)
    rows = [head + " |", "|" + " --- |" * (len(runs) + 1)]
    for k in SIZE_KEYS:
        vals = [r["json"].get(k) for _, r in runs]
        rows.append(f"| `{k}` | " + " | ".join("—" if v is None else f"{v:g}" for v in vals) + " |")
    rows.append("| minutes | " + " | ".join(f"{r['wall_s'] / 60:.1f}" for _, r in runs) + " |")
    return {"title": "Sizes side by side", "body": (
        "Every size of this command (`--mb`), each a full run of its own (its own broker, moto and workload); the "
        f"page above is the {runs[0][0].mb:g} MB run, `{json_dir}/benchmarks-<size>mb.json` has each run's "
        "figures.\n\n" + "\n".join(rows))}


def _registry(r: dict[str, Any] | None, targets: dict[str, dict[str, Any]], json_out: dict[str, Any]) -> str:
    """The Schema Registry row: Avro decoded to parquet against raw parquet of the same records (bench/registry.py)."""
    if r is None:
        return "Not measured in this run (`--registry` off)."
    from bench.registry import summary

    fig = summary(r)
    json_out["registry"] = fig
    if "decoded_vs_raw" not in fig:
        targets["Avro (registry) decoded / raw parquet"] = {"value_fmt": "—", "target_fmt": f"≥ {r['target']}×",
                                                            "verdict": "NOT reached",
                                                            "note": "; ".join(fig["errors"])[:300]}
        return "Failed: " + "; ".join(fig["errors"])[:2000]
    lo, med, hi = fig["decoded_vs_raw"]
    targets["Avro (registry) decoded / raw parquet"] = {
        "value_fmt": f"{lo:.2f} / {med:.2f} / {hi:.2f}", "target_fmt": f"≥ {r['target']}×",
        "verdict": verdict(med, r["target"]), "note": "the same Confluent-framed Avro records, paired per round"}
    json_out["registry_decoded_vs_raw"] = med
    raw, dec = fig["raw_records_per_s"], fig["decoded_records_per_s"]
    return ("The workload's records as Confluent-framed Avro (written by confluent-kafka's AvroSerializer against "
            f"the bench's Apicurio Registry; {fig['records']:,} records, {fig['payload_mb']} MB), archived to "
            "parquet in the warm session once per round raw (`value_decoding: bytes`) and once decoded into typed "
            "columns (`value_decoding: avro`, decoded in the write tasks), rounds interleaved.\n\n"
            "| archive | records/s (min / median / max) |\n| --- | --- |\n"
            f"| raw parquet | {raw[0]:,} / {raw[1]:,} / {raw[2]:,} |\n"
            f"| Avro decoded to parquet | {dec[0]:,} / {dec[1]:,} / {dec[2]:,} |\n\n"
            f"Decoded over raw, paired per round: {lo:.2f} / {med:.2f} / {hi:.2f} (target ≥ {r['target']}×).")


def _recovery(fig: dict[str, Any]) -> str:
    """bench/recovery.py's rounds: the recovery's time (RTO) beside the plain restore of the same windows."""
    if "rounds" not in fig or not fig["rounds"]:
        return f"Not run: {fig.get('error') or fig.get('skipped') or 'no rounds'}"
    rows = "\n".join(f"| {r['bytes'] / 1e6:,.0f} MB | {r['plain_restore_s']:.1f} s | {r['recovery_s']:.1f} s | "
                     f"{r['ratio']:.2f}x | {r['groups_set']} set, {r['groups_skipped']} with a topic skipped |"
                     for r in fig["rounds"])
    return (f"{fig['mb']:g} MB of the workload over {fig['topics']} topics of 4 partitions, {fig['groups']} consumer "
            "groups committed mid-partition, archived and captured; then on an empty second broker the plain restore "
            "of every window (into topics made beforehand) and the recovery (`dr_recover`'s work: topics created, "
            "windows restored with the offset map, every group's offsets translated and set). bench/recovery.py.\n\n"
            "| restored | plain restore | recovery (RTO) | ratio | groups |\n|---|---|---|---|---|\n" + rows)
