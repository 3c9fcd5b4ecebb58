"""Which windows may leave the Dagster instance's partition set (retirement, docs/windows.md). Pure logic, no I/O.

Per Kafka partition the retired windows are one contiguous range of offsets, from the partition's first window on:
a window is retired only after every window before it, and never the partition's last window (the sensor's next
window starts where that one ends). Windows inside the retired range that are live again (added back by hand, e.g.
to restore one from the UI) are retired again.
"""

from __future__ import annotations

from collections.abc import Iterable

from s3_archive.model.windows import OffsetWindow


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
