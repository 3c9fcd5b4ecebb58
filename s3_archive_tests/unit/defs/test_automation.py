"""Automation races, decided by construction: with `schedule_cron` the offsets sensor stays the one path that cuts
windows (the cron only makes a sensor tick also cut the rests), so a schedule and a sensor can never cut
overlapping windows. This pins that: no schedule, and no other sensor, materializes an archive asset."""

import warnings

from s3_archive.config.settings import parse_settings
from s3_archive.definitions import build_defs
from s3_archive.defs.archive.partitions import archive_asset_key
from s3_archive.defs.archive.sensors import sensor_name
from s3_archive_tests.unit.defs.test_definitions import KNOWN, RICH


def test_with_schedule_cron_the_offsets_sensor_is_the_one_path_that_cuts_windows():
    settings = parse_settings(RICH)
    assert settings.archives[0].schedule_cron  # "orders": schedule_cron and the sensor's flush thresholds
    # ("later" has a pattern that knows no topic yet: no asset, no sensor target)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a pattern that knows no topic yet
        defs = build_defs(settings, KNOWN)
    repo, graph = defs.get_repository_def(), defs.resolve_asset_graph()
    archive_keys = {k for k in graph.get_all_asset_keys() if k.path[0] == "kafka_archive"}
    assert archive_keys

    # Each archive's windows are cut and materialized by its offsets sensor, and by no other sensor.
    cutters = {s.name: set(s.asset_selection.resolve(graph)) & archive_keys for s in repo.sensor_defs
               if s.asset_selection is not None}
    cutters = {name: keys for name, keys in cutters.items() if keys}
    assert sorted(cutters) == sorted(sensor_name(a) for a in settings.archives if a.name != "later")
    assert sum(len(keys) for keys in cutters.values()) == len(archive_keys)  # each asset has one cutter
    assert set().union(*cutters.values()) == archive_keys
    assert cutters[sensor_name(settings.archives[0])] >= {archive_asset_key(t) for t in settings.archives[0].topics}
    # No sensor has a job that could materialize them either.
    assert all(not s.has_jobs or not set(repo.get_job(j.name).asset_layer.selected_asset_keys) & archive_keys
               for s in repo.sensor_defs for j in (s.jobs if s.has_jobs else []))

    # No schedule materializes an archive asset (the cut schedule is the sensor's cron, not a schedule; the daily
    # schedules run checks and retirement only).
    assert repo.schedule_defs
    for schedule in repo.schedule_defs:
        job = repo.get_job(schedule.job_name)
        assert not set(job.asset_layer.selected_asset_keys) & archive_keys, schedule.name


def test_the_offsets_sensor_runs_from_the_start_unless_the_archive_says_stopped():
    import dagster as dg
    import pytest

    from s3_archive.defs.archive.sensors import build_offsets_sensor
    from s3_archive.model.errors import InvalidConfig

    def archive(**kw):
        return parse_settings({"archives": [{"name": "a", "topics": ["t"], "bucket": "b-1", **kw}]}).archives[0]

    assert build_offsets_sensor(archive()).default_status == dg.DefaultSensorStatus.RUNNING
    assert build_offsets_sensor(archive(sensor_default="running")).default_status == dg.DefaultSensorStatus.RUNNING
    assert build_offsets_sensor(archive(sensor_default="stopped")).default_status == dg.DefaultSensorStatus.STOPPED
    with pytest.raises(InvalidConfig, match=r"archives\[0\]\.sensor_default.*'running' or 'stopped'"):
        archive(sensor_default="on")
    with pytest.raises(InvalidConfig, match=r"archives\[0\]\.broker_outage_seconds"):
        archive(broker_outage_seconds=-1)
