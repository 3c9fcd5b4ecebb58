"""The code location as Dagster loads it: no network at load, public Dagster APIs only, and a snapshot of what the UI
shows for a fixed config (regenerate with S3_ARCHIVE_UPDATE_SNAPSHOT=1 and review the diff)."""

import difflib
import json
import os
import re
import socket
from pathlib import Path

import dagster as dg
import pytest
import yaml

from s3_archive.config.settings import load_settings, parse_settings
from s3_archive.definitions import DEMO_CONFIG, build_defs, load_defs
from s3_archive.defs.resources import kafka_resource
from s3_archive.io.topic_state import write_known_topics
from s3_archive_tests.definitions_snapshot import describe_definitions

SNAPSHOT = Path(__file__).with_name("definitions_snapshot.json")
PACKAGE = Path(__file__).resolve().parents[3] / "s3_archive"

# Beyond the demo: topic patterns with known topics (one topic also listed explicitly, one pattern that knows none
# yet), json decoding, schedule_cron, lifecycle, a custom layout, a catalog, and a foreign source.
RICH = {
    "archives": [
        {"name": "orders", "topics": ["orders.main"], "topic_pattern": r"orders\..*", "bucket": "rich-archive",
         "prefix": "orders/", "value_decoding": {"type": "json", "json_schema": "id BIGINT, region STRING",
                                                 "column_prefix": "v_"},
         "flush": {"count": 5000, "bytes": 67108864, "interval_seconds": 300}, "schedule_cron": "*/15 * * * *",
         "windows_per_run": 4, "start_position": "latest",
         "lifecycle": {"transitions": [{"days": 30, "storage_class": "STANDARD_IA"}], "expiration_days": 400},
         "catalog": {"database": "rich", "table_prefix": "t_"}},
        {"name": "events", "topic_pattern": r"events\..*", "bucket": "rich-archive", "prefix": "events/",
         "format": "jsonl", "compression": "gzip", "max_records_per_object": 1000,
         "layout": {"template": "{{topic}}/{{partition_by}}/{{topic}}-{{partition}}-{{start_offset}}-{{part}}",
                    "partition_by": [{"kind": "time", "path_format": "'dt'=yyyy-MM-dd"}]}},
        {"name": "later", "topic_pattern": r"later\..*", "bucket": "rich-archive", "prefix": "later/"},
    ],
    "foreign_sources": [
        {"name": "legacy_orders", "layout": "aiven", "bucket": "legacy-sink", "prefix": "kafka/",
         "topic": "orders.main", "format": "jsonl", "fields": ["key", "value", "offset", "timestamp", "headers"]},
    ],
}
KNOWN = {"orders": ["orders.eu", "orders.main", "orders.us"], "events": ["events.click", "events.view"],
         "renamed_away": ["old.topic"]}


def test_definitions_match_the_snapshot():
    with pytest.warns(UserWarning, match=r"topic_pattern knows no topic yet: later; run `s3-archive refresh-topics`"):
        rich = build_defs(parse_settings(RICH), KNOWN)
    current = {"demo": describe_definitions(build_defs(load_settings(DEMO_CONFIG))),
               "rich": describe_definitions(rich)}
    text = json.dumps(current, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    if os.environ.get("S3_ARCHIVE_UPDATE_SNAPSHOT") == "1":
        SNAPSHOT.write_text(text)
    expected = SNAPSHOT.read_text() if SNAPSHOT.exists() else ""
    if text != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(keepends=True), text.splitlines(keepends=True),
                                            fromfile=f"{SNAPSHOT.name} (committed)", tofile="definitions now"))
        pytest.fail("the definitions differ from the committed snapshot; if the change is meant, regenerate it with "
                    f"S3_ARCHIVE_UPDATE_SNAPSHOT=1 and commit it:\n{diff}", pytrace=False)


def test_loading_the_code_location_touches_no_network(tmp_path, monkeypatch):
    config = tmp_path / "archives.yaml"
    config.write_text(yaml.safe_dump(RICH))
    monkeypatch.setenv("S3_ARCHIVE_CONFIG", str(config))
    monkeypatch.setenv("S3_ARCHIVE_STATE_DIR", str(tmp_path / "state"))
    write_known_topics(tmp_path / "state" / "topics.json", KNOWN)
    with socket.socket() as listener:
        # Kafka and S3 "are" a port that accepts connections: any client that tried one would be seen here.
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        monkeypatch.setenv("S3_ARCHIVE_KAFKA_BOOTSTRAP_SERVERS", address)
        monkeypatch.setenv("S3_ARCHIVE_S3_ENDPOINT_URL", f"http://{address}")

        def forbidden(*args, **kwargs):
            raise AssertionError(f"a network connection while definitions load: {args[1:]}")

        monkeypatch.setattr(socket.socket, "connect", forbidden)
        monkeypatch.setattr(socket.socket, "connect_ex", forbidden)
        with pytest.warns(UserWarning, match="knows no topic yet: later"):
            defs = load_defs()
        with pytest.raises(BlockingIOError):
            listener.accept()
    keys = {s.key.to_user_string() for s in defs.resolve_all_asset_specs()}
    assert {"kafka_archive/orders.eu", "kafka_archive/orders.main", "kafka_archive/events.view"} <= keys
    assert defs.get_repository_def().has_sensor_def("s3_archive_topic_discovery")


def test_the_package_uses_public_dagster_apis_only():
    private = re.compile(r"\bdagster\._|\bdg\._")
    found = [f"{p.relative_to(PACKAGE.parent)}:{n}: {line.strip()}" for p in sorted(PACKAGE.rglob("*.py"))
             for n, line in enumerate(p.read_text().splitlines(), 1) if private.search(line)]
    assert found == [], "private Dagster APIs (dagster._...) in s3_archive/:\n" + "\n".join(found)


def test_refresh_topics_uses_the_runs_kafka_settings(monkeypatch):
    monkeypatch.setenv("S3_ARCHIVE_KAFKA_BOOTSTRAP_SERVERS", "kafka.example:9096")
    monkeypatch.setenv("S3_ARCHIVE_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("S3_ARCHIVE_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("S3_ARCHIVE_KAFKA_SASL_USERNAME", "archiver")
    monkeypatch.setenv("S3_ARCHIVE_KAFKA_SASL_PASSWORD", "secret-never-logged")
    with dg.build_resources({"kafka": kafka_resource()}) as resources:
        conf = resources.kafka.client_config()
    assert conf == {"bootstrap.servers": "kafka.example:9096", "security.protocol": "SASL_SSL",
                    "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "archiver",
                    "sasl.password": "secret-never-logged"}
