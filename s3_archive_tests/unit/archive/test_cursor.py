"""The offsets sensor's cursor and its cron gate (pure)."""

from datetime import UTC, datetime

import pytest

from s3_archive.archive.cursor import SensorCursor, cron_due, last_cron_tick


def at(hh: int, mm: int, ss: int = 0) -> float:
    return datetime(2026, 3, 2, hh, mm, ss, tzinfo=UTC).timestamp()


def test_the_cursor_round_trips_and_an_empty_one_is_empty():
    c = SensorCursor(cron_tick=at(10, 0), starts={"orders": {1: 40, 0: 12}, "idle": {}})
    back = SensorCursor.parse(c.dump())
    assert back == SensorCursor(cron_tick=at(10, 0), starts={"orders": {0: 12, 1: 40}})
    assert SensorCursor.parse(None) == SensorCursor.parse("") == SensorCursor()


@pytest.mark.parametrize("text", ["stale", "[1, 2]", '{"starts": {"t": {"x": 1}}}', '{"cron_tick": "soon"}'])
def test_an_unreadable_cursor_is_one_clear_error(text):
    with pytest.raises(ValueError, match="unreadable offsets sensor cursor"):
        SensorCursor.parse(text)


def test_the_last_cron_tick_is_in_utc():
    assert last_cron_tick("*/15 * * * *", at(10, 7)) == at(10, 0)
    assert last_cron_tick("0 6 * * *", at(5, 59)) == datetime(2026, 3, 1, 6, 0, tzinfo=UTC).timestamp()


def test_a_cron_tick_is_due_once_after_it_passes_and_not_when_the_sensor_just_started():
    cron = "*/15 * * * *"
    assert cron_due(cron, None, at(10, 7)) == (False, at(10, 0))  # just turned on: wait for the next tick
    assert cron_due(cron, at(10, 0), at(10, 14, 59)) == (False, at(10, 0))
    assert cron_due(cron, at(10, 0), at(10, 15, 30)) == (True, at(10, 15))
    # Several ticks missed (the sensor was off): one cut, at the latest tick.
    assert cron_due(cron, at(10, 0), at(11, 40)) == (True, at(11, 30))
