"""The write job of one run: what the driver sends to every write task, and what comes back. Pure: no Spark, no I/O.

A run's windows are cut into slices, each read by one Spark task from Kafka and written by the same task straight
to the window's final object keys. A window is one slice unless it may be split (`splittable`): then slice i of n
is offsets [start + i*size/n, ...) and writes the object numbered i. Each task sends back one row per object it
wrote and one row of statistics per slice (records, bytes, offsets, timestamps, absent offsets); the driver merges
a window's slices (`merge_slices`). A slice with no committed record sends no row at all: it is all absent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from s3_archive.archive.upload import MULTIPART_THRESHOLD, PART_SIZE, S3Connection
from s3_archive.keys.layout import KafkaPartition, OutputLayout
from s3_archive.model.errors import UserError
from s3_archive.model.formats import FORMATS, FormatSpec
from s3_archive.model.windows import OffsetWindow

if TYPE_CHECKING:  # not imported by the write tasks' Python workers, which never read the config
    from s3_archive.config.archive import ArchiveConfig

MAX_GAP_RANGES = 10_000

# One row per object written or per slice, from each write task (DataFrame.mapInArrow's output schema).
RESULT_SCHEMA = ("kind string, window string, slice int, key string, size long, etag string, record_offset long, "
                 "records long, bytes long, first long, last long, min_ts long, max_ts long, bad long, "
                 "first_bad long, absent string, absent_truncated boolean, committed boolean")


@dataclass(frozen=True)
class Slice:
    """Offsets [start, end) of `window`, read by one task; slice `index` of `count` of the window."""

    window: OffsetWindow
    start: int
    end: int
    index: int = 0
    count: int = 1


def splittable(layout: OutputLayout | None, rotates: bool, fmt: str) -> bool:
    """Whether a window may be written by several tasks, one object each, numbered by slice: only when nothing
    else numbers its parts (no rotation, a single bucket per window, `{{part}}` in the key)."""
    if rotates or fmt == "bytes":
        return False
    if layout is None:
        return True
    single_bucket = all(isinstance(d, KafkaPartition) for d in layout.partition_by) and not layout.template_slots
    return single_bucket and "part" in layout.key_template.slots


def slices_of(window: OffsetWindow, read_start: int, count: int) -> list[Slice]:
    """[read_start, window.end) in `count` contiguous slices of (nearly) equal size, in offset order."""
    size = window.end - read_start
    count = max(1, min(count, size))
    bounds = [read_start + size * i // count for i in range(count + 1)]
    return [Slice(window, bounds[i], bounds[i + 1], i, count) for i in range(count)]


# Stored envelope columns a write task makes itself instead of receiving them (archive/write.py::_derived): each
# one's source in the task's batches, or TOPIC for the job's topic.
TOPIC = ""
DERIVED = {"topic": TOPIC, "partition": "_partition", "offset": "_offset"}


@dataclass(frozen=True)
class FormatPlan:
    """How a task encodes objects of the archive's format (archive/encoders.py)."""

    name: str  # parquet | avro | jsonl | json | csv | text | bytes
    codec: str
    suffix: str  # object name suffix (extension + codec suffix)
    spark_schema: str = ""  # JSON of the stored columns' Spark schema (Parquet metadata, the Avro schema)
    avro_schema: str = ""  # the Avro writer schema (JSON), for avro
    dictionary: tuple[str, ...] = ()  # Parquet columns dictionary-encoded (not key/value: all distinct)
    row_group_bytes: int = 32 << 20  # Parquet: Arrow bytes buffered per row group


@dataclass(frozen=True)
class WriteJob:
    """Everything a write task needs: sent with the task (pickled), so it holds no client and no session."""

    topic: str
    bucket: str
    prefix: str
    fmt: FormatPlan
    conn: S3Connection
    slices: tuple[Slice, ...]
    layout: OutputLayout | None = None
    bucketed: bool = False  # the layout splits a window by record content (input sorted by bucket, offset)
    max_records: int | None = None
    max_bytes: int | None = None
    decoding: bool = False  # a `_good` column says which records decode
    dead_letter: bool = False  # undecodable records go to dead-letter objects (else: the slice writes nothing)
    payload: tuple[str, ...] = ()  # the stored columns of each Arrow batch
    payload_columns: tuple[str, ...] = ()  # the sent ones' names in the batches when not theirs (archive/write.py)
    derived: tuple[tuple[str, str], ...] = ()  # stored columns not sent, with their source (DERIVED)
    ts_stored: bool = False  # `_ts` is not sent: the task computes it from the stored `timestamp`
    dead_letter_schema: str = ""  # Spark schema JSON of the raw envelope (`_raw`), for the dead-letter Parquet
    multipart_threshold: int = MULTIPART_THRESHOLD
    part_size: int = PART_SIZE
    fault: str | None = None  # tests: "object:<n>" raises after n objects, "mid_upload" kills the worker
    _index: dict[int, tuple[list[int], list[Slice]]] = field(default_factory=dict, compare=False, repr=False)

    def slice_at(self, partition: int, offset: int) -> Slice:
        if not self._index:
            by: dict[int, list[Slice]] = {}
            for s in self.slices:
                by.setdefault(s.window.partition, []).append(s)
            for p, ss in by.items():
                ss.sort(key=lambda s: s.start)
                self._index[p] = ([s.start for s in ss], ss)
        import bisect

        starts, ss = self._index[partition]
        i = bisect.bisect_right(starts, offset) - 1
        if i < 0 or not ss[i].start <= offset < ss[i].end:
            raise ValueError(f"offset {offset} of partition {partition} is in no slice of this job")
        return ss[i]


@dataclass
class WindowStats:
    """A window's statistics, merged from its slices."""

    records: int = 0
    bytes_read: int = 0
    first_offset: int | None = None
    last_offset: int | None = None
    min_timestamp_ms: int | None = None
    max_timestamp_ms: int | None = None
    undecodable: int = 0
    first_undecodable_offset: int | None = None
    absent: list[list[int]] = field(default_factory=list)
    absent_truncated: bool = False
    committed_elsewhere: bool = False  # a task found the window committed by another attempt


def _min(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def merge_slices(slices: list[Slice], rows: list[dict[str, Any]]) -> WindowStats:
    """One window's statistics from its slices' rows (`kind` == "slice"); a slice without a row had no record."""
    out = WindowStats()
    by_index = {r["slice"]: r for r in rows}
    ranges: list[list[int]] = []
    for s in sorted(slices, key=lambda s: s.start):
        r = by_index.get(s.index)
        if r is None:
            ranges.append([s.start, s.end])
            continue
        out.records += r["records"]
        out.bytes_read += r["bytes"]
        out.first_offset = _min(out.first_offset, r["first"])
        out.last_offset = _max(out.last_offset, r["last"])
        out.min_timestamp_ms = _min(out.min_timestamp_ms, r["min_ts"])
        out.max_timestamp_ms = _max(out.max_timestamp_ms, r["max_ts"])
        out.undecodable += r["bad"] or 0
        out.first_undecodable_offset = _min(out.first_undecodable_offset, r["first_bad"])
        out.absent_truncated |= bool(r["absent_truncated"])
        out.committed_elsewhere |= bool(r["committed"])
        ranges += json.loads(r["absent"] or "[]")
    merged: list[list[int]] = []
    for a, b in ranges:  # in offset order: slices are, and each slice's ranges are
        if merged and merged[-1][1] == a:
            merged[-1][1] = b
        else:
            merged.append([a, b])
    out.absent = merged[:MAX_GAP_RANGES]
    out.absent_truncated |= len(merged) > MAX_GAP_RANGES
    return out


class UndecodableValue(UserError, ValueError):
    """A record value does not decode as configured (value_decoding.on_error: fail)."""


@dataclass(frozen=True)
class Output:
    """How a window is written: everything the write job needs from the archive config (config/archive.py)."""

    fmt: FormatSpec
    codec: str
    columns: tuple[str, ...]  # envelope columns kept, envelope order
    csv_fields: tuple[str, ...] = ()
    decoding: str = "bytes"  # bytes | utf8 | json
    json_schema: str | None = None  # json: Spark DDL of the fields; None: inferred per window
    column_prefix: str = ""
    on_error: str = "fail"  # fail | dead_letter
    max_records: int | None = None
    max_bytes: int | None = None
    layout: OutputLayout | None = None  # None: the default layout, no bucket column
    suffix: str | None = None  # how object names end (ArchiveConfig.object_suffix); None: the format's

    @classmethod
    def of(cls, cfg: ArchiveConfig) -> Output:
        d = cfg.value_decoding
        return cls(FORMATS[cfg.format], cfg.codec, tuple(cfg.envelope.columns()), tuple(cfg.csv_fields), d.type,
                   d.json_schema, d.column_prefix, d.on_error, cfg.max_records_per_object, cfg.max_bytes_per_object,
                   cfg.layout, cfg.object_suffix)

    @property
    def rotates(self) -> bool:
        return bool(self.max_records or self.max_bytes)

    @property
    def bucketed(self) -> bool:
        """The layout splits a window by record content (more than its Kafka partition)."""
        return self.layout is not None and (
            any(not isinstance(d, KafkaPartition) for d in self.layout.partition_by)
            or bool(self.layout.template_slots))


@dataclass(frozen=True)
class JobOutput:
    rows: list[dict[str, Any]]
    schema_json: str  # the stored columns' Spark schema (the manifest's `schema`)
