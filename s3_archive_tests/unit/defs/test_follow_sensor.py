"""The follow sensor of a restore target with `mode: follow`, against a real (ephemeral) Dagster instance: it
requests the target's run over the windows the archive committed and the target has not restored, one run per topic
at a time, and records how far the target is behind."""

from __future__ import annotations

import json

import dagster as dg

from s3_archive.config.settings import parse_settings
from s3_archive.defs.archive.partitions import archive_asset_key, window_partitions
from s3_archive.defs.restore.assets import build_restore_defs
from s3_archive.defs.restore.sensors import FOLLOW_TAG, build_follow_sensors
from s3_archive.defs.restore.targets import target_asset_key
from s3_archive.model.windows import OffsetWindow

WINDOWS = [OffsetWindow(0, 0, 10), OffsetWindow(1, 0, 10), OffsetWindow(0, 10, 20), OffsetWindow(1, 10, 20)]


def _setup(mode: str = "follow"):
    settings = parse_settings({"archives": [{"name": "shop", "topics": ["orders"], "bucket": "bkt",
                                             "restore_targets": [{"name": "dr", "target_topic": "{topic}.copy",
                                                                  "mode": mode}]}]})
    defs = build_restore_defs(settings)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(window_partitions("orders").name, [w.key for w in WINDOWS])
    return settings, defs, instance


def _materialize(instance, key, windows):
    for w in windows:
        instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=key, partition=w.key))


def _tick(defs, settings, instance, cursor=None):
    (sensor,) = build_follow_sensors(settings.archives)
    return sensor(dg.build_sensor_context(instance=instance, cursor=cursor))


def test_only_follow_targets_get_a_sensor_and_it_runs_from_the_start():
    settings, defs, _ = _setup()
    assert [s.name for s in defs.sensors] == ["restore_shop_dr_follow"]
    assert defs.sensors[0].default_status == dg.DefaultSensorStatus.RUNNING
    assert not list(build_restore_defs(_setup("manual")[0]).sensors or [])


def test_the_follow_sensor_is_evaluated_as_often_as_its_archives_offsets_sensor():
    settings, defs, _ = _setup()
    assert defs.sensors[0].minimum_interval_seconds == 30  # sensor_interval_seconds' default
    faster = parse_settings({"archives": [{"name": "shop", "topics": ["orders"], "bucket": "bkt",
                                           "sensor_interval_seconds": 5,
                                           "restore_targets": [{"name": "dr", "target_topic": "{topic}.copy",
                                                                "mode": "follow"}]}]})
    (sensor,) = build_follow_sensors(faster.archives)
    assert sensor.minimum_interval_seconds == 5


def test_committed_windows_are_restored_in_one_run_and_a_caught_up_target_is_left_alone():
    settings, defs, instance = _setup()
    _materialize(instance, archive_asset_key("orders"), WINDOWS[:3])

    result = _tick(defs, settings, instance)
    (request,) = result.run_requests
    assert request.asset_selection == [target_asset_key("dr", "orders")]
    assert request.tags["dagster/asset_partition_range_start"] == WINDOWS[0].key
    assert request.tags["dagster/asset_partition_range_end"] == WINDOWS[2].key
    assert request.tags[FOLLOW_TAG] == "dr/orders"
    (behind,) = result.asset_events
    assert behind.metadata["follow_windows_behind"].value == 3

    _materialize(instance, target_asset_key("dr", "orders"), WINDOWS[:3])
    result = _tick(defs, settings, instance, result.cursor)
    assert not result.run_requests
    assert result.asset_events[0].metadata["follow_windows_behind"].value == 0

    _materialize(instance, archive_asset_key("orders"), WINDOWS[3:])
    result = _tick(defs, settings, instance, result.cursor)
    (request,) = result.run_requests
    assert request.partition_key == WINDOWS[3].key and request.run_key != "dr/orders#1"
    assert json.loads(result.cursor)["orders"]["runs"] == 2


def test_no_second_run_while_one_is_in_flight():
    settings, defs, instance = _setup()
    _materialize(instance, archive_asset_key("orders"), WINDOWS[:1])
    instance.add_run(dg.DagsterRun(job_name="__ASSET_JOB", run_id="a" * 36, tags={FOLLOW_TAG: "dr/orders"},
                                   status=dg.DagsterRunStatus.STARTED))

    result = _tick(defs, settings, instance)

    assert not result.run_requests
    assert result.asset_events[0].metadata["follow_windows_behind"].value == 1
