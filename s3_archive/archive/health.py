"""The verdicts of an archive's asset checks, as plain functions: windows tile the offsets, committed objects are
intact, Kafka has not deleted anything before it was archived, nothing unarchived is close to Kafka's retention,
every committed window still has its manifest, and no record waits too long to be committed.

Each takes what the Dagster instance knows of the topic's windows (`WindowsView`; defs/archive/instance.py reads
it) and reads S3 and Kafka itself; each returns a `Verdict`, which defs/archive/checks.py shows as the check's result.

Retired windows (docs/windows.md) are checked too: the contiguity check takes each partition's retired range as one
window, and the objects check verifies every manifest in S3 (retired windows' included) and that the manifests
cover every retired range.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from confluent_kafka.admin import OffsetSpec

from s3_archive.archive.plan import archive_progress, retention_headroom
from s3_archive.archive.retirement import Retired
from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.foreign import ForeignSource
from s3_archive.config.lifecycle import expiry_due
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.s3 import S3Client, list_objects, read_manifest, verify_manifest
from s3_archive.keys.objects import manifest_prefix
from s3_archive.model.errors import InvalidManifest, UnknownTopic
from s3_archive.model.manifest import Manifest
from s3_archive.model.windows import InvalidWindow, OffsetWindow, check_contiguous

READERS = 8  # manifests fetched concurrently
SHOWN = 20  # problems spelled out in a result; the count is always complete


def summary(problems: list[str]) -> str:
    """The first SHOWN problems, one per line, and how many more."""
    more = f"\n… and {len(problems) - SHOWN} more" if len(problems) > SHOWN else ""
    return "\n".join(problems[:SHOWN]) + more


@dataclass(frozen=True)
class Verdict:
    """A check's answer: its problems (none: passed), what it says when it passes, and its metadata (plain values;
    dicts and lists are JSON). `warn`: the check warns rather than fails."""

    problems: list[str]
    ok: str
    metadata: dict[str, Any] = field(default_factory=dict)
    warn: bool = False

    @property
    def passed(self) -> bool:
        return not self.problems


class WindowsView:
    """What the checks of one topic know from the Dagster instance: the live windows (partition keys), the keys that
    are not windows, the retired ranges, and which live windows were materialized (committed)."""

    windows: list[OffsetWindow]
    bad: list[str]
    retired: Retired
    materialized: set[str]  # keys of live windows materialized at least once

    def materialized_at(self, keys: list[str]) -> dict[str, datetime]:
        """When each window was last materialized."""
        raise NotImplementedError

    @property
    def live_and_retired(self) -> list[OffsetWindow]:
        """Every window as far as offsets go: the live ones, and each retired range as one window. Live windows
        inside a retired range (added back, e.g. to restore one) are part of the range."""
        return [w for w in self.windows if not self.retired.covers(w)] + list(self.retired.ranges.values())

    def committed(self) -> set[OffsetWindow]:
        """live_and_retired's committed windows (retired ones were committed and verified)."""
        return {w for w in self.windows if w.key in self.materialized} | set(self.retired.ranges.values())


def contiguity(topic: str, view: WindowsView) -> Verdict:
    """(1) Per Kafka partition, the windows (each partition's retired range counting as one) neither overlap nor
    leave offsets out.

    Offsets lost to retention are recorded inside a window's manifest, never as a hole between windows (the
    sensor always starts the next window where the last one ends), so every hole is a problem.
    """
    windows = view.live_and_retired
    problems = [f"partition key {k!r} of {topic!r} is not a window key" for k in view.bad]
    problems += [f"topic {topic!r} {p}" for p in check_contiguous(windows)]
    ok = f"{len(view.windows)} windows of {topic!r}" + (f" and {view.retired.windows} retired" if view.retired.ranges
                                                        else "") + ", contiguous"
    return Verdict(problems, ok, {
        "windows": len(view.windows),
        "retired_windows": view.retired.windows,
        "kafka_partitions": len({w.partition for w in windows}),
        "offsets_in_windows": sum(w.size for w in windows),
    })


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


def objects(s3: S3Client, cfg: ArchiveConfig, topic: str, view: WindowsView, now: datetime | None = None,
            ) -> Verdict:
    """(2) Every committed manifest's objects exist with their recorded sizes; every materialized window has one.

    Two listings instead of a HEAD per object; only a manifest that the listings disagree with is checked object by
    object (io/s3.py::verify_manifest), so a listing quirk cannot raise a false alarm.

    With a lifecycle `expiration_days`, S3 deletes a window's objects and its manifest once they are that old (the
    lifecycle rules expire `_manifests/` at the same age). A window old enough to be expiring (config/lifecycle.py's
    expiry_due: by its manifest's `committed_at`, or its latest materialization when the manifest is gone) whose
    objects or manifest are absent is counted as expired in the metadata, not as a problem. A changed size is always
    a problem, and so is a manifest that does not parse (model/manifest.py), named with its key.
    """
    now, days, found = now or datetime.now(UTC), cfg.lifecycle_policy.expiration_days, _ObjectsFound()
    _check_manifests(s3, cfg, topic, now, found)
    _check_windows(cfg, topic, view, now, found)
    ok = f"{len(found.committed)} committed windows of {topic!r}: all objects present"
    if found.expired:
        ok += f"; {len(found.expired)} older windows expired by the lifecycle policy (expiration_days {days})"
    return Verdict(found.problems, ok, {
        "manifests": len(found.committed),
        "objects": found.objects,
        "bytes": found.bytes,
        "manifest_prefix": f"s3://{cfg.bucket}/{manifest_prefix(cfg.prefix, topic)}",
        "expiration_days": days if days is not None else 0,
        "expired_windows": len(found.expired),
        "expired": summary(sorted(found.expired)),
    })


@dataclass
class _ObjectsFound:
    """What the objects check found so far: `expired`, windows (and retired ranges) the lifecycle policy expired;
    `objects`, `bytes` of the committed windows; window keys with a manifest, and those (from the manifest's name)
    whose manifest does not parse."""

    problems: list[str] = field(default_factory=list)
    expired: list[str] = field(default_factory=list)
    objects: int = 0
    bytes: int = 0
    committed: set[str] = field(default_factory=set)
    unreadable: set[str] = field(default_factory=set)


def _check_manifests(s3: S3Client, cfg: ArchiveConfig, topic: str, now: datetime, found: _ObjectsFound) -> None:
    """Every manifest of the topic, read concurrently, against one listing of the data objects."""
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
    days = cfg.lifecycle_policy.expiration_days
    for mkey, m in zip(manifest_keys, manifests):
        if m is None:  # deleted between the listing and the read
            continue
        if isinstance(m, InvalidManifest):
            found.unreadable.add(mkey.rsplit("/", 1)[-1].removesuffix(".json"))
            found.problems.append(str(m))
            continue
        found.committed.add(m.window_key)
        found.objects += len(m.objects)
        found.bytes += sum(o.size for o in m.objects)
        if all(sizes.get(o.key) == o.size for o in m.objects):
            continue
        absent_only = all(o.key not in sizes or sizes[o.key] == o.size for o in m.objects)
        if absent_only and expiry_due(m.committed_time, days, now):
            found.expired.append(m.window_key)
            continue
        found.problems += [f"window {m.window_key} ({mkey}): {p}" for p in verify_manifest(s3, cfg.bucket, m)]


def _check_windows(cfg: ArchiveConfig, topic: str, view: WindowsView, now: datetime, found: _ObjectsFound) -> None:
    """Every live window Dagster materialized has a manifest (or is old enough that S3 expired it). Retired windows
    are only in S3: their manifests must cover each retired range. With expiration_days, S3 expires the oldest
    first, so a gap at the start of a range is expired, any other gap a problem."""
    days = cfg.lifecycle_policy.expiration_days
    unmanifested = [w for w in sorted(view.windows) if w.key in view.materialized
                    and w.key not in found.committed and w.key not in found.unreadable]
    when = view.materialized_at([w.key for w in unmanifested]) if days and unmanifested else {}
    for w in unmanifested:
        if expiry_due(when.get(w.key), days, now):
            found.expired.append(w.key)
            continue
        where = cfg.location(topic, w)
        found.problems.append(f"window {w.key} of {topic!r} is materialized but has no manifest at "
                              f"{where.url(where.manifest_key)}")
    for p, gaps in sorted(retired_gaps(view.retired, found.committed | found.unreadable).items()):
        for i, (a, b) in enumerate(gaps):
            if days and i == 0 and a == view.retired.ranges[p].start:
                found.expired.append(f"retired p{p} [{a}, {b})")
                continue
            found.problems.append(f"topic {topic!r} partition {p}: retired offsets [{a}, {b}) have no manifest "
                                  f"under s3://{cfg.bucket}/{manifest_prefix(cfg.prefix, topic)}")


def retention(kafka: KafkaResource, topic: str, view: WindowsView) -> Verdict:
    """(3) Kafka's log start has not passed an offset that is in no committed window; archive lag as metadata."""
    try:
        log_start = kafka.offsets(topic, "earliest")
        high = kafka.offsets(topic, "latest", sorted(log_start))
    except UnknownTopic as e:
        return Verdict([str(e)], "")
    progress = archive_progress(view.live_and_retired, view.committed(), log_start, high)
    problems = [f"topic {topic!r} partition {p.partition}: offsets [{a}, {b}) were deleted by Kafka (log start "
                f"offset {p.log_start}) before they were archived" for p in progress for a, b in p.lost]
    return Verdict(problems, f"nothing of {topic!r} lost to retention", {
        "archive_lag": sum(p.lag for p in progress),
        "lost_offsets": sum(b - a for p in progress for a, b in p.lost),
        "lag_by_partition": {str(p.partition): p.lag for p in progress},
        "first_unarchived_offset": {str(p.partition): p.first_unarchived for p in progress},
        "log_start_offset": {str(p.partition): p.log_start for p in progress},
        "lost_ranges": {str(p.partition): [list(r) for r in p.lost] for p in progress if p.lost},
    })


def headroom(kafka: KafkaResource, cfg: ArchiveConfig, topic: str, view: WindowsView) -> Verdict:
    """(4) WARN when the oldest unarchived record of a partition is older than retention_warn_fraction x the
    topic's retention.ms: Kafka will soon delete records the archive does not have yet."""
    try:
        retention_ms = kafka.retention_ms(topic)
        log_start = kafka.offsets(topic, "earliest")
        high = kafka.offsets(topic, "latest", sorted(log_start))
    except UnknownTopic as e:
        return Verdict([str(e)], "")
    meta: dict[str, Any] = {"retention_ms": retention_ms, "retention_warn_fraction": cfg.retention_warn_fraction}
    if retention_ms < 0:
        return Verdict([], f"{topic!r} has infinite retention (retention.ms -1)",
                       {**meta, "oldest_unarchived_age_seconds": {}}, warn=True)
    progress = archive_progress(view.live_and_retired, view.committed(), log_start, high)
    pending = {p.partition: max(p.first_unarchived, p.log_start) for p in progress
               if max(p.first_unarchived, p.log_start) < p.end_offset}
    now_ms = int(time.time() * 1000)
    rooms = retention_headroom(kafka.first_record_timestamps(topic, pending), retention_ms,
                               cfg.retention_warn_fraction, now_ms)
    problems = [f"topic {topic!r} partition {h.partition}: the oldest unarchived record (offset "
                f"{pending[h.partition]}) is {h.age_ms / 1000:.0f} s old, more than "
                f"{cfg.retention_warn_fraction:g} of retention.ms "
                f"{retention_ms} ({retention_ms / 1000:.0f} s)" for h in rooms if h.warn]
    return Verdict(problems, f"every unarchived record of {topic!r} is younger than "
                             f"{cfg.retention_warn_fraction:g} of retention.ms",
                   {**meta, "oldest_unarchived_age_seconds": {str(h.partition): round(h.age_ms / 1000, 3)
                                                              for h in rooms}}, warn=True)


def missing_ranges(start: int, end: int, open_windows: list[OffsetWindow], manifested: list[tuple[int, int]],
                   ) -> list[tuple[int, int]]:
    """Offsets of [start, end) of one Kafka partition in no open window and under no manifest: committed windows
    whose manifests are gone. `open_windows`: cut but not seen committed; `manifested`: the windows the manifests
    listed cover."""
    covered = sorted([(w.start, w.end) for w in open_windows] + list(manifested))
    out: list[tuple[int, int]] = []
    pos = start
    for a, b in covered:
        if b <= pos:
            continue
        if a > pos:
            out.append((pos, min(a, end)))
        pos = max(pos, b)
        if pos >= end:
            break
    if pos < end:
        out.append((pos, end))
    return [(a, b) for a, b in out if a < b]


def manifests_verdict(cfg: ArchiveConfig, topic: str, lost: list[OffsetWindow], rearchiving: set[OffsetWindow],
                      present: int) -> Verdict:
    """(5) Every window Dagster has seen committed still has its manifest in S3. `lost`: those whose manifest is
    gone; `rearchiving`: the lost ones being archived again (Kafka still holds their records); `present`: the
    manifests found."""
    problems = []
    for w in sorted(lost):
        where = cfg.location(topic, w)
        url = where.url(where.manifest_key)
        then = ("Kafka still holds its records, so the offsets sensor archives it again" if w in rearchiving
                else "Kafka no longer holds all of its records, so it cannot be archived again")
        problems.append(f"window {w.key} of {topic!r} is materialized but its manifest {url} is gone; {then}")
    return Verdict(problems, f"every committed window of {topic!r} has its manifest ({present} found)", {
        "lost_manifests": len(lost),
        "rearchiving": len(rearchiving),
        "lost_windows": summary([w.key for w in sorted(lost)]),
    })


def manifests_present(s3: S3Client, cfg: ArchiveConfig, topic: str, view: WindowsView, log_start: dict[int, int],
                      now: datetime | None = None) -> Verdict:
    """(5) for the check step: the materialized live windows against one listing of the topic's manifests; windows
    S3 may have expired under the lifecycle's expiration_days are not lost. `log_start`: Kafka's, per partition
    (which lost windows could be archived again)."""
    now = now or datetime.now(UTC)
    listed = {o["Key"].rsplit("/", 1)[-1].removesuffix(".json")
              for o in list_objects(s3, cfg.bucket, manifest_prefix(cfg.prefix, topic)) if o["Key"].endswith(".json")}
    gone = [w for w in view.windows if w.key in view.materialized and w.key not in listed]
    days = cfg.lifecycle_policy.expiration_days
    when = view.materialized_at([w.key for w in gone]) if days and gone else {}
    lost = [w for w in gone if not expiry_due(when.get(w.key), days, now)]
    again = {w for w in lost if log_start.get(w.partition, w.start + 1) <= w.start}
    return manifests_verdict(cfg, topic, lost, again, len(listed))


def freshness_verdict(cfg: ArchiveConfig, topic: str, uncommitted: dict[int, int], younger_from: dict[int, int],
                      end: dict[int, int]) -> Verdict:
    """(6) No record older than freshness_factor x flush.interval_seconds is in no committed window.

    Per partition: `uncommitted`, the first offset in no committed window; `younger_from`, the first offset whose
    record is younger than the bound (every record before it is older; -1: none is); `end`, the last stable
    offset. Records at [uncommitted, min(younger_from, end)) are too old and not committed."""
    bound = cfg.freshness_bound_seconds
    meta: dict[str, Any] = {"bound_seconds": bound if bound is not None else 0.0,
                            "first_uncommitted_offset": {str(p): u for p, u in sorted(uncommitted.items())}}
    if bound is None:
        return Verdict([], f"{topic!r}: flush.interval_seconds is null, so no record is ever too old",
                       {**meta, "stale_offsets": 0, "stale_by_partition": {}})
    stale: dict[str, int] = {}
    problems = []
    for p, u in sorted(uncommitted.items()):
        young = younger_from.get(p, u)
        until = min(end.get(p, u), end.get(p, u) if young < 0 else young)
        if u < until:
            stale[str(p)] = until - u
            problems.append(f"topic {topic!r} partition {p}: offsets [{u}, {until}) hold records older than "
                            f"{bound:g} s (flush.interval_seconds {cfg.flush.interval_seconds:g} x freshness_factor "
                            f"{cfg.freshness_factor:g}) that are in no committed window")
    return Verdict(problems, f"every record of {topic!r} older than {bound:g} s is in a committed window", {
        **meta, "stale_offsets": sum(stale.values()), "stale_by_partition": stale,
    })


def freshness(kafka: KafkaResource, cfg: ArchiveConfig, topic: str, view: WindowsView, now_ms: int | None = None,
              ) -> Verdict:
    """(6) for the check step: the first uncommitted offset per partition from the instance's windows, and one
    `ListOffsets` by timestamp at now - the bound."""
    bound = cfg.freshness_bound_seconds
    try:
        log_start = kafka.offsets(topic, "earliest")
        end = kafka.list_offsets(topic, {p: OffsetSpec.latest() for p in log_start}, read_committed=True)
        progress = archive_progress(view.live_and_retired, view.committed(), log_start, end)
        uncommitted = {p.partition: max(p.first_unarchived, p.log_start) for p in progress}
        if cfg.start_position != "earliest":
            # A partition with no window yet starts where start_position says (the sensor remembers it), not at
            # the log start: the records before it are not the archive's (e.g. a sink's, taken over).
            windowed = {w.partition for w in view.live_and_retired}
            uncommitted = {p: u for p, u in uncommitted.items() if p in windowed}
        pending = {p: u for p, u in uncommitted.items() if u < end[p]}
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        young = {} if bound is None or not pending else kafka.list_offsets(
            topic, {p: OffsetSpec.for_timestamp(now_ms - round(bound * 1000)) for p in pending}, read_committed=True)
    except UnknownTopic as e:
        return Verdict([str(e)], "")
    return freshness_verdict(cfg, topic, uncommitted, young, end)


def log_start(kafka: KafkaResource, topic: str) -> dict[int, int]:
    """Kafka's log start offset per partition; none for a topic Kafka does not have."""
    try:
        return kafka.offsets(topic, "earliest")
    except UnknownTopic:
        return {}


def archive_starts(view: WindowsView) -> dict[int, int]:
    """Per Kafka partition, where the archive's first window (live or retired) starts."""
    firsts: dict[int, int] = {}
    for w in view.live_and_retired:
        firsts[w.partition] = min(w.start, firsts.get(w.partition, w.start))
    return firsts


# Past this many offsets between the sink's last object and the first window, the boundary is checked by offsets
# instead of by counting Kafka's records (a read of the whole range).
COUNT_LIMIT = 1_000_000


def take_over_boundary(kafka: KafkaResource, topic: str, sink: str, view: WindowsView,
                       last_objects: dict[int, tuple[str, int, int] | str], sink_past: list[str]) -> Verdict:
    """(7) Where the archive took over from a sink (`foreign_sources[].archive`): per Kafka partition, the sink's
    last object (key, first offset, records: `last_objects`) must end where the archive's first window starts.
    Kafka still holding the offsets in between, its committed records from the object's first offset up to the
    first window are counted: as many as the object holds means no gap and no overlap (transaction markers and
    compaction leave offsets without records, so offsets alone cannot tell); more is a gap (records in neither),
    fewer an overlap (records in both; a restore still produces each once). `sink_past`: sink objects named past the
    boundary (more overlap). A partition without a window yet, or without a sink object, is reported, not a
    problem."""
    firsts = archive_starts(view)
    try:
        log_start = kafka.offsets(topic, "earliest")
    except UnknownTopic as e:
        return Verdict([str(e)], "")
    rows: dict[str, dict[str, Any]] = {}
    gaps: list[str] = []
    overlaps = [f"topic {topic!r}: {key} is named at or past where the archive starts: its records are in both "
                "places" for key in sink_past]
    for p in sorted(set(firsts) | set(last_objects)):
        start, tail = firsts.get(p), last_objects.get(p)
        row: dict[str, Any] = {"archive_starts_at": start}
        rows[str(p)] = row
        if isinstance(tail, str):
            row["sink"] = tail
            continue
        if tail is not None:
            key, first, n = tail
            row |= {"sink_last_object": key, "sink_last_object_first_offset": first, "sink_last_object_records": n}
        if start is None or tail is None:
            row["state"] = "no window yet" if start is None else "no sink object"
            continue
        if log_start.get(p, 0) <= first <= start and start - first <= COUNT_LIMIT:
            in_kafka = kafka.count_records(topic, p, first, start)
            row["kafka_records_from_sink_last_object_to_archive"] = in_kafka
            missing, how = in_kafka - n, "records"
        else:  # Kafka deleted the range (or it is too long to count): offsets, as the sink stored or numbered them
            missing, how = start - (first + n), "offsets"
        row["state"] = "contiguous" if missing == 0 else "gap" if missing > 0 else "overlap"
        where = f"topic {topic!r} partition {p}: the sink's last object {key} (from offset {first}, {n} records)"
        if missing > 0:
            gaps.append(f"{where} and the first window (from offset {start}): {missing} {how} in neither")
        elif missing < 0:
            overlaps.append(f"{where} and the first window (from offset {start}): {-missing} {how} in both; a "
                            "restore produces each once")
    problems = gaps + overlaps
    done = sum(1 for r in rows.values() if r.get("state") == "contiguous")
    return Verdict(problems, f"{done} partitions of {topic!r} continue from sink {sink!r} with no gap and no "
                             "overlap", {"sink": sink, "partitions": rows, "gaps": len(gaps),
                                         "overlaps": len(overlaps)}, warn=not gaps)


def take_over_verdict(kafka: KafkaResource, cfg: ArchiveConfig, topic: str, sink: ForeignSource, view: WindowsView,
                      last_objects: dict[int, tuple[str, int, int] | str], taken_over: list[str]) -> Verdict:
    """(7) for the check step, from the sink's objects planned as a restore plans them with the boundary at
    `archive_starts` (restore/foreign_sources.py): each partition's last object read (`last_objects`), and the keys
    left out as named at or past the boundary (`taken_over`). Under a prefix the archive shares with the sink, those
    are the archive's own objects, not the sink's past the boundary."""
    shared = sink.bucket == cfg.bucket and (sink.key_prefix.startswith(cfg.prefix)
                                            or cfg.prefix.startswith(sink.key_prefix))
    past = [] if shared else [f"s3://{sink.bucket}/{k}" for k in taken_over]
    return take_over_boundary(kafka, topic, sink.name, view, last_objects, past)
