"""Asset checks on each archive asset: windows tile the offsets, committed objects are intact, and Kafka has not
deleted anything before it was archived.

They scan every window of the topic, so the sensor's window runs leave them out; the daily schedule
(schedules.py) runs them, and they can be run from the UI at any time. The four checks of a topic are one step
(a multi-asset check): the partition keys, the retirement record and the materialization status are read once
(`TopicView`) and shared by whichever checks are selected.

Retired windows (windows.py) are checked too: the contiguity check takes each partition's retired range as one
window, and the objects check verifies every manifest in S3 (retired windows' included) and that the manifests
cover every retired range.
"""

# No `from __future__ import annotations`: Dagster reads the context and resource annotations at definition time.

import re
import time
import uuid
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

import dagster as dg
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import ConfigResource, ResourceType

from s3_archive.archive.plan import archive_progress, retention_headroom
from s3_archive.config.archive import ArchiveConfig
from s3_archive.defs.archive.partitions import archive_asset_key, window_partitions
from s3_archive.defs.archive.windows import Retired, read_retired, read_windows
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.s3 import list_objects, read_manifest, verify_manifest
from s3_archive.io.s3_resource import S3Resource
from s3_archive.keys.objects import manifest_key, manifest_prefix
from s3_archive.lifecycle.rules import expiry_due, policy_for
from s3_archive.model.errors import InvalidManifest, UnknownTopic
from s3_archive.model.manifest import Manifest
from s3_archive.model.windows import InvalidWindow, OffsetWindow, check_contiguous

CONTIGUOUS = "windows_contiguous"
OBJECTS = "objects_match_manifests"
RETENTION = "nothing_lost_to_retention"
HEADROOM = "retention_headroom"
SHOWN = 20  # problems spelled out in a result; the count is always complete
READERS = 8  # manifests fetched concurrently


class TopicView:
    """What the checks of one topic read from the Dagster instance, each read at most once per check step."""

    def __init__(self, instance: dg.DagsterInstance, topic: str) -> None:
        self.instance, self.topic = instance, topic

    @cached_property
    def _keys(self) -> tuple[list[OffsetWindow], list[str]]:
        return read_windows(self.instance, self.topic)

    @property
    def windows(self) -> list[OffsetWindow]:
        """The live windows (dynamic partition keys)."""
        return self._keys[0]

    @property
    def bad(self) -> list[str]:
        """Partition keys that are not windows."""
        return self._keys[1]

    @cached_property
    def retired(self) -> Retired:
        return read_retired(self.instance, self.topic)

    @cached_property
    def materialized(self) -> set[str]:
        """The live windows' keys materialized at least once (committed)."""
        return materialized_windows(self.instance, self.topic, [w.key for w in self.windows])

    @cached_property
    def live_and_retired(self) -> list[OffsetWindow]:
        """Every window as far as offsets go: the live ones, and each retired range as one window. Live windows
        inside a retired range (added back, e.g. to restore one) are part of the range."""
        return [w for w in self.windows if not self.retired.covers(w)] + list(self.retired.ranges.values())

    def committed(self) -> set[OffsetWindow]:
        """live_and_retired's committed windows (retired ones were committed and verified)."""
        return {w for w in self.windows if w.key in self.materialized} | set(self.retired.ranges.values())


def _summary(problems: list[str]) -> str:
    more = f"\n… and {len(problems) - SHOWN} more" if len(problems) > SHOWN else ""
    return "\n".join(problems[:SHOWN]) + more


def _result(problems: list[str], ok: str, metadata: dict[str, Any]) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        passed=not problems, severity=dg.AssetCheckSeverity.ERROR,
        description=_summary(problems) if problems else ok,
        metadata={**metadata, "problems": len(problems), "details": dg.MetadataValue.text(_summary(problems))},
    )


def contiguity_result(instance: dg.DagsterInstance, topic: str, view: TopicView | None = None,
                      ) -> dg.AssetCheckResult:
    """(1) Per Kafka partition, the windows (each partition's retired range counting as one) neither overlap nor
    leave offsets out.

    Offsets lost to retention are recorded inside a window's manifest, never as a hole between windows (the
    sensor always starts the next window where the last one ends), so every hole is a problem.
    """
    view = view or TopicView(instance, topic)
    windows = view.live_and_retired
    problems = [f"partition key {k!r} of {topic!r} is not a window key" for k in view.bad]
    problems += [f"topic {topic!r} {p}" for p in check_contiguous(windows)]
    ok = f"{len(view.windows)} windows of {topic!r}" + (f" and {view.retired.windows} retired" if view.retired.ranges
                                                        else "") + ", contiguous"
    return _result(problems, ok, {
        "windows": len(view.windows),
        "retired_windows": view.retired.windows,
        "kafka_partitions": len({w.partition for w in windows}),
        "offsets_in_windows": sum(w.size for w in windows),
    })


def materialization_times(instance: dg.DagsterInstance, topic: str, keys: list[str]) -> dict[str, datetime]:
    """When each window (partition key) was last materialized: the newest, so a window is never taken for older
    than its objects may be."""
    out: dict[str, datetime] = {}
    for i in range(0, len(keys), 500):
        chunk = keys[i:i + 500]
        cursor = None
        while True:
            page = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=archive_asset_key(topic),
                                                                         asset_partitions=chunk),
                                                   limit=1000, cursor=cursor)
            for r in page.records:  # newest first
                if r.partition_key is not None and r.partition_key not in out:
                    out[r.partition_key] = datetime.fromtimestamp(r.timestamp, UTC)
            if not page.has_more:
                break
            cursor = page.cursor
    return out


def materialized_windows(instance: dg.DagsterInstance, topic: str, keys: list[str]) -> set[str]:
    """The windows (partition keys) materialized at least once, i.e. committed.

    The asset's partition status answers for most windows in one cached read; it reports a window whose latest run
    is in progress or failed as such, even if an earlier run committed it, so those few are looked up in their
    materialization records (a re-run of a committed window must not make it look uncommitted)."""
    status = instance.get_status_by_partition(archive_asset_key(topic), keys, window_partitions(topic)) or {}
    done = {k for k, s in status.items() if s == dg.AssetPartitionStatus.MATERIALIZED}
    unsure = [k for k, s in status.items()
              if s in (dg.AssetPartitionStatus.IN_PROGRESS, dg.AssetPartitionStatus.FAILED)]
    return done | set(materialization_times(instance, topic, unsure) if unsure else {})


def retired_gaps(retired: Retired, manifested: set[str]) -> dict[int, list[tuple[int, int]]]:
    """Per Kafka partition, the offsets of its retired range that no manifest's window covers."""
    by_partition: dict[int, list[OffsetWindow]] = {}
    for key in manifested:
        try:
            w = OffsetWindow.parse(key)
        except InvalidWindow:
            continue
        if retired.covers(w):
            by_partition.setdefault(w.partition, []).append(w)
    out: dict[int, list[tuple[int, int]]] = {}
    for p, r in retired.ranges.items():
        pos, gaps = r.start, []
        for w in sorted(by_partition.get(p, [])):
            if w.start > pos:
                gaps.append((pos, w.start))
            pos = max(pos, w.end)
        if pos < r.end:
            gaps.append((pos, r.end))
        if gaps:
            out[p] = gaps
    return out


def objects_result(instance: dg.DagsterInstance, s3: Any, cfg: ArchiveConfig, topic: str,
                   now: datetime | None = None, view: TopicView | None = None) -> dg.AssetCheckResult:
    """(2) Every committed manifest's objects exist with their recorded sizes; every materialized window has one.

    Two listings instead of a HEAD per object; only a manifest that the listings disagree with is checked object by
    object (io/s3.py::verify_manifest), so a listing quirk cannot raise a false alarm.

    With a lifecycle `expiration_days`, S3 deletes a window's objects and its manifest once they are that old (the
    lifecycle rules expire `_manifests/` at the same age). A window old enough to be expiring (lifecycle.expiry_due:
    by its manifest's `committed_at`, or its latest materialization when the manifest is gone) whose objects or
    manifest are absent is counted as expired in the metadata, not as a problem. A changed size is always a problem,
    and so is a manifest that does not parse (model/manifest.py), named with its key.
    """
    now = now or datetime.now(UTC)
    days = policy_for(cfg).expiration_days
    # Manifests first, data second: a window's objects are written before its manifest, so every object of a
    # listed manifest is in the later data listing unless it was really deleted.
    manifest_keys = [o["Key"] for o in list_objects(s3, cfg.bucket, manifest_prefix(cfg.prefix, topic))
                     if o["Key"].endswith(".json")]
    sizes = {o["Key"]: o["Size"] for o in list_objects(s3, cfg.bucket, f"{cfg.prefix}{topic}/")}

    def read(key: str) -> Manifest | InvalidManifest | None:
        try:
            return read_manifest(s3, cfg.bucket, key)
        except InvalidManifest as e:  # one bad manifest is a problem of its window, not a failed check
            return e

    with ThreadPoolExecutor(max_workers=READERS) as pool:
        manifests = list(pool.map(read, manifest_keys))

    problems: list[str] = []
    expired: list[str] = []
    objects = size = 0
    committed: set[str] = set()
    unreadable: set[str] = set()  # window keys (from the manifest's name) whose manifest does not parse
    for mkey, m in zip(manifest_keys, manifests):
        if m is None:  # deleted between the listing and the read
            continue
        if isinstance(m, InvalidManifest):
            unreadable.add(mkey.rsplit("/", 1)[-1].removesuffix(".json"))
            problems.append(str(m))
            continue
        committed.add(m.window_key)
        objects += len(m.objects)
        size += sum(o.size for o in m.objects)
        if all(sizes.get(o.key) == o.size for o in m.objects):
            continue
        absent_only = all(o.key not in sizes or sizes[o.key] == o.size for o in m.objects)
        if absent_only and expiry_due(m.committed_time, days, now):
            expired.append(m.window_key)
            continue
        problems += [f"window {m.window_key} ({mkey}): {p}" for p in verify_manifest(s3, cfg.bucket, m)]

    view = view or TopicView(instance, topic)
    unmanifested = [w for w in sorted(view.windows)
                    if w.key in view.materialized and w.key not in committed and w.key not in unreadable]
    when = materialization_times(instance, topic, [w.key for w in unmanifested]) if days and unmanifested else {}
    for w in unmanifested:
        if expiry_due(when.get(w.key), days, now):
            expired.append(w.key)
            continue
        problems.append(f"window {w.key} of {topic!r} is materialized but has no manifest at "
                        f"s3://{cfg.bucket}/{manifest_key(cfg.prefix, topic, w)}")
    # Retired windows are only in S3: their manifests must cover each retired range. With expiration_days, S3
    # expires the oldest first, so a gap at the start of a range is expired, any other gap a problem.
    for p, gaps in sorted(retired_gaps(view.retired, committed | unreadable).items()):
        for i, (a, b) in enumerate(gaps):
            if days and i == 0 and a == view.retired.ranges[p].start:
                expired.append(f"retired p{p} [{a}, {b})")
                continue
            problems.append(f"topic {topic!r} partition {p}: retired offsets [{a}, {b}) have no manifest under "
                            f"s3://{cfg.bucket}/{manifest_prefix(cfg.prefix, topic)}")
    ok = f"{len(committed)} committed windows of {topic!r}: all objects present"
    if expired:
        ok += f"; {len(expired)} older windows expired by the lifecycle policy (expiration_days {days})"
    return _result(problems, ok, {
        "manifests": len(committed),
        "objects": objects,
        "bytes": size,
        "manifest_prefix": f"s3://{cfg.bucket}/{manifest_prefix(cfg.prefix, topic)}",
        "expiration_days": days if days is not None else 0,
        "expired_windows": len(expired),
        "expired": dg.MetadataValue.text(_summary(sorted(expired))),
    })


def retention_result(instance: dg.DagsterInstance, kafka: KafkaResource, topic: str,
                     view: TopicView | None = None) -> dg.AssetCheckResult:
    """(3) Kafka's log start has not passed an offset that is in no committed window; archive lag as metadata."""
    try:
        log_start = kafka.offsets(topic, "earliest")
        high = kafka.offsets(topic, "latest", sorted(log_start))
    except UnknownTopic as e:
        return _result([str(e)], "", {})
    view = view or TopicView(instance, topic)
    progress = archive_progress(view.live_and_retired, view.committed(), log_start, high)
    problems = [f"topic {topic!r} partition {p.partition}: offsets [{a}, {b}) were deleted by Kafka (log start "
                f"offset {p.log_start}) before they were archived" for p in progress for a, b in p.lost]
    return _result(problems, f"nothing of {topic!r} lost to retention", {
        "archive_lag": sum(p.lag for p in progress),
        "lost_offsets": sum(b - a for p in progress for a, b in p.lost),
        "lag_by_partition": dg.MetadataValue.json({str(p.partition): p.lag for p in progress}),
        "first_unarchived_offset": dg.MetadataValue.json({str(p.partition): p.first_unarchived for p in progress}),
        "log_start_offset": dg.MetadataValue.json({str(p.partition): p.log_start for p in progress}),
        "lost_ranges": dg.MetadataValue.json({str(p.partition): [list(r) for r in p.lost] for p in progress
                                              if p.lost}),
    })


def topic_retention_ms(kafka: KafkaResource, topic: str) -> int:
    """The topic's `retention.ms` (broker default included); -1: infinite. One DescribeConfigs round trip."""
    admin = kafka.admin()
    resource = ConfigResource(ResourceType.TOPIC, topic)
    try:
        entries = admin.describe_configs([resource], request_timeout=kafka.timeout_s)[resource].result(
            timeout=kafka.timeout_s + 5)
    except (KafkaException, TimeoutError) as e:
        raise kafka.unavailable(e, admin, f"describing the configs of topic {topic!r}") from e
    return int(entries["retention.ms"].value)


def first_record_timestamps(kafka: KafkaResource, topic: str, offsets: dict[int, int],
                            timeout_s: float = 10.0) -> dict[int, int]:
    """Per partition, the timestamp (ms) of the first committed record at or after the given offset: one consumer,
    assigned to every partition at once, reads one record each (read_committed). A partition whose record does
    not arrive within `timeout_s` (e.g. only aborted records or markers left) is left out."""
    if not offsets:
        return {}
    consumer = Consumer(kafka.client_config(**{
        "group.id": f"s3-archive-headroom-{uuid.uuid4().hex}", "enable.auto.commit": False,
        "isolation.level": "read_committed", "auto.offset.reset": "earliest", "enable.partition.eof": False,
        "fetch.max.bytes": 1 << 20, "max.partition.fetch.bytes": 1 << 20}))
    try:
        consumer.assign([TopicPartition(topic, p, o) for p, o in offsets.items()])
        out: dict[int, int] = {}
        deadline = time.monotonic() + timeout_s
        while len(out) < len(offsets) and time.monotonic() < deadline:
            msg = consumer.poll(min(1.0, max(0.0, deadline - time.monotonic())))
            if msg is None or msg.error() is not None:
                continue
            if msg.partition() not in out:
                out[msg.partition()] = msg.timestamp()[1]
                # Stop fetching a partition once its record is read.
                consumer.pause([TopicPartition(topic, msg.partition())])
        return out
    finally:
        consumer.close()


def headroom_result(instance: dg.DagsterInstance, kafka: KafkaResource, cfg: ArchiveConfig,
                    topic: str, view: TopicView | None = None) -> dg.AssetCheckResult:
    """(4) WARN when the oldest unarchived record of a partition is older than retention_warn_fraction x the
    topic's retention.ms: Kafka will soon delete records the archive does not have yet."""
    try:
        retention_ms = topic_retention_ms(kafka, topic)
        log_start = kafka.offsets(topic, "earliest")
        high = kafka.offsets(topic, "latest", sorted(log_start))
    except UnknownTopic as e:
        return _result([str(e)], "", {})
    meta: dict[str, Any] = {"retention_ms": retention_ms, "retention_warn_fraction": cfg.retention_warn_fraction}
    if retention_ms < 0:
        return dg.AssetCheckResult(passed=True, severity=dg.AssetCheckSeverity.WARN,
                                   description=f"{topic!r} has infinite retention (retention.ms -1)",
                                   metadata={**meta, "problems": 0, "details": dg.MetadataValue.text(""),
                                             "oldest_unarchived_age_seconds": dg.MetadataValue.json({})})
    view = view or TopicView(instance, topic)
    progress = archive_progress(view.live_and_retired, view.committed(), log_start, high)
    pending = {p.partition: max(p.first_unarchived, p.log_start) for p in progress
               if max(p.first_unarchived, p.log_start) < p.end_offset}
    now_ms = int(time.time() * 1000)
    rooms = retention_headroom(first_record_timestamps(kafka, topic, pending), retention_ms,
                               cfg.retention_warn_fraction, now_ms)
    problems = [f"topic {topic!r} partition {h.partition}: the oldest unarchived record (offset "
                f"{pending[h.partition]}) is {h.age_ms / 1000:.0f} s old, more than "
                f"{cfg.retention_warn_fraction:g} of retention.ms "
                f"{retention_ms} ({retention_ms / 1000:.0f} s)" for h in rooms if h.warn]
    return dg.AssetCheckResult(
        passed=not problems, severity=dg.AssetCheckSeverity.WARN,
        description=_summary(problems) if problems else f"every unarchived record of {topic!r} is younger than "
                                                        f"{cfg.retention_warn_fraction:g} of retention.ms",
        metadata={**meta, "problems": len(problems), "details": dg.MetadataValue.text(_summary(problems)),
                  "oldest_unarchived_age_seconds": dg.MetadataValue.json(
                      {str(h.partition): round(h.age_ms / 1000, 3) for h in rooms})},
    )


def check_step_name(topic: str) -> str:
    """An op name for the topic's checks: topic names may hold '.' and '-', op names may not (hence the hash)."""
    return f"kafka_archive_checks_{re.sub(r'[^A-Za-z0-9_]', '_', topic)}_{zlib.crc32(topic.encode()):08x}"


def build_archive_checks(cfg: ArchiveConfig, topic: str) -> list[dg.AssetChecksDefinition]:
    """The topic's four checks as one multi-asset check (one step; any subset of them can run)."""
    key = archive_asset_key(topic)
    specs = {
        CONTIGUOUS: "Per Kafka partition, the windows (partition keys, and the retired range) neither overlap nor "
                    "leave gaps.",
        OBJECTS: "Every committed window's objects exist in S3 with the sizes in its manifest, and manifests cover the "
                 "retired windows; windows old enough for the lifecycle's expiration_days may be gone (counted as "
                 "expired).",
        RETENTION: "Kafka has not deleted (retention) offsets that are in no committed window.",
        HEADROOM: f"WARN when a partition's oldest unarchived record is older than {cfg.retention_warn_fraction:g} x "
                  "the topic's retention.ms.",
    }

    @dg.multi_asset_check(specs=[dg.AssetCheckSpec(n, asset=key, description=d) for n, d in specs.items()],
                          name=check_step_name(topic), can_subset=True,
                          description=f"The asset checks of {topic!r}, reading the instance once.")
    def _checks(context: dg.AssetCheckExecutionContext, kafka: KafkaResource,
                s3: S3Resource) -> Iterator[dg.AssetCheckResult]:
        view = TopicView(context.instance, topic)
        selected = {k.name for k in context.selected_asset_check_keys}
        run = {
            CONTIGUOUS: lambda: contiguity_result(context.instance, topic, view),
            # Windows S3 expired under the archive's lifecycle expiration_days are reported as expired, not missing.
            OBJECTS: lambda: objects_result(context.instance, s3.get_client(), cfg, topic, view=view),
            RETENTION: lambda: retention_result(context.instance, kafka, topic, view),
            HEADROOM: lambda: headroom_result(context.instance, kafka, cfg, topic, view),
        }
        for name in specs:
            if name in selected:
                r = run[name]()
                yield dg.AssetCheckResult(asset_key=key, check_name=name, passed=r.passed, severity=r.severity,
                                          description=r.description, metadata=r.metadata)

    return [_checks]
