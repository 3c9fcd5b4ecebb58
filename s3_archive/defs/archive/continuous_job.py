"""A continuous archive's job and sensor (docs/sensors.md, "Continuous archive"): with `continuous:` set, each topic
is archived by ONE long-lived run of the job `archive_<name>_continuous` (continuous_loop.py), which the sensor
`archive_<name>_continuous` launches whenever the topic has none queued or running — at the start, after a crash,
after a cancel (turn the sensor off to stop archiving). The offsets sensor cuts no window of such an archive; its
upkeep (retries of lost manifests, the checks it reports) goes on.

Each window committed is an AssetMaterialization of the topic's archive asset, for its partition, with the same
metadata as the asset's own runs: the UI shows the windows as partitions, materialized by the one run.

Stopping: a cancel marks the run canceling and interrupts its process's main thread. The loop runs in a thread of
its own (`relay`): it ends between two batches, when it sees the run canceling or is told to stop; a commit it
started is finished or, when the commit finds the run canceled, not started (the manifest is the commit point; a
window whose manifest was not written is archived again by the next run).
"""

# No `from __future__ import annotations`: Dagster reads the context annotation at definition time.

import queue
import threading
import time
from collections.abc import Callable, Iterator

import dagster as dg

from s3_archive.archive.driver.archive_run import ArchiveContext
from s3_archive.archive.driver.coordinator import WindowResult
from s3_archive.archive.failures import permanent
from s3_archive.archive.protocol import S3Connection
from s3_archive.config.archive import ArchiveConfig
from s3_archive.defs.archive.assets import ENDED, failure, still_running
from s3_archive.defs.archive.continuous_loop import STOP_CHECK_S, ContinuousLoop, WindowsFailed
from s3_archive.defs.archive.partitions import GAVE_UP_TAG, archive_asset_key
from s3_archive.defs.metadata import typed
from s3_archive.io.iceberg_catalog import S3Endpoint
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.s3 import check_bucket
from s3_archive.io.s3_resource import S3Resource
from s3_archive.io.schema_registry import SchemaRegistryResource
from s3_archive.io.spark import SparkResource

STREAM_TAG = "s3_archive/continuous"  # the topic a continuous run archives
STATUS_EVERY_S = 1.0  # the run's status is read at most this often
ACTIVE = (dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
          dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING)


def continuous_job_name(cfg: ArchiveConfig) -> str:
    return f"archive_{cfg.name}_continuous"


def continuous_sensor_name(cfg: ArchiveConfig) -> str:
    return f"archive_{cfg.name}_continuous"


def loop_op_name(cfg: ArchiveConfig) -> str:
    return f"archive_{cfg.name}_loop"


def run_config(cfg: ArchiveConfig, topic: str) -> dict:
    return {"ops": {loop_op_name(cfg): {"config": {"topic": topic}}}}


def relay(loop: ContinuousLoop, stop: threading.Event) -> Iterator[WindowResult]:
    """`loop.run()` in a thread of its own, its results yielded here. Dagster delivers a cancel as an interrupt of the
    run's main thread, raised wherever that thread is in the op's code: here, never inside a window's write or commit,
    which go on in the loop's thread. On the interrupt the loop is told to stop (`stop`), the batch it is archiving
    ends, its committed windows are still yielded, then the interrupt is raised again. When Dagster abandons this
    generator instead (the interrupt came while it handled an event), the loop's batch still ends before it returns."""
    results: queue.Queue = queue.Queue()

    def work() -> None:
        try:
            for r in loop.run():
                results.put(r)
        except BaseException as e:  # handed to the op's thread, which fails the run with it
            results.put(e)
            return
        results.put(None)

    thread = threading.Thread(target=work, name=f"continuous-{loop.topic}", daemon=True)
    thread.start()
    interrupt: BaseException | None = None
    try:
        while True:
            try:
                item = results.get(timeout=STOP_CHECK_S)
            except queue.Empty:
                continue
            except (KeyboardInterrupt, dg.DagsterExecutionInterruptedError) as e:
                stop.set()
                interrupt = e
                continue
            if item is None:
                break
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        thread.join()
    if interrupt is not None:
        raise interrupt


def run_ended(instance: dg.DagsterInstance, run_id: str) -> Callable[[], bool]:
    """Whether the run is canceling or ended; read at most every STATUS_EVERY_S."""
    last = {"at": 0.0, "ended": False}

    def check() -> bool:
        if not last["ended"] and time.monotonic() - last["at"] >= STATUS_EVERY_S:
            run = instance.get_run_by_id(run_id)
            last["at"], last["ended"] = time.monotonic(), run is not None and run.status in ENDED
        return bool(last["ended"])

    return check


def build_continuous_job(cfg: ArchiveConfig) -> dg.JobDefinition:
    registry = cfg.value_decoding.registry or cfg.key_decoding.registry
    op = dg.op(name=loop_op_name(cfg), out={},
               config_schema={"topic": dg.Field(str, description=f"one of {', '.join(cfg.topics)}")},
               description=f"Cuts and archives the windows of one topic of archive {cfg.name!r} until canceled.")

    def body(context: dg.OpExecutionContext, spark: SparkResource, kafka: KafkaResource, s3: S3Resource,
             schema_registry: SchemaRegistryResource | None) -> Iterator[dg.AssetMaterialization]:
        topic = context.op_config["topic"]
        if topic not in cfg.topics:
            raise dg.Failure(description=f"topic {topic!r} is not a topic of archive {cfg.name!r} (its topics: "
                                         f"{', '.join(cfg.topics)})", allow_retries=False)
        try:
            client = s3.get_client()
            check_bucket(client, cfg.bucket, cfg.prefix)
            ctx = ArchiveContext(spark.session(), kafka, client, S3Connection.of_resource(s3),
                                 S3Endpoint.of_resource(s3), context.log,
                                 schema_registry.connection() if schema_registry is not None else None,
                                 still_running(context.instance, context.run_id))
        except Exception as e:
            raise failure(context, [f"{type(e).__name__}: {e}"], permanent(e)) from e
        stop, ended = threading.Event(), run_ended(context.instance, context.run_id)
        loop = ContinuousLoop(context.instance, cfg, topic, ctx, lambda: stop.is_set() or ended(),
                              run_id=context.run_id)
        yield from _materializations(context, loop, stop)
        # The loop ends only when the run is to stop (its status says canceled): it ends as canceled, as any
        # interrupted run does; nothing is left half committed.
        raise dg.DagsterExecutionInterruptedError("the continuous run was canceled")

    if registry:
        @op
        def _loop_decoded(context: dg.OpExecutionContext, spark: SparkResource, kafka: KafkaResource,
                          s3: S3Resource, schema_registry: SchemaRegistryResource,
                          ) -> Iterator[dg.AssetMaterialization]:
            yield from body(context, spark, kafka, s3, schema_registry)

        loop_op = _loop_decoded
    else:
        @op
        def _loop(context: dg.OpExecutionContext, spark: SparkResource, kafka: KafkaResource,
                  s3: S3Resource) -> Iterator[dg.AssetMaterialization]:
            yield from body(context, spark, kafka, s3, None)

        loop_op = _loop

    def _materializations(context: dg.OpExecutionContext, loop: ContinuousLoop, stop: threading.Event,
                          ) -> Iterator[dg.AssetMaterialization]:
        try:
            for r in relay(loop, stop):
                context.log.info(f"window {r.window.key}: {r.outcome}, {r.manifest.record_count} records")
                yield dg.AssetMaterialization(asset_key=archive_asset_key(loop.topic), partition=r.window.key,
                                              metadata=typed(r.metadata() | {"run_attempt": 1, "step_retry": 0}))
        except WindowsFailed as e:
            raise failure(context, [str(e)], all(permanent(x) for x in e.failed.values())) from e
        except dg.DagsterExecutionInterruptedError:
            context.log.info(f"topic {loop.topic!r}: the continuous run stops (interrupted) between windows")
            raise
        except Exception as e:
            raise failure(context, [f"{type(e).__name__}: {e}"], permanent(e)) from e
        context.log.info(f"topic {loop.topic!r}: the continuous run stops (canceled) between windows")

    @dg.job(name=continuous_job_name(cfg), tags={"s3_archive/archive": cfg.name},
            description=f"One long-lived run per topic of archive {cfg.name!r}: cuts its windows and archives them "
                        "in a loop, the Spark session and definitions kept warm (docs/sensors.md, Continuous "
                        "archive). Launched by the sensor of the same name.")
    def _job() -> None:
        loop_op()

    return _job


def requests(instance: dg.DagsterInstance, cfg: ArchiveConfig, now: float) -> tuple[list[dg.RunRequest], list[str]]:
    """A run request per topic with no continuous run queued or running, and why the others get none."""
    out, why = [], []
    for topic in cfg.topics:
        last = instance.get_run_records(dg.RunsFilter(job_name=continuous_job_name(cfg), tags={STREAM_TAG: topic}),
                                        limit=1)
        run = last[0].dagster_run if last else None
        if run is not None and run.status in ACTIVE:
            why.append(f"{topic}: run {run.run_id} is {run.status.value}")
            continue
        if run is not None and run.status == dg.DagsterRunStatus.FAILURE:
            if run.tags.get(GAVE_UP_TAG) == "true":
                why.append(f"{topic}: run {run.run_id} failed on an error no retry can fix; fix it and launch the "
                           f"job {continuous_job_name(cfg)} for this topic (or delete that run)")
                continue
            ended = last[0].end_time or 0.0
            if now - ended < cfg.retries.backoff_seconds:
                why.append(f"{topic}: run {run.run_id} failed; a new one in "
                           f"{cfg.retries.backoff_seconds - (now - ended):.0f} s")
                continue
        out.append(dg.RunRequest(run_config=run_config(cfg, topic), tags={STREAM_TAG: topic}))
    return out, why


def build_continuous_sensor(cfg: ArchiveConfig, job: dg.JobDefinition) -> dg.SensorDefinition:
    @dg.sensor(name=continuous_sensor_name(cfg), job=job, minimum_interval_seconds=cfg.sensor_interval_seconds,
               default_status=dg.DefaultSensorStatus.RUNNING if cfg.sensor_default == "running"
               else dg.DefaultSensorStatus.STOPPED,
               description=f"Keeps one run of {job.name} per topic of {', '.join(cfg.topics)}: launches one when "
                           "the topic has none queued or running (a failed one after retries.backoff_seconds).")
    def _continuous_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        out, why = requests(context.instance, cfg, time.time())
        if not out:
            return dg.SensorResult(skip_reason="; ".join(why) or "no topic")
        return dg.SensorResult(run_requests=out)

    return _continuous_sensor


def build_continuous(cfg: ArchiveConfig) -> tuple[dg.JobDefinition, dg.SensorDefinition]:
    job = build_continuous_job(cfg)
    return job, build_continuous_sensor(cfg, job)
