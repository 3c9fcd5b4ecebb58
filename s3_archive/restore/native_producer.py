"""The restore's producer with `producer: native`: native/'s `s3_archive_native.Producer` (librdkafka driven from
Rust) behind producer.py's `Producer` contract: the same settings, `init_transactions` fencing a crashed run, our
watchdog deadline on every transactional call, the same errors (fenced, unreachable, the rest). A batch of records
goes in as Arrow arrays in one call, with the GIL released while librdkafka queues them: no Python call per record.
The offset map's delivery offsets come from the batch's tracked first and last delivered offsets. No Dagster here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from s3_archive.io.deadline import call_with_deadline
from s3_archive.io.kafka import KafkaResource
from s3_archive.model.errors import DeadlineExceeded, NativeProducerMissing, RestoreFailed
from s3_archive.restore import producer as python_producer
from s3_archive.restore.batch import Records
from s3_archive.restore.producer import (
    FENCED,
    UNREACHABLE,
    CoordinatorUnreachable,
    deadline_passed,
    fenced,
    init_failed,
    producer_settings,
    queue_stayed_full,
)
from s3_archive.restore.request import RestoreRequest

COMMIT_ATTEMPTS = 3  # commit_transaction while it fails with a retriable error (as producer.py's commit_retrying)
_QUEUE_FULL = -184  # librdkafka's RD_KAFKA_RESP_ERR__QUEUE_FULL


def native_module() -> Any:
    """The extension, or one error naming the setting and the fix (never a silent fall back to `producer: python`)."""
    try:
        import s3_archive_native
    except ImportError as e:
        raise NativeProducerMissing(
            f"producer: native needs native/'s producer, the module s3_archive_native, and the Python at "
            f"{sys.executable} has none ({e}); run `make setup` to build it, or set producer: python in the "
            "restore's config (NativeProducerMissing)") from None
    if not hasattr(s3_archive_native, "Producer"):
        raise NativeProducerMissing(
            f"producer: native needs native/'s producer, and the module s3_archive_native at "
            f"{s3_archive_native.__file__} is an older build without it; run `make setup` to rebuild it, or set "
            "producer: python in the restore's config (NativeProducerMissing)")
    return s3_archive_native


def _setting(value: Any) -> str:
    """A setting as librdkafka takes it (confluent-kafka's conversion: booleans lower case)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _headers_type() -> Any:
    """Kafka headers as Arrow: list<struct<key: string, value: binary>> ((name, value) tuples convert as they are)."""
    import pyarrow as pa

    return pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))


class _At:
    """A delivered record's offset, as the offset map's delivery callbacks read it (`msg.offset()`)."""

    __slots__ = ("at",)

    def __init__(self, at: int) -> None:
        self.at = at

    def offset(self) -> int:
        return self.at


class NativeProducer:
    """A transactional producer of Arrow batches with producer.py's `Producer` interface (begin, send, flush,
    commit, abort, close, failed, in_txn, abandoned)."""

    sends_batches = True  # restore/group_run.py hands it whole batches (`send`), not records

    def __init__(self, kafka: KafkaResource, request: RestoreRequest, transactional_id: str | None = None,
                 delivery_reports: bool = False) -> None:
        native = native_module()
        self.error = native.ProduceError
        # producer.py's timeouts, read when the producer is made (as producer.py's `Producer` reads them)
        self.timeout = max(python_producer.TRANSACTION_CALL_TIMEOUT_S, kafka.timeout_s)
        self.request, self.who = request, kafka.who
        self.txn_id = transactional_id or request.ledger_id
        self.deadline = self.timeout + python_producer.WATCHDOG_GRACE_S
        conf = kafka.client_config(**producer_settings(self.txn_id, delivery_reports))
        try:
            # the connection's settings pass straight through; an error names a refused setting, never its value
            self.producer = native.Producer([(k, _setting(v)) for k, v in conf.items()], kafka.bootstrap_servers)
        except native.ProduceError as e:
            raise RestoreFailed(f"the restore's producer for {self.who}: {e}") from None
        self.in_txn = False
        self.abandoned = False  # a call passed our deadline and may still be inside the client
        # tracked batches (the offset map): batch id -> the recorder's callbacks for its first and last record
        self.tracked: dict[int, tuple[Callable, Callable]] = {}
        try:
            # Aborts a transaction a crashed run left open, and fences that run's producer.
            self._call(self.producer.init_transactions)
        except self.error as e:
            self.close()
            raise init_failed(self.txn_id, e, e.retriable or e.code in UNREACHABLE) from None

    def failed(self, what: str, e: Exception) -> RestoreFailed:
        code, retriable, fatal = getattr(e, "code", None), getattr(e, "retriable", False), getattr(e, "fatal", False)
        if code in FENCED:
            return fenced(self.txn_id, e)
        if code in UNREACHABLE or (retriable and not fatal):
            return CoordinatorUnreachable(f"{what} {self.request.target_topic!r} failed: {e}")
        return RestoreFailed(f"{what} {self.request.target_topic!r} failed: {e}")

    def _call(self, fn: Any, *args: Any) -> Any:
        """A blocking transactional call `fn(*args, timeout)` under our deadline (producer.py's `_call`)."""
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

    def send(self, batch: Records, tps: int | list[int], track: tuple[Callable, Callable] | None = None) -> None:
        """Queue `batch` to target partition `tps` (one for all, or one per record) in one call; waits while the
        local queue is full, up to our deadline. `track`: the offset map's callbacks for the batch's first and
        last record, called with their delivery offsets by `flush`."""
        import pyarrow as pa  # imported by the first batch sent, not at load

        self.begin()
        try:
            batch_id = self.producer.produce_arrow(
                self.request.target_topic, tps if isinstance(tps, int) else pa.array(tps, pa.int32()),
                pa.array(batch.keys, pa.binary()), pa.array(batch.values, pa.binary()),
                pa.array(batch.headers, _headers_type()), pa.array(batch.timestamps, pa.int64()),
                track=track is not None, queue_full_s=self.deadline)
        except self.error as e:
            if e.code == _QUEUE_FULL:
                raise queue_stayed_full(self.request.target_topic, self.txn_id, self.deadline, self.who) from None
            raise self.failed("producing to", e) from None
        if track is not None:
            self.tracked[batch_id] = track

    def flush(self) -> None:
        """Deliver what is queued within our deadline; the tracked batches' callbacks get their offsets."""
        left = self.producer.flush(self.timeout)
        if left:
            raise CoordinatorUnreachable(f"{left} records for {self.request.target_topic!r} were not delivered "
                                         f"within {self.timeout:g}s: {self.who} takes no records")
        self._delivered()

    def _delivered(self) -> None:
        for batch_id, _partition, first, last, _n in self.producer.take_deliveries()[3]:
            callbacks = self.tracked.pop(batch_id, None)
            if callbacks is not None:
                callbacks[0](None, _At(first))
                callbacks[1](None, _At(last))

    def commit(self, offsets: list, group_metadata: Any = None) -> None:
        """Commit the transaction with the ledger's `offsets` (TopicPartitions with metadata) of consumer group
        `request.ledger_id` (the group whose metadata producer.py's `Producer` is given)."""
        entries = [(tp.topic, tp.partition, tp.offset, tp.metadata or "") for tp in offsets]
        try:
            self._call(self.producer.send_offsets_to_transaction, entries, self.request.ledger_id)
            for attempt in range(COMMIT_ATTEMPTS):
                try:
                    self._call(self.producer.commit_transaction)  # flushes first; fails if a record was not delivered
                    break
                except self.error as e:
                    if not e.retriable or attempt == COMMIT_ATTEMPTS - 1:
                        raise
        except self.error as e:
            if e.txn_requires_abort:
                self.abort()
            raise self.failed("committing a restore transaction to", e) from None
        self.tracked.clear()
        self.in_txn = False

    def close(self) -> None:
        """Drop what is still queued; the client is destroyed with this object. A client a call may still be inside
        (past our deadline) is left alone."""
        if not self.abandoned:
            self.producer.purge()

    def abort(self) -> None:
        if self.in_txn:
            try:
                self._call(self.producer.abort_transaction)
            except self.error as e:
                if e.code not in FENCED:  # fenced: the new run aborts it for us
                    raise
            finally:
                self.tracked.clear()
                self.in_txn = False
