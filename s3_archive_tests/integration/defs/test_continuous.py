"""A continuous archive (defs/archive/continuous_job.py) against the real broker, moto and Spark, in an in-process
instance: one long-lived run archives what is produced while it runs, exactly once, a materialization per window,
and stops on cancel; a loop that dies mid-commit loses and duplicates nothing once a new run takes over."""

import logging
import threading
import time
from collections import Counter

import dagster as dg
import pytest

from s3_archive.archive.driver.archive_run import ArchiveContext, ArchiveHooks
from s3_archive.archive.driver.commit import CommitStep
from s3_archive.config.archive import ArchiveConfig, FlushPolicy
from s3_archive.config.continuous import ContinuousOptions
from s3_archive.defs.archive.continuous_job import STREAM_TAG, build_continuous_job, continuous_job_name, run_config
from s3_archive.defs.archive.continuous_loop import ContinuousLoop
from s3_archive.defs.archive.partitions import archive_asset_key, window_partitions
from s3_archive.defs.archive.sensors import build_offsets_sensor
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.integration.archive_helpers import archived_records, manifest, resources, s3_resource
from s3_archive_tests.kafka_helpers import create_topic, produce

WAIT_S = 240


def config(services, topic: str, unique: str) -> ArchiveConfig:
    return ArchiveConfig(name="cont", topics=[topic], bucket=services.bucket, prefix=f"continuous/{unique}/",
                         flush=FlushPolicy(count=10, interval_seconds=None),
                         continuous=ContinuousOptions(poll_seconds=0.2))


class Running:
    """The continuous job of `cfg` for `topic`, executed in a thread (as its run process would run it)."""

    def __init__(self, cfg: ArchiveConfig, topic: str, instance: dg.DagsterInstance, res: dict) -> None:
        self.cfg, self.topic, self.instance = cfg, topic, instance
        self.result: dg.ExecuteInProcessResult | None = None
        job = build_continuous_job(cfg)
        self.thread = threading.Thread(target=lambda: setattr(self, "result", job.execute_in_process(
            run_config=run_config(cfg, topic), instance=instance, resources=res, raise_on_error=False,
            tags={STREAM_TAG: topic})), daemon=True)
        self.thread.start()

    def run(self) -> dg.DagsterRun:
        runs = self.instance.get_runs(dg.RunsFilter(job_name=continuous_job_name(self.cfg),
                                                    tags={STREAM_TAG: self.topic}), limit=1)
        assert runs, "the continuous run was not created"
        return runs[0]

    def wait_materialized(self, n: int) -> None:
        deadline = time.monotonic() + WAIT_S
        while len(self.instance.get_materialized_partitions(archive_asset_key(self.topic))) < n:
            assert self.thread.is_alive(), f"the continuous run ended early: {self.result and self.result.success}"
            assert time.monotonic() < deadline, f"fewer than {n} windows materialized after {WAIT_S}s"
            time.sleep(0.2)

    def cancel(self) -> dg.DagsterRun:
        self.instance.report_run_canceling(self.run())
        self.thread.join(60)
        assert not self.thread.is_alive(), "the continuous run did not stop within 60 s of its cancel"
        return self.run()


def materializations(instance: dg.DagsterInstance, topic: str) -> Counter:
    """How many times each window (partition key) was materialized."""
    records = instance.fetch_materializations(archive_asset_key(topic), limit=10_000).records
    return Counter(r.partition_key for r in records)


def windows_of(instance: dg.DagsterInstance, topic: str) -> list[OffsetWindow]:
    return sorted(OffsetWindow.parse(k) for k in instance.get_dynamic_partitions(window_partitions(topic).name))


def assert_exactly_once(s3, kafka, cfg: ArchiveConfig, topic: str, instance: dg.DagsterInstance,
                        ends: dict[int, int]) -> None:
    """Every produced offset archived once, every window a partition materialized once, contiguous from 0, and the
    consumer group at the end of each partition."""
    got = Counter((r.partition, r.offset) for r in archived_records(s3, cfg, topic))
    assert got == Counter({(p, o): 1 for p, end in ends.items() for o in range(end)})
    windows = windows_of(instance, topic)
    assert materializations(instance, topic) == Counter({w.key: 1 for w in windows})
    for p, end in ends.items():
        mine = [w for w in windows if w.partition == p]
        assert [(w.start, w.end) for w in mine] == [(o, o + 10) for o in range(0, end, 10)]
    assert kafka.group_offsets(cfg.group_id, topic, sorted(ends)) == ends


def test_one_run_archives_what_is_produced_while_it_runs_and_stops_on_cancel(kafka, services, spark_resource, s3,
                                                                             unique):
    topic = create_topic(kafka, f"cont-{unique}", partitions=2)
    cfg = config(services, topic, unique)
    produce(kafka, topic, [(0, b"k", b"a" * 100, [])] * 20 + [(1, None, b"b", [])] * 10)
    instance = dg.DagsterInstance.ephemeral()
    running = Running(cfg, topic, instance, resources(services, kafka, spark_resource))
    running.wait_materialized(3)
    # produced while the run is up: the same run cuts and archives them, no sensor tick in between
    produce(kafka, topic, [(0, b"k", b"c" * 100, [])] * 20 + [(1, None, b"d", [])] * 10)
    running.wait_materialized(6)
    assert len(instance.get_runs()) == 1
    # the offsets sensor cuts nothing of a continuous archive (its upkeep still runs)
    produce(kafka, topic, [(0, None, b"e", [])] * 10)
    with dg.build_sensor_context(instance=instance, resources={"kafka": kafka, "s3": s3_resource(services)}) as ctx:
        tick = build_offsets_sensor(cfg)(ctx)
    assert isinstance(tick, dg.SensorResult) and not tick.run_requests and not tick.dynamic_partitions_requests
    running.wait_materialized(7)
    run = running.cancel()
    assert run.status in (dg.DagsterRunStatus.CANCELED, dg.DagsterRunStatus.CANCELING), run.status
    assert_exactly_once(s3, kafka, cfg, topic, instance, {0: 50, 1: 20})
    assert len(instance.get_runs()) == 1
    logs = [e.user_message for e in instance.all_logs(run.run_id)]
    assert any("the continuous run stops (canceled) between windows" in m for m in logs)


class Crash(BaseException):
    """The run process dying: nothing of the loop catches it."""


def test_a_loop_that_dies_mid_commit_loses_and_duplicates_nothing(kafka, services, spark_resource, spark, s3,
                                                                  unique):
    topic = create_topic(kafka, f"crash-{unique}")
    cfg = config(services, topic, unique)
    produce(kafka, topic, [(0, None, b"x" * 50, [])] * 30)
    instance = dg.DagsterInstance.ephemeral()
    writes = []

    def fault(step: CommitStep) -> None:
        if step == CommitStep.WRITTEN:
            writes.append(step)
            if len(writes) == 2:  # the second window's objects are written, its manifest is not
                raise Crash()

    ctx = ArchiveContext.of_client(spark, kafka, s3, logging.getLogger("s3_archive_tests"))
    loop = ContinuousLoop(instance, cfg, topic, ctx, lambda: False, ArchiveHooks(fault=fault))
    with pytest.raises(Crash):
        for _ in loop.run():
            pass
    cut = [OffsetWindow(0, s, s + 10) for s in (0, 10, 20)]
    assert windows_of(instance, topic) == cut
    # the first window committed (its manifest), the second written (objects, no manifest), the third not; none
    # materialized: the crash came before the loop reported any
    assert [manifest(s3, cfg, topic, w) is not None for w in cut] == [True, False, False]
    assert not materializations(instance, topic)

    # a new run: the three windows first (one committed, one written but not committed, one not written), then
    # what is produced after
    produce(kafka, topic, [(0, None, b"y" * 50, [])] * 10)
    running = Running(cfg, topic, instance, resources(services, kafka, spark_resource))
    running.wait_materialized(4)
    running.cancel()
    assert_exactly_once(s3, kafka, cfg, topic, instance, {0: 40})
    outcomes = {r.partition_key: r.asset_materialization.metadata["outcome"].value
                for r in instance.fetch_materializations(archive_asset_key(topic), limit=100).records}
    assert outcomes == {cut[0].key: "already_committed", cut[1].key: "committed", cut[2].key: "committed",
                        OffsetWindow(0, 30, 40).key: "committed"}
