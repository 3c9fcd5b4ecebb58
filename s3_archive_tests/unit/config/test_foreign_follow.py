"""A foreign source's follow and error-tolerance keys: defaults, a sensor only when it follows, clear refusals."""

from __future__ import annotations

import pytest

from s3_archive.config.settings import parse_settings
from s3_archive.defs.restore.assets import build_restore_defs
from s3_archive.model.errors import InvalidConfig


def settings(**source):
    return parse_settings({"archives": [{"name": "shop", "topics": ["orders"], "bucket": "bkt"}],
                           "foreign_sources": [{"name": "legacy", "layout": "aiven", "bucket": "old",
                                                "topic": "orders", **source}]})


def test_defaults_fail_on_an_unreadable_object_and_follow_nothing():
    s = settings().foreign_sources[0]
    assert (s.error_tolerance, s.follow_target_topic) == ("none", None)
    assert not list(build_restore_defs(settings()).sensors or [])


def test_a_followed_source_gets_its_sensor_running_from_the_start():
    defs = build_restore_defs(settings(follow_target_topic="orders.copy", error_tolerance="skip"))
    assert [s.name for s in defs.sensors] == ["restore_foreign_legacy_follow"]


@pytest.mark.parametrize("source,message", [
    ({"follow_target_topic": "orders"}, "foreign_sources[0]: follow_target_topic is the archived topic 'orders' itself"),
    ({"follow_target_topic": "bad topic"}, "foreign_sources[0].follow_target_topic"),
    ({"error_tolerance": "all"}, "foreign_sources[0].error_tolerance"),
])
def test_bad_keys_are_refused_at_load_naming_the_key(source, message):
    with pytest.raises(InvalidConfig) as e:
        settings(**source)
    assert message in str(e.value)
