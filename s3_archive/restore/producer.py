"""The transactional side of a restore in Kafka: the producer (with clear errors for fencing and aborts) and the
ledger's store as committed-offset metadata of a consumer group, committed in the producer's transactions.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from tenacity import Retrying, retry_if_exception, stop_after_attempt, stop_after_delay, wait_exponential

from s3_archive.io.deadline import call_with_deadline
from s3_archive.io.kafka import KafkaResource
from s3_archive.model.errors import DeadlineExceeded, RestoreFailed
from s3_archive.restore.ledger import RangeSet, decode_ledger, encode_ledger
from s3_archive.restore.request import RestoreRequest

# The timeout of each transactional call (at least; the `kafka` resource's timeout_s if longer), and the grace
# our watchdog adds before it gives up on a call that ignores its timeout (io/deadline.py).
TRANSACTION_CALL_TIMEOUT_S = 30.0
WATCHDOG_GRACE_S = 15.0
# The longest a new producer waits for its first broker connection before init_transactions (which then waits on); at
# most half its call timeout.
CONNECT_WAIT_S = 5.0


def _kafka_error(e: BaseException) -> Any:
    return e.args[0] if e.args and hasattr(e.args[0], "code") else None


_COORDINATOR_BUSY = frozenset({KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                               KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.UNSTABLE_OFFSET_COMMIT,
                               KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT})


FENCED = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})
# What the cluster answers, or the client concludes, while a broker is down or restarting.
UNREACHABLE = frozenset(getattr(KafkaError, name) for name in (
    "_TRANSPORT", "_ALL_BROKERS_DOWN", "_TIMED_OUT", "_MSG_TIMED_OUT", "_TIMED_OUT_QUEUE", "REQUEST_TIMED_OUT",
    "NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS", "LEADER_NOT_AVAILABLE",
    "NOT_LEADER_FOR_PARTITION", "NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND", "CONCURRENT_TRANSACTIONS",
) if hasattr(KafkaError, name))


class CoordinatorUnreachable(RestoreFailed):
    """The cluster did not answer a transactional call (or took no records) in time: the run may ride it out
    (restore/run.py, `broker_outage_seconds`)."""


def producer_settings(transactional_id: str, delivery_reports: bool) -> dict[str, Any]:
    """The restore's producer settings (besides the connection's), whichever client (`producer`) sends."""
    return {"transactional.id": transactional_id, "enable.idempotence": True, "acks": "all", "linger.ms": 20,
            "message.max.bytes": 64 << 20, "queue.buffering.max.messages": 200_000,
            "delivery.report.only.error": not delivery_reports, "transaction.timeout.ms": 300_000,
            # the target exists (checked first): a metadata request for it never creates a topic
            "allow.auto.create.topics": False}


def fenced(txn_id: str, e: object) -> RestoreFailed:
    return RestoreFailed(f"the restore was fenced: another run of the same restore (transactional.id {txn_id!r}) "
                         f"started, and only one may run at a time; this run stopped, and its open transaction is "
                         f"aborted. Kafka said: {e}")


def deadline_passed(name: str, txn_id: str, deadline: float, timeout: float, who: str) -> CoordinatorUnreachable:
    return CoordinatorUnreachable(
        f"{name} for transactional.id {txn_id!r} did not return within {deadline:.0f}s (its timeout {timeout:.0f}s "
        f"+ {WATCHDOG_GRACE_S:.0f}s): the transaction coordinator of {who} is unreachable (is the broker down or "
        "restarting?). The run stopped; the open transaction commits or aborts as a whole, and a re-run (whose "
        "init_transactions completes it first) restores exactly what the ledger does not list")


def queue_stayed_full(topic: str, txn_id: str, deadline: float, who: str) -> CoordinatorUnreachable:
    return CoordinatorUnreachable(
        f"the producer's queue for {topic!r} (transactional.id {txn_id!r}) stayed full for {deadline:g}s: {who} "
        "takes no records (is the broker down or restarting?). The run stopped; the open transaction commits or "
        "aborts as a whole, and a re-run restores exactly what the ledger does not list")


def init_failed(txn_id: str, e: object, unreachable: bool) -> RestoreFailed:
    return (CoordinatorUnreachable if unreachable else RestoreFailed)(
        f"init_transactions for transactional.id {txn_id!r} failed: {e}. Does the target cluster allow "
        "transactions (transaction.state.log.*)?")


def _ledger_busy(e: BaseException) -> bool:
    # The group coordinator may be moving or loading (NOT_COORDINATOR is not flagged retriable), and a transaction
    # of an earlier run may still be completing: its offsets are "unstable" a moment.
    err = _kafka_error(e) if isinstance(e, KafkaException) else None
    return err is not None and (err.retriable() or err.code() in _COORDINATOR_BUSY)


def _retriable(e: BaseException) -> bool:
    err = _kafka_error(e) if isinstance(e, KafkaException) else None
    return err is not None and err.retriable()


def ledger_retrying(timeout_s: float) -> Retrying:
    """Reading the ledger while the coordinator is busy: retried for up to max(60 s, 4 client timeouts), waiting
    0.05 s, doubling up to 1 s; any other error, or a busy one past that, is raised as it is."""
    return Retrying(retry=retry_if_exception(_ledger_busy), stop=stop_after_delay(max(60.0, timeout_s * 4)),
                    wait=wait_exponential(multiplier=0.05, max=1.0), reraise=True)


def commit_retrying(retriable: Callable[[BaseException], bool] = _retriable) -> Retrying:
    """commit_transaction: at most 3 attempts, at once, while it fails with an error `retriable` says may pass
    (e.g. a timeout). librdkafka does not retry the call itself: it leaves a retriable error to the caller."""
    return Retrying(retry=retry_if_exception(retriable), stop=stop_after_attempt(3), reraise=True)


class LedgerStore:
    """The ledger as committed-offset metadata of consumer group `request.ledger_id` on the target topic."""

    def __init__(self, kafka: KafkaResource, request: RestoreRequest, num_target: int) -> None:
        self.request, self.num_target, self.timeout = request, num_target, kafka.timeout_s
        # read_committed: the coordinator then never returns offsets of a transaction still pending.
        self.consumer = Consumer(kafka.client_config(**{"group.id": request.ledger_id, "enable.auto.commit": False,
                                                         "isolation.level": "read_committed"}))

    def read(self) -> dict[int, RangeSet]:
        tps = [TopicPartition(self.request.target_topic, b) for b in range(self.num_target)]
        try:
            got = ledger_retrying(self.timeout)(self.consumer.committed, tps, timeout=self.timeout)
        except KafkaException as e:
            raise RestoreFailed(f"reading the restore ledger (consumer group {self.request.ledger_id!r}) "
                                f"failed: {e}") from None
        for tp in got:
            if tp.error is not None:
                raise RestoreFailed(f"reading the restore ledger (consumer group {self.request.ledger_id!r}) "
                                    f"partition {tp.partition}: {tp.error}")
        return decode_ledger(self.request.source_topic, [tp.metadata for tp in got if tp.offset >= 0])

    def entries(self, ledger: dict[int, RangeSet], source_partitions: Iterable[int]) -> list:
        """The ledger entries of the buckets of `source_partitions` (what one transaction committed)."""
        enc = encode_ledger(self.request.source_topic, ledger, self.num_target,
                            [sp % self.num_target for sp in source_partitions])
        return [TopicPartition(self.request.target_topic, b, off, meta) for b, (off, meta) in enc.items()]

    def group_metadata(self) -> Any:
        return self.consumer.consumer_group_metadata()

    def close(self) -> None:
        self.consumer.close()


class ClientError(NamedTuple):
    """What the restore reads off a client's error, whichever client raised it: librdkafka's code (None: not a
    Kafka error), whether a retry may succeed, whether the client is unusable, whether the transaction must abort."""

    code: int | None
    retriable: bool
    fatal: bool
    requires_abort: bool


class TransactionalProducer:
    """The restore's transactional producer, whichever client sends (`producer`): the same settings, our deadline on
    every transactional call, `init_transactions` fencing a crashed run, and Kafka's errors turned into clear ones
    (fenced, unreachable, the rest). A client says what differs: how it is made (`_open`), its error class
    (`error`), how an error reads (`_classify`), how offsets go into the transaction (`_send_offsets`)."""

    error: type[BaseException] = KafkaException  # the client's error class

    def __init__(self, kafka: KafkaResource, request: RestoreRequest, transactional_id: str | None = None,
                 delivery_reports: bool = False) -> None:
        """`transactional_id`: one of the restore's (restore/groups.py); default the ledger id, the first one.
        `delivery_reports`: every delivery is reported (the offset map's callbacks need it); else errors only."""
        self.request, self.timeout, self.who = request, max(TRANSACTION_CALL_TIMEOUT_S, kafka.timeout_s), kafka.who
        self.txn_id = transactional_id or request.ledger_id
        self.deadline = self.timeout + WATCHDOG_GRACE_S
        self.producer = self._open(kafka, producer_settings(self.txn_id, delivery_reports))
        self.in_txn = False
        self.abandoned = False  # a call passed our deadline and may still be inside the client
        try:
            # Aborts a transaction a crashed run left open, and fences that run's producer.
            self._call(self.producer.init_transactions)
        except self.error as e:
            self.close()
            info = self._classify(e)
            raise init_failed(self.txn_id, e, info.retriable or info.code in UNREACHABLE) from None

    def _open(self, kafka: KafkaResource, settings: dict[str, Any]) -> Any:
        raise NotImplementedError

    def _classify(self, e: BaseException) -> ClientError:
        raise NotImplementedError

    def _fatal_cause(self, e: BaseException) -> BaseException:
        """The error that made the client unusable, when `e` only says that it is (the client's own word)."""
        return e

    def _send_offsets(self, offsets: list, group_metadata: Any) -> None:
        raise NotImplementedError

    def _ended(self) -> None:
        """The open transaction ended (committed or aborted): what the client kept for it goes."""

    def failed(self, what: str, e: BaseException) -> RestoreFailed:
        e = self._fatal_cause(e)
        info = self._classify(e)
        if info.code in FENCED:
            return fenced(self.txn_id, e)
        if info.code in UNREACHABLE or (info.retriable and not info.fatal):
            return CoordinatorUnreachable(f"{what} {self.request.target_topic!r} failed: {e}")
        return RestoreFailed(f"{what} {self.request.target_topic!r} failed: {e}")

    def _call(self, fn: Any, *args: Any) -> Any:
        """A blocking transactional call `fn(*args, timeout)` under our deadline: librdkafka can block in it far
        past its timeout while the transaction coordinator is gone (librdkafka #5456, #5511)."""
        name = getattr(fn, "__name__", "call")
        try:
            return call_with_deadline(fn, *args, self.timeout, deadline_s=self.deadline, what=name)
        except DeadlineExceeded:
            self.abandoned = True
            raise deadline_passed(name, self.txn_id, self.deadline, self.timeout, self.who) from None

    def begin(self) -> None:
        if not self.in_txn:
            try:
                self.producer.begin_transaction()
            except self.error as e:
                raise self.failed("producing to", e) from None
            self.in_txn = True

    def flush(self) -> None:
        """Deliver what is queued (its delivery callbacks run here), within our deadline."""
        left = self.producer.flush(self.timeout)
        if left:
            raise CoordinatorUnreachable(f"{left} records for {self.request.target_topic!r} were not delivered "
                                         f"within {self.timeout:g}s: {self.who} takes no records")

    def commit(self, offsets: list, group_metadata: Any) -> None:
        """Commit the transaction with the ledger's `offsets` (TopicPartitions with metadata) of consumer group
        `request.ledger_id` (`group_metadata`: the ledger consumer's)."""
        try:
            self._send_offsets(offsets, group_metadata)
            # Flushes first; fails if any record of the transaction was not delivered.
            commit_retrying(lambda e: isinstance(e, self.error) and self._classify(e).retriable)(
                self._call, self.producer.commit_transaction)
        except self.error as e:
            if self._classify(e).requires_abort:
                self.abort()
            raise self.failed("committing a restore transaction to", e) from None
        self._ended()
        self.in_txn = False

    def close(self) -> None:
        """Destroy the client once no transaction is open: what is still queued is dropped (`purge`), so it
        returns at once. A client a call may still be inside (past our deadline) is left to the garbage collector:
        destroying it under that call is not safe."""
        if not self.abandoned:
            self.producer.purge()
            self._close_client()

    def _close_client(self) -> None:
        """Destroy the client now (else with this object)."""

    def abort(self) -> None:
        if self.in_txn:
            try:
                self._call(self.producer.abort_transaction)
            except self.error as e:
                if self._classify(e).code not in FENCED:  # fenced: the new run aborts it for us
                    raise
            finally:
                self._ended()
                self.in_txn = False


class Producer(TransactionalProducer):
    """`producer: python`: confluent-kafka's producer, a call per record (restore/group_run.py calls the client's
    `produce` itself; `produce` here is its slow path).

    No per-record delivery callback: a record that fails delivery puts the transaction in the abortable state, so
    `commit_transaction` fails and nothing of the transaction becomes visible. (Python callbacks running while the
    client raises a fatal error, e.g. fenced, also confuse confluent-kafka.)"""

    def _open(self, kafka: KafkaResource, settings: dict[str, Any]) -> Any:
        client = kafka.producer(**settings)
        # init_transactions asks a connected broker for the transaction coordinator at once and, finding none (a
        # client made a moment ago is still connecting), asks again only 500 ms later: the target's metadata is
        # read first, which waits for the connection (native_producer.py does the same)
        try:
            client.list_topics(self.request.target_topic, timeout=min(CONNECT_WAIT_S, self.timeout / 2))
        except KafkaException:
            pass  # init_transactions reports what is wrong
        return client

    def _classify(self, e: BaseException) -> ClientError:
        err = _kafka_error(e) if isinstance(e, KafkaException) else None
        if err is None:
            return ClientError(None, False, False, False)
        code = err.code()
        return ClientError(code, err.retriable(), code == KafkaError._FATAL or err.fatal(), err.txn_requires_abort())

    def _fatal_cause(self, e: BaseException) -> BaseException:
        # Calls after a fatal error fail with a generic _FATAL; poll raises the fatal error itself (e.g. fenced).
        if self._classify(e).code == KafkaError._FATAL:
            try:
                self.producer.poll(0)
            except KafkaException as fatal:
                return fatal
        return e

    def _send_offsets(self, offsets: list, group_metadata: Any) -> None:
        self._call(self.producer.send_offsets_to_transaction, offsets, group_metadata)

    def produce(self, partition: int, key: bytes | None, value: bytes | None,
                headers: list[tuple[str, bytes | None]], timestamp_ms: int, on_delivery: Any = None) -> None:
        """The slow path of `_Run.window`'s produce call (which calls the client directly): waits while the
        local queue is full, up to our deadline (else only message.timeout.ms, 5 min, would end the wait while the
        broker takes no records)."""
        self.begin()
        full_since = time.monotonic()
        try:
            while True:
                try:
                    # timestamp 0 means "now" to librdkafka: timestamps <= 0 cannot be kept (the caller counts them)
                    self.producer.produce(self.request.target_topic, value=value, key=key, partition=partition,
                                          headers=headers or None, timestamp=max(timestamp_ms, 0),
                                          on_delivery=on_delivery)
                    return
                except BufferError:  # the local queue is full: let it drain
                    if time.monotonic() - full_since > self.deadline:
                        raise queue_stayed_full(self.request.target_topic, self.txn_id, self.deadline,
                                                self.who) from None
                    self.producer.poll(0.05)
        except KafkaException as e:
            raise self.failed("producing to", e) from None

    def _close_client(self) -> None:
        try:
            self.producer.close()
        except KafkaException:  # a client in a fatal state (fenced) raises that error again
            pass
