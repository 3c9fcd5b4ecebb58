"""`s3-archive metrics serve` refuses what it cannot run with, in one line naming the value; the lag's arithmetic."""

from __future__ import annotations

import pytest

from s3_archive.archive.lag import PartitionLag
from s3_archive.cli import main


@pytest.mark.parametrize("argv,env,message", [
    (["--interval", "0.5"], {}, "--interval must be at least 1 second, got 0.5"),
    (["--store-probe-interval", "30"], {}, "--store-probe-interval must be 0 (never) or at least 60 seconds, got 30"),
    ([], {"S3_ARCHIVE_KAFKA_BOOTSTRAP_SERVERS": ""}, "$S3_ARCHIVE_KAFKA_BOOTSTRAP_SERVERS is not set"),
    ([], {"S3_ARCHIVE_KAFKA_BOOTSTRAP_SERVERS": "k:9092", "DAGSTER_HOME": ""}, "$DAGSTER_HOME is not set"),
])
def test_serve_refuses_with_one_clear_error(argv, env, message, monkeypatch, capsys):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert main(["metrics", "serve", *argv]) == 1
    assert message in capsys.readouterr().err


def test_lag_is_never_negative():
    assert PartitionLag(end=100, archived=40).records == 60
    assert PartitionLag(end=100, archived=120).records == 0  # the end moved back (a truncated topic)


def test_every_metric_is_documented_and_the_dashboard_uses_only_exported_ones():
    """The exposition of a refresh that reached neither Kafka (nothing listens) nor any run: every family the
    exporter serves is in docs/metrics.md's table, and the Grafana dashboard queries only those."""
    import json
    import re
    from pathlib import Path

    import dagster as dg
    from prometheus_client import generate_latest
    from prometheus_client.registry import CollectorRegistry

    from s3_archive.config.archive import ArchiveConfig
    from s3_archive.config.settings import Settings
    from s3_archive.io.kafka import KafkaResource
    from s3_archive.metrics.exporter import ArchiveCollector

    root = Path(__file__).resolve().parents[3]
    settings = Settings(archives=[ArchiveConfig(name="a", topics=["t"], bucket="bucket")])
    lines: list[str] = []
    with dg.instance_for_test() as instance:
        collector = ArchiveCollector(settings, lambda: instance, KafkaResource(bootstrap_servers="127.0.0.1:1",
                                                                                timeout_s=1), log=lines.append)
        collector.refresh()
        collector.kafka.close()
        registry = CollectorRegistry()
        registry.register(collector)
        text = generate_latest(registry).decode()
    assert "s3_archive_exporter_kafka_up 0.0" in text
    assert any("127.0.0.1:1" in line for line in lines)  # the refresh said why, naming the brokers
    served = set(re.findall(r"^# TYPE (\S+) \S+$", text, re.M))
    documented = set(re.findall(r"^\| `(s3_archive_[a-z_]+)` \|", (root / "docs/metrics.md").read_text(), re.M))
    assert served == documented
    queried = set(re.findall(r"s3_archive_[a-z_]+", json.dumps(json.loads(
        (root / "deploy/grafana-dashboard.json").read_text())["panels"])))
    assert queried <= served, queried - served


def test_the_store_probe_runs_once_per_bucket_and_interval_and_says_when_it_fails():
    """StoreProbe against moto in process: one probe per bucket (two archives on one bucket share it), its S3
    requests counted, none again before the interval; a bucket that does not exist is 0, and an error counted."""
    import boto3
    from moto import mock_aws

    from s3_archive.config.archive import ArchiveConfig
    from s3_archive.metrics.exporter import StoreProbe

    archives = [ArchiveConfig(name="a", topics=["t"], bucket="lake", prefix="p/"),
                ArchiveConfig(name="b", topics=["u"], bucket="lake", prefix="q/"),
                ArchiveConfig(name="c", topics=["v"], bucket="gone")]
    lines: list[str] = []
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="lake")
        probe = StoreProbe(lambda: client, interval=3600)
        probe.run(archives, lines.append)
        assert {k: ok for k, (ok, _) in probe.results.items()} == {("a", "lake"): 1.0, ("b", "lake"): 1.0,
                                                                    ("c", "gone"): 0.0}
        assert probe.errors == 1, lines
        assert lines == ["metrics: the store probe of bucket 'gone' failed: NoSuchBucket: An error occurred "
                         "(NoSuchBucket) when calling the PutObject operation: The specified bucket does not exist"]
        sent = probe.requests
        assert sent == 12 + 1  # the fit bucket's 12, and the gone bucket's first PUT, refused
        probe.run(archives, lines.append)
        assert probe.requests == sent  # not due yet
        assert client.list_objects_v2(Bucket="lake").get("KeyCount") == 0  # nothing left behind
