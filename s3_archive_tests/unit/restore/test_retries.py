"""The restore's retries of Kafka calls (tenacity policies): which errors retry, the waits, the limits."""

import types

import pytest
import tenacity
from confluent_kafka import KafkaError, KafkaException

from s3_archive.restore.producer import commit_retrying, ledger_retrying


def failing(outcomes: list) -> tuple[list, object]:
    """A call that raises each exception of `outcomes` in turn and returns the first other value."""
    calls: list = []

    def call():
        calls.append(1)
        x = outcomes[len(calls) - 1]
        if isinstance(x, BaseException):
            raise x
        return x
    return calls, call


def kafka(code: int, retriable: bool = False) -> KafkaException:
    return KafkaException(KafkaError(code, retriable=retriable))


@pytest.fixture
def clock(monkeypatch) -> types.SimpleNamespace:
    """tenacity's clock, simulated: `sleep` (given to the policy) records the wait and advances the clock."""
    now = [0.0]
    sleeps: list[float] = []

    def sleep(s: float) -> None:
        sleeps.append(s)
        now[0] += s
    monkeypatch.setattr(tenacity, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    return types.SimpleNamespace(sleep=sleep, sleeps=sleeps)


def test_reading_the_ledger_retries_a_busy_coordinator_waiting_longer_each_time(clock):
    busy = [kafka(KafkaError.COORDINATOR_LOAD_IN_PROGRESS), kafka(KafkaError.NOT_COORDINATOR),
            kafka(KafkaError.UNSTABLE_OFFSET_COMMIT), kafka(KafkaError.COORDINATOR_NOT_AVAILABLE),
            kafka(KafkaError._TIMED_OUT), kafka(KafkaError.REQUEST_TIMED_OUT),
            kafka(KafkaError.UNKNOWN, retriable=True)]
    calls, call = failing([*busy, "ledger"])
    retrying = ledger_retrying(5.0)
    assert retrying.copy(sleep=clock.sleep)(call) == "ledger"
    assert len(calls) == 8
    assert clock.sleeps == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0])


def test_reading_the_ledger_raises_any_other_error_at_once(clock):
    calls, call = failing([kafka(KafkaError.GROUP_AUTHORIZATION_FAILED)])
    with pytest.raises(KafkaException, match="GROUP_AUTHORIZATION_FAILED"):
        ledger_retrying(5.0).copy(sleep=clock.sleep)(call)
    assert len(calls) == 1 and clock.sleeps == []


@pytest.mark.parametrize("timeout_s,deadline", [(5.0, 60.0), (30.0, 120.0)])
def test_reading_the_ledger_gives_up_after_max_60s_or_4_timeouts_raising_the_last_error(clock, timeout_s, deadline):
    calls, call = failing([kafka(KafkaError.NOT_COORDINATOR)] * 1000)
    with pytest.raises(KafkaException, match="NOT_COORDINATOR"):
        ledger_retrying(timeout_s).copy(sleep=clock.sleep)(call)
    # the last try is the first one at or past the deadline
    assert sum(clock.sleeps[:-1]) < deadline <= sum(clock.sleeps)


def test_a_commit_is_tried_3_times_while_the_error_is_retriable(clock):
    calls, call = failing([kafka(KafkaError._TIMED_OUT, retriable=True)] * 2 + ["committed"])
    assert commit_retrying().copy(sleep=clock.sleep)(call) == "committed"
    assert len(calls) == 3 and clock.sleeps == [0, 0]
    calls, call = failing([kafka(KafkaError._TIMED_OUT, retriable=True)] * 3 + ["committed"])
    with pytest.raises(KafkaException):
        commit_retrying().copy(sleep=clock.sleep)(call)
    assert len(calls) == 3
    calls, call = failing([kafka(KafkaError._FENCED), "committed"])
    with pytest.raises(KafkaException):
        commit_retrying()(call)
    assert len(calls) == 1
