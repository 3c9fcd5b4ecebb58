"""The restore producer's slow path: a local queue that stays full (the broker takes no records) ends the run at
our deadline, not after librdkafka's message.timeout.ms (5 min); a queue that drains lets the record in."""

import time

import pytest

from s3_archive.model.errors import RestoreFailed
from s3_archive.restore.producer import Producer
from s3_archive.restore.request import RestoreRequest


class FullQueue:
    """The client's calls as while its queue is full: `produce` raises BufferError until `frees_after` polls."""

    def __init__(self, frees_after: float = float("inf")) -> None:
        self.polls, self.frees_after, self.produced = 0, frees_after, []

    def produce(self, topic, **kw) -> None:
        if self.polls < self.frees_after:
            raise BufferError("Local: Queue full")
        self.produced.append((topic, kw["value"]))

    def poll(self, timeout: float) -> int:
        self.polls += 1
        time.sleep(timeout)
        return 0


def producer(client: FullQueue, deadline: float) -> Producer:
    """A Producer around `client`, in a transaction, without a broker (its __init__ connects)."""
    p = Producer.__new__(Producer)
    p.request, p.timeout, p.deadline, p.who = RestoreRequest("src", "dst"), 0.1, deadline, "Kafka at 127.0.0.1:9"
    p.txn_id = p.request.ledger_id
    p.producer, p.in_txn = client, True
    return p


def test_a_queue_that_stays_full_fails_the_run_at_our_deadline_naming_the_broker():
    t0 = time.monotonic()
    with pytest.raises(RestoreFailed) as e:
        producer(FullQueue(), deadline=0.3).produce(0, b"k", b"v", [], 1)
    assert 0.3 <= time.monotonic() - t0 < 2
    assert str(e.value).startswith("the producer's queue for 'dst' (transactional.id 's3-archive-restore.src.dst') "
                                   "stayed full for 0.3s: Kafka at 127.0.0.1:9 takes no records")


def test_a_queue_that_drains_takes_the_record():
    client = FullQueue(frees_after=3)
    producer(client, deadline=30).produce(0, b"k", b"v", [], 1)
    assert client.produced == [("dst", b"v")] and client.polls == 3
