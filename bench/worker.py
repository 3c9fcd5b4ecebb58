"""The benchmark's Spark side, in its own process so that its JVM's memory is its own and a fresh process can be
timed: `python -m bench.worker STACK_JSON` serves JSON commands read line by line from stdin (a warm session kept
across commands), `python -m bench.worker STACK_JSON --once COMMAND_JSON` runs one command in a fresh process.
Each answer is one stdout line `@@RESULT <json>`.

Every archive goes through Dagster (`dg.materialize` of the archive asset), commit included. The names this
process takes from s3_archive are imported here, not through bench/under_test.py, so that a fresh process imports
only what it runs (its imports are part of the run-overhead figures); bench/tools/timeline.py times them from here.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
import traceback
from typing import Any

import dagster as dg

import s3_archive.archive.driver.coordinator as archive_mod
import s3_archive.defs.archive.assets as assets_mod
from bench.common import RESULT, RssSampler, descendants, process_start, status_kb
from s3_archive.config.archive import ArchiveConfig, FlushPolicy
from s3_archive.defs.archive.partitions import window_partitions
from s3_archive.defs.archive.sensors import build_offsets_sensor
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.s3_resource import S3Resource
from s3_archive.io.spark import KAFKA_MIN_PARTITIONS_CONF, SparkResource
from s3_archive.local.stack import LOCAL_AWS
from s3_archive.model.windows import OffsetWindow

log = logging.getLogger("bench.worker")


def jvm_pid() -> int | None:
    """The PID of the Py4J gateway JVM (driver and, in local mode, the executors too)."""
    from pyspark import SparkContext

    gw = SparkContext._gateway
    proc = getattr(gw, "proc", None) if gw is not None else None
    return proc.pid if proc is not None else None


class StageProfile:
    """Wraps the two heavy steps of `archive_windows` (the run's Spark job, whose tasks write the objects; each
    window's commit: LIST, strays, manifest) to time them. Instrumentation of the benchmark only: the code under
    test is not changed."""

    def __init__(self) -> None:
        self.stage_s = 0.0
        self.commit_s = 0.0
        self.lock = threading.Lock()
        self._orig = (archive_mod._write, archive_mod._commit_one)

    def _timed(self, fn, attr: str):
        def wrapper(*a, **kw):
            t = time.monotonic()
            try:
                return fn(*a, **kw)
            finally:
                with self.lock:
                    setattr(self, attr, getattr(self, attr) + time.monotonic() - t)
        return wrapper

    def __enter__(self) -> StageProfile:
        archive_mod._write = self._timed(self._orig[0], "stage_s")
        archive_mod._commit_one = self._timed(self._orig[1], "commit_s")
        return self

    def __exit__(self, *exc) -> None:
        archive_mod._write, archive_mod._commit_one = self._orig


class Worker:
    def __init__(self, stack: dict[str, str]) -> None:
        self.stack = stack
        self.kafka = KafkaResource(bootstrap_servers=stack["bootstrap_servers"])

    def spark(self) -> SparkResource:
        return SparkResource(s3_endpoint_url=self.stack["s3_endpoint_url"], remote=self.stack.get("remote"),
                             s3_access_key_id=LOCAL_AWS["AWS_ACCESS_KEY_ID"],
                             s3_secret_access_key=LOCAL_AWS["AWS_SECRET_ACCESS_KEY"], s3_path_style=True,
                             jvm_profile=self.stack.get("jvm_profile", "short"),
                             extra_conf=self.stack.get("spark_conf", {}))

    registry: Any = None  # the SchemaRegistryResource of a registry-decoding command

    def resources(self) -> dict[str, Any]:
        return {"kafka": self.kafka, "spark": self.spark(),
                **({"schema_registry": self.registry} if self.registry is not None else {}),
                "s3": S3Resource(endpoint_url=self.stack["s3_endpoint_url"], region_name=LOCAL_AWS["AWS_REGION"],
                                 aws_access_key_id=LOCAL_AWS["AWS_ACCESS_KEY_ID"],
                                 aws_secret_access_key=LOCAL_AWS["AWS_SECRET_ACCESS_KEY"], path_style=True)}

    def config(self, topic: str, prefix: str, **kw) -> ArchiveConfig:
        return ArchiveConfig(name="bench", topics=[topic], bucket=self.stack["bucket"], prefix=prefix, **kw)

    def materialize(self, cfg: ArchiveConfig, topic: str, windows: list[OffsetWindow],
                    instance: dg.DagsterInstance | None = None, tags: dict[str, str] | None = None,
                    partition_key: str | None = None) -> dict[str, Any]:
        """One run over `windows` (a partition range, as a UI backfill or the sensor's batched run does)."""
        instance = instance or dg.DagsterInstance.ephemeral()
        if windows:
            instance.add_dynamic_partitions(window_partitions(topic).name, [w.key for w in sorted(windows)])
            keys = sorted(w.key for w in windows)
            if len(keys) == 1:
                partition_key = keys[0]
            else:
                tags = {"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]}
        t = time.monotonic()
        res = dg.materialize([assets_mod.build_archive_asset(cfg, topic)], instance=instance,
                             resources=self.resources(), partition_key=partition_key, tags=tags)
        dt = time.monotonic() - t
        metas = [{k: v.value for k, v in e.materialization.metadata.items()}
                 for e in res.get_asset_materialization_events()]
        return {"seconds": dt, "windows": len(metas), "records": sum(m["records"] for m in metas),
                "bytes_read": sum(m["bytes_read"] for m in metas),
                "bytes_written": sum(m["bytes_written"] for m in metas), "objects": sum(m["objects"] for m in metas)}

    # --- commands ---

    def cmd_archive(self, topic: str, prefix: str, windows: list[list[int]], min_partitions: int | None = None,
                    read_path: str = "librdkafka", task_reader: str = "native") -> dict[str, Any]:
        """`min_partitions`: SparkResource.kafka_min_partitions for this call only (the slices a window is read
        and written in), set on the warm session's conf; `read_path`, `task_reader`: ArchiveConfig's."""
        ws = [OffsetWindow(*w) for w in windows]
        session = self.spark().session()
        if min_partitions:
            session.conf.set(KAFKA_MIN_PARTITIONS_CONF, str(min_partitions))
        try:
            with StageProfile() as prof, RssSampler(jvm_pid) as rss:
                out = self.materialize(self.config(topic, prefix, windows_per_run=min(500, len(ws)),
                                                   read_path=read_path, task_reader=task_reader), topic, ws)
        finally:
            session.conf.unset(KAFKA_MIN_PARTITIONS_CONF)
        pid = jvm_pid()
        return out | {"stage_s": prof.stage_s, "commit_s": prof.commit_s, "jvm_rss_max_mb": rss.max_kb / 1024,
                      "jvm_peak_mb": status_kb(pid, "VmHWM") / 1024 if pid else 0.0,
                      "python_peak_mb": status_kb("self", "VmHWM") / 1024}

    def cmd_format(self, topic: str, prefix: str, windows: list[list[int]], format: str,
                   read_path: str = "librdkafka") -> dict[str, Any]:
        """The run of `windows` archived in `format` at its defaults (csv with the fields key, value, offset, timestamp
        and headers)."""
        ws = [OffsetWindow(*w) for w in windows]
        extra: dict[str, Any] = {"format": format, "read_path": read_path}
        if format == "csv":
            extra["csv_fields"] = ["key", "value", "offset", "timestamp", "headers"]
        return self.materialize(self.config(topic, prefix, windows_per_run=min(500, len(ws)), **extra), topic, ws)

    def cmd_drop_table(self, topic: str, prefix: str, format: str) -> dict[str, Any]:
        """The topic's table of a table format (iceberg) dropped from its catalog, before the bench empties the
        archive's prefix: the prefix alone would leave the catalog naming a metadata file that no longer exists, and
        the next run of the archive would fail on it instead of creating the table again."""
        from s3_archive.io.iceberg_catalog import S3Endpoint, table_ident, use_catalog

        if format != "iceberg":
            return {"dropped": False}
        cfg = self.config(topic, prefix, format=format)
        session = self.spark().session()
        use_catalog(session, cfg, S3Endpoint.of_resource(self.resources()["s3"]))
        session.sql(f"DROP TABLE IF EXISTS {table_ident(cfg, topic)}")  # the catalog's entry; the prefix, its files
        return {"dropped": True}

    def cmd_decoded(self, topic: str, prefix: str, windows: list[list[int]], decoding: str,
                    registry_url: str, value: bool = True) -> dict[str, Any]:
        """The run of `windows` to parquet with `value_decoding.type` `decoding` (bytes, or a registry type decoded
        with the registry at `registry_url`), one window per partition; `value` false: `envelope.value` off (the
        raw value not stored beside the decoded columns)."""
        from s3_archive.io.schema_registry import SchemaRegistryResource

        ws = [OffsetWindow(*w) for w in windows]
        extra: dict[str, Any] = {} if value else {"envelope": {"value": False}}
        cfg = self.config(topic, prefix, windows_per_run=min(500, len(ws)), value_decoding={"type": decoding},
                          **extra)
        self.registry = SchemaRegistryResource(url=registry_url)
        try:
            return self.materialize(cfg, topic, ws)
        finally:
            self.registry = None

    def cmd_spark_read(self, topic: str, windows: list[list[int]]) -> dict[str, Any]:
        """Spark's own count of the same offset ranges (one batch read, as read_window reads): the floor of any
        design on Spark's Kafka source."""
        session = self.spark().session()
        parts: dict[int, list[int]] = {}
        for p, s, e in windows:
            lo, hi = parts.get(p, [s, e])
            parts[p] = [min(lo, s), max(hi, e)]
        t = time.monotonic()
        n = (session.read.format("kafka").options(**self.kafka.spark_options())
             .option("assign", json.dumps({topic: sorted(parts)}))
             .option("startingOffsets", json.dumps({topic: {str(p): r[0] for p, r in parts.items()}}))
             .option("endingOffsets", json.dumps({topic: {str(p): r[1] for p, r in parts.items()}}))
             .option("includeHeaders", "true").option("kafka.isolation.level", "read_committed")
             .option("failOnDataLoss", "false").load().count())
        return {"seconds": time.monotonic() - t, "records": n}

    def cmd_streaming(self, topic: str, prefix: str, triggers: int = 4) -> dict[str, Any]:
        """The "just write a streaming job" peer: Spark Structured Streaming, Kafka → Parquet on S3 with its
        checkpoint on S3, `trigger(availableNow=True)` over the whole topic in `triggers` micro-batches
        (maxOffsetsPerTrigger), each batch a commit. In this warm session, like the archive's figure."""
        session = self.spark().session()
        ends = self.kafka.offsets(topic, "latest")
        total = sum(ends.values())
        base = f"s3a://{self.stack['bucket']}/{prefix}"
        t = time.monotonic()
        query = (session.readStream.format("kafka").options(**self.kafka.spark_options())
                 .option("subscribe", topic).option("startingOffsets", "earliest")
                 .option("includeHeaders", "true").option("maxOffsetsPerTrigger", str(-(-total // triggers)))
                 .load()
                 .selectExpr("key", "value", "headers", "topic", "partition", "offset", "timestamp",
                             "timestampType AS timestamp_type")
                 .writeStream.format("parquet").option("path", base + "data")
                 .option("checkpointLocation", base + "checkpoint").trigger(availableNow=True).start())
        query.awaitTermination()
        visible = time.monotonic() - t
        batches = [(b["batchId"], b["numInputRows"], b["durationMs"].get("triggerExecution", 0), b["timestamp"])
                   for b in query.recentProgress]
        rows = sum(b[1] for b in batches)
        return {"seconds": visible, "records": rows, "expected": total,
                "batches": [{"id": b[0], "rows": b[1], "ms": b[2], "at": b[3]} for b in batches]}

    def cmd_one(self, one_topic: str, prefix: str) -> dict[str, Any]:
        """The run overhead: one one-record window first thing in this fresh process (the Spark session starts
        inside the run), and the seconds from this process's start to the end of that run."""
        import_s = time.time() - process_start()
        out = self.materialize(self.config(one_topic, prefix), one_topic, [OffsetWindow(0, 0, 1)])
        assert out["records"] == 1, out
        return out | {"import_s": import_s, "process_to_done_s": time.time() - process_start(),
                      "java_options": self.spark().spark_conf().get("spark.driver.extraJavaOptions", "")}

    def cmd_fresh(self, one_topic: str, prefix: str, topic: str, partition: int, records: int) -> dict[str, Any]:
        """In this fresh process: a one-record window with the Spark session starting inside the run (as in a
        deployed run: one process per run), a second one-record window with the session warm (the run overhead),
        then one window of `records` records: the JVM's peak resident set (driver = executors in local mode), the
        Python driver's, and the largest of the PySpark workers' (the write tasks: with read_path librdkafka they
        hold the records, not the JVM)."""
        cold = self.materialize(self.config(one_topic, prefix), one_topic, [OffsetWindow(0, 0, 1)])
        warm = self.materialize(self.config(one_topic, prefix), one_topic, [OffsetWindow(0, 1, 2)])
        assert cold["records"] == warm["records"] == 1, (cold, warm)
        pid = jvm_pid()
        before = status_kb(pid, "VmHWM") / 1024 if pid else 0.0
        with RssSampler(jvm_pid) as rss:
            out = self.materialize(self.config(topic, prefix), topic, [OffsetWindow(partition, 0, records)])
        return out | {"cold_s": cold["seconds"], "warm_s": warm["seconds"], "jvm_peak_before_mb": before,
                      "jvm_peak_mb": status_kb(pid, "VmHWM") / 1024 if pid else 0.0,
                      "jvm_rss_max_mb": rss.max_kb / 1024, "python_peak_mb": status_kb("self", "VmHWM") / 1024,
                      "workers_peak_mb": max((status_kb(p, "VmHWM") for p in descendants(pid)), default=0) / 1024
                      if pid else 0.0}

    def cmd_catchup(self, topic: str, prefix: str, window_records: int) -> dict[str, Any]:
        """100 windows behind: one tick of the offsets sensor cuts them and requests runs of windows_per_run
        windows; each run is executed like the daemon would (its own Spark session: the session is stopped after
        every run, so each run starts one — in the JVM this process already has, which is cheaper than the fresh
        process a deployed run gets)."""
        from pyspark.sql import SparkSession

        cfg = self.config(topic, prefix, flush=FlushPolicy(count=window_records))
        instance = dg.DagsterInstance.ephemeral()
        t0 = time.monotonic()
        with dg.build_sensor_context(instance=instance, resources={"kafka": self.kafka,
                                                                   "s3": self.resources()["s3"]}) as ctx:
            result = build_offsets_sensor(cfg)(ctx)
        for req in result.dynamic_partitions_requests or []:
            instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
        tick_s = time.monotonic() - t0
        apps: list[str] = []
        records = windows = 0
        for req in result.run_requests or []:
            out = self.materialize(cfg, topic, [], instance=instance, tags=dict(req.tags) if req.tags else None,
                                   partition_key=req.partition_key)
            records += out["records"]
            windows += out["windows"]
            session = SparkSession.getActiveSession() or SparkSession._instantiatedSession
            if session is not None:
                apps.append(session.sparkContext.applicationId)
                session.stop()
        return {"seconds": time.monotonic() - t0, "tick_s": tick_s, "runs": len(result.run_requests or []),
                "spark_sessions": len(set(apps)), "windows": windows, "records": records,
                "windows_per_run": cfg.windows_per_run}

    def handle(self, cmd: dict[str, Any]) -> dict[str, Any]:
        name = cmd.pop("cmd")
        return getattr(self, f"cmd_{name}")(**cmd)


def main() -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    stack = json.loads(sys.argv[1])
    worker = Worker(stack)
    if len(sys.argv) > 3 and sys.argv[2] == "--once":
        commands = [sys.argv[3]]
    else:
        commands = iter(sys.stdin.readline, "")
    for line in commands:
        if not line.strip():
            continue
        cmd = json.loads(line)
        if cmd.get("cmd") == "stop":
            break
        try:
            out = {"ok": True, **worker.handle(cmd)}
        except Exception as e:  # reported to the orchestrator, which stops the benchmark with it
            out = {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
        print(RESULT + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
