"""The Prometheus exporter of `s3-archive metrics serve` (docs/metrics.md): a long-lived process, independent of
Dagster's runs, serving the archives' metrics over HTTP with prometheus-client.

A scrape costs no Kafka or S3 request and no read of the instance: it returns the snapshot the last refresh built.
A refresh (every `interval` seconds, in a thread) reads what the Dagster instance recorded since the previous one
(defs/run_history.py) and asks Kafka for the archives' lag (archive/lag.py: one metadata and one offsets request for
all topics, plus one consumer group request per topic of an archive with a consumer group). The store probe
(io/store_probe.py: the conditional requests the commit relies on) runs once per bucket at start and then at most
every `StoreProbe.interval` seconds: 12 S3 requests per bucket each time (13 for a store that deletes against a
wrong ETag), counted in `s3_archive_exporter_store_requests_total`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import dagster as dg
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from s3_archive.archive.lag import PartitionLag, archive_lag
from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.settings import Settings
from s3_archive.defs.restore.assets import restore_asset_key
from s3_archive.defs.restore.targets import target_asset_key
from s3_archive.defs.run_history import History
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.s3 import S3Client
from s3_archive.io.store_probe import probe_conditional_writes
from s3_archive.model.errors import UserError

TOPIC = ["archive", "topic"]
PARTITION = ["archive", "topic", "partition"]


@dataclass
class Refreshed:
    """What a refresh saw: the lag per (archive, topic, partition), and how the refresh went."""

    lag: dict[tuple[str, str, int], PartitionLag]
    seconds: float = 0.0
    kafka_ok: bool = True
    at: float = 0.0


@dataclass
class StoreProbe:
    """The store probe of each archive's bucket, at most every `interval` seconds: per bucket (archive names the
    archive whose prefix it writes under) 1 when the store honours every conditional request, 0 when it does not or
    the probe failed; and when it ran."""

    client: Callable[[], S3Client]
    interval: float = 3600.0
    results: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)  # (archive, bucket) -> ok, at
    requests: int = 0
    errors: int = 0
    due: float = 0.0  # monotonic time of the next probe

    def run(self, archives: list[ArchiveConfig], log: Callable[[str], None]) -> None:
        if time.monotonic() < self.due:
            return
        self.due = time.monotonic() + self.interval
        client = self.client()
        client.meta.events.register("before-call.s3", self._count, unique_id="s3_archive_store_probe_count")
        probed: dict[str, float] = {}
        for a in archives:
            if a.bucket not in probed:
                probed[a.bucket] = self._probe(client, a, log)
            self.results[(a.name, a.bucket)] = (probed[a.bucket], time.time())

    def _count(self, **_: object) -> None:
        self.requests += 1

    def _probe(self, client: S3Client, archive: ArchiveConfig, log: Callable[[str], None]) -> float:
        try:
            missing = probe_conditional_writes(client, archive.bucket, archive.prefix)
        except Exception as e:  # noqa: BLE001 - a store that cannot be probed is not known to be fit
            self.errors += 1
            log(f"metrics: the store probe of bucket {archive.bucket!r} failed: {type(e).__name__}: {e}")
            return 0.0
        if missing:
            log(f"metrics: the store of bucket {archive.bucket!r} does not honour: {'; '.join(missing)}")
        return 0.0 if missing else 1.0


class ArchiveCollector(Collector):
    """prometheus-client's collector of the archives' metrics: `collect` yields the last refresh's snapshot."""

    def __init__(self, settings: Settings, instance: Callable[[], dg.DagsterInstance], kafka: KafkaResource,
                 log: Callable[[str], None] = print, store: StoreProbe | None = None) -> None:
        self.settings = settings
        self.store = store  # None: the store is not probed (its metrics have no samples)
        self.instance = instance
        self.kafka = kafka
        self.log = log
        self.history = History({t: a.name for a in settings.archives for t in a.topics})
        self.kafka_requests = 0
        self.refresh_errors = {"instance": 0, "kafka": 0}
        self._snapshot: list[Metric] = []
        self._lock = threading.Lock()

    def restore_keys(self) -> list[dg.AssetKey]:
        return [*(restore_asset_key(t) for a in self.settings.archives if a.restorable for t in a.topics),
                *(target_asset_key(r.name, t) for a in self.settings.archives for r in a.restore_targets
                  for t in a.topics if r.applies_to(t))]

    def refresh(self) -> None:
        t0 = time.monotonic()
        try:
            self.history.refresh(self.instance(), self.restore_keys())
        except Exception as e:  # noqa: BLE001 - the exporter keeps serving the last counts
            self.refresh_errors["instance"] += 1
            self.log(f"metrics: reading the Dagster instance failed: {type(e).__name__}: {e}")
        seen = Refreshed({}, at=time.time())
        archived = {k: t.end for k, t in self.history.windows.items()}
        try:
            seen.lag = archive_lag(self.kafka, self.settings.archives, archived)
        except UserError as e:  # KafkaUnavailable names the brokers, never a secret
            seen.kafka_ok = False
            self.refresh_errors["kafka"] += 1
            self.log(f"metrics: {e}")
        self.kafka_requests += 2 + sum(len(a.topics) for a in self.settings.archives if a.group_id is not None)
        if self.store is not None:
            self.store.run(self.settings.archives, self.log)
        seen.seconds = time.monotonic() - t0
        snapshot = list(self._families(seen))
        with self._lock:
            self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            yield from self._snapshot

    def _families(self, seen: Refreshed) -> Iterator[Metric]:
        yield from self._lag(seen)
        yield from self._windows()
        yield from self._runs()
        yield from self._restores()
        yield from self._store()
        up = GaugeMetricFamily("s3_archive_exporter_kafka_up", "1 if the last refresh reached Kafka, else 0")
        up.add_metric([], 1.0 if seen.kafka_ok else 0.0)
        took = GaugeMetricFamily("s3_archive_exporter_refresh_seconds", "how long the last refresh took")
        took.add_metric([], seen.seconds)
        at = GaugeMetricFamily("s3_archive_exporter_refresh_timestamp_seconds", "when the last refresh ran")
        at.add_metric([], seen.at)
        requests = CounterMetricFamily("s3_archive_exporter_kafka_requests", "Kafka requests the refreshes sent")
        requests.add_metric([], self.kafka_requests)
        errors = CounterMetricFamily("s3_archive_exporter_refresh_errors", "refreshes that failed to read a source",
                                     labels=["source"])
        for source, n in sorted({**self.refresh_errors, "s3": self.store.errors if self.store else 0}.items()):
            errors.add_metric([source], n)
        s3 = CounterMetricFamily("s3_archive_exporter_store_requests", "S3 requests the store probes sent")
        s3.add_metric([], self.store.requests if self.store else 0)
        yield from (up, took, at, requests, s3, errors)

    def _store(self) -> Iterator[Metric]:
        ok = GaugeMetricFamily("s3_archive_store_conditional_writes_ok", "1 if the archive's S3 store honoured every "
                               "conditional request of the commit at the last probe, else 0", labels=["archive",
                                                                                                      "bucket"])
        at = GaugeMetricFamily("s3_archive_store_probe_timestamp_seconds", "when the store was last probed",
                               labels=["archive", "bucket"])
        for (name, bucket), (value, when) in sorted((self.store.results if self.store else {}).items()):
            ok.add_metric([name, bucket], value)
            at.add_metric([name, bucket], when)
        yield from (ok, at)

    def _lag(self, seen: Refreshed) -> Iterator[Metric]:
        records = GaugeMetricFamily("s3_archive_lag_records", "records in Kafka not archived yet (last stable "
                                    "offset minus the archived end)", labels=PARTITION)
        seconds = GaugeMetricFamily("s3_archive_lag_seconds", "age of the archive's newest committed record when "
                                    "records wait to be archived; 0 when none wait", labels=PARTITION)
        for (name, topic, p), lag in sorted(seen.lag.items()):
            records.add_metric([name, topic, str(p)], lag.records)
            newest = self.history.windows[(topic, p)].newest_record_ms if (topic, p) in self.history.windows \
                else None
            if lag.records == 0:
                seconds.add_metric([name, topic, str(p)], 0.0)
            elif newest is not None:
                seconds.add_metric([name, topic, str(p)], max(seen.at - newest / 1000, 0.0))
        yield from (records, seconds)

    def _windows(self) -> Iterator[Metric]:
        fams = {k: CounterMetricFamily(f"s3_archive_{k}", doc, labels=PARTITION) for k, doc in [
            ("windows_committed", "windows committed (one materialization each)"),
            ("records_archived", "records in the committed windows"),
            ("archived_bytes", "bytes of the committed windows' objects")]}
        dead = CounterMetricFamily("s3_archive_dead_letters", "records kept as dead letters (undecodable or "
                                   "unplaceable)", labels=TOPIC)
        skipped = CounterMetricFamily("s3_archive_skipped_records", "records skipped by a policy (on_error skip, "
                                      "skip_tombstones)", labels=TOPIC)
        per_topic: dict[str, tuple[int, int]] = {}
        for (topic, p), t in sorted(self.history.windows.items()):
            labels = [self.history.topics[topic], topic, str(p)]
            fams["windows_committed"].add_metric(labels, t.windows)
            fams["records_archived"].add_metric(labels, t.records)
            fams["archived_bytes"].add_metric(labels, t.bytes)
            d, s = per_topic.get(topic, (0, 0))
            per_topic[topic] = (d + t.dead_letters, s + t.skipped)
        for topic, (d, s) in sorted(per_topic.items()):
            dead.add_metric([self.history.topics[topic], topic], d)
            skipped.add_metric([self.history.topics[topic], topic], s)
        yield from (*fams.values(), dead, skipped)

    def _runs(self) -> Iterator[Metric]:
        failed = CounterMetricFamily("s3_archive_runs_failed", "archive runs that failed", labels=TOPIC)
        retried = CounterMetricFamily("s3_archive_runs_retried", "archive runs requested again after a failed run",
                                      labels=TOPIC)
        last = GaugeMetricFamily("s3_archive_last_success_timestamp_seconds", "end of the newest successful "
                                 "archive run", labels=TOPIC)
        for topic, archive in sorted(self.history.topics.items()):
            r = self.history.runs.get(topic)
            failed.add_metric([archive, topic], r.failed if r else 0)
            retried.add_metric([archive, topic], r.retried if r else 0)
            if r is not None and r.last_success is not None:
                last.add_metric([archive, topic], r.last_success)
        yield from (failed, retried, last)

    def _restores(self) -> Iterator[Metric]:
        records = CounterMetricFamily("s3_archive_restored_records", "records produced by restores",
                                      labels=["asset", "target_topic"])
        windows = CounterMetricFamily("s3_archive_restored_windows", "windows restored", labels=["asset",
                                                                                                 "target_topic"])
        for (asset, target), n in sorted(self.history.restored.items()):
            records.add_metric([asset, target], n)
            windows.add_metric([asset, target], self.history.restored_windows[(asset, target)])
        yield from (records, windows)


def serve(collector: ArchiveCollector, port: int, host: str, interval: float,
          stop: threading.Event | None = None) -> None:
    """Serve the collector's metrics on http://host:port/metrics, refreshing it every `interval` seconds until
    `stop` is set (or forever)."""
    from prometheus_client import start_http_server
    from prometheus_client.registry import CollectorRegistry

    registry = CollectorRegistry()
    collector.refresh()
    registry.register(collector)
    server, thread = start_http_server(port, addr=host, registry=registry)
    collector.log(f"metrics: serving http://{host}:{port}/metrics (refreshed every {interval:g} s)")
    stop = stop or threading.Event()
    try:
        while not stop.wait(interval):
            collector.refresh()
    finally:
        server.shutdown()
        thread.join()
