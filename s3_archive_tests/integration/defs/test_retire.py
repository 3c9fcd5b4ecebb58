"""Window retirement against the real broker, moto and Spark: windows really archived, then retired from the
partition set; the sensor, the checks and a window added back (to restore it) all still see them."""

from datetime import UTC, datetime, timedelta

import dagster as dg

from s3_archive.defs.archive.checks import contiguity_result, objects_result, retention_result
from s3_archive.defs.archive.instance import read_retired, retire_topic
from s3_archive.defs.archive.partitions import archive_asset_key, window_partitions
from s3_archive.defs.archive.sensors import build_offsets_sensor
from s3_archive.keys.objects import manifest_key
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.integration.archive_helpers import archive_config, materialize, resources, s3_resource
from s3_archive_tests.kafka_helpers import create_topic, produce


class Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, msg: str) -> None:
        self.lines.append(msg)

    warning = info


def keys(instance: dg.DagsterInstance, topic: str) -> list[str]:
    return list(instance.get_dynamic_partitions(window_partitions(topic).name))


def test_retired_windows_leave_the_partition_set_and_stay_checked(kafka, services, spark_resource, s3, unique):
    topic = create_topic(kafka, f"retire-{unique}", partitions=2)
    produce(kafka, topic, [(i % 2, None, f"v{i}".encode(), []) for i in range(80)])  # 40 per partition
    cfg = archive_config(services.bucket, topic, f"retire/{unique}/", flush={"count": 10, "interval_seconds": None},
                         retire_after_days=1)
    res = resources(services, kafka, spark_resource)
    instance = dg.DagsterInstance.ephemeral()
    ws = [OffsetWindow(p, s, s + 10) for s in (0, 10, 20, 30) for p in (0, 1)]
    old_run = materialize(cfg, topic, ws[:4], res, instance).run_id  # offsets 0-20: all retired below
    new_run = materialize(cfg, topic, ws[4:], res, instance).run_id  # 20-40: keeps each partition's last window
    client = res["s3"].get_client()

    # Committed just now: within retire_after_days, nothing goes.
    log = Log()
    kept = retire_topic(instance, client, cfg, topic, datetime.now(UTC), log)
    assert kept.retired == 0 and "within retire_after_days" in kept.kept[0]
    # Two days later: every window but each partition's last is retired, the record written first.
    later = retire_topic(instance, client, cfg, topic, datetime.now(UTC) + timedelta(days=2), log)
    assert later.retired == 6
    assert sorted(keys(instance, topic)) == sorted([OffsetWindow(0, 30, 40).key, OffsetWindow(1, 30, 40).key])
    retired = read_retired(instance, topic)
    assert retired.ranges == {0: OffsetWindow(0, 0, 30), 1: OffsetWindow(1, 0, 30)} and retired.windows == 6
    # The run that materialized only retired windows is deleted with its events; the other one stays.
    assert later.runs_deleted == 1 and instance.get_run_by_id(old_run) is None
    assert instance.get_run_by_id(new_run) is not None
    left = instance.fetch_materializations(archive_asset_key(topic), limit=100).records
    assert sorted(r.partition_key for r in left) == sorted(w.key for w in ws[4:])

    # The checks still see every window.
    contiguous = contiguity_result(instance, topic)
    assert contiguous.passed and contiguous.metadata["retired_windows"].value == 6
    objects = objects_result(instance, client, cfg, topic)
    assert objects.passed and objects.metadata["manifests"].value == 8
    assert retention_result(instance, kafka, topic).metadata["archive_lag"].value == 0

    # A lost sensor cursor does not cut windows over the retired offsets.
    produce(kafka, topic, [(0, None, b"new", [])] * 10)
    with dg.build_sensor_context(instance=instance, resources={"kafka": kafka, "s3": s3_resource(services)}) as ctx:
        result = build_offsets_sensor(cfg)(ctx)
    (req,) = result.dynamic_partitions_requests
    assert list(req.partition_keys) == [OffsetWindow(0, 40, 50).key]

    # A retired window added back (to restore it from the UI) is no overlap, and is retired again later.
    back = OffsetWindow(1, 10, 20)
    instance.add_dynamic_partitions(window_partitions(topic).name, [back.key])
    assert contiguity_result(instance, topic).passed
    assert retire_topic(instance, client, cfg, topic, datetime.now(UTC) + timedelta(days=2), log).retired == 1
    assert back.key not in keys(instance, topic) and read_retired(instance, topic) == retired  # counted once

    # A retired window whose manifest is gone is a problem of the objects check.
    client.delete_object(Bucket=cfg.bucket, Key=manifest_key(cfg.prefix, topic, OffsetWindow(0, 10, 20)))
    bad = objects_result(instance, client, cfg, topic)
    assert not bad.passed
    assert f"topic '{topic}' partition 0: retired offsets [10, 20) have no manifest" in bad.description
