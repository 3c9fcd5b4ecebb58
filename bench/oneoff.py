"""One-off figures of `make bench` that need no Spark worker: the offsets sensor's tick with many windows, and the
topic of the catch-up figure."""

from __future__ import annotations

import time
from typing import Any

from bench import workload as wl
from s3_archive.io.kafka import KafkaResource
from s3_archive.model.windows import OffsetWindow

BUCKET = "bench"


def sensor_tick(kafka: KafkaResource, windows_total: int = 100_000, ticks: int = 3) -> dict[str, Any]:
    """Tick time of the offsets sensor with `windows_total` existing windows (dynamic partitions) of a 4-partition
    topic, in a temporary (sqlite) Dagster instance."""
    import dagster as dg

    from s3_archive.config.archive import ArchiveConfig
    from s3_archive.defs.archive.partitions import window_partitions
    from s3_archive.defs.archive.sensors import build_offsets_sensor

    topic = "ticks"
    per = windows_total // wl.PARTITIONS
    wl.create_topic(kafka, topic)
    producer = kafka.producer(**{"linger.ms": 50})
    for p in range(wl.PARTITIONS):
        for i in range(per + 10):  # 10 records past the last window: the tick plans, and cuts nothing (count 10k)
            producer.produce(topic, value=b"x", partition=p)
            if i % 10_000 == 0:
                producer.poll(0)
    producer.flush(120)
    cfg = ArchiveConfig(name="ticks", topics=[topic], bucket=BUCKET)
    keys = [OffsetWindow(p, i, i + 1).key for p in range(wl.PARTITIONS) for i in range(per)]
    out: dict[str, Any] = {"windows": len(keys)}
    with dg.instance_for_test() as instance:
        t = time.monotonic()
        for i in range(0, len(keys), 10_000):
            instance.add_dynamic_partitions(window_partitions(topic).name, keys[i:i + 10_000])
        out["add_partitions_s"] = time.monotonic() - t
        sensor = build_offsets_sensor(cfg)
        secs, skip = [], None
        for _ in range(ticks):
            with dg.build_sensor_context(instance=instance, resources={"kafka": kafka}) as ctx:
                t = time.monotonic()
                result = sensor(ctx)
                secs.append(time.monotonic() - t)
                skip = result.skip_reason.skip_message if result.skip_reason else None
        out["tick_s"] = secs
        out["skip_reason"] = skip
    return out


def catchup_topic(kafka: KafkaResource, window_records: int, windows: int = 100) -> str:
    topic = "catchup"
    wl.create_topic(kafka, topic)
    per = windows // wl.PARTITIONS * window_records
    producer = kafka.producer(**wl.PRODUCER_CONF)
    for i, (p, k, v, h) in enumerate(wl.records(per * wl.PARTITIONS)):
        producer.produce(topic, value=v, key=k, headers=h, partition=p)
        if i % 5000 == 0:
            producer.poll(0)
    producer.flush(120)
    return topic
