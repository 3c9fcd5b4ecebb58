"""The write task's two readers of `read_path: librdkafka` (`task_reader`: native, the Rust extension of native/;
python, confluent-kafka's consumer) against the real broker: each gives the envelope of what was produced, byte for
byte (keys, values, headers, timestamps and their types, offsets), and both give the same batches' rows; aborted
records and transaction markers are skipped, offsets deleted by retention are skipped to the log start, a range
past the log's end fails at the stall deadline with the same text, and SASL_SSL (SCRAM, a private CA) reads alike
while a wrong password is a refusal that names neither password."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pyarrow as pa
import pytest
from confluent_kafka import TopicPartition

from s3_archive.archive.driver.task_read_job import kafka_connection
from s3_archive.archive.executor import kafka_read, native_read
from s3_archive.archive.executor.kafka_read import BATCH_BYTES, BATCH_RECORDS, ENVELOPE_SCHEMA
from s3_archive.archive.protocol import KafkaConnection
from s3_archive.io.kafka import KafkaResource
from s3_archive.model.errors import KafkaUnavailable
from s3_archive_tests.conftest import SCRAM, SECURE_USER
from s3_archive_tests.kafka_helpers import NASTY, Rec, create_topic, produce, produce_transactions

Reader = Callable[..., Iterator[pa.RecordBatch]]
READERS: dict[str, Reader] = {"native": native_read.read_range, "python": kafka_read.read_range}


@pytest.fixture(params=READERS)
def reader(request: pytest.FixtureRequest) -> Reader:
    return READERS[request.param]


def read(reader: Reader, conn: KafkaConnection, topic: str, start: int, end: int, stall_s: float = 30,
         ) -> tuple[list[pa.RecordBatch], pa.Table]:
    batches = list(reader(conn, topic, 0, start, end, stall_s))
    assert all(b.schema == ENVELOPE_SCHEMA for b in batches)
    return batches, pa.Table.from_batches(batches, schema=ENVELOPE_SCHEMA)


def envelope_of(produced: list[Rec], topic: str) -> list[dict]:
    """What each reader must give for `produced`: Spark's Kafka source's envelope (headers null when none)."""
    return [{"key": r.key, "value": r.value,
             "headers": [{"key": k, "value": v} for k, v in r.headers] or None,
             "topic": topic, "partition": r.partition, "offset": r.offset,
             "timestamp": r.timestamp_ms * 1000, "timestamp_type": 0} for r in produced]


def rows(table: pa.Table) -> list[dict]:
    out = table.to_pylist()
    for r in out:  # compare the instant in microseconds: exact, no datetime rounding
        r["timestamp"] = None
    stamps = table.column("timestamp").cast(pa.int64()).to_pylist()
    return [{**r, "timestamp": t} for r, t in zip(out, stamps, strict=True)]


def test_nasty_records_are_read_byte_exact_by_both_readers_alike(kafka, unique):
    topic = create_topic(kafka, f"readers-{unique}")
    produced = produce(kafka, topic, [(0, k, v, h) for k, v, h in NASTY * 3])
    conn = kafka_connection(kafka)
    tables = {name: read(r, conn, topic, 0, len(produced))[1] for name, r in READERS.items()}
    assert rows(tables["native"]) == envelope_of(produced, topic)
    assert tables["native"].equals(tables["python"])
    # a range inside the log: exactly its records
    assert rows(read(READERS["native"], conn, topic, 5, 9)[1]) == envelope_of(produced[5:9], topic)


def test_batches_are_cut_at_the_record_and_byte_bounds(kafka, reader, unique):
    topic = create_topic(kafka, f"readers-batch-{unique}")
    produced = produce(kafka, topic, [(0, None, f"{i:06}".encode(), []) for i in range(2 * BATCH_RECORDS + 123)])
    batches, table = read(reader, kafka_connection(kafka), topic, 0, len(produced))
    assert table.column("offset").to_pylist() == list(range(len(produced)))
    assert table.column("value").to_pylist() == [r.value for r in produced]
    for b in batches[:-1]:  # every batch but the last is full by records or by bytes of values
        assert b.num_rows >= BATCH_RECORDS or b.column("value").nbytes >= BATCH_BYTES


@pytest.mark.alone  # bounds on the reading's wall time
def test_aborted_records_and_markers_are_skipped_and_every_range_ends(kafka, reader, unique):
    topic = create_topic(kafka, f"readers-txn-{unique}")
    committed, end = produce_transactions(kafka, topic)
    conn = kafka_connection(kafka)
    t0 = time.monotonic()
    # ending at a commit marker; only aborted records and their marker; ending in aborted records and a marker
    got = [read(reader, conn, topic, a, b, stall_s=60)[1] for a, b in ((0, 6), (6, 12), (12, end))]
    assert time.monotonic() - t0 < 30  # no range waits for the stall deadline
    assert [t.column("value").to_pylist() for t in got] == [committed[0], [], committed[1]]
    assert [t.column("offset").to_pylist() for t in got] == [list(range(5)), [], list(range(12, 17))]


@pytest.mark.alone  # bounds on the reading's wall time
def test_offsets_deleted_by_retention_are_skipped_to_the_log_start(kafka, reader, unique):
    topic = create_topic(kafka, f"readers-ret-{unique}")
    produced = produce(kafka, topic, [(0, None, f"{i}".encode(), []) for i in range(30)])
    kafka.admin().delete_records([TopicPartition(topic, 0, 12)])[TopicPartition(topic, 0, 12)].result(timeout=30)
    conn = kafka_connection(kafka)
    assert rows(read(reader, conn, topic, 0, 30)[1]) == envelope_of(produced[12:], topic)
    t0 = time.monotonic()
    assert read(reader, conn, topic, 0, 10, stall_s=60)[1].num_rows == 0  # all of it deleted: ends at once
    assert time.monotonic() - t0 < 30


@pytest.mark.alone  # bounds on the reading's wall time
def test_a_range_past_the_logs_end_fails_at_the_stall_deadline_with_the_same_text(kafka, unique):
    topic = create_topic(kafka, f"readers-short-{unique}")
    produce(kafka, topic, [(0, None, b"x", [])] * 3)
    conn = kafka_connection(kafka)
    texts = {}
    for name, r in READERS.items():
        t0 = time.monotonic()
        with pytest.raises(KafkaUnavailable) as err:
            read(r, conn, topic, 1, 10, stall_s=3)
        assert 3 <= time.monotonic() - t0 < 20
        texts[name] = str(err.value)
    assert texts["native"] == texts["python"]
    assert f"topic '{topic}' partition 0" in texts["native"] and "no progress at offset 3 for 3s" in texts["native"]
    assert "offsets [3, 10) not read" in texts["native"]


def test_sasl_ssl_reads_alike_and_a_wrong_password_is_a_refusal_without_it(secure_services, unique):
    secure = secure_services
    kafka = secure.kafka()
    topic = create_topic(kafka, f"readers-sasl-{unique}")
    produced = produce(kafka, topic, [(0, k, v, h) for k, v, h in NASTY])
    conn = kafka_connection(kafka)
    for name, r in READERS.items():
        assert rows(read(r, conn, topic, 0, len(produced))[1]) == envelope_of(produced, topic), name
    wrong = f"wrong-{unique}"
    bad = kafka_connection(KafkaResource(bootstrap_servers=secure.bootstrap_servers, security_protocol="SASL_SSL",
                                         sasl_mechanism=SCRAM, sasl_username=SECURE_USER,
                                         sasl_password=wrong, ssl_ca_location=secure.ca_file))
    for name, r in READERS.items():
        with pytest.raises(KafkaUnavailable) as err:
            read(r, bad, topic, 0, len(produced), stall_s=60)
        text = str(err.value)
        assert "KafkaRefused" in text and secure.bootstrap_servers in text, (name, text)
        assert wrong not in text and secure.password not in text, name
