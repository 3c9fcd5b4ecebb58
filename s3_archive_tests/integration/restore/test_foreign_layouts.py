"""Restore from the Lenses layout and Confluent's time/field partitioners with keys/headers files, into the real
broker, from objects written to the moto server by s3_archive_tests/sink_writers.py (the sinks' documented
layouts and formats, not our readers)."""

from __future__ import annotations

import logging

import pytest

from s3_archive.config.foreign import ForeignSource
from s3_archive.model.errors import InvalidForeignObject
from s3_archive.restore.foreign_sources import restore_foreign
from s3_archive.restore.request import RestoreContext, RestoreRequest
from s3_archive_tests import sink_writers as sink
from s3_archive_tests.kafka_helpers import consume_all, create_topic

log = logging.getLogger("s3_archive_tests")
TS = 1_700_000_000_000


def restored(kafka, s3, source: ForeignSource, target: str) -> list:
    reports = list(restore_foreign(RestoreContext(kafka, s3, log), source,
                                   RestoreRequest(source.topic, target, provenance_headers=True)))
    assert reports[0].cold == 0
    return reports[1:]


def got(kafka, target: str, partitions: int = 2) -> dict[int, list[tuple]]:
    out = consume_all(kafka, target)
    return {p: [(g.key, g.value, list(g.headers[:-3]), g.timestamp_ms, int(g.header("s3archive.source.offset")))
                for g in out[p]] for p in range(partitions)}


def test_lenses_objects_restore_byte_exact_with_default_and_partitionby_names(kafka, s3, services, unique):
    # Per partition, two objects; offsets with a gap (compaction or a transaction marker) inside the envelope.
    objects = {
        (0, 2): [(0, b"\x00k", b"\xff\x00v", [("a", b"1"), ("b", b"")], TS), (2, None, b"v2", [], TS + 1)],
        (0, 4): [(3, b"k3", None, [("n", "ü".encode())], TS + 2), (4, b"", b"", [], TS + 3)],
        (1, 1): [(0, b"p1", b"w0", [], TS + 4), (1, b"p1", b"w1", [], TS + 5)],
        (1, 5): [(5, b"p1", b"w5", [], TS + 6)],
    }
    envelope = ForeignSource(name="lenses_avro", layout="lenses", bucket=services.bucket, topic=f"orders-{unique}",
                             prefix=f"lenses/{unique}/avro", format="avro", envelope=True)
    for (p, last), recs in objects.items():
        s3.put_object(Bucket=services.bucket, Key=sink.lenses_key(envelope.prefix, envelope.topic, p, last, "avro"),
                      Body=sink.lenses_avro(recs, envelope.topic, p, envelope=True))
    target = create_topic(kafka, f"flenses-{unique}", partitions=2, config={"retention.ms": "-1"})
    assert sum(r.restored for r in restored(kafka, s3, envelope, target)) == 7
    want = {p: [(k, v, hs, ts, o) for (sp, _), recs in sorted(objects.items()) if sp == p for o, k, v, hs, ts in recs]
            for p in (0, 1)}
    assert got(kafka, target) == want

    # Values alone (ByteArrayConverter into JSON: base64), named by PARTITIONBY; offsets numbered back from the
    # name's last offset; no timestamps (the producer stamps them).
    values = ForeignSource(name="lenses_json", layout="lenses", bucket=services.bucket, topic=f"clicks-{unique}",
                           prefix=f"lenses/{unique}/json")
    for dirs, last, recs in [([("region", "eu")], 2, objects[(0, 2)]), ([("region", "us")], 4, objects[(0, 4)])]:
        s3.put_object(Bucket=services.bucket, Key=sink.lenses_key(values.prefix, values.topic, 0, last, "json",
                                                                  partition_by=dirs),
                      Body=sink.lenses_json(recs, values.topic, 0, envelope=False))
    target = create_topic(kafka, f"flensesv-{unique}", partitions=2, config={"retention.ms": "-1"})
    assert sum(r.timestamps_replaced for r in restored(kafka, s3, values, target)) == 4
    assert [(v, o) for _, v, _, _, o in got(kafka, target)[0]] == [(b"\xff\x00v", 1), (b"v2", 2), (None, 3), (b"", 4)]

    # BYTES: one object per record.
    raw = ForeignSource(name="lenses_bytes", layout="lenses", bucket=services.bucket, topic=f"images-{unique}",
                        prefix=f"lenses/{unique}/bytes", format="bytes")
    for offset, body in [(7, b"\x89PNG\r\n\x1a\n\x00"), (9, b"")]:
        s3.put_object(Bucket=services.bucket, Key=sink.lenses_key(raw.prefix, raw.topic, 1, offset, "bytes"),
                      Body=body)
    target = create_topic(kafka, f"flensesb-{unique}", partitions=2, config={"retention.ms": "-1"})
    restored(kafka, s3, raw, target)
    assert [(v, o) for _, v, _, _, o in got(kafka, target)[1]] == [(b"\x89PNG\r\n\x1a\n\x00", 7), (b"", 9)]


def test_confluent_time_partitioned_objects_with_keys_and_headers_files_restore_exact(kafka, s3, services, unique):
    source = ForeignSource(name="confluent_time", layout="confluent", bucket=services.bucket,
                           topic=f"events-{unique}", prefix=f"confluent/{unique}/topics", format="parquet",
                           partitioner="time")
    recs = [(0, b"\x00k", b"\xff\x00v", [("h", b"1"), ("h", b"2")], 0), (1, None, b"v1", [], 0),
            (2, b"k2", b"v2", [("x", "ü".encode())], 0)]
    hours = {0: ("year=2024/month=01/day=15/hour=10", recs[:2]), 2: ("year=2024/month=01/day=15/hour=11", recs[2:])}
    for start, (path, rs) in hours.items():
        base = dict(topics_dir=source.key_prefix, topic=source.topic, encoded=path, partition=0, start=start)
        s3.put_object(Bucket=services.bucket, Key=sink.confluent_key(**base, ext=".snappy.parquet"),
                      Body=sink.confluent_parquet("value", [r[2] for r in rs], sink.pa.binary()))
        s3.put_object(Bucket=services.bucket, Key=sink.confluent_key(**base, ext=".avro", sidecar=".keys"),
                      Body=sink.confluent_avro([r[1] for r in rs]))
        s3.put_object(Bucket=services.bucket, Key=sink.confluent_key(**base, ext=".avro", sidecar=".headers"),
                      Body=sink.confluent_headers_avro([r[3] for r in rs]))
    target = create_topic(kafka, f"fconfluentt-{unique}", config={"retention.ms": "-1"})
    restored(kafka, s3, source, target)
    # Keys and values byte for byte, headers in order with duplicates (their text), offsets from the names.
    assert [(k, v, hs, o) for k, v, hs, _, o in got(kafka, target, 1)[0]] == [(k, v, hs, o) for o, k, v, hs, _ in recs]

    # A field partitioner whose directories interleave one partition's records: refused, nothing produced.
    field = ForeignSource(name="confluent_field", layout="confluent", bucket=services.bucket,
                          topic=f"sales-{unique}", prefix=f"confluent/{unique}/field", format="avro",
                          partitioner="field")
    for region, start, values in [("eu", 0, [b"a", b"c"]), ("us", 1, [b"b"])]:
        s3.put_object(Bucket=services.bucket, Key=sink.confluent_key(field.key_prefix, field.topic,
                                                                     f"region={region}", 0, start, ".avro"),
                      Body=sink.confluent_avro(values))
    target = create_topic(kafka, f"fconfluentf-{unique}", config={"retention.ms": "-1"})
    with pytest.raises(InvalidForeignObject, match="region=eu/.*spread over several directories"):
        restored(kafka, s3, field, target)
    assert consume_all(kafka, target)[0] == []
