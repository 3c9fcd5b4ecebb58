"""Run overhead (the page's "Run overhead, one JVM flag at a time" and its target): a one-record window
materialized first thing in a fresh worker process, per variant of the driver's JVM flags (`JVM_VARIANTS`), and over
Spark Connect when a server is given; then the whole workload in one fresh process per `jvm_profile`, what a
deployed run of it costs."""

from __future__ import annotations

from typing import Any

from bench import workload as wl
from bench.common import Setup, say
from bench.config import BUCKET, JVM_VARIANTS, TOPIC
from bench.stats import Summary

ONE_TOPIC = "one"  # two records per partition: offsets 0 and 1 of partition 0 are the one-record windows


def one_record_topic(s: Setup) -> str:
    """The topic of the one-record windows (also the cold and warm runs of the memory figure)."""
    wl.create_topic(s.kafka, ONE_TOPIC)
    wl.produce(s.kafka, ONE_TOPIC, 2 * wl.PARTITIONS)  # round robin: offsets 0 and 1 of partition 0
    return ONE_TOPIC


def time_run_overhead(s: Setup, repeats: int) -> dict[str, list[dict[str, Any]]]:
    """Per JVM variant, `repeats` fresh processes (variants interleaved): the run's seconds (the Spark session
    starts inside it), from the process's start to the run's end, and the Python imports."""
    overhead: dict[str, list[dict[str, Any]]] = {v: [] for v in JVM_VARIANTS}
    for i in range(repeats):
        for variant, spec in JVM_VARIANTS.items():
            conf = {} if spec["cds"] else {"spark.driver.extraJavaOptions":
                                           "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
                                           if spec["jvm_profile"] == "short" else
                                           "-Xshare:auto"}  # the JVM's default: a no-op
            out = s.fresh("fresh.log", {"jvm_profile": spec["jvm_profile"], "spark_conf": conf}, cmd="one",
                          one_topic=ONE_TOPIC, prefix=f"one-{i}/")
            overhead[variant].append(out)
            wl.empty_prefix(s.s3, BUCKET, f"one-{i}/")
            say(f"run overhead, {variant}: {out['seconds']:.1f}s in the run (session start included); process "
                f"start to done {out['process_to_done_s']:.1f}s (imports {out['import_s']:.1f}s); JVM options "
                f"{out['java_options']!r}")
    return overhead


def time_run_overhead_connect(s: Setup, remote: str, repeats: int) -> list[dict[str, Any]]:
    """The one-record run in `repeats` fresh processes against a running Spark Connect server."""
    runs = [s.fresh("fresh.log", {"remote": remote}, cmd="one", one_topic=ONE_TOPIC, prefix=f"one-remote-{i}/")
            for i in range(repeats)]
    say(f"run overhead over Spark Connect ({remote}): {Summary.of([o['seconds'] for o in runs]).fmt(1)}s")
    return runs


def time_fresh_whole_workload(s: Setup) -> dict[str, dict[str, Any]]:
    """The whole workload in one fresh process, per jvm_profile: the run's and the process's seconds."""
    fresh_full: dict[str, dict[str, Any]] = {}
    for prof in ("short", "long"):
        out = s.fresh("fresh.log", {"jvm_profile": prof}, cmd="archive", topic=TOPIC, prefix=f"full-{prof}/",
                      windows=s.wlist)
        assert out["records"] == s.records, out
        fresh_full[prof] = out
        wl.empty_prefix(s.s3, BUCKET, f"full-{prof}/")
        say(f"whole workload in a fresh process, jvm_profile {prof}: run {out['seconds']:.1f}s, process "
            f"{out['process_s']:.1f}s")
    return fresh_full
