"""The `drill:` settings of an archive: defaults, each bad value named with what is allowed."""

import pytest

from s3_archive_tests.unit.config.parsed import cfg, err


def test_off_unless_configured_and_defaults_when_on():
    assert cfg().drill is None
    d = cfg(drill={}).drill
    assert (d.bytes_per_run, d.scratch_topic, d.every_days) == (64 << 20, None, 7)
    d = cfg(drill={"bytes_per_run": 1000, "scratch_topic": "drills.t", "every_days": 1}).drill
    assert (d.bytes_per_run, d.scratch_topic, d.every_days) == (1000, "drills.t", 1)


@pytest.mark.parametrize(("drill", "message"), [
    ({"bytes_per_run": 0}, "archives[0].drill.bytes_per_run"),
    ({"every_days": 0}, "archives[0].drill.every_days"),
    ({"every_days": 1.5}, "archives[0].drill.every_days"),
    ({"scratch_topic": "no spaces"}, "not a valid Kafka topic name: 'no spaces' (allowed: 1-249 of a-z A-Z 0-9 . _ -)"),
    ({"scratch_topic": ".."}, "not a valid Kafka topic name: '..'"),
    ({"scratch": "x"}, "archives[0].drill.scratch"),
    ({"scratch_topic": "t"}, "drill.scratch_topic 't' is an archived topic"),
])
def test_bad_values_are_named(drill, message):
    assert message in err(drill=drill)


def test_an_archive_that_cannot_be_restored_cannot_drill():
    text = err(format="csv", drill={})
    assert "drill: a drill restores the archive, and format 'csv' does not keep records byte for byte" in text
    assert "restorable formats: parquet" in text
    assert "value_decoding.type 'utf8'" in err(value_decoding={"type": "utf8"}, drill={})
    assert cfg(format="avro", drill={}).drill is not None
