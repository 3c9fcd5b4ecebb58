"""The offsets sensor and the asset checks against the real broker and moto server (Spark only where a window is
really archived)."""

import math
import time
import uuid
from dataclasses import dataclass

import dagster as dg
import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewPartitions

from s3_archive.archive.cursor import SensorCursor, last_cron_tick
from s3_archive.archive.plan import DEFAULT_BYTES_PER_RECORD
from s3_archive.config.archive import ArchiveConfig, FlushPolicy
from s3_archive.config.settings import Settings
from s3_archive.defs.archive.assets import build_archive_assets
from s3_archive.defs.archive.automation import build_archive_automation
from s3_archive.defs.archive.checks import (
    CONTIGUOUS,
    FRESH,
    HEADROOM,
    MANIFESTS,
    OBJECTS,
    RETENTION,
    VERIFY,
    build_archive_checks,
    contiguity_result,
    headroom_result,
    objects_result,
    retention_result,
)
from s3_archive.defs.archive.partitions import RANGE_END, RANGE_START, archive_asset_key, window_partitions
from s3_archive.defs.archive.schedules import build_checks_schedule, checks_job_name, retire_job_name
from s3_archive.defs.archive.sensors import (
    CUT_TAG,
    build_offsets_sensor,
    sensor_name,
)
from s3_archive.io.s3_resource import S3Resource
from s3_archive.keys.objects import manifest_key, object_key
from s3_archive.model.windows import OffsetWindow, check_contiguous
from s3_archive_tests.integration.archive_helpers import materialize, resources, s3_resource, window_metadata
from s3_archive_tests.kafka_helpers import create_topic, open_producer, produce


def config(services, topics: list[str], unique: str, **flush) -> ArchiveConfig:
    return ArchiveConfig(name="sensed", topics=topics, bucket=services.bucket, prefix=f"sensed/{unique}/",
                         flush=FlushPolicy(**flush))


SENSOR_S3: list[S3Resource] = []  # the session's moto as the sensors' `s3` resource (set by `_sensor_s3`)


@pytest.fixture(autouse=True)
def _sensor_s3(services):
    SENSOR_S3[:] = [s3_resource(services)]


def tick(cfg: ArchiveConfig, kafka, instance: dg.DagsterInstance, cursor: str | None = None) -> dg.SensorResult:
    with dg.build_sensor_context(instance=instance, resources={"kafka": kafka, "s3": SENSOR_S3[0]},
                                 cursor=cursor) as context:
        result = build_offsets_sensor(cfg)(context)
    assert isinstance(result, dg.SensorResult)
    return result


def apply(result: dg.SensorResult, instance: dg.DagsterInstance) -> None:
    """What the daemon does with a tick's partition requests before it launches the runs."""
    for req in result.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))


def cut(result: dg.SensorResult) -> list[tuple[str, int, int, int]]:
    """(topic, partition, start, end) of every requested window, checked against the partition requests:
    a run covers one window (partition_key) or a contiguous slice of the tick's added keys (a range)."""
    out = []
    added = {r.partitions_def_name: list(r.partition_keys) for r in result.dynamic_partitions_requests or []}
    for r in result.run_requests or []:
        (key,) = r.asset_selection
        topic = key.path[-1]
        order = added[window_partitions(topic).name]
        if r.partition_key is not None:
            keys = [r.partition_key]
            assert r.run_key == f"{topic}/{r.partition_key}"
        else:
            start, end = r.tags[RANGE_START], r.tags[RANGE_END]
            keys = order[order.index(start):order.index(end) + 1]
            assert len(keys) > 1 and r.run_key == f"{topic}/{start}..{end}"
        assert key == archive_asset_key(topic) and r.asset_check_keys == []
        out += [(topic, w.partition, w.start, w.end) for w in map(OffsetWindow.parse, keys)]
    assert sum(len(k) for k in added.values()) == len(out)
    return out


def windows_of(instance: dg.DagsterInstance, topic: str) -> list[OffsetWindow]:
    return sorted(OffsetWindow.parse(k) for k in instance.get_dynamic_partitions(window_partitions(topic).name))


def delete_records(kafka, topic: str, partition: int, before: int) -> None:
    tp = TopicPartition(topic, partition, before)
    admin = kafka.admin()  # keep a reference: a collected client never resolves its futures
    admin.delete_records([tp])[tp].result(timeout=30)


@dataclass
class Archived:
    topic: str
    cfg: ArchiveConfig
    instance: dg.DagsterInstance
    res: dict
    windows: list[OffsetWindow]
    meta: dict[str, dict]


@pytest.fixture(scope="module")
def archived(kafka, services, spark_resource) -> Archived:
    """One topic with three windows really archived by the asset (Spark), shared to keep the module fast."""
    unique = uuid.uuid4().hex[:8]
    topic = create_topic(kafka, f"archived-{unique}")
    produce(kafka, topic, [(0, b"k", b"v" * 200, [])] * 30)
    cfg = config(services, [topic], unique)
    res = resources(services, kafka, spark_resource)
    instance = dg.DagsterInstance.ephemeral()
    ws = [OffsetWindow(0, 0, 10), OffsetWindow(0, 10, 20), OffsetWindow(0, 20, 30)]
    meta = window_metadata(materialize(cfg, topic, ws, res, instance))
    return Archived(topic, cfg, instance, res, ws, meta)


# --- the sensor --------------------------------------------------------------------------------------------------


def test_full_windows_from_the_log_start_then_from_the_last_window(kafka, services, unique):
    topic = create_topic(kafka, f"count-{unique}", partitions=2)
    produce(kafka, topic, [(0, None, b"x", [])] * 25 + [(1, None, b"y", [])] * 15)
    delete_records(kafka, topic, 1, 3)  # partition 1 starts at offset 3: its first window must too
    cfg = config(services, [topic], unique, count=10, interval_seconds=None)
    instance = dg.DagsterInstance.ephemeral()

    first = tick(cfg, kafka, instance)
    assert cut(first) == [(topic, 0, 0, 10), (topic, 1, 3, 13), (topic, 0, 10, 20)]
    assert {r.tags[CUT_TAG] for r in first.run_requests} == {"count"}
    apply(first, instance)

    produce(kafka, topic, [(0, None, b"x", [])] * 10)
    second = tick(cfg, kafka, instance)
    assert cut(second) == [(topic, 0, 20, 30)]  # partition 1 has 2 records after its window: not a full one
    apply(second, instance)

    third = tick(cfg, kafka, instance)
    assert cut(third) == [] and "no new windows" in third.skip_reason.skip_message


def test_the_rest_is_cut_once_its_oldest_record_is_older_than_the_interval(kafka, services, unique):
    topic = create_topic(kafka, f"age-{unique}")
    produce(kafka, topic, [(0, None, b"x", [])] * 25)
    produced_at = time.monotonic()
    cfg = config(services, [topic], unique, count=10, interval_seconds=3)
    instance = dg.DagsterInstance.ephemeral()

    fresh = tick(cfg, kafka, instance)
    assert cut(fresh) == [(topic, 0, 0, 10), (topic, 0, 10, 20)]  # [20, 25) is too young
    apply(fresh, instance)

    time.sleep(max(0.0, produced_at + 3.3 - time.monotonic()))
    old = tick(cfg, kafka, instance)
    assert cut(old) == [(topic, 0, 20, 25)] and old.run_requests[0].tags[CUT_TAG] == "age"
    apply(old, instance)

    # Age is that of the oldest record in no window: the new ones, not the ones just archived.
    produce(kafka, topic, [(0, None, b"x", [])] * 3)
    assert cut(tick(cfg, kafka, instance)) == []


def test_a_repeated_tick_or_lost_cursor_cuts_the_same_windows_and_never_overlaps(kafka, services, unique):
    topic = create_topic(kafka, f"restart-{unique}")
    produce(kafka, topic, [(0, None, b"x", [])] * 250)
    cfg = config(services, [topic], unique, count=2, interval_seconds=None)
    instance = dg.DagsterInstance.ephemeral()
    # A window that already exists (an earlier sensor, or added by hand): the keys, not a cursor, are the truth.
    instance.add_dynamic_partitions(window_partitions(topic).name, [OffsetWindow(0, 0, 7).key])

    first = tick(cfg, kafka, instance)
    # Evaluated again before its partitions were added (the daemon died mid-tick): the same windows and run keys,
    # which Dagster de-duplicates.
    again = tick(cfg, kafka, instance, cursor="stale")
    assert cut(first) == cut(again)
    assert [r.run_key for r in first.run_requests] == [r.run_key for r in again.run_requests]
    assert len(cut(first)) == 100, "one tick is bounded"
    # A backlog is packed into runs by windows_per_run (100) and bytes_per_run (2 GiB): these 100 small windows
    # are one run, which materializes each of them.
    assert len(first.run_requests) == 1
    assert first.run_requests[0].tags[RANGE_START] == OffsetWindow(0, 7, 9).key
    assert cut(first)[0] == (topic, 0, 7, 9)
    apply(first, instance)

    second = tick(cfg, kafka, instance)  # fresh context: no cursor at all
    assert cut(second)[0] == (topic, 0, 207, 209) and cut(second)[-1] == (topic, 0, 247, 249)
    assert not {r.run_key for r in first.run_requests} & {r.run_key for r in second.run_requests}
    apply(second, instance)

    assert cut(tick(cfg, kafka, instance)) == []
    ws = windows_of(instance, topic)
    assert check_contiguous(ws) == [] and (ws[0].start, ws[-1].end, len(ws)) == (0, 249, 122)


def test_partitions_added_to_a_topic_are_archived_from_their_start(kafka, services, unique):
    topic = create_topic(kafka, f"grow-{unique}")
    produce(kafka, topic, [(0, None, b"x", [])] * 10)
    cfg = config(services, [topic], unique, count=5, interval_seconds=None)
    instance = dg.DagsterInstance.ephemeral()
    apply(tick(cfg, kafka, instance), instance)

    admin = kafka.admin()
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(timeout=30)
    deadline = time.monotonic() + 20
    while kafka.partitions(topic) != [0, 1, 2]:
        assert time.monotonic() < deadline, "the new partitions never showed up in the metadata"
        time.sleep(0.2)
    produce(kafka, topic, [(2, None, b"z", [])] * 5 + [(1, None, b"y", [])] * 4)

    assert cut(tick(cfg, kafka, instance)) == [(topic, 2, 0, 5)]


def test_each_topic_of_an_archive_gets_its_own_run_keys_and_a_missing_topic_waits(kafka, services, spark_resource,
                                                                                  unique):
    a = create_topic(kafka, f"two-a-{unique}")
    b = create_topic(kafka, f"two-b-{unique}")
    for t in (a, b):
        produce(kafka, t, [(0, None, b"x", [])] * 5)
    cfg = config(services, [a, b, f"not-yet-{unique}"], unique, count=5, interval_seconds=None)
    defs = dg.Definitions.merge(dg.Definitions(assets=build_archive_assets([cfg]),
                                               resources=resources(services, kafka, spark_resource)),
                                build_archive_automation(Settings(archives=[cfg])))
    (sensor,) = defs.get_repository_def().sensor_defs

    # As the daemon evaluates it: run requests resolved against the repository's assets, checks and partitions
    # (a persistent instance: the partition keys are validated against it plus the tick's own requests).
    # Contexts are closed with `with`: an open one leaves Dagster's current defs-state storage pointing at a
    # disposed instance, which breaks later definitions loads in the same process.
    with dg.instance_for_test() as instance, dg.build_sensor_context(
            instance_ref=instance.get_ref(), definitions=defs, resources={"kafka": kafka, "s3": SENSOR_S3[0]},
    ) as context:
        data = sensor.evaluate_tick(context)

    assert sorted((r.asset_selection[0].path[-1], r.partition_key) for r in data.run_requests) == \
        [(a, OffsetWindow(0, 0, 5).key), (b, OffsetWindow(0, 0, 5).key)]
    assert len({r.run_key for r in data.run_requests}) == 2  # same window key, two topics
    assert all(r.job_name and r.asset_check_keys == [] for r in data.run_requests)  # checks run daily instead
    assert sorted(r.partitions_def_name for r in data.dynamic_partitions_requests) == \
        sorted(window_partitions(t).name for t in (a, b))


def test_byte_cap_uses_the_bytes_per_record_of_archived_windows(kafka, archived):
    topic, cfg = archived.topic, archived.cfg.model_copy(update={"flush": FlushPolicy(count=1000, bytes=5000,
                                                                                      interval_seconds=None)})
    produce(kafka, topic, [(0, b"k", b"v" * 200, [])] * 100)  # after the 30 archived ones

    # Nothing archived yet (another instance): the default estimate
    default_size = math.floor(5000 / DEFAULT_BYTES_PER_RECORD)
    assert cut(tick(cfg, kafka, dg.DagsterInstance.ephemeral()))[0] == (topic, 0, 0, default_size)

    measured = sum(m["bytes_read"] for m in archived.meta.values()) / 30
    size = math.floor(5000 / measured)
    assert size != default_size and size < cfg.flush.count
    result = tick(cfg, kafka, archived.instance)
    assert cut(result)[:2] == [(topic, 0, 30, 30 + size), (topic, 0, 30 + size, 30 + 2 * size)]
    assert {r.tags[CUT_TAG] for r in result.run_requests} == {"bytes"}


# --- the asset checks --------------------------------------------------------------------------------------------


def run_check(cfg: ArchiveConfig, topic: str, name: str, instance: dg.DagsterInstance,
              res: dict | None = None) -> dg.AssetCheckResult:
    """One check of the topic's checks step, through the same function the step calls for it."""
    res = res or {}
    run = {CONTIGUOUS: lambda: contiguity_result(instance, topic),
           OBJECTS: lambda: objects_result(instance, res["s3"].get_client(), cfg, topic),
           RETENTION: lambda: retention_result(instance, res["kafka"], topic),
           HEADROOM: lambda: headroom_result(instance, res["kafka"], cfg, topic)}
    return run[name]()


def test_the_checks_job_runs_every_check_in_one_step(archived):
    cfg, topic, instance, res = archived.cfg, archived.topic, archived.instance, archived.res
    defs = dg.Definitions(assets=build_archive_assets([cfg]), asset_checks=build_archive_checks(cfg, topic),
                          jobs=[build_checks_schedule(cfg)[0]], resources=res)
    result = defs.get_job_def(checks_job_name(cfg)).execute_in_process(instance=instance)
    assert result.success and len(result.get_step_success_events()) == 1
    evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert sorted(evaluations) == sorted([CONTIGUOUS, OBJECTS, RETENTION, HEADROOM, MANIFESTS, FRESH, VERIFY])
    assert all(e.passed for e in evaluations.values()), evaluations
    verified = evaluations[VERIFY].metadata  # every committed window re-read, hashed, its link checked
    assert verified["windows_read"].value == verified["windows"].value > 0
    assert verified["bytes_read"].value > 0 and verified["unhashed_windows"].value == 0


def test_contiguity_check_names_overlaps_holes_and_bad_keys(services, unique):
    topic = f"tiles-{unique}"
    cfg = config(services, [topic], unique)
    instance = dg.DagsterInstance.ephemeral()
    name = window_partitions(topic).name
    instance.add_dynamic_partitions(name, [OffsetWindow(0, 0, 10).key, OffsetWindow(0, 10, 20).key,
                                           OffsetWindow(1, 0, 5).key])
    ok = run_check(cfg, topic, CONTIGUOUS, instance)
    assert ok.passed and ok.metadata["windows"].value == 3

    instance.add_dynamic_partitions(name, [OffsetWindow(0, 15, 25).key, OffsetWindow(1, 8, 12).key, "junk"])
    bad = run_check(cfg, topic, CONTIGUOUS, instance)
    assert not bad.passed and bad.severity == dg.AssetCheckSeverity.ERROR
    assert "partition 0: p0 [10, 20) overlaps p0 [15, 25)" in bad.description
    assert "partition 1: offsets [5, 8) are in no window" in bad.description
    assert "'junk'" in bad.description and bad.metadata["problems"].value == 3


def test_objects_check_finds_missing_resized_and_unmanifested_windows(s3, archived):
    cfg, topic, instance, res, ws = archived.cfg, archived.topic, archived.instance, archived.res, archived.windows
    ok = run_check(cfg, topic, OBJECTS, instance, res)
    assert ok.passed and (ok.metadata["manifests"].value, ok.metadata["objects"].value) == (3, 3)

    gone = object_key(cfg.prefix, topic, ws[0], 0, ".parquet")
    resized = object_key(cfg.prefix, topic, ws[1], 0, ".parquet")
    s3.delete_object(Bucket=cfg.bucket, Key=gone)
    s3.put_object(Bucket=cfg.bucket, Key=resized, Body=b"truncated")
    s3.delete_object(Bucket=cfg.bucket, Key=manifest_key(cfg.prefix, topic, ws[2]))
    bad = run_check(cfg, topic, OBJECTS, instance, res)

    assert not bad.passed and bad.severity == dg.AssetCheckSeverity.ERROR
    assert f"missing: s3://{cfg.bucket}/{gone}" in bad.description
    assert f"size changed: s3://{cfg.bucket}/{resized} is 9 bytes" in bad.description
    assert f"window {ws[2].key} of '{topic}' is materialized but has no manifest" in bad.description
    assert bad.metadata["problems"].value == 3


def test_retention_check_names_the_offsets_kafka_deleted_before_they_were_archived(kafka, services, unique):
    topic = create_topic(kafka, f"lost-{unique}", partitions=2)
    produce(kafka, topic, [(0, None, b"x", [])] * 30)
    cfg = config(services, [topic], unique)
    instance = dg.DagsterInstance.ephemeral()
    ws = [OffsetWindow(0, 0, 10), OffsetWindow(0, 10, 20)]
    instance.add_dynamic_partitions(window_partitions(topic).name, [w.key for w in ws])
    instance.report_runless_asset_event(dg.AssetMaterialization(archive_asset_key(topic), partition=ws[0].key))
    res = {"kafka": kafka}

    ok = run_check(cfg, topic, RETENTION, instance, res)
    assert ok.passed and ok.metadata["archive_lag"].value == 20  # [10, 20) uncommitted + [20, 30) in no window
    assert ok.metadata["lag_by_partition"].value == {"0": 20, "1": 0}

    delete_records(kafka, topic, 0, 5)  # inside the committed window: nothing lost
    assert run_check(cfg, topic, RETENTION, instance, res).passed

    delete_records(kafka, topic, 0, 25)
    lost = run_check(cfg, topic, RETENTION, instance, res)
    assert not lost.passed and lost.severity == dg.AssetCheckSeverity.ERROR
    assert f"topic '{topic}' partition 0: offsets [10, 25) were deleted by Kafka" in lost.description
    assert lost.metadata["lost_offsets"].value == 15
    assert lost.metadata["lost_ranges"].value == {"0": [[10, 25]]}


def test_the_daily_job_runs_every_check_of_the_archive(kafka, services, spark_resource, unique):
    topic = create_topic(kafka, f"daily-{unique}")
    cfg = config(services, [topic], unique)
    defs = dg.Definitions.merge(
        dg.Definitions(assets=build_archive_assets([cfg]), resources=resources(services, kafka, spark_resource)),
        build_archive_automation(Settings(archives=[cfg])),
    )
    dg.Definitions.validate_loadable(defs)

    result = defs.resolve_job_def(checks_job_name(cfg)).execute_in_process(instance=dg.DagsterInstance.ephemeral())

    evaluations = {e.asset_check_evaluation_data.check_name: e.asset_check_evaluation_data.passed
                   for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"}
    assert evaluations == {CONTIGUOUS: True, OBJECTS: True, RETENTION: True, HEADROOM: True, MANIFESTS: True,
                           FRESH: True, VERIFY: True}
    assert result.get_asset_materialization_events() == []


# --- cron ticks, start position, retention headroom -------------------------------------------------------------


def produce_at(kafka, topic: str, records: list[tuple[int, int]]) -> None:
    """(partition, CreateTime in epoch ms) records, in order."""
    with open_producer(kafka, **{"enable.idempotence": True}) as producer:
        for partition, ts in records:
            producer.produce(topic, value=b"x", partition=partition, timestamp=ts)
        assert producer.flush(60) == 0


def test_at_each_cron_tick_the_sensor_also_cuts_every_rest_up_to_the_last_stable_offset(kafka, services,
                                                                                          spark_resource, unique):
    a = create_topic(kafka, f"cron-a-{unique}", partitions=2)
    b = create_topic(kafka, f"cron-b-{unique}")
    produce(kafka, a, [(0, None, b"x", [])] * 25 + [(1, None, b"y", [])] * 3)
    # Once a year, so no real cron tick passes during the test: a cursor that handled an older tick stands for
    # "a cron tick passed since the last evaluation".
    cron = "0 0 1 1 *"
    cfg = config(services, [a, b], unique, count=10, interval_seconds=None).model_copy(
        update={"schedule_cron": cron, "windows_per_run": 1})
    defs = dg.Definitions.merge(dg.Definitions(assets=build_archive_assets([cfg]),
                                               resources=resources(services, kafka, spark_resource)),
                                build_archive_automation(Settings(archives=[cfg])))
    dg.Definitions.validate_loadable(defs)
    repo = defs.get_repository_def()
    # One cutting path: the offsets sensor; no cut schedule that could race it (the other schedules run the checks
    # and the window retirement, which cut nothing).
    assert sorted(s.name for s in repo.schedule_defs) == [f"{checks_job_name(cfg)}_daily",
                                                          f"{retire_job_name(cfg)}_daily"]
    sensor = repo.get_sensor_def(sensor_name(cfg))
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING and f"at each tick of {cron!r} (UTC)" in \
        sensor.description

    def spans(data) -> list[tuple[str, int, int, int, str]]:
        out = []
        for r in data.run_requests:  # windows_per_run 1: one window per run
            topic, w = r.asset_selection[0].path[-1], OffsetWindow.parse(r.partition_key)
            assert r.run_key == f"{topic}/{w.key}" and r.asset_check_keys == []
            out.append((topic, w.partition, w.start, w.end, r.tags[CUT_TAG]))
        return sorted(out)

    with dg.instance_for_test() as instance:
        def evaluate(cursor: str | None):
            with dg.build_sensor_context(instance_ref=instance.get_ref(), definitions=defs, cursor=cursor,
                                         resources={"kafka": kafka, "s3": SENSOR_S3[0]}) as context:
                data = sensor.evaluate_tick(context)
            for req in data.dynamic_partitions_requests:  # as the daemon does before it launches the runs
                instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
            return data

        due = SensorCursor(cron_tick=0).dump()
        first = evaluate(due)
        # Full windows as at every tick, and every rest up to the last stable offset, however young.
        assert spans(first) == [(a, 0, 0, 10, "count"), (a, 0, 10, 20, "count"), (a, 0, 20, 25, "cron"),
                                (a, 1, 0, 3, "cron")]
        assert windows_of(instance, a) == [OffsetWindow(0, 0, 10), OffsetWindow(0, 10, 20), OffsetWindow(0, 20, 25),
                                           OffsetWindow(1, 0, 3)]
        # The cron tick is handled: the cursor says so.
        assert SensorCursor.parse(first.cursor).cron_tick == last_cron_tick(cron, time.time())
        # Evaluated again with the old cursor (a retried tick): nothing new, so nothing is launched twice.
        again = evaluate(due)
        assert not again.run_requests and "every partition's windows reach" in again.skip_message

        produce(kafka, a, [(0, None, b"x", [])] * 2)
        produce(kafka, b, [(0, None, b"z", [])] * 1)
        # Until the next cron tick, young rests wait (flush.interval_seconds is off).
        assert not evaluate(first.cursor).run_requests
        third = evaluate(due)
        assert spans(third) == [(a, 0, 25, 27, "cron"), (b, 0, 0, 1, "cron")]
        assert not {r.run_key for r in first.run_requests} & {r.run_key for r in third.run_requests}
        assert check_contiguous(windows_of(instance, a)) == []

        # Turned on (no cursor, or a reset one): like a schedule turned on, the rests wait for the next cron tick.
        produce(kafka, a, [(1, None, b"y", [])])
        turned_on = evaluate(None)
        assert not turned_on.run_requests
        assert SensorCursor.parse(turned_on.cursor).cron_tick == last_cron_tick(cron, time.time())


def test_start_position_latest_skips_existing_records_and_archives_new_ones(kafka, services, unique):
    topic = create_topic(kafka, f"latest-{unique}", partitions=2)
    produce(kafka, topic, [(0, None, b"x", [])] * 12 + [(1, None, b"y", [])] * 4)
    cfg = config(services, [topic], unique, count=5, interval_seconds=None).model_copy(
        update={"start_position": "latest"})
    instance = dg.DagsterInstance.ephemeral()

    first = tick(cfg, kafka, instance)
    assert cut(first) == [] and "no new windows" in first.skip_reason.skip_message

    # Records produced after the first tick: archived from where the partition ended at that tick, not from where
    # it ends at the tick that cuts (the start is remembered in the sensor's cursor until the first window exists).
    produce(kafka, topic, [(0, None, b"x", [])] * 3)
    waiting = tick(cfg, kafka, instance, first.cursor)
    assert cut(waiting) == []
    assert SensorCursor.parse(waiting.cursor).starts == {topic: {0: 12, 1: 4}}
    produce(kafka, topic, [(0, None, b"x", [])] * 3 + [(1, None, b"y", [])] * 5)
    second = tick(cfg, kafka, instance, waiting.cursor)
    assert cut(second) == [(topic, 0, 12, 17), (topic, 1, 4, 9)]
    apply(second, instance)
    last = tick(cfg, kafka, instance, second.cursor)
    assert cut(last) == []
    assert SensorCursor.parse(last.cursor).starts == {}  # every partition has a window: no anchor is needed


def test_start_position_timestamp_starts_at_the_first_record_at_or_after_it(kafka, services, unique):
    topic = create_topic(kafka, f"since-{unique}", partitions=2)
    now = int(time.time() * 1000)
    produce_at(kafka, topic, [(0, now - 60_000), (0, now - 50_000), (0, now - 30_000), (0, now - 20_000),
                              (0, now - 10_000), (1, now - 40_000), (1, now - 35_000)])
    cfg = config(services, [topic], unique, count=2, interval_seconds=None).model_copy(
        update={"start_position": now - 30_000})
    instance = dg.DagsterInstance.ephemeral()
    # Partition 0 from offset 2 (the first record at or after the timestamp); partition 1 has none: it starts at
    # its end, and its next records are archived.
    assert cut(tick(cfg, kafka, instance)) == [(topic, 0, 2, 4)]
    produce_at(kafka, topic, [(1, now), (1, now + 1)])
    assert cut(tick(cfg, kafka, instance)) == [(topic, 0, 2, 4), (topic, 1, 2, 4)]


def test_retention_headroom_warns_when_the_oldest_unarchived_record_nears_retention(kafka, services, unique):
    hour = 3_600_000
    old = create_topic(kafka, f"old-{unique}", partitions=2, config={"retention.ms": str(hour)})
    forever = create_topic(kafka, f"forever-{unique}", config={"retention.ms": "-1"})
    fresh = create_topic(kafka, f"fresh-{unique}", config={"retention.ms": str(hour)})
    now = int(time.time() * 1000)
    fifty_minutes_ago = now - 50 * 60_000  # 0.83 of retention.ms: past 0.8
    produce_at(kafka, old, [(0, fifty_minutes_ago)] * 3 + [(0, now)] * 2 + [(1, now)] * 2)
    produce_at(kafka, forever, [(0, fifty_minutes_ago)] * 3)
    produce_at(kafka, fresh, [(0, now)] * 3)
    res = {"kafka": kafka}
    instance = dg.DagsterInstance.ephemeral()

    warn = run_check(config(services, [old], unique), old, HEADROOM, instance, res)
    assert not warn.passed and warn.severity == dg.AssetCheckSeverity.WARN
    assert f"topic '{old}' partition 0: the oldest unarchived record (offset 0) is 30" in warn.description
    assert "s old, more than 0.8 of retention.ms 3600000 (3600 s)" in warn.description
    assert "partition 1" not in warn.description and warn.metadata["problems"].value == 1
    assert warn.metadata["retention_ms"].value == hour
    ages = warn.metadata["oldest_unarchived_age_seconds"].value
    assert set(ages) == {"0", "1"} and 2990 < ages["0"] < 3100 and ages["1"] < 60

    # Once the old records are in a committed window, the oldest unarchived one is young.
    w = OffsetWindow(0, 0, 3)
    instance.add_dynamic_partitions(window_partitions(old).name, [w.key])
    instance.report_runless_asset_event(dg.AssetMaterialization(archive_asset_key(old), partition=w.key))
    ok = run_check(config(services, [old], unique), old, HEADROOM, instance, res)
    assert ok.passed and ok.metadata["oldest_unarchived_age_seconds"].value["0"] < 60

    for topic, retention in ((forever, -1), (fresh, hour)):
        ok = run_check(config(services, [topic], unique), topic, HEADROOM, instance, res)
        assert ok.passed and ok.metadata["retention_ms"].value == retention
