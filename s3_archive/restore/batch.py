"""A batch of archived records, column-wise: what every reader hands to the restore run. The run filters,
counts and routes a batch at a time (slices, `sum`, `bisect`), so the only Python left per record is the
producer's call. `WindowSource` is one window to restore as the batches of its records, from our archives or a
sink's. No I/O here (`read_ahead` runs a reader in a thread).
"""

from __future__ import annotations

import bisect
import itertools
import operator
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.ledger import RangeSet
from s3_archive.restore.request import ArchivedRecord, Filters, record_bytes

Headers = list[tuple[str, bytes | None]]


class Records:
    """Records in file order as parallel lists (ArchivedRecord's fields); `sizes` are key + value + header
    bytes. No list is changed in place: filtering makes a new batch, and the run replaces a whole column
    (timestamps it cannot keep, headers with provenance) of a batch it got from a reader."""

    __slots__ = ("partitions", "offsets", "keys", "values", "headers", "timestamps", "sizes")

    def __init__(self, partitions: list[int], offsets: list[int], keys: list[bytes | None],
                 values: list[bytes | None], headers: list[Headers], timestamps: list[int], sizes: list[int]) -> None:
        self.partitions, self.offsets, self.keys, self.values = partitions, offsets, keys, values
        self.headers, self.timestamps, self.sizes = headers, timestamps, sizes

    def __len__(self) -> int:
        return len(self.offsets)

    def columns(self) -> tuple[list, ...]:
        return (self.partitions, self.offsets, self.keys, self.values, self.headers, self.timestamps, self.sizes)

    @classmethod
    def from_rows(cls, rows: Sequence[tuple]) -> Records:
        """From ArchivedRecord-shaped tuples (`size` missing or None: computed here)."""
        if not rows:
            return cls([], [], [], [], [], [], [])
        cols = [list(c) for c in zip(*rows)]
        parts, offsets, keys, values, headers, ts = cols[:6]
        sizes = cols[6] if len(cols) > 6 and None not in cols[6] else list(map(record_bytes, keys, values, headers))
        return cls(parts, offsets, keys, values, headers, ts, sizes)

    def rows(self) -> Iterator[tuple]:
        """Plain tuples in ArchivedRecord's field order."""
        return zip(*self.columns())

    def records(self) -> Iterator[ArchivedRecord]:
        return map(ArchivedRecord._make, self.rows())

    def slice(self, i: int, j: int) -> Records:
        return Records(*(c[i:j] for c in self.columns()))

    def take(self, idx: list[int]) -> Records:
        return Records(*([c[i] for i in idx] for c in self.columns()))


def batches_of(rows: Iterable[tuple], n: int) -> Iterator[Records]:
    """Row-wise readers' records (ArchivedRecord-shaped tuples) in Records of at most `n`."""
    it = iter(rows)
    while chunk := list(itertools.islice(it, n)):
        yield Records.from_rows(chunk)


def increasing(xs: list[int]) -> bool:
    """Strictly increasing (at C speed: no Python per element)."""
    return all(map(operator.lt, xs, itertools.islice(xs, 1, None)))


def select(batch: Records, lo: int, hi: int, done: RangeSet | None, filters: Filters) -> tuple[Records, int, int]:
    """The records of `batch` to restore: offsets in [lo, hi) (a slice: offsets increase), not in `done` (the
    ledger; None when it does not overlap the window), timestamps inside the time filter. Also how many were
    skipped (in `done`) and filtered out (the rest). Without filters and ledger: the batch itself."""
    offs, n = batch.offsets, len(batch)
    if n and (offs[0] < lo or offs[-1] >= hi):
        # also records past a foreign window's end: the next object holds them too
        batch = batch.slice(bisect.bisect_left(offs, lo), bisect.bisect_left(offs, hi))
        offs = batch.offsets
    filtered, skipped = n - len(batch), 0
    if done is not None and offs and done.overlaps(offs[0], offs[-1] + 1):
        keep = [i for i, o in enumerate(offs) if o not in done]
        skipped = len(batch) - len(keep)
        batch = batch.take(keep)
    if filters.has_time and len(batch):
        time_ok = filters.time_ok
        keep = [i for i, t in enumerate(batch.timestamps) if time_ok(t)]
        if len(keep) < len(batch):
            filtered += len(batch) - len(keep)
            batch = batch.take(keep)
    return batch, skipped, filtered


_END = object()


def read_ahead(batches: Iterator[Records], depth: int) -> Iterator[Records]:
    """`batches` read in a thread, up to `depth` batches ahead of the caller, so that downloading and decoding
    (Arrow releases the GIL) overlap the caller's producing; `depth` 0 reads them inline. An error of the reader
    is raised in the caller, in order. Closing this generator stops the thread (after its current batch)."""
    if depth <= 0:
        yield from batches
        return
    q: queue.Queue = queue.Queue(depth)
    stop = threading.Event()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        try:
            for b in batches:
                if not put(b):
                    return
        except BaseException as e:  # noqa: BLE001 - handed to the caller, which raises it
            put(e)
            return
        put(_END)

    thread = threading.Thread(target=work, name="s3-archive-restore-read", daemon=True)
    thread.start()
    try:
        while (item := q.get()) is not _END:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        thread.join()
        close = getattr(batches, "close", None)
        if close is not None:
            close()  # the reader's own cleanup (spooled files), now that no thread runs it


@dataclass(frozen=True)
class WindowSource:
    """One window to restore and how to read it: our archives (a manifest) and archives written by others
    (restore/foreign_sources.py) both come in as these, so the exactly-once machinery is one."""

    window: OffsetWindow
    batches: Callable[[], Iterator[Records]]  # the window's records in offset order, a batch at a time
    record_count: int | None = None  # None: unknown until read (counted while reading)
    min_timestamp_ms: int | None = None
    max_timestamp_ms: int | None = None
    # The window's end is not known (the last object of a foreign partition): records at or past `window.end`
    # never come, and the ledger records the window as done up to its last record read, not up to `window.end`.
    open_end: bool = False
    # The window's start is not known either (a Lenses partition's first object): the ledger records the window
    # as done from its first record read.
    open_start: bool = False
    objects: int = 0  # objects the window is read from (the plan's count)
    erased: int = 0  # records an erasure removed (or nulled) from the window: never read, counted
