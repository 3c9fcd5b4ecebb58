"""Dead letters to a Kafka topic (`dead_letter_topic`), exactly once: after a window commits, its dead-letter objects
(the raw records the write tasks kept, listed in its manifest) are produced to the topic in one Kafka transaction,
each with its key, value, headers and timestamp, plus context headers naming where it came from and why.

The ledger of what was published is the committed-offset metadata of the consumer group `<group>.dead-letters` on
the archived topic's partition: the offset ranges of the windows published, written by the same transaction
(`send_offsets_to_transaction`), so a window's dead letters and its ledger entry become visible together or not at
all. A run that crashed in between, or a window run again, reads the ledger first and publishes nothing twice. The
ledger keeps the newest ranges that fit in LEDGER_BYTES (Kafka's `offset.metadata.max.bytes` is 4096 by default):
a window older than those, run again, publishes its dead letters again. One
`transactional.id` per archived partition: two runs publishing windows of one partition fence each other, and the
one fenced reads the ledger again.

The dead letters go through the run's process (a window's few bad records, read a batch at a time from their
Parquet objects), not through Spark: their objects are written and committed by the executors as for any archive.
"""

from __future__ import annotations

import json
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from s3_archive.config.archive import ArchiveConfig
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.s3 import S3Client
from s3_archive.model.errors import KafkaUnavailable
from s3_archive.model.logger import Logger
from s3_archive.model.manifest import Manifest

# Context headers of each dead letter (Kafka Connect's errors.deadletterqueue.context.headers, ours).
TOPIC_HEADER = "s3_archive.error.topic"
PARTITION_HEADER = "s3_archive.error.partition"
OFFSET_HEADER = "s3_archive.error.offset"
REASON_HEADER = "s3_archive.error.reason"
ATTEMPTS = 5  # a fenced or failed transaction is tried again this many times, reading the ledger each time
LEDGER_BYTES = 3_000  # the ledger's JSON, under the broker's offset.metadata.max.bytes (4096 by default)
_FENCED = (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)


def ledger_group(cfg: ArchiveConfig) -> str:
    return f"{cfg.group_id or f's3-archive.{cfg.name}'}.dead-letters"


def merged(ranges: list[list[int]], a: int, b: int) -> list[list[int]]:
    """`ranges` (sorted, disjoint [from, to)) with [a, b) added, touching ones joined."""
    out: list[list[int]] = []
    for x, y in sorted([*ranges, [a, b]]):
        if out and x <= out[-1][1]:
            out[-1][1] = max(out[-1][1], y)
        else:
            out.append([x, y])
    return out


def bounded(ranges: list[list[int]], log: Logger, topic: str, partition: int) -> list[list[int]]:
    """The newest of `ranges` whose JSON fits in LEDGER_BYTES."""
    kept = list(ranges)
    while len(kept) > 1 and len(json.dumps(kept)) > LEDGER_BYTES:
        kept.pop(0)
    if len(kept) < len(ranges):
        log.warning(f"dead-letter ledger of {topic!r} partition {partition}: the {len(ranges) - len(kept)} oldest "
                    f"ranges dropped to fit Kafka's offset metadata (from offset {kept[0][0]} on: a window before "
                    "it, run again, publishes its dead letters again)")
    return kept


def reason(cfg: ArchiveConfig, value: bytes | None, stored: str | None = None) -> str:
    """Why a dead letter is one: the reason the write task stored with it (Schema Registry decoding: the value's or
    the key's), else its value does not decode as configured, else the layout cannot place it."""
    if stored:
        return stored
    decoding = cfg.value_decoding.type
    if decoding in ("utf8", "json") and value is not None:
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError:
            return f"value_decoding {decoding}: the value is not UTF-8"
        if decoding == "json":
            try:
                if not isinstance(json.loads(text), dict):
                    return "value_decoding json: the value is not a JSON object"
            except ValueError:
                return "value_decoding json: the value is not JSON"
    return "layout: a partition_by value (or {{key}}) the record lacks"


def dead_letter_records(s3: S3Client, cfg: ArchiveConfig, m: Manifest) -> list[tuple]:
    """(offset, key, value, headers, timestamp ms, stored reason or None) of the window's dead letters, in offset
    order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = []
    for o in m.dead_letter_objects:
        body = s3.get_object(Bucket=cfg.bucket, Key=o.key)["Body"].read()
        table = pq.read_table(pa.BufferReader(body))
        for r in table.to_pylist():
            ts = r.get("timestamp")
            ms = round(ts.timestamp() * 1000) if ts is not None else 0
            out.append((r["offset"], r.get("key"), r.get("value"),
                        [(h["key"], h["value"]) for h in r.get("headers") or []], ms, r.get("reason")))
    return sorted(out, key=lambda x: x[0])


def publish(kafka: KafkaResource, s3: S3Client, cfg: ArchiveConfig, topic: str, m: Manifest, log: Logger) -> int:
    """Produce the committed window `m`'s dead letters to the archive's dead_letter_topic, unless the ledger says
    they were; how many were produced. Raises KafkaUnavailable when it cannot (the window stays committed; a run
    of it again publishes them)."""
    target = cfg.dead_letter_topic_for(topic)
    if target is None or not m.dead_letter_objects:
        return 0
    group = ledger_group(cfg)
    tid = f"s3-archive-dlq.{cfg.name}.{topic}.{m.partition}"
    records = dead_letter_records(s3, cfg, m)
    last: Exception | None = None
    for attempt in range(ATTEMPTS):
        producer = kafka.producer(**{"transactional.id": tid, "enable.idempotence": True, "acks": "all",
                                     "transaction.timeout.ms": 60_000})
        consumer = Consumer(kafka.client_config(**{"group.id": group, "enable.auto.commit": False,
                                                   "isolation.level": "read_committed"}))
        try:
            # Fences an earlier producer of this partition and aborts what it left open, so the ledger read next
            # is the last one committed.
            producer.init_transactions(kafka.timeout_s)
            (done,) = consumer.committed([TopicPartition(topic, m.partition)], timeout=kafka.timeout_s)
            ranges = json.loads(done.metadata) if done.offset >= 0 and done.metadata else []
            if any(a <= m.start_offset and m.end_offset <= b for a, b in ranges):
                return 0
            producer.begin_transaction()
            for offset, key, value, headers, ts, why in records:
                context = [(TOPIC_HEADER, topic.encode()), (PARTITION_HEADER, str(m.partition).encode()),
                           (OFFSET_HEADER, str(offset).encode()), (REASON_HEADER, reason(cfg, value, why).encode())]
                _produce(producer, target, key, value, [*headers, *context], ts)
            ranges = bounded(merged(ranges, m.start_offset, m.end_offset), log, topic, m.partition)
            entry = TopicPartition(topic, m.partition, max(b for _, b in ranges), json.dumps(ranges))
            producer.send_offsets_to_transaction([entry], consumer.consumer_group_metadata(), kafka.timeout_s)
            producer.commit_transaction(kafka.timeout_s)
            log.info(f"window {m.window_key} of {topic!r}: {len(records)} dead letters produced to {target!r}")
            return len(records)
        except KafkaException as e:
            last = e
            err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
            if err is not None and err.txn_requires_abort():
                try:
                    producer.abort_transaction(kafka.timeout_s)
                except KafkaException:
                    pass
            if err is not None and err.code() not in _FENCED and not err.retriable() and not \
                    err.txn_requires_abort():
                break
            time.sleep(0.2 * (attempt + 1))
        finally:
            consumer.close()
            producer.flush(0)
            # Destroyed now, not when an error's traceback lets this frame go (its close() would first wait for
            # what is queued while the cluster is unreachable).
            producer = None
    raise KafkaUnavailable(f"the dead letters of window {m.window_key} of {topic!r} were not produced to "
                           f"{target!r} ({kafka.who}): {kafka.scrub(str(last))}. The window is committed; running it "
                           "again produces them (once)")


def _produce(producer: Any, target: str, key: bytes | None, value: bytes | None, headers: list, ts: int) -> None:
    while True:
        try:
            producer.produce(target, key=key, value=value, headers=headers, timestamp=max(ts, 0))
            return
        except BufferError:
            producer.poll(0.05)
