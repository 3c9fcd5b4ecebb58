"""native/'s producer (`s3_archive_native.Producer`, Arrow batches in, no Python per record) against the real
broker: what a read_committed consumer reads back is what was handed over, byte for byte (keys, values, headers,
timestamps, nulls, the NASTY records), in order, on the partitions asked for; extra headers and the source offset
header are appended as the restore's provenance headers are; a transaction's records and the consumer group
offsets sent with it become visible together, an aborted one's never; tracked batches report their first and last
delivered offset; a second producer of the same transactional.id fences the first, whose next call fails fatally
with the fencing code."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest
import s3_archive_native as native
from confluent_kafka import Consumer, KafkaError, TopicPartition

from s3_archive.io.kafka import KafkaResource
from s3_archive_tests.kafka_helpers import NASTY, create_topic

HEADER = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}


def settings(kafka: KafkaResource, **extra) -> list[tuple[str, str]]:
    conf = kafka.client_config(**{"enable.idempotence": True, "acks": "all", "linger.ms": 5,
                                  "message.max.bytes": 8 << 20, **extra})
    return [(k, str(v).lower() if isinstance(v, bool) else str(v)) for k, v in conf.items()]


def read_committed(kafka: KafkaResource, topic: str, partitions: int, wait_s: float = 5.0) -> list:
    """Every committed record of `topic` as (partition, offset, key, value, headers, timestamp ms)."""
    c = Consumer(kafka.client_config(**{"group.id": "native-producer-test", "isolation.level": "read_committed",
                                        "enable.auto.commit": False, "enable.partition.eof": True}))
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out, eof, deadline = [], set(), time.monotonic() + wait_s
        while len(eof) < partitions and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
                    continue
                raise AssertionError(m.error())
            eof.discard(m.partition())
            out.append((m.partition(), m.offset(), m.key(), m.value(), m.headers() or [], m.timestamp()[1]))
        return sorted(out, key=lambda r: (r[0], r[1]))
    finally:
        c.close()


def arrays(rows: list[tuple[bytes | None, bytes | None, list]]) -> tuple[pa.Array, pa.Array, pa.Array]:
    keys = pa.array([k for k, _, _ in rows], pa.binary())
    values = pa.array([v for _, v, _ in rows], pa.binary())
    headers = pa.array([[{"key": a, "value": b} for a, b in h] or None for _, _, h in rows], HEADER)
    return keys, values, headers


def test_a_transaction_delivers_the_arrays_byte_for_byte_in_order(kafka: KafkaResource, unique: str):
    # timestamps of 2020 and 2023: kept however old (the test broker checks retention every second)
    topic = create_topic(kafka, f"native-prod-{unique}", partitions=2, config={"retention.ms": "-1"})
    p = native.Producer(settings(kafka, **{"transactional.id": f"native-{unique}"}), kafka.bootstrap_servers)
    p.init_transactions(30.0)
    p.begin_transaction()
    keys, values, headers = arrays(NASTY)
    stamps = pa.array([1_700_000_000_000 + i for i in range(len(NASTY))], pa.int64())
    first = p.produce_arrow(topic, 0, keys, values, headers, stamps, track=True)
    # one target partition per record, timestamps as a timestamp column, extra and offset headers
    parts = pa.array([i % 2 for i in range(len(NASTY))], pa.int32())
    micros = pa.array([1_600_000_000_000_123 + i * 1000 for i in range(len(NASTY))], pa.timestamp("us", "UTC"))
    offsets = pa.array([100 + i for i in range(len(NASTY))], pa.int64())
    second = p.produce_arrow(topic, parts, keys, values, headers, micros,
                             extra_headers=[("src.topic", b"orders"), ("src.none", None)],
                             offset_header="src.offset", offsets=offsets, track=True)
    assert read_committed(kafka, topic, 2, wait_s=2) == []  # nothing is visible before the commit
    p.commit_transaction(60.0)
    delivered, failed, err, spans = p.take_deliveries()
    assert (delivered, failed, err) == (2 * len(NASTY), 0, None)

    got = read_committed(kafka, topic, 2)
    on0 = [r for r in got if r[0] == 0]
    plain = on0[:len(NASTY)]
    assert [(k, v, h, t) for _, _, k, v, h, t in plain] == [
        (k, v, h, 1_700_000_000_000 + i) for i, (k, v, h) in enumerate(NASTY)]
    extra = [r for r in got if r not in plain]
    assert len(extra) == len(NASTY)
    for i, (k, v, h) in enumerate(NASTY):
        part, _, gk, gv, gh, gt = next(r for r in extra if dict(r[4]).get("src.offset") == str(100 + i).encode())
        assert (part, gk, gv, gt) == (i % 2, k, v, 1_600_000_000_000 + i)
        assert gh == [*h, ("src.topic", b"orders"), ("src.none", None), ("src.offset", str(100 + i).encode())]
    # tracked: each batch's first and last delivered offset per partition
    mine = {(b, part): (lo, hi, n) for b, part, lo, hi, n in spans}
    assert len(mine) == 3 and first != second
    assert mine[(first, 0)] == (plain[0][1], plain[-1][1], len(NASTY))
    for part in (0, 1):
        offs = [r[1] for r in extra if r[0] == part]
        assert mine[(second, part)] == (min(offs), max(offs), len(offs))


def test_offsets_commit_with_the_transaction_and_an_abort_shows_nothing(kafka: KafkaResource, unique: str):
    topic = create_topic(kafka, f"native-txn-{unique}", partitions=1)
    group = f"native-ledger-{unique}"
    p = native.Producer(settings(kafka, **{"transactional.id": f"native-txn-{unique}"}), kafka.bootstrap_servers)
    p.init_transactions(30.0)
    keys, values, headers = arrays([(b"k", b"aborted", [])] * 3)
    p.begin_transaction()
    p.produce_arrow(topic, 0, keys, values, headers)
    p.send_offsets_to_transaction([(topic, 0, 3, "aborted ledger")], group, 30.0)
    p.abort_transaction(30.0)
    keys, values, headers = arrays([(b"k", b"kept", [("h", b"1")])] * 2)
    p.begin_transaction()
    p.produce_arrow(topic, 0, keys, values, headers)
    p.send_offsets_to_transaction([(topic, 0, 7, "ledger v1")], group, 30.0)
    p.commit_transaction(60.0)
    assert [(r[2], r[3]) for r in read_committed(kafka, topic, 1)] == [(b"k", b"kept")] * 2
    c = Consumer(kafka.client_config(**{"group.id": group, "isolation.level": "read_committed"}))
    try:
        (tp,) = c.committed([TopicPartition(topic, 0)], timeout=30)
    finally:
        c.close()
    assert (tp.offset, tp.metadata) == (7, "ledger v1")


def test_a_second_producer_of_the_same_id_fences_the_first(kafka: KafkaResource, unique: str):
    topic = create_topic(kafka, f"native-fence-{unique}", partitions=1)
    conf = settings(kafka, **{"transactional.id": f"native-fence-{unique}"})
    old = native.Producer(conf, kafka.bootstrap_servers)
    old.init_transactions(30.0)
    old.begin_transaction()
    keys, values, headers = arrays([(b"k", b"v", [])])
    old.produce_arrow(topic, 0, keys, values, headers)
    old.flush(30.0)
    new = native.Producer(conf, kafka.bootstrap_servers)
    new.init_transactions(30.0)  # aborts the old one's open transaction and fences it
    with pytest.raises(native.ProduceError) as e:
        old.produce_arrow(topic, 0, keys, values, headers)
        old.commit_transaction(30.0)
    assert e.value.code in FENCED and e.value.fatal, (e.value.code, str(e.value))
    assert old.fatal_error()[0] in FENCED
    assert read_committed(kafka, topic, 1) == []


def test_records_too_large_for_the_broker_fail_delivery_and_the_commit(kafka: KafkaResource, unique: str):
    topic = create_topic(kafka, f"native-big-{unique}", partitions=1, config={"max.message.bytes": "1000"})
    p = native.Producer(settings(kafka, **{"transactional.id": f"native-big-{unique}"}), kafka.bootstrap_servers)
    p.init_transactions(30.0)
    p.begin_transaction()
    keys, values, headers = arrays([(b"k", b"x" * 5000, [])])
    p.produce_arrow(topic, 0, keys, values, headers)
    with pytest.raises(native.ProduceError) as e:
        p.commit_transaction(30.0)
    assert e.value.txn_requires_abort, str(e.value)
    delivered, failed, err, _ = p.take_deliveries()
    assert (delivered, failed) == (0, 1) and err is not None and err[0] == KafkaError.MSG_SIZE_TOO_LARGE, err
    p.abort_transaction(30.0)
    assert read_committed(kafka, topic, 1) == []


@pytest.mark.alone  # a 1 s wait returns within 3 s
def test_the_connection_wait_returns_once_the_cluster_answers_and_gives_up_at_its_timeout(kafka: KafkaResource,
                                                                                          unique: str):
    """`wait_connected` asks until a broker of the cluster (not the bootstrap address, whose connection librdkafka
    drops after the first metadata) answers, then init_transactions runs; with no broker reachable it returns False
    at its timeout, not later (its loop is bounded), and init_transactions reports the error."""
    topic = create_topic(kafka, f"native-wait-{unique}", partitions=1)
    p = native.Producer(settings(kafka, **{"transactional.id": f"native-wait-{unique}",
                                           "allow.auto.create.topics": False}), kafka.bootstrap_servers)
    assert p.wait_connected(topic, 5.0)
    p.init_transactions(30.0)
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    nowhere = KafkaResource(bootstrap_servers=f"127.0.0.1:{port}", timeout_s=5)
    q = native.Producer(settings(nowhere, **{"transactional.id": f"native-wait-{unique}-nowhere",
                                             "allow.auto.create.topics": False}), nowhere.bootstrap_servers)
    t = time.monotonic()
    assert not q.wait_connected(topic, 1.0)
    assert time.monotonic() - t < 3.0
