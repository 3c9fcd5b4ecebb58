"""The metrics exporter against the real broker, moto and Spark: scraped over HTTP and parsed with
prometheus-client's text-format parser while an archive runs (docs/metrics.md)."""

from __future__ import annotations

import socket
import threading
import urllib.request

import boto3
import dagster as dg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from s3_archive.config.archive import Retries
from s3_archive.config.settings import Settings
from s3_archive.defs.archive.partitions import TOPIC_TAG
from s3_archive.local.fault_proxy import IGNORE_CONDITIONS, FaultRule
from s3_archive.metrics.exporter import ArchiveCollector, StoreProbe, serve
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.credentials import TEST_AWS
from s3_archive_tests.integration.archive_helpers import archive_config, final_objects, materialize, resources
from s3_archive_tests.kafka_helpers import create_topic, produce

N = 60  # records, 30 a partition


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Scraper:
    def __init__(self, collector: ArchiveCollector, port: int) -> None:
        self.collector, self.url = collector, f"http://127.0.0.1:{port}/metrics"

    def __call__(self, topic: str) -> dict[tuple[str, tuple], float]:
        """A refresh (what the interval does), then a scrape: (sample name, its labels but archive) -> value, for
        `topic` and the exporter's own metrics."""
        self.collector.refresh()
        text = urllib.request.urlopen(self.url, timeout=10).read().decode()
        out = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.labels.get("topic", topic) == topic:
                    out[(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "archive")))] = s.value
        return out


def _p(partition: int, topic: str) -> tuple:
    return (("partition", str(partition)), ("topic", topic))


@pytest.fixture
def exporter(kafka, tmp_path):
    """A Dagster instance on disk (runs and event log in SQLite), as the runs and the exporter share one."""
    home = tmp_path / "dagster"
    home.mkdir()
    with dg.instance_for_test(temp_dir=str(home)) as instance:
        yield instance


def test_scraped_lag_goes_from_n_to_0_windows_and_bytes_counted_a_failed_run_counted(
        kafka, s3, services, spark_resource, unique, exporter):
    instance = exporter
    topic = create_topic(kafka, f"metrics-{unique}", partitions=2)
    produce(kafka, topic, [(i % 2, None, f"record {i}".encode(), []) for i in range(N)])
    cfg = archive_config(services.bucket, topic, f"metrics/{unique}/", retries=Retries(max=0))
    collector = ArchiveCollector(Settings(archives=[cfg]), lambda: instance, kafka)
    port, stop = _free_port(), threading.Event()
    server = threading.Thread(target=serve, args=(collector, port, "127.0.0.1", 3600, stop), daemon=True)
    server.start()
    scrape = Scraper(collector, port)
    try:
        first = _wait(lambda: scrape(topic))
        assert first[("s3_archive_lag_records", _p(0, topic))] == N / 2
        assert first[("s3_archive_lag_records", _p(1, topic))] == N / 2
        assert ("s3_archive_windows_committed_total", _p(0, topic)) not in first

        res = resources(services, kafka, spark_resource)
        tags = {TOPIC_TAG: topic}  # as the offsets sensor tags its runs
        materialize(cfg, topic, [OffsetWindow(0, 0, 10)], res, instance=instance, tags=tags)
        mid = scrape(topic)
        assert mid[("s3_archive_lag_records", _p(0, topic))] == N / 2 - 10
        assert mid[("s3_archive_lag_seconds", _p(0, topic))] > 0
        assert mid[("s3_archive_windows_committed_total", _p(0, topic))] == 1

        rest = [OffsetWindow(0, 10, 30), OffsetWindow(1, 0, 15), OffsetWindow(1, 15, 30)]
        materialize(cfg, topic, rest, res, instance=instance, tags=tags)
        done = scrape(topic)
        assert done[("s3_archive_lag_records", _p(0, topic))] == 0
        assert done[("s3_archive_lag_records", _p(1, topic))] == 0
        assert done[("s3_archive_lag_seconds", _p(1, topic))] == 0
        assert done[("s3_archive_windows_committed_total", _p(0, topic))] == 2
        assert done[("s3_archive_windows_committed_total", _p(1, topic))] == 2
        assert (done[("s3_archive_records_archived_total", _p(0, topic))]
                + done[("s3_archive_records_archived_total", _p(1, topic))]) == N
        stored = sum(o["size"] for o in final_objects(s3, cfg, topic).values())
        assert (done[("s3_archive_archived_bytes_total", _p(0, topic))]
                + done[("s3_archive_archived_bytes_total", _p(1, topic))]) == stored
        assert done[("s3_archive_runs_failed_total", (("topic", topic),))] == 0
        assert done[("s3_archive_last_success_timestamp_seconds", (("topic", topic),))] > 0

        # A window past the high watermark: the run fails, and the failure counter counts it.
        failed = materialize(cfg, topic, [OffsetWindow(0, 30, 40)], res, instance=instance, raise_on_error=False,
                             tags=tags)
        assert not failed.success
        after = scrape(topic)
        assert after[("s3_archive_runs_failed_total", (("topic", topic),))] == 1
        assert after[("s3_archive_windows_committed_total", _p(0, topic))] == 2
        assert after[("s3_archive_exporter_kafka_up", ())] == 1
    finally:
        stop.set()
        server.join(timeout=10)


def _wait(scrape, tries: int = 50):
    """The first scrape once the server answers."""
    import time

    for _ in range(tries):
        try:
            return scrape()
        except OSError:
            time.sleep(0.1)
    return scrape()


def _exposed(collector: ArchiveCollector) -> dict[tuple[str, tuple], float]:
    """A refresh, then the collector's exposition in Prometheus's text format, parsed."""
    from prometheus_client import generate_latest
    from prometheus_client.registry import CollectorRegistry

    collector.refresh()
    registry = CollectorRegistry()
    registry.register(collector)
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(generate_latest(registry).decode()) for s in f.samples}


def test_the_store_probe_is_1_for_moto_and_0_for_a_store_ignoring_the_conditions(kafka, s3, services, fault_proxy,
                                                                                 unique, exporter):
    """The exporter's store probe against moto, and against moto behind the fault proxy dropping the conditional
    headers (a store the commit must refuse): the gauge says which, and the S3 requests it cost are counted."""
    cfg = archive_config(services.bucket, f"probe-{unique}", f"probe/{unique}/")
    def client(endpoint: str):  # each its own: the probe counts the requests of the client it is given
        return boto3.client("s3", endpoint_url=endpoint, region_name=TEST_AWS["AWS_REGION"],
                            aws_access_key_id=TEST_AWS["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=TEST_AWS["AWS_SECRET_ACCESS_KEY"])

    labels = (("archive", cfg.name), ("bucket", cfg.bucket))
    lines: list[str] = []
    try:
        for endpoint, fit in [(services.s3_endpoint_url, 1.0), (fault_proxy.endpoint_url, 0.0)]:
            fault_proxy.set_rules([] if fit else [FaultRule(IGNORE_CONDITIONS)])
            probed = client(endpoint)
            collector = ArchiveCollector(Settings(archives=[cfg]), lambda: exporter, kafka, log=lines.append,
                                         store=StoreProbe(lambda c=probed: c, interval=3600))
            seen = _exposed(collector)
            assert seen[("s3_archive_store_conditional_writes_ok", labels)] == fit, lines
            assert seen[("s3_archive_store_probe_timestamp_seconds", labels)] > 0
            assert seen[("s3_archive_exporter_store_requests_total", ())] >= 12
            again = _exposed(collector)  # not due again within the interval: no request
            assert again[("s3_archive_exporter_store_requests_total", ())] == \
                seen[("s3_archive_exporter_store_requests_total", ())]
    finally:
        fault_proxy.clear()
    assert any("does not honour: PutObject with If-None-Match: *" in line for line in lines), lines
    assert s3.list_objects_v2(Bucket=cfg.bucket, Prefix=cfg.prefix).get("KeyCount") == 0  # the probe left nothing
