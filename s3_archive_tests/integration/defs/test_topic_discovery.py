"""Topic patterns against the real broker: a refresh (the CLI or the sensor) finds new matching topics and only ever
adds; definitions load the known topics from the state, so a reload with Kafka down changes nothing."""

import socket
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import dagster as dg
import pytest
import yaml

from s3_archive.cli import main
from s3_archive.config.settings import parse_settings
from s3_archive.definitions import build_defs, load_defs
from s3_archive.defs.archive.discovery import DISCOVERY_SENSOR, build_topic_discovery_sensor
from s3_archive.defs.webserver import WebserverResource
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.paths import topic_state_file
from s3_archive.io.topic_state import read_known_topics, refresh_topics
from s3_archive.model.errors import KafkaUnavailable
from s3_archive_tests.definitions_snapshot import describe_definitions
from s3_archive_tests.kafka_helpers import create_topic


@contextmanager
def unreachable() -> Iterator[str]:
    """A bootstrap address where nothing listens (bound, never listening: connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def state_file(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("S3_ARCHIVE_STATE_DIR", str(tmp_path / "state"))
    return topic_state_file()


def config(services, unique: str) -> dict:
    return {"archives": [
        {"name": "pat", "topic_pattern": rf"pat-{unique}\..*", "bucket": services.bucket, "prefix": f"pat/{unique}/",
         "lifecycle": {"expiration_days": 30}},
        {"name": "fixed", "topics": [f"fixed-{unique}"], "bucket": services.bucket, "prefix": f"fixed/{unique}/"},
    ]}


def archived(defs: dg.Definitions) -> set[str]:
    return {s.key.path[-1] for s in defs.resolve_all_asset_specs() if s.key.path[0] == "kafka_archive"}


def delete_topic(kafka: KafkaResource, topic: str) -> None:
    admin = kafka.admin()  # keep a reference: a collected client never resolves its futures
    admin.delete_topics([topic])[topic].result(timeout=30)
    deadline = time.monotonic() + 30
    while topic in kafka.topics():
        assert time.monotonic() < deadline, f"topic {topic} was not deleted within 30 s"
        time.sleep(0.2)


@pytest.mark.alone  # an unreachable broker's refresh fails within 15 s
def test_topic_pattern_archives_the_topics_a_refresh_found_and_a_reload_with_kafka_down_changes_nothing(
        kafka, services, unique, state_file, tmp_path, monkeypatch):
    a, b = f"pat-{unique}.a", f"pat-{unique}.b"
    for t in (a, b, f"other-{unique}"):
        create_topic(kafka, t)
    settings = parse_settings(config(services, unique))
    # Nothing known yet: the pattern archive has no assets, and the warning says how to get them.
    with pytest.warns(UserWarning, match="archives whose topic_pattern knows no topic yet: pat; run `s3-archive "
                                         "refresh-topics`"):
        assert archived(build_defs(settings, known_topics=read_known_topics(state_file))) == {f"fixed-{unique}"}

    assert refresh_topics(settings, kafka, state_file).added == {"pat": [a, b]}
    path = tmp_path / "archives.yaml"
    path.write_text(yaml.safe_dump(config(services, unique)))
    monkeypatch.setenv("S3_ARCHIVE_CONFIG", str(path))
    monkeypatch.setenv("S3_ARCHIVE_KAFKA_BOOTSTRAP_SERVERS", services.bootstrap_servers)
    up = load_defs()  # as the code location loads: config, environment and topic state
    assert archived(up) == {a, b, f"fixed-{unique}"}
    before = describe_definitions(up)

    with unreachable() as address, closing(KafkaResource(bootstrap_servers=address, timeout_s=2)) as down:
        t = time.monotonic()
        with pytest.raises(KafkaUnavailable, match=f"cannot reach Kafka at {address}"):
            refresh_topics(settings, down, state_file)
        assert time.monotonic() - t < 15
        assert read_known_topics(state_file) == {"pat": [a, b]}  # a failed refresh keeps the state
        monkeypatch.setenv("S3_ARCHIVE_KAFKA_BOOTSTRAP_SERVERS", address)
        reloaded = describe_definitions(load_defs())
    # The same asset keys, checks, sensors, code versions (the lifecycle asset's is a hash of its rules, which name
    # every topic) and metadata.
    assert reloaded == before
    assert before["assets"]["s3_lifecycle/pat"]["metadata"]["rule_count"] == 2 * 2 + 1  # data + manifests per topic


def test_a_refresh_adds_new_topics_keeps_vanished_ones_and_forgets_only_on_request(kafka, services, unique, state_file,
                                                                                   tmp_path, monkeypatch, capsys):
    a = create_topic(kafka, f"pat-{unique}.a")
    path = tmp_path / "archives.yaml"
    path.write_text(yaml.safe_dump(config(services, unique)))
    monkeypatch.setenv("S3_ARCHIVE_KAFKA_BOOTSTRAP_SERVERS", services.bootstrap_servers)

    # The CLI, with the runs' Kafka settings from the environment.
    assert main(["refresh-topics", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"archive 'pat' (topic_pattern 'pat-{unique}\\..*'): 1 known topics: {a}\n  new: {a}" in out
    assert "reload the code location" in out

    # The sensor does the same with the code location's kafka resource.
    b = create_topic(kafka, f"pat-{unique}.b")
    # Loaded as definitions would be before the refresh: the fixed topic, and the pattern's first topic.
    sensor = build_topic_discovery_sensor(parse_settings(config(services, unique)),
                                          {"fixed": [f"fixed-{unique}"], "pat": [a]})
    assert sensor.name == DISCOVERY_SENSOR and sensor.default_status == dg.DefaultSensorStatus.RUNNING
    with dg.build_sensor_context(resources={"kafka": kafka, "webserver": WebserverResource()}) as context:
        skip = sensor(context)
    # No webserver to reload through ($S3_ARCHIVE_DAGSTER_URL unset): a person must, and the next tick tries again.
    assert skip.skip_message == f"new topics: archive 'pat': {b}; not loaded yet: archive 'pat': {b}; " \
                                "$S3_ARCHIVE_DAGSTER_URL is not set, so reload the code location (Deployment → " \
                                "Reload) to archive them (the next tick tries again)"
    assert read_known_topics(state_file) == {"pat": [a, b]}

    # A topic deleted from Kafka stays known: its windows, manifests and lifecycle rules must not vanish.
    delete_topic(kafka, a)
    assert main(["refresh-topics", "--config", str(path)]) == 0
    assert f"no longer in Kafka (kept; --forget TOPIC removes one): {a}" in capsys.readouterr().out
    assert read_known_topics(state_file) == {"pat": [a, b]}

    # Kafka down: the CLI fails, saying nothing changed (after its request timeout, 2 s here); so does the sensor's tick.
    with unreachable() as address:
        monkeypatch.setenv("S3_ARCHIVE_KAFKA_BOOTSTRAP_SERVERS", address)
        monkeypatch.setenv("S3_ARCHIVE_KAFKA_TIMEOUT_S", "2")
        c = create_topic(kafka, f"pat-{unique}.c")
        assert main(["refresh-topics", "--config", str(path)]) == 1
        assert "the known topics are unchanged" in capsys.readouterr().err
        with dg.build_sensor_context(resources={"kafka": KafkaResource(bootstrap_servers=address, timeout_s=2),
                                                "webserver": WebserverResource()}) \
                as context, pytest.raises(KafkaUnavailable):
            sensor(context)
    assert read_known_topics(state_file) == {"pat": [a, b]}

    # Removing a topic is explicit, and needs no Kafka.
    assert main(["refresh-topics", "--config", str(path), "--forget", a]) == 0
    assert f"archive 'pat': forgot {a}" in capsys.readouterr().out
    assert read_known_topics(state_file) == {"pat": [b]}
    monkeypatch.setenv("S3_ARCHIVE_KAFKA_BOOTSTRAP_SERVERS", services.bootstrap_servers)
    monkeypatch.delenv("S3_ARCHIVE_KAFKA_TIMEOUT_S")
    assert main(["refresh-topics", "--config", str(path)]) == 0
    assert f"  new: {c}" in capsys.readouterr().out
    assert read_known_topics(state_file) == {"pat": [b, c]}
