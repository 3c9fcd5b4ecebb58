"""A restore run's producer groups side by side (restore/run.py, group_run.py) against an in-memory stand-in for
Kafka's transactional producer: which id produces which partition, in order, what each commit's ledger entries
hold, and that a failing group stops the others and leaves every open transaction aborted. The real broker's
behaviour (fencing, outages, kills) is covered by integration/reliability/test_restore_broker_outage.py."""

from __future__ import annotations

import threading
import time

import pytest

from s3_archive.model.windows import OffsetWindow
from s3_archive.restore import group_run, run
from s3_archive.restore.batch import Records, WindowSource
from s3_archive.restore.ledger import decode_ledger
from s3_archive.restore.request import RestoreContext, RestoreHooks, RestoreRequest

pytestmark = pytest.mark.unit

N_TARGET = 4


class Broker:
    """What the fakes share: every transactional id initialised, the committed records per target partition and
    the committed ledger entries, in commit order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inits: list[str] = []
        self.records: dict[int, list[tuple[str, int]]] = {p: [] for p in range(N_TARGET)}
        self.entries: dict[int, str] = {}
        self.commits: list[tuple[str, list[int]]] = []
        self.aborted: list[str] = []
        self.fail_on: str | None = None  # a transactional id whose second commit fails
        self.opened: list[OffsetWindow] = []  # windows whose reading started, in order
        self.closed: list[OffsetWindow] = []  # windows whose reader was closed
        self.read_before_init: list[bool] = []  # per producer: had a window's reading started when it initialised?
        self.ledger_fails = False


class FakeClient:
    def __init__(self, owner: FakeProducer) -> None:
        self.owner = owner

    def produce(self, topic, value, key, partition, _cb, _cb2, ts, headers) -> None:
        self.owner.pending.append((partition, value))


class FakeProducer:
    broker: Broker

    def __init__(self, kafka, request, transactional_id=None, delivery_reports=False) -> None:
        assert not delivery_reports  # these runs record no offset map
        self.txn_id = transactional_id or request.ledger_id
        self.producer = FakeClient(self)
        self.pending: list[tuple[int, bytes]] = []
        self.in_txn = False
        self.commits = 0
        deadline = time.monotonic() + 5
        while not self.broker.opened and time.monotonic() < deadline:  # init_transactions' round trips
            time.sleep(0.01)
        with self.broker.lock:
            self.broker.read_before_init.append(bool(self.broker.opened))
            self.broker.inits.append(self.txn_id)

    def begin(self) -> None:
        self.in_txn = True

    def produce(self, *a) -> None:  # the slow path: never taken here
        raise AssertionError("queue full")

    def commit(self, entries, _meta) -> None:
        self.commits += 1
        if self.broker.fail_on == self.txn_id and self.commits == 2:
            from s3_archive.model.errors import RestoreFailed

            raise RestoreFailed(f"commit of {self.txn_id} refused")
        time.sleep(0.001)
        with self.broker.lock:
            for tp, value in self.pending:
                self.broker.records[tp].append((self.txn_id, int(value)))
            for e in entries:
                self.broker.entries[e.partition] = e.metadata
            self.broker.commits.append((self.txn_id, sorted(e.partition for e in entries)))
        self.pending, self.in_txn = [], False

    def abort(self) -> None:
        if self.in_txn:
            with self.broker.lock:
                self.broker.aborted.append(self.txn_id)
        self.pending, self.in_txn = [], False

    def close(self) -> None:
        pass


class FakeLedgerStore:
    broker: Broker

    def __init__(self, kafka, request, num_target) -> None:
        self.request, self.num_target = request, num_target

    def read(self):
        if self.broker.ledger_fails:
            from s3_archive.model.errors import RestoreFailed

            raise RestoreFailed("reading the restore ledger failed")
        with self.broker.lock:
            return decode_ledger(self.request.source_topic, list(self.broker.entries.values()))

    def entries(self, ledger, sps):
        from confluent_kafka import TopicPartition

        from s3_archive.restore.ledger import encode_ledger

        enc = encode_ledger(self.request.source_topic, ledger, self.num_target, [sp % self.num_target for sp in sps])
        return [TopicPartition(self.request.target_topic, b, off, meta) for b, (off, meta) in enc.items()]

    def group_metadata(self):
        return None

    def close(self) -> None:
        pass


class FakeKafka:
    def offsets(self, topic, which, parts):
        return {p: 0 for p in parts}


@pytest.fixture
def broker(monkeypatch) -> Broker:
    b = Broker()
    FakeProducer.broker = FakeLedgerStore.broker = b
    monkeypatch.setattr(run, "Producer", FakeProducer)
    monkeypatch.setattr(group_run, "Producer", FakeProducer)
    monkeypatch.setattr(group_run, "LedgerStore", FakeLedgerStore)
    monkeypatch.setattr(run, "target_partition_count", lambda kafka, topic: N_TARGET)
    monkeypatch.setattr(run, "target_checks", lambda kafka, topic, manifests: ([], -1))
    return b


def window(p: int, start: int, end: int) -> WindowSource:
    w = OffsetWindow(p, start, end)

    def batches():
        b = FakeProducer.broker
        b.opened.append(w)
        try:
            for a in range(start, end, 50):
                offs = list(range(a, min(end, a + 50)))
                yield Records([p] * len(offs), offs, [b"k"] * len(offs), [str(o).encode() for o in offs],
                              [[] for _ in offs], [1] * len(offs), [2] * len(offs))
        finally:
            b.closed.append(w)

    return WindowSource(w, batches, end - start, 1, 1)


def restore(producers: int, windows: list[WindowSource], fault=None, transaction_records: int = 120) -> list:
    import logging

    # the stand-in is for the python client (its `produce` call per record)
    request = RestoreRequest("src", "dst", transaction_records=transaction_records, producers=producers,
                             producer="python")
    hooks = RestoreHooks(fault) if fault else RestoreHooks()
    return list(run.restore_sources(RestoreContext(FakeKafka(), None, logging.getLogger("t")), request, windows,
                                    hooks=hooks))


WINDOWS = [window(p, s, s + 300) for p in range(N_TARGET) for s in (0, 300)]  # mapping same: sp -> sp


@pytest.mark.parametrize("producers", [1, 2, 3, 4, 16])
def test_groups_produce_their_partitions_in_order_and_commit_only_their_entries(broker, producers):
    reports = restore(producers, WINDOWS)
    assert sorted(r.window for r in reports) == sorted(w.window for w in WINDOWS)
    # every run initialises every transactional id of the restore, whatever its producers
    assert sorted(broker.inits) == sorted(["s3-archive-restore.src.dst"]
                                          + [f"s3-archive-restore.src.dst.p{i}" for i in (1, 2, 3)])
    for tp, got in broker.records.items():  # every record once, in offset order, by one producer
        assert [offset for _, offset in got] == list(range(600))
        assert len({txn_id for txn_id, _ in got}) == 1
    # each id commits only the entries of its own buckets; as many ids commit as the run has groups
    owner: dict[int, str] = {}
    for txn_id, buckets in broker.commits:
        for b in buckets:
            assert owner.setdefault(b, txn_id) == txn_id
    assert len(set(owner.values())) == min(producers, N_TARGET)
    ledger = decode_ledger("src", list(broker.entries.values()))
    assert {p: rs.ranges() for p, rs in ledger.items()} == {p: [[0, 600]] for p in range(N_TARGET)}
    assert broker.aborted == []


def test_a_failing_group_stops_the_others_and_every_open_transaction_is_aborted(broker):
    broker.fail_on = "s3-archive-restore.src.dst.p1"
    with pytest.raises(Exception, match="commit of s3-archive-restore.src.dst.p1 refused"):
        restore(2, WINDOWS)
    assert "s3-archive-restore.src.dst.p1" in broker.aborted  # the failed one's open transaction
    # the ledger lists exactly what was committed (whole transactions of 120 records, or a partition's 600)
    ledger = decode_ledger("src", list(broker.entries.values()))
    for tp, got in broker.records.items():
        offsets = [offset for _, offset in got]
        assert offsets == list(range(len(offsets)))
        assert (ledger[tp].ranges() if tp in ledger else []) == ([[0, len(offsets)]] if offsets else [])
    assert [len(broker.records[tp]) for tp in (1, 3)] == [120, 0]  # the failed group's first transaction only


def test_a_transaction_spans_the_source_partitions_of_a_group_and_commits_each_ones_entry(broker):
    """One producer, transactions larger than the run: one commit carries every source partition's records and
    writes the entry of every bucket it touched; each window is reported once, after that commit."""
    reports = restore(1, WINDOWS, transaction_records=10_000)
    assert sorted(r.window for r in reports) == sorted(w.window for w in WINDOWS)
    assert broker.commits == [("s3-archive-restore.src.dst", [0, 1, 2, 3])]
    assert sum(r.transactions for r in reports) == 1
    for tp, got in broker.records.items():
        assert [offset for _, offset in got] == list(range(600))
    ledger = decode_ledger("src", list(broker.entries.values()))
    assert {p: rs.ranges() for p, rs in ledger.items()} == {p: [[0, 600]] for p in range(N_TARGET)}


def test_a_crash_inside_a_transaction_spanning_partitions_leaves_none_of_it_and_a_rerun_restores_it_once(broker):
    """Transactions of 1,000 records over partitions of 600: the second one (partitions 1 and 2) is open when the
    run crashes; the ledger lists exactly the first one's ranges (partition 0 and the start of 1), and a re-run
    restores the rest once, in order."""
    def crash(step: str) -> None:
        if step == "produced:1500":
            raise RuntimeError("crash")

    with pytest.raises(RuntimeError, match="crash"):
        restore(1, WINDOWS, crash, transaction_records=1000)
    ledger = decode_ledger("src", list(broker.entries.values()))
    assert {p: rs.ranges() for p, rs in ledger.items()} == {0: [[0, 600]], 1: [[0, 400]]}
    assert broker.aborted == ["s3-archive-restore.src.dst"]
    assert [len(broker.records[tp]) for tp in range(N_TARGET)] == [600, 400, 0, 0]
    restore(1, WINDOWS, transaction_records=1000)
    for tp, got in broker.records.items():
        assert [offset for _, offset in got] == list(range(600))
    ledger = decode_ledger("src", list(broker.entries.values()))
    assert {p: rs.ranges() for p, rs in ledger.items()} == {p: [[0, 600]] for p in range(N_TARGET)}


@pytest.mark.parametrize("producers", [1, 2])
def test_the_groups_readers_start_before_the_producers_are_initialised(broker, producers):
    """Each group's first window is downloaded and decoded while init_transactions runs (the fake producer's init
    waits up to 5 s for a read to start): the first record goes out as soon as the ledger is read."""
    restore(producers, WINDOWS)
    assert broker.read_before_init == [True] * N_TARGET
    assert {w.partition for w in broker.opened[:producers]} == set(range(producers))  # every group's first window
    assert sorted(broker.closed) == sorted(w.window for w in WINDOWS)


def test_readers_started_for_a_run_that_fails_before_producing_are_stopped_and_closed(broker):
    broker.ledger_fails = True
    with pytest.raises(Exception, match="reading the restore ledger failed"):
        restore(2, WINDOWS)
    assert broker.opened and sorted(broker.closed) == sorted(broker.opened)  # every window opened was closed
    assert not [t for t in threading.enumerate() if t.name == "s3-archive-restore-read"]
    assert not any(broker.records.values()) and broker.commits == []
