"""The restore's producer with `producer: native`: native/'s `s3_archive_native.Producer` (librdkafka driven from
Rust) behind producer.py's `TransactionalProducer`: the same settings, `init_transactions` fencing a crashed run, our
watchdog deadline on every transactional call, the same errors (fenced, unreachable, the rest). A batch of records
goes in as Arrow arrays in one call, with the GIL released while librdkafka queues them: no Python call per record.
The offset map's delivery offsets come from the batch's tracked first and last delivered offsets. No Dagster here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from s3_archive.io.kafka import KafkaResource
from s3_archive.model.errors import NativeProducerMissing, RestoreFailed
from s3_archive.restore.batch import Records
from s3_archive.restore.producer import CONNECT_WAIT_S, ClientError, TransactionalProducer, queue_stayed_full
from s3_archive.restore.request import RestoreRequest

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


def _takes(name: str, t: Any) -> bool:
    """Whether native/'s producer takes an Arrow array of type `t` as column `name` (restore/batch.py's names)."""
    import pyarrow as pa

    binary = (pa.binary(), pa.large_binary(), pa.string(), pa.large_string())
    if name in ("keys", "values"):
        return t in binary
    if name == "headers":
        if not pa.types.is_list(t) or not pa.types.is_struct(t.value_type):
            return False
        fields = {f.name: f.type for f in t.value_type}
        return fields.get("key") == pa.string() and fields.get("value") in binary
    return t == pa.int64()  # offsets, timestamps (epoch ms)


def _column(batch: Records, name: str, t: Any) -> Any:
    """Column `name` of `batch` as an Arrow array the native producer takes: the batch's own (a reader's), else
    made from its list."""
    import pyarrow as pa

    got = batch.arrow(name)
    return got if got is not None and _takes(name, got.type) else pa.array(getattr(batch, name), t)


class _At:
    """A delivered record's offset, as the offset map's delivery callbacks read it (`msg.offset()`)."""

    __slots__ = ("at",)

    def __init__(self, at: int) -> None:
        self.at = at

    def offset(self) -> int:
        return self.at


class NativeProducer(TransactionalProducer):
    """`producer: native`: a transactional producer of Arrow batches (`send`) behind producer.py's
    `TransactionalProducer` (begin, flush, commit, abort, close, failed, in_txn, abandoned)."""

    sends_batches = True  # restore/group_run.py hands it whole batches (`send`), not records

    def __init__(self, kafka: KafkaResource, request: RestoreRequest, transactional_id: str | None = None,
                 delivery_reports: bool = False) -> None:
        native = native_module()
        self.native, self.error = native, native.ProduceError
        # tracked batches (the offset map): batch id -> the recorder's callbacks for its first and last record
        self.tracked: dict[int, tuple[Callable, Callable]] = {}
        super().__init__(kafka, request, transactional_id, delivery_reports)

    def _open(self, kafka: KafkaResource, settings: dict[str, Any]) -> Any:
        conf = kafka.client_config(**settings)
        try:
            # the connection's settings pass straight through; an error names a refused setting, never its value
            client = self.native.Producer([(k, _setting(v)) for k, v in conf.items()], kafka.bootstrap_servers)
        except self.error as e:
            raise RestoreFailed(f"the restore's producer for {kafka.who}: {e}") from None
        # as the python client: the target's metadata first waits for a broker connection (producer.py, _open); a
        # build older than this wait only starts slower
        wait = getattr(client, "wait_connected", None)
        if wait is not None:
            wait(self.request.target_topic, min(CONNECT_WAIT_S, self.timeout / 2))
        return client

    def _classify(self, e: BaseException) -> ClientError:
        # a fatal error's code is the underlying one (e.g. fenced): native/ reads it with rd_kafka_fatal_error
        return ClientError(getattr(e, "code", None), getattr(e, "retriable", False), getattr(e, "fatal", False),
                           getattr(e, "txn_requires_abort", False))

    def _send_offsets(self, offsets: list, group_metadata: Any) -> None:
        """The ledger's `offsets` committed for consumer group `request.ledger_id` (the group whose metadata
        `group_metadata` is: the native client takes the group's id)."""
        entries = [(tp.topic, tp.partition, tp.offset, tp.metadata or "") for tp in offsets]
        self._call(self.producer.send_offsets_to_transaction, entries, self.request.ledger_id)

    def _ended(self) -> None:
        self.tracked.clear()

    def send(self, batch: Records, tps: int | list[int], track: tuple[Callable, Callable] | None = None,
             provenance: tuple[list[tuple[str, bytes | None]], str] | None = None) -> None:
        """Queue `batch` to target partition `tps` (one for all, or one per record) in one call, its Arrow columns
        as they came (a column held as a list is made an array here); waits while the local queue is full, up to
        our deadline. `track`: the offset map's callbacks for the batch's first and last record, called with their
        delivery offsets by `flush`. `provenance`: (headers, name): `headers` added to every record after its own,
        then header `name` holding the record's source offset as decimal text."""
        import pyarrow as pa  # imported by the first batch sent, not at load

        self.begin()
        extra, offset_header, offsets = None, None, None
        if provenance is not None:
            extra, offset_header = provenance
            offsets = _column(batch, "offsets", pa.int64())
        try:
            batch_id = self.producer.produce_arrow(
                self.request.target_topic, tps if isinstance(tps, int) else pa.array(tps, pa.int32()),
                _column(batch, "keys", pa.binary()), _column(batch, "values", pa.binary()),
                _column(batch, "headers", _headers_type()), _column(batch, "timestamps", pa.int64()),
                extra_headers=extra, offset_header=offset_header, offsets=offsets,
                track=track is not None, queue_full_s=self.deadline)
        except self.error as e:
            if getattr(e, "code", None) == _QUEUE_FULL:
                raise queue_stayed_full(self.request.target_topic, self.txn_id, self.deadline, self.who) from None
            raise self.failed("producing to", e) from None
        if track is not None:
            self.tracked[batch_id] = track

    def flush(self) -> None:
        """Deliver what is queued within our deadline; the tracked batches' callbacks get their offsets."""
        super().flush()
        for batch_id, _partition, first, last, _n in self.producer.take_deliveries()[3]:
            callbacks = self.tracked.pop(batch_id, None)
            if callbacks is not None:
                callbacks[0](None, _At(first))
                callbacks[1](None, _At(last))
