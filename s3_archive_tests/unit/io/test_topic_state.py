"""The topic state: the topics each topic_pattern knows, only ever grown by a refresh (pure, and the file)."""

import json

import pytest

from s3_archive.config.settings import parse_settings
from s3_archive.io.topic_state import forget_topics, merge_topics, read_known_topics, write_known_topics
from s3_archive.model.errors import TopicStateUnreadable

SETTINGS = parse_settings({"archives": [
    {"name": "a", "topics": ["orders.eu"], "topic_pattern": r"orders\..*", "bucket": "bkt", "prefix": "a/"},
    {"name": "b", "topic_pattern": r".*\.eu", "bucket": "bkt", "prefix": "b/"},
    {"name": "c", "topics": ["fixed"], "bucket": "bkt", "prefix": "c/"},
]})


def test_a_refresh_adds_matches_and_drops_nothing():
    first = merge_topics(SETTINGS, ["orders.eu", "orders.us", "clicks.eu", "__consumer_offsets", "fixed"], {})
    # explicit topics are not state; a topic goes to the first pattern claiming it; archives without a pattern
    # have no entry
    assert first == {"a": ["orders.us"], "b": ["clicks.eu"]}
    # orders.us and clicks.eu are gone from Kafka: still known (their windows, checks and lifecycle rules stay)
    second = merge_topics(SETTINGS, ["orders.eu", "orders.asia"], first | {"old_archive": ["x"]})
    assert second == {"a": ["orders.asia", "orders.us"], "b": ["clicks.eu"], "old_archive": ["x"]}


def test_the_state_file_round_trips_atomically_and_forgets_only_on_request(tmp_path):
    path = tmp_path / "state" / "topics.json"
    assert read_known_topics(path) == {}
    write_known_topics(path, {"b": ["z", "y"], "a": ["x"]})
    assert json.loads(path.read_text()) == {"version": 1, "archives": {"a": ["x"], "b": ["y", "z"]}}
    assert sorted(p.name for p in path.parent.iterdir()) == ["topics.json"]  # no temporary file left
    assert forget_topics(path, ["y", "nope"]) == {"b": ["y"]}
    assert read_known_topics(path) == {"a": ["x"], "b": ["z"]}


@pytest.mark.parametrize("body", ["{not json", '{"version": 2, "archives": {}}', '{"version": 1}',
                                  '{"version": 1, "archives": {"a": "x"}}', "[]"])
def test_a_damaged_state_file_is_one_clear_error(tmp_path, body):
    path = tmp_path / "topics.json"
    path.write_text(body)
    with pytest.raises(TopicStateUnreadable, match=rf"{path} is not a topic state file .*fix or delete it, then run "
                                                   r"`s3-archive refresh-topics`"):
        read_known_topics(path)
