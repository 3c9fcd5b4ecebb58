"""A slice's offset range read with librdkafka (confluent-kafka) inside a Spark task, as Arrow record batches of the
archived envelope with the types Spark's Kafka source gives (`ENVELOPE_SCHEMA`): the `read_path: librdkafka` of
docs/performance.md with `task_reader: python`, and the contract native/ (`task_reader: native`,
native_read.py) keeps. Runs on the executors: no Spark, no Dagster.

A range [start, end) is read with `isolation.level: read_committed` from `start` until the consumer's position
reaches `end`: a record at or past `end`, the partition's end (EOF) at or past `end`, or the position itself (which
librdkafka moves past transaction markers and aborted records) ends it, so a range that ends in a marker or in
aborted records ends too. Offsets the broker no longer holds (retention) are skipped to the log start and counted
absent, as Spark's source does with failOnDataLoss off: the driver compares the log start before and after the
read and raises the data-loss error (or records the gap). A read that makes no progress for `stall_s` (broker
down, an open transaction below `end`) fails naming the broker, topic, partition and offset; librdkafka
reconnects by itself meanwhile, so a broker restart shorter than that is ridden out.

Memory: librdkafka's prefetch queue holds at most `queued.max.messages.kbytes` (FETCH_SETTINGS) and, through
`queued.min.messages`, no more records than the range still needs plus one fetch (`fetch.message.max.bytes`); a
batch holds at most BATCH_RECORDS records or BATCH_BYTES of keys and values.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from s3_archive.archive.protocol import KafkaConnection
from s3_archive.model.errors import KafkaUnavailable

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
# What Spark's Kafka source hands a Python task for the envelope (driver/spark_job.py::_kafka's columns).
ENVELOPE_SCHEMA = pa.schema([
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("headers", pa.list_(pa.field("element", HEADER_TYPE))),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestamp_type", pa.int32()),
])
BATCH_RECORDS = 10_000
BATCH_BYTES = 32 << 20
STALL_S = 120.0  # as Spark's Kafka source (kafkaConsumer.pollTimeoutMs = spark.network.timeout)
# Per consumer (one per task): fetch up to 4 MiB per partition and request, keep at most 8 MiB queued ahead (the
# read-ahead, part of a task's memory: docs/performance.md, "Memory"), and fetch again 10 ms after the queue was full
# (librdkafka's default waits a second).
FETCH_SETTINGS = {"fetch.message.max.bytes": 4 << 20, "fetch.max.bytes": 64 << 20,
                  "queued.max.messages.kbytes": 8 << 10, "fetch.queue.backoff.ms": 10,
                  "receive.message.max.bytes": 80 << 20, "socket.receive.buffer.bytes": 4 << 20}


@functools.cache
def _refused() -> frozenset[int]:
    """Errors no retry mends: credentials, TLS, ACLs."""
    from confluent_kafka import KafkaError

    return frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._SSL,
                      KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED})


def consumer_settings(conn: KafkaConnection, records: int) -> dict[str, Any]:
    """The range consumer's librdkafka settings, the Python and the native reader's alike (a range of `records`
    offsets)."""
    return {**dict(conn.settings), **FETCH_SETTINGS,
            "group.id": "s3-archive-read",  # never joined nor committed: the task assigns its range
            "enable.auto.commit": False, "enable.auto.offset.store": False,
            "isolation.level": "read_committed", "auto.offset.reset": "error",
            "enable.partition.eof": True,
            "queued.min.messages": max(1, min(records, 100_000)),
            "reconnect.backoff.max.ms": 1000}


def _consumer(conn: KafkaConnection, records: int, errors: list[Any]) -> Any:
    """The range's consumer; the client's own errors (a refused login or TLS handshake, a broker down) land in
    `errors`: confluent-kafka hands them to an error_cb, never to consume()."""
    from confluent_kafka import Consumer

    return Consumer({**consumer_settings(conn, records), "error_cb": errors.append})


def _envelope(msgs: list[Any], topic: str, partition: int) -> pa.RecordBatch:
    """The envelope of `msgs` (in offset order) as Spark's Kafka source gives it: headers null when a record has
    none, the timestamp in microseconds, timestamp_type as Kafka's id (0 CreateTime, 1 LogAppendTime)."""
    n = len(msgs)
    hdrs = [m.headers() for m in msgs]
    counts = np.fromiter((len(h) if h else 0 for h in hdrs), dtype=np.int32, count=n)
    flat = [kv for h in hdrs if h for kv in h]
    header_offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=header_offsets[1:])
    pairs = pa.StructArray.from_arrays([pa.array([k for k, _ in flat], pa.string()),
                                        pa.array([v for _, v in flat], pa.binary())], fields=list(HEADER_TYPE))
    headers = pa.ListArray.from_arrays(pa.array(header_offsets), pairs, type=ENVELOPE_SCHEMA.field("headers").type,
                                       mask=pa.array(counts == 0))
    stamps = [m.timestamp() for m in msgs]
    ts = np.fromiter((t for _, t in stamps), dtype=np.int64, count=n) * 1000
    return pa.RecordBatch.from_arrays([
        pa.array([m.key() for m in msgs], pa.binary()),
        pa.array([m.value() for m in msgs], pa.binary()),
        headers,
        pa.DictionaryArray.from_arrays(np.zeros(n, np.int32), pa.array([topic])).dictionary_decode(),
        pa.array(np.full(n, partition, np.int32)),
        pa.array(np.fromiter((m.offset() for m in msgs), dtype=np.int64, count=n)),
        pa.array(ts, pa.timestamp("us", tz="UTC")),
        pa.array(np.fromiter((t - 1 for t, _ in stamps), dtype=np.int32, count=n)),
    ], schema=ENVELOPE_SCHEMA)


def _refusal(err: Any, what: str, conn: KafkaConnection) -> KafkaUnavailable:
    # KafkaRefused in its text: the driver gets it inside Spark's error, and no retry is tried
    return KafkaUnavailable(f"reading {what} from Kafka at {conn.servers} failed (KafkaRefused): {err.str()}")


def read_range(conn: KafkaConnection, topic: str, partition: int, start: int, end: int,
               stall_s: float = STALL_S) -> Iterator[pa.RecordBatch]:
    """The committed records of offsets [start, end) of one partition, in offset order, in batches."""
    from confluent_kafka import KafkaError, TopicPartition

    if start >= end:
        return
    errors: list[Any] = []
    consumer = _consumer(conn, end - start, errors)
    tp = TopicPartition(topic, partition, start)
    where = f"topic {topic!r} partition {partition}"
    try:
        consumer.assign([tp])
        position, pending, pending_bytes, last_error = start, [], 0, ""
        progress = time.monotonic()
        while position < end:
            msgs = consumer.consume(min(BATCH_RECORDS, end - position), 0.5)
            done, before = False, len(pending)
            for m in msgs:
                err = m.error()
                if err is None:
                    if m.offset() >= end:
                        done = True
                        break
                    pending.append(m)
                    pending_bytes += len(m)
                    continue
                code = err.code()
                if code == KafkaError._PARTITION_EOF:
                    if m.offset() >= end:
                        done = True
                        break
                elif code == KafkaError._AUTO_OFFSET_RESET or code == KafkaError.OFFSET_OUT_OF_RANGE:
                    low, _ = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
                    if low >= end:
                        done = True
                        break
                    # Deleted by retention: what is left is read; the driver sees the log start moved
                    consumer.assign([TopicPartition(topic, partition, max(low, position))])
                    if low > position:  # else the log ends below the position (truncated): the stall deadline ends it
                        progress = time.monotonic()
                elif err.fatal() or code in _refused():
                    raise _refusal(err, f"offsets [{position}, {end}) of {where}", conn)
                else:  # a lost connection, a moved leader: librdkafka retries; the stall deadline bounds it
                    last_error = err.str()
            for err in errors:  # the client's own (error_cb): a refused login or handshake ends the read at once
                if err.fatal() or err.code() in _refused():
                    raise _refusal(err, f"offsets [{position}, {end}) of {where}", conn)
                last_error = err.str()
            errors.clear()
            if len(pending) > before:
                position = pending[-1].offset() + 1
                progress = time.monotonic()
            if not done:
                at = consumer.position([TopicPartition(topic, partition)])[0].offset
                if at >= end:
                    done = True
                elif at > position:
                    position, progress = at, time.monotonic()
            if pending and (done or len(pending) >= BATCH_RECORDS or pending_bytes >= BATCH_BYTES):
                yield _envelope(pending, topic, partition)
                pending, pending_bytes = [], 0
            if done:
                return
            if time.monotonic() - progress > stall_s:
                raise KafkaUnavailable(
                    f"reading {where} from Kafka at {conn.servers}: no progress at offset {position} for "
                    f"{stall_s:.0f}s (offsets [{position}, {end}) not read: the broker is unreachable, or a "
                    f"transaction below the window's end is still open){'; last: ' + last_error if last_error else ''}")
        if pending:
            yield _envelope(pending, topic, partition)
    finally:
        consumer.close()
