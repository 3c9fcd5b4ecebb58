"""A batch of archived records, column-wise: what every reader hands to the restore run. The run filters,
counts and routes a batch at a time (slices, `sum`, `bisect`), so the only Python left per record is the
producer's call. `WindowSource` is one window to restore as the batches of its records, from our archives or a
sink's. No I/O here (`ReadAhead` runs a reader in a thread).
"""

from __future__ import annotations

import bisect
import itertools
import operator
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.ledger import RangeSet
from s3_archive.restore.request import ArchivedRecord, Filters, record_bytes

Headers = list[tuple[str, bytes | None]]

# Records' columns, in ArchivedRecord's field order (then the sizes).
COLUMNS = ("partitions", "offsets", "keys", "values", "headers", "timestamps", "sizes")
_NO_HEADERS: list = []  # shared by every record without headers (nothing mutates a record's header list)


def _names(col: Any) -> list[str | None]:
    """Header names as Python strings, dictionary-decoded: one string per distinct name of the batch, shared by
    every header that has it (a batch holds few distinct names: decoding each is most of the work)."""
    import pyarrow.compute as pc

    if col.null_count or len(col) < 64:
        return col.to_pylist()
    enc = pc.dictionary_encode(col)
    return list(map(enc.dictionary.to_pylist().__getitem__, enc.indices.to_pylist()))


def header_lists(col: Any) -> list[Headers]:
    """An Arrow list<struct<key, value>> column as each record's headers, (name, value) pairs: one to_pylist per
    field of the batch, not per record."""
    n = len(col)
    offsets = col.offsets  # absolute positions in col.values (the list array's slice offset included)
    bounds = offsets.to_pylist()
    lo, hi = bounds[0], bounds[-1]
    if hi == lo:
        return [_NO_HEADERS] * n
    names, values = col.values.flatten()  # the struct's fields, its own offset applied
    pairs = list(zip(_names(names.slice(lo, hi - lo)), values.slice(lo, hi - lo).to_pylist()))
    k = (hi - lo) // n
    if not col.null_count and k * n == hi - lo and bounds == list(range(lo, hi + 1, k)):
        return list(map(list, zip(*[iter(pairs)] * k)))  # every record has k headers: grouped in C
    rel = [o - lo for o in bounds]
    headers = [pairs[a:b] if a < b else _NO_HEADERS for a, b in zip(rel, itertools.islice(rel, 1, None))]
    if col.null_count:
        headers = [h if ok else _NO_HEADERS for h, ok in zip(headers, col.is_valid().to_pylist())]
    return headers


def _as_list(name: str, col: Any) -> list:
    """An Arrow column of Records as its Python list."""
    if name == "headers":
        return header_lists(col)
    if name in ("keys", "values") or col.null_count:
        return col.to_pylist()
    return col.to_numpy(zero_copy_only=False).tolist()  # integers: numpy makes the ints at C speed


class _Column:
    """A column of Records: a Python list, made from the column's Arrow array when first read (and kept);
    setting it replaces the column (its Arrow array goes)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Records | None, owner: type | None = None) -> Any:
        if obj is None:
            return self
        got = obj._lists.get(self.name)
        if got is None:
            got = obj._lists[self.name] = _as_list(self.name, obj._arrow[self.name])
        return got

    def __set__(self, obj: Records, value: list) -> None:
        obj._lists[self.name] = value
        obj._arrow.pop(self.name, None)


class Records:
    """Records in file order, column-wise (ArchivedRecord's fields); `sizes` are key + value + header bytes. A
    column is a Python list or an Arrow array (a Parquet reader's: no Python object per record until a list is
    read). The native producer takes the Arrow arrays as they are (`arrow`); reading a column as a list makes it
    once. No column is changed in place: filtering makes a new batch, and the run replaces a whole column
    (timestamps it cannot keep, headers with provenance) of a batch it got from a reader."""

    __slots__ = ("_lists", "_arrow")

    partitions, offsets, keys, values = _Column(), _Column(), _Column(), _Column()
    headers, timestamps, sizes = _Column(), _Column(), _Column()

    def __init__(self, partitions: Any, offsets: Any, keys: Any, values: Any, headers: Any, timestamps: Any,
                 sizes: Any) -> None:
        """Each column a list, or an Arrow array (timestamps int64 epoch ms, sizes int64)."""
        self._lists: dict[str, list] = {}
        self._arrow: dict[str, Any] = {}
        for name, col in zip(COLUMNS, (partitions, offsets, keys, values, headers, timestamps, sizes)):
            (self._lists if isinstance(col, list) else self._arrow)[name] = col

    @classmethod
    def _of(cls, lists: dict[str, list], arrow: dict[str, Any]) -> Records:
        r = cls.__new__(cls)
        r._lists, r._arrow = lists, arrow
        return r

    def __len__(self) -> int:
        got = self._lists.get("offsets")
        return len(got if got is not None else self._arrow["offsets"])

    def columns(self) -> tuple[list, ...]:
        return (self.partitions, self.offsets, self.keys, self.values, self.headers, self.timestamps, self.sizes)

    def arrow(self, name: str) -> Any:
        """Column `name` as the Arrow array it came as; None once replaced by a list (or when it came as one)."""
        return self._arrow.get(name)

    def materialized(self) -> Records:
        """Every column read as a list now (a reader thread's work, not its consumer's); the batch itself."""
        self.columns()
        return self

    def with_columns(self, **lists: list) -> Records:
        """A batch with the columns named replaced (lists), the others shared."""
        return Records._of({**self._lists, **lists}, {k: v for k, v in self._arrow.items() if k not in lists})

    def total_bytes(self) -> int:
        got = self._lists.get("sizes")
        if got is not None:
            return sum(got)
        import pyarrow.compute as pc

        return pc.sum(self._arrow["sizes"]).as_py() or 0

    def clamp_timestamps(self) -> int:
        """Timestamps <= 0 (and null) made 0 ("now" to librdkafka: they cannot be kept); how many there were."""
        ts = self._lists.get("timestamps")
        if ts is None:
            import pyarrow.compute as pc

            col = pc.fill_null(self._arrow["timestamps"], 0)
            bad = pc.sum(pc.less_equal(col, 0)).as_py() or 0
            if bad:
                self._arrow["timestamps"] = pc.max_element_wise(col, 0)
            return bad
        if not ts or min(ts) > 0:
            return 0
        self.timestamps = [t if t > 0 else 0 for t in ts]
        return sum(1 for t in ts if t <= 0)

    def in_time(self, filters: Filters) -> list[int]:
        """The positions of the records whose timestamp passes the time filter."""
        col = self._arrow.get("timestamps") if "timestamps" not in self._lists else None
        if col is None:
            time_ok = filters.time_ok
            return [i for i, t in enumerate(self.timestamps) if time_ok(t)]
        import pyarrow.compute as pc

        ok = pc.is_valid(col)
        if filters.from_timestamp_ms is not None:
            ok = pc.and_(ok, pc.greater_equal(col, filters.from_timestamp_ms))
        if filters.to_timestamp_ms is not None:
            ok = pc.and_(ok, pc.less(col, filters.to_timestamp_ms))
        return pc.indices_nonzero(pc.fill_null(ok, False)).to_numpy().tolist()

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
        j = max(i, min(j, len(self)))
        return Records._of({k: c[i:j] for k, c in self._lists.items()},
                           {k: a.slice(i, j - i) for k, a in self._arrow.items()})

    def take(self, idx: list[int]) -> Records:
        arrow = {}
        if self._arrow:
            import pyarrow as pa

            at = pa.array(idx, pa.int64())
            arrow = {k: a.take(at) for k, a in self._arrow.items()}
        return Records._of({k: [c[i] for i in idx] for k, c in self._lists.items()}, arrow)


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
        keep = batch.in_time(filters)
        if len(keep) < len(batch):
            filtered += len(batch) - len(keep)
            batch = batch.take(keep)
    return batch, skipped, filtered


def materialized(batches: Iterator[Records]) -> Iterator[Records]:
    """`batches` with every column read as a list (`Records.materialized`: in the thread that reads them); closing
    this closes `batches`."""
    try:
        for b in batches:
            yield b.materialized()
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()


_END = object()


class ReadAhead:
    """`batches` read in a thread up to `depth` batches ahead of the caller, so that downloading and decoding (Arrow
    releases the GIL) overlap the caller's producing; `depth` 0 reads them inline. The thread starts when this is
    made, not at the first batch asked for: a run starts its readers before its producers are ready. An error of
    the reader is raised in the caller, in order. `close` (also at the end, or after an error) stops the thread
    (after its current batch), then closes `batches` in the caller's thread; call it whether or not a batch was
    read."""

    def __init__(self, batches: Iterator[Any], depth: int) -> None:
        self.batches, self.done = batches, False
        self.queue: queue.Queue = queue.Queue(max(depth, 1))
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        if depth > 0:
            self.thread = threading.Thread(target=self._work, name="s3-archive-restore-read", daemon=True)
            self.thread.start()

    def _put(self, item: object) -> bool:
        while not self.stop.is_set():
            try:
                self.queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _work(self) -> None:
        try:
            for b in self.batches:
                if not self._put(b):
                    return
        except BaseException as e:  # noqa: BLE001 - handed to the caller, which raises it
            self._put(e)
            return
        self._put(_END)

    def __iter__(self) -> ReadAhead:
        return self

    def __next__(self) -> Any:
        if self.done:
            raise StopIteration
        try:
            item = next(self.batches) if self.thread is None else self.queue.get()
        except BaseException:
            self.close()
            raise
        if item is _END:
            self.close()
            raise StopIteration
        if isinstance(item, BaseException):
            self.close()
            raise item
        return item

    def close(self) -> None:
        self.done = True
        self.stop.set()
        if self.thread is not None:
            self.thread.join()
        close = getattr(self.batches, "close", None)
        if close is not None:
            close()  # the reader's own cleanup (spooled files), now that no thread runs it


class _WindowEnd:
    """In a `WindowReads` stream: the end of a window's batches."""

    __slots__ = ("window",)

    def __init__(self, window: OffsetWindow) -> None:
        self.window = window


class WindowReads:
    """The batches of windows read in one thread, one window after another, up to `depth` batches ahead of the
    caller and across windows (`ReadAhead`, started when this is made): the next window's objects are opened and
    decoded while the current one's last batches are produced, and its first object is asked for ahead
    (`WindowSource.prefetch`) once the current one's first batch is in. `of(src)` is one window's batches, asked for
    in the order of `srcs`; `materialize`: every column read as a list in the reader's thread (`materialized`). `close`
    stops the thread and closes the window being read (also after an error, or before any was asked for)."""

    def __init__(self, srcs: Sequence[WindowSource], depth: int, materialize: bool = False) -> None:
        self.stream = ReadAhead(self._chained(list(srcs), materialize), depth)

    @staticmethod
    def _chained(srcs: list[WindowSource], materialize: bool) -> Iterator[Any]:
        for i, src in enumerate(srcs):
            # the next window's objects start downloading once this one's first batch is decoded (its object is in)
            ahead = srcs[i + 1].prefetch if i + 1 < len(srcs) else None
            read = materialized(src.batches()) if materialize else src.batches()
            try:
                for batch in read:
                    if ahead is not None:
                        ahead()
                        ahead = None
                    yield batch
            finally:
                close = getattr(read, "close", None)
                if close is not None:
                    close()
            if ahead is not None:
                ahead()
            yield _WindowEnd(src.window)

    def of(self, src: WindowSource) -> Iterator[Records]:
        for item in self.stream:
            if isinstance(item, _WindowEnd):
                if item.window != src.window:
                    raise RuntimeError(f"window {src.window.key} asked for out of order (the reader is at "
                                       f"{item.window.key})")
                return
            yield item
        raise RuntimeError(f"window {src.window.key} asked for after the reader's last window")

    def close(self) -> None:
        self.stream.close()


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
    # Starts downloading the window's first object ahead of `batches` (our archives' `Prefetch.ahead`); None: none
    prefetch: Callable[[], None] | None = None
