"""The continuous job and sensor (defs/archive/continuous_job.py) on an in-memory instance: one run per topic, launched
when the topic has none queued or running, a failed one replaced after retries.backoff_seconds, one that failed on an
error no retry can fix left for a person; the definitions of a continuous archive; and how the op's thread relays the
loop's windows when a cancel interrupts it."""

import _thread
import signal
import threading
import time

import dagster as dg
import pytest

from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.continuous import ContinuousOptions
from s3_archive.config.settings import Settings
from s3_archive.definitions import build_defs
from s3_archive.defs.archive.continuous_job import (
    STREAM_TAG,
    build_continuous_job,
    continuous_job_name,
    continuous_sensor_name,
    relay,
    requests,
    run_config,
)
from s3_archive.defs.archive.partitions import GAVE_UP_TAG
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.s3_resource import S3Resource
from s3_archive.io.spark import SparkResource

pytestmark = pytest.mark.unit

CFG = ArchiveConfig(name="live", topics=["t1", "t2"], bucket="bucket", continuous=ContinuousOptions())


def a_run(instance: dg.DagsterInstance, topic: str, tags: dict | None = None,
          status: dg.DagsterRunStatus | None = None) -> dg.DagsterRun:
    return instance.create_run_for_job(build_continuous_job(CFG), run_config=run_config(CFG, topic), status=status,
                                       tags={STREAM_TAG: topic, **(tags or {})})


def topics(reqs: list[dg.RunRequest]) -> list[str]:
    return [r.tags[STREAM_TAG] for r in reqs]


def test_a_run_per_topic_with_the_topic_in_its_config_and_tags():
    reqs, why = requests(dg.DagsterInstance.ephemeral(), CFG, 0)
    assert topics(reqs) == ["t1", "t2"] and why == []
    assert reqs[0].run_config == {"ops": {"archive_live_loop": {"config": {"topic": "t1"}}}}


@pytest.mark.parametrize("status", ["NOT_STARTED", "STARTING", "STARTED", "CANCELING"])
def test_no_second_run_while_one_is_queued_or_running(status):
    instance = dg.DagsterInstance.ephemeral()
    run = a_run(instance, "t1", status=dg.DagsterRunStatus(status))
    reqs, why = requests(instance, CFG, 0)
    assert topics(reqs) == ["t2"]
    assert why == [f"t1: run {run.run_id} is {status}"]


def test_a_failed_run_is_replaced_after_the_backoff_unless_no_retry_can_fix_it():
    instance = dg.DagsterInstance.ephemeral()
    run = a_run(instance, "t1")
    instance.report_run_failed(run)
    ended = instance.get_run_record_by_id(run.run_id).end_time
    assert ended is not None
    reqs, why = requests(instance, CFG, ended + CFG.retries.backoff_seconds - 1)
    assert topics(reqs) == ["t2"] and why[0].startswith(f"t1: run {run.run_id} failed; a new one in")
    reqs, _ = requests(instance, CFG, ended + CFG.retries.backoff_seconds + 1)
    assert topics(reqs) == ["t1", "t2"]

    gave_up = a_run(instance, "t1", {GAVE_UP_TAG: "true"})
    instance.report_run_failed(gave_up)
    reqs, why = requests(instance, CFG, ended + 10_000)
    assert topics(reqs) == ["t2"] and "no retry can fix" in why[0]


def test_a_canceled_or_finished_run_is_replaced():
    instance = dg.DagsterInstance.ephemeral()
    instance.report_run_canceled(a_run(instance, "t1"))
    assert topics(requests(instance, CFG, 0)[0]) == ["t1", "t2"]


def test_a_continuous_archive_has_its_job_and_sensor_and_keeps_the_offsets_sensor():
    defs = build_defs(Settings(archives=[CFG, ArchiveConfig(name="plain", topics=["t3"], bucket="bucket")]))
    assert defs.get_job_def(continuous_job_name(CFG)).name == "archive_live_continuous"
    names = {s.name for s in defs.sensors}
    assert {continuous_sensor_name(CFG), "archive_live_offsets", "archive_plain_offsets"} <= names
    assert "archive_plain_continuous" not in names


def test_an_unknown_topic_in_the_runs_config_fails_naming_it_and_the_archives_topics():
    result = build_continuous_job(CFG).execute_in_process(run_config=run_config(CFG, "t9"), raise_on_error=False,
                                                          resources={"spark": SparkResource(), "s3": S3Resource(),
                                                                     "kafka": KafkaResource(bootstrap_servers="x:1")})
    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    text = failure.step_failure_data.error.message
    assert "topic 't9' is not a topic of archive 'live' (its topics: t1, t2)" in text


def test_poll_seconds_is_bounded():
    with pytest.raises(ValueError, match="poll_seconds"):
        ContinuousOptions(poll_seconds=0)


class SlowLoop:
    """A loop whose every window takes 0.5 s to "commit" (20 at most); `log` says when each started and ended."""

    topic = "t1"

    def __init__(self, stop: threading.Event) -> None:
        self.stop, self.log = stop, []

    def run(self):
        i = 0
        while not self.stop.is_set() and i < 20:
            self.log.append(f"start {i}")
            time.sleep(0.5)
            self.log.append(f"end {i}")
            yield i
            i += 1


@pytest.fixture
def raising_sigint():
    """SIGINT raises KeyboardInterrupt in the main thread during the test, whatever an earlier test left installed
    (Dagster's own handler only records an interrupt outside its raising contexts)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_an_interrupt_of_the_ops_thread_lets_the_window_being_committed_end_and_reports_it(raising_sigint):
    stop = threading.Event()
    loop = SlowLoop(stop)
    got = []
    threading.Timer(0.7, _thread.interrupt_main).start()  # what a cancel does to the run's main thread
    with pytest.raises(KeyboardInterrupt):
        for r in relay(loop, stop):
            got.append(r)
    # window 1 was being committed when the interrupt came: it ended, and was reported before the interrupt
    assert loop.log == ["start 0", "end 0", "start 1", "end 1"] and got == [0, 1] and stop.is_set()


def test_a_relay_abandoned_by_dagster_still_waits_for_the_window_being_committed():
    stop = threading.Event()
    loop = SlowLoop(stop)
    it = relay(loop, stop)
    assert next(it) == 0
    time.sleep(0.2)  # window 1 is being committed
    it.close()  # what Dagster does with the op's generator when the interrupt comes while it handles an event
    assert loop.log == ["start 0", "end 0", "start 1", "end 1"]
