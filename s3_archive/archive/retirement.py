"""Which windows may leave the Dagster instance's partition set (retirement, docs/windows.md): pure logic, but for
`verdict`, which reads a window's manifest and checks its objects in S3. The instance's side (reading the keys,
recording the retired ranges, deleting partitions and runs) is defs/archive/instance.py.

Per Kafka partition the retired windows are one contiguous range of offsets, from the partition's first window on:
a window is retired only after every window before it, and never the partition's last window (the sensor's next
window starts where that one ends). Windows inside the retired range that are live again (added back by hand, e.g.
to restore one from the UI) are retired again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime

from s3_archive.config.archive import ArchiveConfig
from s3_archive.io.s3 import S3Client, read_manifest, verify_manifest
from s3_archive.model.errors import InvalidManifest
from s3_archive.model.windows import OffsetWindow

READERS = 8  # manifests read (and objects HEADed) at once
# Windows retired per topic and run: a day's windows are far fewer; an instance with a long history (retirement
# turned on late) catches up over a few daily runs instead of one run of hours.
MAX_PER_RUN = 50_000


@dataclass
class Retired:
    """Per Kafka partition, the offsets whose windows were retired (as one window spanning them), and how many
    windows that was in all."""

    ranges: dict[int, OffsetWindow]
    windows: int = 0

    def covers(self, w: OffsetWindow) -> bool:
        r = self.ranges.get(w.partition)
        return r is not None and r.start <= w.start and w.end <= r.end


def retire_candidates(windows: Iterable[OffsetWindow], retired: dict[int, OffsetWindow],
                      ) -> dict[int, tuple[list[OffsetWindow], list[OffsetWindow]]]:
    """Per Kafka partition, the live windows that may be retired: those inside the retired range (any of them),
    and, in offset order, the windows that continue the range back to back (or, with none retired, from the
    partition's first window), stopping before the partition's last window and at the first overlap or hole (the
    contiguity check's to report). Only a prefix of the latter may be retired, so the range stays contiguous."""
    by_partition: dict[int, list[OffsetWindow]] = {}
    for w in windows:
        by_partition.setdefault(w.partition, []).append(w)
    out: dict[int, tuple[list[OffsetWindow], list[OffsetWindow]]] = {}
    for p, ws in sorted(by_partition.items()):
        ws.sort()
        last = max(ws, key=lambda w: w.end)
        r = retired.get(p)

        def within(w: OffsetWindow) -> bool:
            return r is not None and r.start <= w.start and w.end <= r.end

        inside = [w for w in ws if within(w) and w != last]
        run: list[OffsetWindow] = []
        rest = [w for w in ws if not within(w)]
        pos = r.end if r is not None else (rest[0].start if rest else 0)
        for w in rest:
            if w == last or w.start != pos:
                break
            run.append(w)
            pos = w.end
        if inside or run:
            out[p] = (inside, run)
    return out


def extend(retired: OffsetWindow | None, w: OffsetWindow) -> OffsetWindow:
    """The retired range of w's partition once w is retired too (w is inside it, or continues it)."""
    if retired is None:
        return w
    return OffsetWindow(w.partition, min(retired.start, w.start), max(retired.end, w.end))


def verdict(s3: S3Client, cfg: ArchiveConfig, topic: str, w: OffsetWindow, horizon: datetime) -> str | None:
    """None when w may be retired (committed before `horizon`, its objects intact), else why not."""
    try:
        m = read_manifest(s3, cfg.bucket, cfg.location(topic, w).manifest_key)
    except InvalidManifest as e:
        return str(e)
    if m is None:
        return f"window {w.key} has no manifest (not committed)"
    if m.committed_time > horizon:
        return f"window {w.key} was committed at {m.committed_at}, within retire_after_days"
    problems = verify_manifest(s3, cfg.bucket, m)
    return f"window {w.key}: {problems[0]}" if problems else None


def choose(windows: list[OffsetWindow], retired: Retired, verdict_of: Callable[[OffsetWindow], str | None],
           ) -> tuple[list[OffsetWindow], dict[int, str]]:
    """The windows to retire now (at most MAX_PER_RUN), and per Kafka partition with candidates left why the next
    one stays. Candidates inside the retired range go if their verdict allows; those continuing the range go in
    offset order up to the first whose verdict does not (READERS verdicts at a time)."""
    accepted: list[OffsetWindow] = []
    kept: dict[int, str] = {}
    with ThreadPoolExecutor(max_workers=READERS) as pool:
        def verdicts(ws: list[OffsetWindow]) -> list[str | None]:
            return list(pool.map(verdict_of, ws))

        for p, (inside, run) in retire_candidates(windows, retired.ranges).items():
            room = MAX_PER_RUN - len(accepted)
            if len(inside) + len(run) > room:
                kept[p] = f"at most {MAX_PER_RUN} windows are retired per run and topic; the next run goes on"
                inside, run = inside[:room], run[:max(0, room - len(inside))]
            accepted += [w for w, v in zip(inside, verdicts(inside)) if v is None]
            # The continuing windows in offset order, a page at a time: stop at the first that must stay.
            for i in range(0, len(run), 4 * READERS):
                page = run[i:i + 4 * READERS]
                vs = verdicts(page)
                stop = next((j for j, v in enumerate(vs) if v is not None), None)
                accepted += page[:stop]
                if stop is not None:
                    kept[p] = vs[stop]
                    break
    return accepted, kept
