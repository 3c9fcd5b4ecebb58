"""An archive takes over from a Kafka Connect sink: a stand-in connector (a real consumer group that commits its
offsets, objects in the Confluent layout with keys and headers files) archives the first records, stops; the archive
starts at the group's offsets (the offsets sensor), and the sink's objects plus the windows hold every record once:
the boundary check counts Kafka's records across it, and one restore run produces the whole topic in order."""

from __future__ import annotations

import time

import dagster as dg
import pytest
from confluent_kafka import Consumer, TopicPartition

from s3_archive.archive.health import WindowsView
from s3_archive.archive.retirement import Retired
from s3_archive.archive.scan import take_over_offsets
from s3_archive.config.archive import ArchiveConfig, FlushPolicy, GroupStart
from s3_archive.config.foreign import ForeignSource
from s3_archive.defs.archive.checks import take_over_verdict
from s3_archive.defs.archive.instance import TopicView
from s3_archive.defs.restore.config import ForeignRestoreConfig
from s3_archive.defs.restore.foreign_assets import build_foreign_restore_asset
from s3_archive.model.errors import TakeOverRefused
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests import sink_writers as sink
from s3_archive_tests.integration.archive_helpers import materialize, resources
from s3_archive_tests.integration.defs.test_sensors import (  # noqa: F401 (the fixture its ticks need)
    _sensor_s3,
    apply,
    tick,
)
from s3_archive_tests.kafka_helpers import consume_all, create_topic, produce

OBJECT_RECORDS = 4  # the stand-in connector's flush.size


def stand_in_connector(kafka, topic: str, group: str, bucket: str, topics_dir: str, s3, upto: dict[int, int],
                       ) -> Consumer:
    """Consume as the connector's group, write objects of OBJECT_RECORDS records up to `upto` (per partition,
    exclusive) in the Confluent layout (values, .keys, .headers), commit each object's end; still a member."""
    c = Consumer(kafka.client_config(**{"group.id": group, "enable.auto.commit": False,
                                        "auto.offset.reset": "earliest", "isolation.level": "read_committed"}))
    c.subscribe([topic])
    got: dict[int, list] = {p: [] for p in upto}
    deadline = time.monotonic() + 60
    while any(len(got[p]) < n for p, n in upto.items()):
        assert time.monotonic() < deadline, "the stand-in connector did not get its records"
        msg = c.poll(0.5)
        if msg is not None and msg.error() is None and len(got[msg.partition()]) < upto[msg.partition()]:
            got[msg.partition()].append(msg)
    for p, msgs in got.items():
        for i in range(0, len(msgs), OBJECT_RECORDS):
            part = msgs[i:i + OBJECT_RECORDS]
            base = dict(topics_dir=topics_dir, topic=topic, encoded=f"partition={p}", partition=p,
                        start=part[0].offset())
            s3.put_object(Bucket=bucket, Key=sink.confluent_key(**base, ext=".avro"),
                          Body=sink.confluent_avro([m.value() for m in part]))
            s3.put_object(Bucket=bucket, Key=sink.confluent_key(**base, ext=".avro", sidecar=".keys"),
                          Body=sink.confluent_avro([m.key() for m in part]))
            s3.put_object(Bucket=bucket, Key=sink.confluent_key(**base, ext=".avro", sidecar=".headers"),
                          Body=sink.confluent_headers_avro([list(m.headers() or []) for m in part]))
            c.commit(offsets=[TopicPartition(topic, p, part[-1].offset() + 1)], asynchronous=False)
    return c


class Shifted(WindowsView):
    """The topic's windows with partition 0's first one moved: the boundary check must see it."""

    def __init__(self, windows: list[OffsetWindow]) -> None:
        self.windows, self.bad, self.retired, self.materialized = windows, [], Retired({}), set()


def test_an_archive_takes_over_from_a_stopped_connector_and_every_record_is_restored_once_in_order(
        kafka, s3, services, spark_resource, unique):
    topic = create_topic(kafka, f"takeover-{unique}", partitions=3, config={"retention.ms": "-1"})
    records = [(p, f"k{p}-{i}".encode() if i % 3 else None, b"\x00v%d-%d\xff" % (p, i),
                [("trace", f"t{i}".encode()), ("trace", b"again")] if i % 2 else [])
               for i in range(10) for p in (0, 1, 2) if p < 2 or i < 4]
    produce(kafka, topic, records)
    group = f"connect-standin-{unique}"
    topics_dir = f"old/{unique}/topics"
    # Partition 2: everything archived by the connector, nothing new when the archive takes over.
    connector = stand_in_connector(kafka, topic, group, services.bucket, topics_dir, s3, {0: 8, 1: 6, 2: 4})

    cfg = ArchiveConfig(name="took_over", topics=[topic], bucket=services.bucket, prefix=f"new/{unique}/",
                        start_position=GroupStart(consumer_group=group),
                        flush=FlushPolicy(count=5, interval_seconds=0.001))
    instance = dg.DagsterInstance.ephemeral()
    # While the connector is a member of its group, nothing is cut: its offsets still move.
    assert not tick(cfg, kafka, instance).run_requests
    with pytest.raises(TakeOverRefused, match=f"consumer group '{group}' has 1 active member"):
        take_over_offsets(kafka, group, topic, [0, 1, 2])
    connector.close()
    with pytest.raises(TakeOverRefused, match="has no committed offset for topic"):
        take_over_offsets(kafka, f"connect-typo-{unique}", topic, [0, 1, 2])
    produce(kafka, topic, [(p, b"late", b"after-%d" % i, []) for i in range(3) for p in (0, 1)])

    result = tick(cfg, kafka, instance)
    apply(result, instance)
    windows = sorted(OffsetWindow.parse(k) for r in result.dynamic_partitions_requests for k in r.partition_keys)
    assert [(w.partition, w.start, w.end) for w in windows] == [(0, 8, 13), (1, 6, 11), (1, 11, 13)]
    # Partition 2 got no window: where it starts is remembered (the group's offsets may expire before it does).
    produce(kafka, topic, [(2, b"late", b"after-%d" % i, []) for i in range(2)])
    later = tick(cfg, kafka, instance, result.cursor)
    apply(later, instance)
    windows += [OffsetWindow.parse(k) for r in later.dynamic_partitions_requests for k in r.partition_keys]
    assert windows[-1] == OffsetWindow(2, 4, 6)
    res = resources(services, kafka, spark_resource)
    materialize(cfg, topic, windows, res, instance)

    source = ForeignSource(name="standin_sink", layout="confluent", bucket=services.bucket, prefix=topics_dir,
                           topic=topic, format="avro", archive=cfg.name)
    s3c = res["s3"].get_client()
    verdict = take_over_verdict(kafka, s3c, cfg, topic, source, TopicView(instance, topic))
    assert verdict.passed, verdict.problems
    assert {p: r["state"] for p, r in verdict.metadata["partitions"].items()} == {
        "0": "contiguous", "1": "contiguous", "2": "contiguous"}
    assert verdict.metadata["partitions"]["0"]["kafka_records_from_sink_last_object_to_archive"] == 4

    # A gap (the first window two records later) and an overlap (one record earlier) are told apart by counting.
    live = TopicView(instance, topic).windows
    gap = [OffsetWindow(0, 10, w.end) if w.partition == 0 and w.start == 8 else w for w in live]
    v = take_over_verdict(kafka, s3c, cfg, topic, source, Shifted(gap))
    assert not v.passed and not v.warn and "2 records in neither" in v.problems[0]
    overlap = [OffsetWindow(1, 5, w.end) if w.partition == 1 and w.start == 6 else w for w in live]
    v = take_over_verdict(kafka, s3c, cfg, topic, source, Shifted(overlap))
    assert not v.passed and v.warn and "1 records in both" in v.problems[0]

    # One restore run: the sink's objects, then the archive's windows, under one ledger.
    target = create_topic(kafka, f"takeover-restored-{unique}", partitions=3, config={"retention.ms": "-1"})
    asset = build_foreign_restore_asset(source, cfg)
    run = dg.materialize([asset], resources={k: v for k, v in res.items() if k != "spark"}, run_config=dg.RunConfig(
        ops={asset.op.name: ForeignRestoreConfig(target_topic=target)}))
    meta = {k: v.value for k, v in run.get_asset_materialization_events()[0].materialization.metadata.items()}
    assert meta["records_restored"] == 32 and meta["archive_windows"] == len(windows)
    source_records = consume_all(kafka, topic)
    restored = consume_all(kafka, target)
    for p in (0, 1, 2):
        assert [(r.key, r.value, r.headers) for r in restored[p]] == [(r.key, r.value, r.headers)
                                                                      for r in source_records[p]]
    # A second run restores nothing again.
    again = dg.materialize([asset], resources={k: v for k, v in res.items() if k != "spark"},
                           run_config=dg.RunConfig(ops={asset.op.name: ForeignRestoreConfig(target_topic=target)}))
    meta = {k: v.value for k, v in again.get_asset_materialization_events()[0].materialization.metadata.items()}
    assert meta["records_restored"] == 0 and meta["records_skipped_already_present"] == 32
