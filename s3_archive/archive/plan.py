"""What the offsets sensor cuts, and what the retention check reports. Pure logic, no I/O.

The sensor gathers, per Kafka partition, where its next window starts (the end of its last existing window, or
the log start offset when it has none), how far windows may reach (the last stable offset), and how far records
are old enough to flush; `plan_windows` turns that into windows. The set of existing windows is the only state:
planning the same inputs twice gives the same windows, so a restarted sensor cuts nothing twice.

"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

from s3_archive.config.archive import FlushPolicy
from s3_archive.model.windows import OffsetWindow

# Assumed input bytes per record before any window of the topic has been archived: only used with flush.bytes.
DEFAULT_BYTES_PER_RECORD = 1024.0
MAX_WINDOWS_PER_TICK = 100

CutReason = Literal["count", "bytes", "age", "cron"]


@dataclass(frozen=True)
class PartitionState:
    """One topic-partition as the sensor sees it at one tick."""

    topic: str
    partition: int
    next_offset: int  # where the next window starts
    end_offset: int  # windows may reach this offset (exclusive): the last stable offset
    window_size: int  # offsets per full window (see `window_size`)
    size_reason: CutReason = "count"  # which cap set window_size: "count" or "bytes"
    # Records before this offset are older than flush.interval_seconds. None: no age flush (no interval set,
    # or nothing pending).
    aged_until: int | None = None

    def __post_init__(self) -> None:
        if self.next_offset < 0 or self.end_offset < 0:
            raise ValueError(f"{self.topic} partition {self.partition}: offsets must be >= 0, got next_offset="
                             f"{self.next_offset}, end_offset={self.end_offset}")
        if self.window_size < 1:
            raise ValueError(f"{self.topic} partition {self.partition}: window_size must be >= 1, "
                             f"got {self.window_size}")


@dataclass(frozen=True, order=True)
class Cut:
    topic: str
    window: OffsetWindow
    reason: CutReason  # "count"/"bytes": a full window capped by that limit; "age"/"cron": a partial window


def bytes_per_record(samples: Iterable[tuple[int, int]]) -> float | None:
    """Input bytes per record over recent windows given as (bytes_read, records); None when none has records.

    Weighted by records, so a near-empty window does not swing the estimate.
    """
    total_bytes = total_records = 0
    for b, r in samples:
        if r > 0 and b >= 0:
            total_bytes += b
            total_records += r
    return total_bytes / total_records if total_records else None


def window_size(flush: FlushPolicy, bytes_per_record: float | None) -> tuple[int, CutReason]:
    """Offsets per full window: flush.count, lowered so that an estimated window stays within flush.bytes."""
    if flush.bytes is None:
        return flush.count, "count"
    # At least 1 byte per record: empty records still cost something, and it keeps the division finite.
    bpr = max(1.0, DEFAULT_BYTES_PER_RECORD if bytes_per_record is None else bytes_per_record)
    by_bytes = math.floor(flush.bytes / bpr)
    # The division rounds: the largest count whose estimate fits is one off when bpr x count is exactly the cap.
    while (by_bytes + 1) * bpr <= flush.bytes:
        by_bytes += 1
    while by_bytes > 1 and by_bytes * bpr > flush.bytes:
        by_bytes -= 1
    by_bytes = max(1, by_bytes)
    return (flush.count, "count") if flush.count <= by_bytes else (by_bytes, "bytes")


def _cuts(s: PartitionState, cut_rest: bool) -> Iterator[Cut]:
    """The partition's windows in offset order: full windows, then the rest if its oldest record is old enough
    (reason "age") or, with `cut_rest`, in any case (reason "cron")."""
    pos = s.next_offset
    while pos + s.window_size <= s.end_offset:
        yield Cut(s.topic, OffsetWindow(s.partition, pos, pos + s.window_size), s.size_reason)
        pos += s.window_size
    if pos < s.end_offset:
        # aged_until > pos: the record at `pos` (the oldest not in any window) is older than the flush interval.
        if s.aged_until is not None and s.aged_until > pos:
            yield Cut(s.topic, OffsetWindow(s.partition, pos, s.end_offset), "age")
        elif cut_rest:
            yield Cut(s.topic, OffsetWindow(s.partition, pos, s.end_offset), "cron")


def plan_windows(states: Iterable[PartitionState], limit: int = MAX_WINDOWS_PER_TICK,
                 cut_rest: bool = False) -> list[Cut]:
    """At most `limit` new windows, taken round-robin over the partitions so one backlog cannot starve the others.

    Per partition the windows are contiguous from `next_offset`, never reach past `end_offset`, and are all
    `window_size` long except a last, shorter one cut for age, or, with `cut_rest` (the cut schedule: "cut at the
    last stable offset on a fixed cadence"), whatever rest is left.
    """
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    ordered = sorted(states, key=lambda s: (s.topic, s.partition))
    seen: set[tuple[str, int]] = set()
    for s in ordered:
        if (s.topic, s.partition) in seen:
            raise ValueError(f"{s.topic} partition {s.partition} is listed twice")
        seen.add((s.topic, s.partition))
    pending = [_cuts(s, cut_rest) for s in ordered]
    out: list[Cut] = []
    while pending and len(out) < limit:
        still = []
        for it in pending:
            if len(out) == limit:
                break
            cut = next(it, None)
            if cut is not None:
                out.append(cut)
                still.append(it)
        pending = still
    return out


def run_chunks(cuts: list[Cut], windows_per_run: int, bytes_per_run: int | None,
               bytes_per_record: float | None) -> list[list[Cut]]:
    """The cuts of one topic, in order, grouped into runs: consecutive cuts, at most `windows_per_run` of them and,
    with `bytes_per_run`, at most that many estimated input bytes (offsets x `bytes_per_record`, or
    DEFAULT_BYTES_PER_RECORD before any window has been archived); a single window larger than that is a run alone."""
    if windows_per_run < 1:
        raise ValueError(f"windows_per_run must be >= 1, got {windows_per_run}")
    bpr = max(1.0, DEFAULT_BYTES_PER_RECORD if bytes_per_record is None else bytes_per_record)
    out: list[list[Cut]] = []
    size = 0.0
    for c in cuts:
        est = (c.window.end - c.window.start) * bpr
        full = out and (len(out[-1]) >= windows_per_run or
                        (bytes_per_run is not None and size + est > bytes_per_run))
        if not out or full:
            out.append([])
            size = 0.0
        out[-1].append(c)
        size += est
    return out


# --- retention ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionProgress:
    """How far one partition is archived, and what Kafka deleted before it was."""

    partition: int
    log_start: int
    end_offset: int
    first_unarchived: int  # the lowest offset not in a committed window (log start when there are no windows)
    lag: int  # offsets below end_offset in no committed window
    lost: tuple[tuple[int, int], ...]  # [start, end) ranges deleted by Kafka before they were archived


def _merge(ranges: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return tuple(out)


def archive_progress(windows: Iterable[OffsetWindow], committed: set[OffsetWindow],
                     log_start: Mapping[int, int], end_offset: Mapping[int, int]) -> list[PartitionProgress]:
    """Per Kafka partition: lag, and the offsets Kafka deleted that are in no committed window.

    An offset is lost when it is below the log start and either in an uncommitted window or past the last window
    (the sensor will start the next window there). A partition without windows has lost nothing: its first window
    starts at the log start.
    """
    by_partition: dict[int, list[OffsetWindow]] = {}
    for w in windows:
        by_partition.setdefault(w.partition, []).append(w)
    out = []
    for p in sorted(log_start):
        start, end = log_start[p], end_offset.get(p, log_start[p])
        ws = sorted(by_partition.get(p, []))
        if not ws:
            out.append(PartitionProgress(p, start, end, start, max(0, end - start), ()))
            continue
        tail = max(w.end for w in ws)
        open_ = [w for w in ws if w not in committed]
        lost = [(w.start, min(w.end, start)) for w in open_ if start > w.start]
        if start > tail:
            lost.append((tail, start))
        lag = sum(max(0, min(w.end, end) - w.start) for w in open_) + max(0, end - tail)
        first = min([w.start for w in open_] + [tail])
        out.append(PartitionProgress(p, start, end, first, lag, _merge(lost)))
    return out


@dataclass(frozen=True)
class Headroom:
    """How close one partition's oldest unarchived record is to Kafka's retention."""

    partition: int
    age_ms: int  # now - the record's timestamp (0 for a timestamp in the future)
    warn: bool  # older than fraction x retention.ms


def retention_headroom(oldest_timestamp_ms: Mapping[int, int], retention_ms: int, fraction: float,
                       now_ms: int) -> list[Headroom]:
    """Per partition with unarchived records: the age of its oldest one, and whether it is past `fraction` of the
    topic's retention.ms. retention.ms < 0 (infinite retention): nothing is ever deleted, so nothing warns."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    out = []
    for p in sorted(oldest_timestamp_ms):
        age = max(0, now_ms - oldest_timestamp_ms[p])
        out.append(Headroom(p, age, retention_ms >= 0 and age > fraction * retention_ms))
    return out
