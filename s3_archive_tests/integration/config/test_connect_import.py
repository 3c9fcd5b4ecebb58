"""`s3-archive import-connect` on the real stack: a Confluent and an Aiven sink config are imported, a window
of each is archived with the resulting YAML (real broker, Spark, moto), the object keys have the sink's shape,
and restore's reader for that sink (`foreign_sources:`) reads them back into Kafka byte for byte — the strongest
round trip without the connectors themselves."""

from __future__ import annotations

import json
import logging
import time

import yaml

from s3_archive.archive.driver.archive_run import ArchiveContext
from s3_archive.archive.driver.coordinator import archive_windows
from s3_archive.config.connect_import.convert import import_connect
from s3_archive.config.foreign import ForeignSource
from s3_archive.config.settings import parse_settings
from s3_archive.io.s3 import list_objects
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.foreign_sources import restore_foreign
from s3_archive.restore.request import RestoreContext, RestoreRequest
from s3_archive_tests.kafka_helpers import consume_all, create_topic, produce

log = logging.getLogger("s3_archive_tests")
# Recent record timestamps: the broker's time-based retention (7 days) deletes records older than that, which
# made an archive of a 2023-stamped window fail with DataLoss whenever the retention check ran in between.
TS = (int(time.time()) - 3600) * 1000


def imported(connector: dict, topic: str):
    """The YAML import-connect prints, loaded by the Settings loader, with the test's topic."""
    [a] = parse_settings(yaml.safe_load(import_connect(json.dumps(connector)))).archives
    assert a.topics == [topic]
    return a


def archive_and_restore(kafka, s3, spark, cfg, topic, windows, source, unique):
    results = archive_windows(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, windows)
    assert not [r for r in results.values() if isinstance(r, BaseException)], \
        [repr(r) for r in results.values() if isinstance(r, BaseException)]
    keys = sorted(o["Key"] for o in list_objects(s3, cfg.bucket, cfg.prefix)
                  if "/_manifests/" not in o["Key"] and not o["Key"].startswith(f"{cfg.prefix}_"))
    target = create_topic(kafka, f"restored-{unique}", partitions=2)
    out = list(restore_foreign(RestoreContext(kafka, s3, log), source, RestoreRequest(topic, target)))
    assert out[0].cold == 0
    return keys, consume_all(kafka, target)


def test_imported_confluent_json_config_archives_in_its_shape_and_its_reader_restores_it(kafka, s3, services, spark,
                                                                                          unique):
    topic = create_topic(kafka, f"events-{unique}", partitions=2)
    values = [json.dumps({"id": i, "name": f"n{i}", "ü": "ß"}, separators=(",", ":"), ensure_ascii=False).encode()
              for i in range(9)]
    recs = produce(kafka, topic, [(i % 2, f"k{i}".encode(), v, []) for i, v in enumerate(values)],
                   timestamps=[TS + i for i in range(9)])
    cfg = imported({"name": "events-to-s3", "config": {
        "connector.class": "io.confluent.connect.s3.S3SinkConnector", "topics": topic,
        "s3.bucket.name": services.bucket, "topics.dir": f"imp-{unique}/topics", "flush.size": "3",
        "format.class": "io.confluent.connect.s3.format.json.JsonFormat", "s3.compression.type": "gzip",
        "partitioner.class": "io.confluent.connect.storage.partitioner.DefaultPartitioner",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter", "value.converter.schemas.enable": "false",
        "aws.secret.access.key": "not-in-the-yaml"}}, topic)
    # Windows as the sensor cuts them with flush.count 3: partition 0 holds 5 records, partition 1 holds 4.
    windows = [OffsetWindow(0, 0, 3), OffsetWindow(0, 3, 5), OffsetWindow(1, 0, 3), OffsetWindow(1, 3, 4)]
    source = ForeignSource(name="confluent_json", layout="confluent", bucket=services.bucket,
                           prefix=f"imp-{unique}/topics", topic=topic, format="json", compression="gzip")
    keys, got = archive_and_restore(kafka, s3, spark, cfg, topic, windows, source, unique)

    base = f"imp-{unique}/topics/{topic}"
    assert keys == [f"{base}/partition={w.partition}/{topic}+{w.partition}+{w.start:010d}.json.gz" for w in windows]
    for p in (0, 1):  # the sink's json objects hold values only: each value byte for byte, in offset order
        assert [g.value for g in got[p]] == [r.value for r in recs if r.partition == p]


def test_imported_aiven_jsonl_config_archives_in_its_shape_and_its_reader_restores_it(kafka, s3, services, spark,
                                                                                       unique):
    topic = create_topic(kafka, f"orders-{unique}", partitions=2)
    rows = [(0, b"\x00k", b"\xff\x00 binary", [("dup", b"1"), ("dup", b"2")]), (1, None, b"no key", []),
            (0, b"tomb", None, [("e", b"")]), (1, b"", b"", [("n", None)]),
            (0, "ключ".encode(), "значение".encode(), [("ü", b"\x01")])]
    recs = produce(kafka, topic, rows, timestamps=[TS + i for i in range(len(rows))])
    cfg = imported({"name": "orders-aiven", "config": {
        "connector.class": "io.aiven.kafka.connect.s3.AivenKafkaConnectS3SinkConnector", "topics": topic,
        "aws.s3.bucket.name": services.bucket, "aws.s3.prefix": f"aiven-{unique}/", "format.output.type": "jsonl",
        "format.output.fields": "key,value,offset,timestamp,headers", "file.compression.type": "gzip",
        "file.name.template": "{{topic}}-{{partition}}-{{start_offset}}",
        "key.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
        "value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
        "aws.secret.access.key": "not-in-the-yaml"}}, topic)
    windows = [OffsetWindow(0, 0, 2), OffsetWindow(0, 2, 3), OffsetWindow(1, 0, 2)]
    source = ForeignSource(name="aiven_jsonl", layout="aiven", bucket=services.bucket, prefix=f"aiven-{unique}/",
                           topic=topic, format="jsonl", compression="gzip", template=cfg.layout.template,
                           fields=["key", "value", "offset", "timestamp", "headers"])
    keys, got = archive_and_restore(kafka, s3, spark, cfg, topic, windows, source, unique)

    assert keys == sorted(f"aiven-{unique}/{topic}-{w.partition}-{w.start}.gz" for w in windows)
    for p in (0, 1):  # key, value, headers (order, duplicates, nulls) and timestamp, byte for byte
        assert [(g.key, g.value, g.headers, g.timestamp_ms) for g in got[p]] == \
            [(r.key, r.value, r.headers, r.timestamp_ms) for r in recs if r.partition == p]
