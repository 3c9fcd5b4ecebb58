"""The sensor side (the page's "Catch-up of 100 windows" and "Sensor tick with 100k windows"): one tick of the
offsets sensor cutting `CATCHUP_WINDOWS` windows behind and their runs executed one after the other, each with its
own Spark session (bench/worker.py's `catchup` command, in a fresh process); and the sensor's tick with
`SENSOR_TICK_WINDOWS` existing windows in a temporary sqlite Dagster instance (no Spark)."""

from __future__ import annotations

import time
from typing import Any

from bench import workload as wl
from bench.common import Setup, say
from bench.config import BUCKET, CATCHUP_WINDOWS, SENSOR_TICK_WINDOWS, SENSOR_TICKS
from bench.stats import Summary
from bench.under_test import (
    LOCAL_AWS,
    ArchiveConfig,
    KafkaResource,
    OffsetWindow,
    S3Resource,
    build_offsets_sensor,
    window_partitions,
)


def catchup_topic(kafka: KafkaResource, window_records: int, windows: int = CATCHUP_WINDOWS) -> str:
    """A topic holding `windows` windows of `window_records` records of the workload, spread over its partitions."""
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


def time_catchup(s: Setup, window_records: int) -> dict[str, Any]:
    """`CATCHUP_WINDOWS` windows behind: the tick that cuts them and their runs, in a fresh process."""
    topic = catchup_topic(s.kafka, window_records)
    out = s.fresh("catchup.log", cmd="catchup", topic=topic, prefix="catchup/", window_records=window_records)
    assert out["windows"] == CATCHUP_WINDOWS, out
    say(f"catch-up of {CATCHUP_WINDOWS} windows: {out['seconds']:.1f}s, {out['runs']} runs, "
        f"{out['spark_sessions']} Spark sessions")
    return out


def time_sensor_tick(kafka: KafkaResource, s3_endpoint: str, windows_total: int = SENSOR_TICK_WINDOWS,
                     ticks: int = SENSOR_TICKS) -> dict[str, Any]:
    """Tick time of the offsets sensor with `windows_total` existing windows (dynamic partitions) of a 4-partition
    topic, in a temporary (sqlite) Dagster instance, upkeep included (its S3 listings go to `s3_endpoint`)."""
    import dagster as dg

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
        s3 = S3Resource(endpoint_url=s3_endpoint, region_name=LOCAL_AWS["AWS_REGION"],
                        aws_access_key_id=LOCAL_AWS["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=LOCAL_AWS["AWS_SECRET_ACCESS_KEY"], path_style=True)
        secs, skip = [], None
        for _ in range(ticks):
            with dg.build_sensor_context(instance=instance, resources={"kafka": kafka, "s3": s3}) as ctx:
                t = time.monotonic()
                result = sensor(ctx)
                secs.append(time.monotonic() - t)
                skip = result.skip_reason.skip_message if result.skip_reason else None
        out["tick_s"] = secs
        out["skip_reason"] = skip
    say(f"sensor tick with {out['windows']:,} windows: {Summary.of(secs).fmt(2)}s "
        f"(adding them took {out['add_partitions_s']:.1f}s)")
    return out
