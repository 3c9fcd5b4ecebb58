"""Restore archived windows into a Kafka topic, exactly once. No Dagster here: the asset only maps config and
partition keys to `restore_windows`.

Pure parts: partition mapping (Kafka's murmur2), filters, the restore ledger's range sets and their encoding.
I/O parts: reading a window's manifest and objects from S3 (boto3 + pyarrow, one object at a time, streamed in
batches built column-wise; objects whose offsets interleave — dead letters, layouts that split windows — merged
by offset), and producing with a transactional confluent-kafka producer.

Exactly once. Every transaction carries, besides its records, the restore *ledger*: per source partition the
offset ranges already restored, written with `send_offsets_to_transaction` as committed-offset metadata of a
consumer group named after the restore (`ledger_id`). Kafka commits the records and the ledger atomically, so
after a crash the ledger says exactly which source records are in the target. A re-run calls
`init_transactions` first (which aborts the dead run's open transaction and fences it), then reads the ledger
and skips what it lists. Why a ledger and not "the last restored record per target partition" (provenance
headers): with murmur2 or many-to-one maps a target partition takes records from several source partitions,
and restoring windows in several runs (or out of order) makes the last record say nothing about the others.
"""

from __future__ import annotations

import base64
import bisect
import bz2
import gzip
import heapq
import io
import itertools
import json
import operator
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from backports import zstd
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import ConfigResource

from s3_archive import layout
from s3_archive.cold import ColdOptions, head_storage_classes, prepare_cold
from s3_archive.foreign import COLD_CLASSES
from s3_archive.commit import ArchiveIntegrityError, read_manifest
from s3_archive.formats import ENVELOPE_COLUMNS, FORMATS
from s3_archive.resources import KafkaResource, UnknownTopic
from s3_archive.windows import OffsetWindow

Fault = Callable[[str], None]

PROVENANCE_TOPIC = "s3archive.source.topic"
PROVENANCE_PARTITION = "s3archive.source.partition"
PROVENANCE_OFFSET = "s3archive.source.offset"

MAPPINGS = ("same", "murmur2", "map")
# Kafka's default offset.metadata.max.bytes is 4096; one ledger entry must fit.
MAX_LEDGER_ENTRY_BYTES = 4000
PARQUET_BATCH = 2048
# Formats whose objects keep key, value, headers and coordinates byte for byte (FormatSpec.lossless).
RESTORABLE_FORMATS = tuple(name for name, spec in FORMATS.items() if spec.lossless)
# Records per transaction unless configured: each commit costs ~0.1-0.15 s (send_offsets_to_transaction +
# commit_transaction, draining the producer); a crash redoes at most this many records.
DEFAULT_TRANSACTION_RECORDS = 50_000
# Commit at least this often (besides every `transaction_records`); the producer's transaction.timeout.ms is 5 min.
TRANSACTION_SECONDS = 20.0
_OFFSET = operator.itemgetter(1)  # a record's offset
_MASK32 = 0xFFFFFFFF
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def no_fault(step: str) -> None:
    return None


class InvalidRestore(ValueError):
    """The restore request is wrong (bad topic, mapping, filter); the message names the bad value."""


class WindowNotArchived(RuntimeError):
    """A requested window has no manifest in S3."""


class RestoreFailed(RuntimeError):
    """Kafka refused the restore mid-way (delivery error, fenced, transaction aborted)."""


# --------------------------------------------------------------------------------------------------------------
# Partition mapping (pure)


def murmur2(data: bytes) -> int:
    """Kafka's `Utils.murmur2` (32-bit MurmurHash2, seed 0x9747b28c), as a signed 32-bit int like Java's."""
    m = 0x5BD1E995
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK32
    whole = length & ~3
    for i in range(0, whole, 4):
        k = (data[i] | data[i + 1] << 8 | data[i + 2] << 16 | data[i + 3] << 24) * m & _MASK32
        k ^= k >> 24
        k = k * m & _MASK32
        h = (h * m & _MASK32) ^ k
    rest = length & 3
    # Java's switch falls through: case 3 also does 2 and 1.
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = h * m & _MASK32
    h ^= h >> 13
    h = h * m & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Kafka's `Utils.toPositive`: clear the sign bit (not abs: abs(MIN_VALUE) overflows in Java)."""
    return n & 0x7FFFFFFF


def murmur2_partition(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner (and librdkafka's `murmur2_random`) picks for a non-null key."""
    return to_positive(murmur2(key)) % num_partitions


@dataclass(frozen=True)
class PartitionMapping:
    """Where a source record goes: `same` partition, `murmur2` of its key, or an explicit `map` {src: dst}.

    murmur2 sends null keys to `source partition % target partitions`, not to a random partition as Kafka's
    producers do: the restore must put each record in the same place on every run for exactly-once to hold.
    """

    mode: str = "same"
    explicit: tuple[tuple[int, int], ...] = ()

    @classmethod
    def parse(cls, mode: str, mapping: dict[Any, Any] | None = None) -> PartitionMapping:
        if mode not in MAPPINGS:
            raise InvalidRestore(f"partition_mapping must be one of {', '.join(MAPPINGS)}; got {mode!r}")
        if mode != "map":
            if mapping:
                raise InvalidRestore(f"partition_map is only used with partition_mapping: map, got partition_mapping "
                                     f"{mode!r} and partition_map {mapping!r}")
            return cls(mode)
        if not mapping:
            raise InvalidRestore("partition_mapping: map needs partition_map {source partition: target partition}, "
                                 "e.g. {'0': 2, '1': 2}; got an empty map")
        pairs = []
        for src, dst in mapping.items():
            try:
                s, d = int(src), int(dst)
            except (TypeError, ValueError):
                raise InvalidRestore(f"partition_map entries must be partition numbers, got {src!r}: {dst!r}") from None
            if s < 0 or d < 0:
                raise InvalidRestore(f"partition_map entries must be >= 0, got {src!r}: {dst!r}")
            pairs.append((s, d))
        if len({s for s, _ in pairs}) != len(pairs):
            raise InvalidRestore(f"partition_map names a source partition twice: {mapping!r}")
        return cls("map", tuple(sorted(pairs)))

    def check(self, source_partitions: Iterable[int], num_target: int, target_topic: str) -> None:
        """Fail before producing anything if some source partition has nowhere to go."""
        explicit = dict(self.explicit)
        for sp in sorted(set(source_partitions)):
            if self.mode == "same" and sp >= num_target:
                raise InvalidRestore(
                    f"source partition {sp} has no same-numbered partition in target topic {target_topic!r} "
                    f"({num_target} partitions); use partition_mapping: murmur2 or map, or add partitions")
            if self.mode == "map":
                if sp not in explicit:
                    raise InvalidRestore(f"partition_map has no entry for source partition {sp}; "
                                         f"it maps only {sorted(explicit)}")
                if explicit[sp] >= num_target:
                    raise InvalidRestore(f"partition_map sends source partition {sp} to partition {explicit[sp]}, "
                                         f"but target topic {target_topic!r} has {num_target} partitions "
                                         f"(0..{num_target - 1})")

    def target(self, source_partition: int, key: bytes | None, num_target: int) -> int:
        if self.mode == "same":
            return source_partition
        if self.mode == "murmur2":
            return source_partition % num_target if key is None else murmur2_partition(key, num_target)
        return dict(self.explicit)[source_partition]

    def compiled(self, num_target: int) -> Callable[[int, bytes | None], int]:
        """`target` specialised once per run (it is called for every record)."""
        if self.mode == "same":
            return lambda sp, key: sp
        if self.mode == "murmur2":
            return lambda sp, key: sp % num_target if key is None else to_positive(murmur2(key)) % num_target
        explicit = dict(self.explicit)
        return lambda sp, key: explicit[sp]


# --------------------------------------------------------------------------------------------------------------
# Filters (pure)


@dataclass(frozen=True)
class Filters:
    """Half-open ranges: timestamps in [from_timestamp_ms, to_timestamp_ms), offsets in [from_offset, to_offset).
    None means unbounded. The offset range applies to every source partition."""

    from_timestamp_ms: int | None = None
    to_timestamp_ms: int | None = None
    from_offset: int | None = None
    to_offset: int | None = None

    def __post_init__(self) -> None:
        for name in ("from_offset", "to_offset"):
            v = getattr(self, name)
            if v is not None and v < 0:
                raise InvalidRestore(f"{name} must be >= 0, got {v}")
        if self.from_timestamp_ms is not None and self.to_timestamp_ms is not None \
                and self.from_timestamp_ms >= self.to_timestamp_ms:
            raise InvalidRestore(f"from_timestamp_ms ({self.from_timestamp_ms}) must be < to_timestamp_ms "
                                 f"({self.to_timestamp_ms}); the range is [from, to)")
        if self.from_offset is not None and self.to_offset is not None and self.from_offset >= self.to_offset:
            raise InvalidRestore(f"from_offset ({self.from_offset}) must be < to_offset ({self.to_offset}); "
                                 "the range is [from, to)")

    @property
    def has_time(self) -> bool:
        return self.from_timestamp_ms is not None or self.to_timestamp_ms is not None

    def offset_scope(self, window: OffsetWindow) -> tuple[int, int] | None:
        """The window's offsets inside the offset filter, as [a, b); None when there are none."""
        a = max(window.start, self.from_offset if self.from_offset is not None else 0)
        b = min(window.end, self.to_offset if self.to_offset is not None else window.end)
        return (a, b) if a < b else None

    def time_ok(self, ts_ms: int) -> bool:
        return ((self.from_timestamp_ms is None or ts_ms >= self.from_timestamp_ms)
                and (self.to_timestamp_ms is None or ts_ms < self.to_timestamp_ms))

    def time_may_match(self, min_ts: int | None, max_ts: int | None) -> bool:
        """False when a window's [min, max] timestamps (from its manifest) miss the time range: skip its objects."""
        if min_ts is None or max_ts is None:
            return True
        return ((self.from_timestamp_ms is None or max_ts >= self.from_timestamp_ms)
                and (self.to_timestamp_ms is None or min_ts < self.to_timestamp_ms))


# --------------------------------------------------------------------------------------------------------------
# The ledger: which source offsets are already in the target (pure)


class RangeSet:
    """Disjoint, sorted, merged half-open integer ranges [a, b)."""

    def __init__(self, ranges: Iterable[Iterable[int]] = ()) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        for a, b in ranges:
            self.add(a, b)

    def add(self, a: int, b: int) -> None:
        if a >= b:
            return
        # Every range touching or overlapping [a, b) is merged into it.
        lo = bisect.bisect_left(self._ends, a)
        hi = bisect.bisect_right(self._starts, b)
        if lo < hi:
            a = min(a, self._starts[lo])
            b = max(b, self._ends[hi - 1])
        self._starts[lo:hi] = [a]
        self._ends[lo:hi] = [b]

    def __contains__(self, x: int) -> bool:
        i = bisect.bisect_right(self._starts, x) - 1
        return i >= 0 and x < self._ends[i]

    def ranges(self) -> list[list[int]]:
        return [[a, b] for a, b in zip(self._starts, self._ends)]

    def size(self) -> int:
        return sum(b - a for a, b in zip(self._starts, self._ends))

    def copy(self) -> RangeSet:
        return RangeSet(self.ranges())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RangeSet) and self.ranges() == other.ranges()

    def __repr__(self) -> str:
        return f"RangeSet({self.ranges()})"


def ledger_id(source_topic: str, target_topic: str, filters: Filters) -> str:
    """The consumer group holding the ledger, also the producer's transactional.id (so two runs of one restore
    fence each other). A time filter selects records inside an offset range, so a time-filtered restore has a
    ledger of its own; an offset filter only narrows which ranges are recorded, so it shares the ledger."""
    base = f"s3-archive-restore.{source_topic}.{target_topic}"
    if not filters.has_time:
        return base
    lo = "" if filters.from_timestamp_ms is None else filters.from_timestamp_ms
    hi = "" if filters.to_timestamp_ms is None else filters.to_timestamp_ms
    return f"{base}.t{lo}-{hi}"


def encode_ledger(source_topic: str, ledger: dict[int, RangeSet], num_target: int,
                  buckets: Iterable[int]) -> dict[int, tuple[int, str]]:
    """Ledger entries to commit: bucket (a target partition number) -> (offset, metadata JSON).

    Source partition sp lives in bucket sp % num_target; the committed offset is the number of source offsets the
    bucket covers (informative only; it must be >= 0 for the client to send it)."""
    out: dict[int, tuple[int, str]] = {}
    for b in sorted(set(buckets)):
        parts = {sp: rs for sp, rs in sorted(ledger.items()) if sp % num_target == b}
        meta = json.dumps({"v": 1, "source": source_topic,
                           "ranges": {str(sp): rs.ranges() for sp, rs in parts.items()}}, separators=(",", ":"))
        if len(meta.encode()) > MAX_LEDGER_ENTRY_BYTES:
            raise RestoreFailed(
                f"the restore ledger for source partitions {sorted(parts)} no longer fits in one committed-offset "
                f"entry ({len(meta)} bytes > {MAX_LEDGER_ENTRY_BYTES}): too many separate restored ranges. "
                "Restore the gaps between already restored windows to merge them")
        out[b] = (sum(rs.size() for rs in parts.values()), meta)
    return out


def decode_ledger(source_topic: str, metadatas: Iterable[str | None]) -> dict[int, RangeSet]:
    """Union of all entries (old entries from before the target gained partitions stay valid: ranges only grow)."""
    ledger: dict[int, RangeSet] = {}
    for meta in metadatas:
        if not meta:
            continue
        try:
            doc = json.loads(meta)
            ok = doc.get("v") == 1 and doc.get("source") == source_topic
        except (ValueError, AttributeError):
            ok = False
        if not ok:
            raise RestoreFailed(f"committed-offset metadata of the restore ledger is not an s3-archive ledger for "
                                f"source {source_topic!r}: {meta[:200]!r}; was the consumer group used by something "
                                "else?")
        for sp, ranges in doc["ranges"].items():
            rs = ledger.setdefault(int(sp), RangeSet())
            for a, b in ranges:
                rs.add(a, b)
    return ledger


# --------------------------------------------------------------------------------------------------------------
# Reading archived windows (S3)


class ArchivedRecord(NamedTuple):
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp_ms: int
    size: int | None = None  # key + value + header bytes when the reader computed them (else: _record_bytes)


def read_manifests(s3: Any, bucket: str, prefix: str, topic: str,
                   windows: list[OffsetWindow]) -> dict[OffsetWindow, dict]:
    """Every window's manifest, or one error naming every window that is not archived yet."""
    out, missing = {}, []
    for w in windows:
        key = layout.manifest_key(prefix, topic, w)
        m = read_manifest(s3, bucket, key)
        if m is None:
            missing.append(f"window {w.key} of topic {topic!r} is not archived yet (no manifest at "
                           f"s3://{bucket}/{key})")
            continue
        if m.get("topic") != topic or m.get("window_key") != w.key:
            raise ArchiveIntegrityError(f"manifest s3://{bucket}/{key} is for topic {m.get('topic')!r} window "
                                        f"{m.get('window_key')!r}, not {topic!r} {w.key}")
        out[w] = m
    if missing:
        raise WindowNotArchived("; ".join(missing) + ". Materialize the archive asset for these windows first")
    return out


def _b64(v: str | None) -> bytes | None:
    return None if v is None else base64.b64decode(v)


def _iso_ms(text: str) -> int:
    # Exact integer arithmetic: float seconds would round some milliseconds.
    td = datetime.fromisoformat(text) - _EPOCH
    return (td.days * 86_400 + td.seconds) * 1000 + td.microseconds // 1000


def _ts_divisor(t: pa.DataType) -> int:
    return {"s": 1, "ms": 1, "us": 1000, "ns": 1_000_000}[t.unit] if pa.types.is_timestamp(t) else 1


def _ms(col: pa.Array) -> list[int]:
    """A timestamp (or integer epoch-ms) column as epoch milliseconds, floored like Python's //."""
    t = col.type
    div = _ts_divisor(t)
    ints = col.cast(pa.int64())
    if pa.types.is_timestamp(t) and t.unit == "s":
        return pc.multiply(ints, 1000).to_pylist()
    if div == 1:
        return ints.to_pylist()
    if ints.null_count == 0 and len(ints) and pc.min(ints).as_py() >= 0:
        return pc.divide(ints, div).to_pylist()  # truncation = floor for values >= 0
    return [None if v is None else v // div for v in ints.to_pylist()]


def _lengths(col: pa.Array) -> pa.Array:
    """Byte length of each binary/string value, 0 for null, as int64."""
    return pc.fill_null(pc.binary_length(col), 0).cast(pa.int64())


def _headers_and_sizes(batch: pa.RecordBatch) -> tuple[list[list[tuple[str, bytes | None]]], list[int]]:
    """Per row: the headers as (name, value) pairs, and key + value + header bytes. Column-wise: one
    to_pylist per column of the batch, not per row."""
    col = batch.column("headers")
    n = len(col)
    offsets = col.offsets  # absolute positions in col.values (the list array's slice offset included)
    lo, hi = offsets[0].as_py(), offsets[-1].as_py()
    names, values = col.values.flatten()  # the struct's fields, its own offset applied
    pairs = list(zip(names.slice(lo, hi - lo).to_pylist(), values.slice(lo, hi - lo).to_pylist()))
    rel = [o - lo for o in offsets.to_pylist()]
    valid = col.is_valid().to_pylist() if col.null_count else None
    if valid is None:
        headers = [pairs[rel[i]:rel[i + 1]] for i in range(n)]
    else:
        headers = [pairs[rel[i]:rel[i + 1]] if valid[i] else [] for i in range(n)]
    # Header bytes per row: differences of the running sum of name + value lengths at the list offsets.
    each = pc.add(_lengths(names), _lengths(values))
    running = pa.concat_arrays([pa.array([0], pa.int64()), pc.cumulative_sum(each)]) if len(each) else \
        pa.array([0], pa.int64())
    at = pc.take(running, offsets)
    per_row = pc.subtract(at.slice(1), at.slice(0, n))
    if valid is not None:
        per_row = pc.if_else(col.is_valid(), per_row, 0)
    total = pc.add(pc.add(_lengths(batch.column("key")), _lengths(batch.column("value"))), per_row)
    return headers, total.to_pylist()


def parquet_batches(f: Any) -> Iterator[list[tuple]]:
    """Records of one Parquet object, in file order, as lists of plain tuples in ArchivedRecord's field order
    (one list per Parquet batch; built column-wise). Columns other than the envelope's (decoded value fields)
    are not read."""
    pf = pq.ParquetFile(f)
    for batch in pf.iter_batches(batch_size=PARQUET_BATCH,
                                 columns=["key", "value", "headers", "partition", "offset", "timestamp"]):
        headers, sizes = _headers_and_sizes(batch)
        yield list(zip(batch.column("partition").to_pylist(), batch.column("offset").to_pylist(),
                       batch.column("key").to_pylist(), batch.column("value").to_pylist(), headers,
                       _ms(batch.column("timestamp")), sizes))


def parquet_records(f: Any) -> Iterator[ArchivedRecord]:
    """Records of one Parquet object, in file order."""
    for rows in parquet_batches(f):
        yield from map(ArchivedRecord._make, rows)


def _batched(records: Iterable[tuple], n: int = PARQUET_BATCH) -> Iterator[list[tuple]]:
    it = iter(records)
    while batch := list(itertools.islice(it, n)):
        yield batch


def avro_records(f: Any) -> Iterator[ArchivedRecord]:
    """Records of one Avro object container file (Spark's writer: timestamp is timestamp-micros)."""
    import fastavro

    for r in fastavro.reader(f):
        ts = r["timestamp"]
        ms = (ts - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1) if isinstance(ts, datetime) \
            else int(ts) // 1000
        yield ArchivedRecord(r["partition"], r["offset"], r["key"], r["value"],
                             [(h["key"], h["value"]) for h in r["headers"] or ()], ms)


def _lines(stream: Any, chunk: int = 1 << 20) -> Iterator[bytes]:
    rest = b""
    while True:
        data = stream.read(chunk)
        if not data:
            break
        lines = (rest + data).split(b"\n")
        rest = lines.pop()
        yield from lines
    if rest:
        yield rest


def _json_record(r: dict) -> ArchivedRecord:
    return ArchivedRecord(r["partition"], r["offset"], _b64(r.get("key")), _b64(r.get("value")),
                          [(h["key"], _b64(h.get("value"))) for h in r.get("headers") or ()], _iso_ms(r["timestamp"]))


def jsonl_records(stream: Any) -> Iterator[ArchivedRecord]:
    """Records of one (decompressed) JSON-lines stream: binary fields are base64, timestamps ISO-8601. Fields
    other than the envelope's (decoded value fields) are ignored."""
    for line in _lines(stream):
        if not line.strip():
            continue
        yield _json_record(json.loads(line))


def json_array_records(stream: Any, what: str) -> Iterator[ArchivedRecord]:
    """Records of one (decompressed) `json` object: a JSON array of jsonl's records, as stage.py writes it, one
    record per line: `[rec`, `,rec`, ..., `,rec]` (also `[rec]` and `[]`)."""
    state = "start"  # start -> open (after '[') -> closed (after ']')
    first = True  # no record read yet: the next one has no leading ','
    for raw in _lines(stream):
        line = raw.strip()
        if not line:
            continue
        if state == "closed":
            raise ArchiveIntegrityError(f"{what}: text after the closing ']' of the JSON array")
        if state == "start":
            if line[:1] != b"[":
                raise ArchiveIntegrityError(f"{what}: a json object must be a JSON array; it starts with "
                                            f"{raw[:20]!r}")
            line, state = line[1:].lstrip(), "open"
        elif line[:1] == b"," and not first:
            line = line[1:].lstrip()
        elif line != b"]" and not first:
            raise ArchiveIntegrityError(f"{what}: not a JSON array of records written one per line (a line "
                                        f"starts with {raw[:20]!r})")
        if line.endswith(b"]"):  # a record is a JSON object: it ends with '}', so ']' closes the array
            line, state = line[:-1].rstrip(), "closed"
        if line:
            yield _json_record(json.loads(line))
            first = False
    if state != "closed":
        raise ArchiveIntegrityError(f"{what}: the JSON array is not closed (a truncated object?)")


_DECOMPRESS_BY_CODEC = {"gzip": ".gz", "bzip2": ".bz2", "zstd": ".zst"}


def _text_stream(f: Any, key: str, codec: str | None) -> Any:
    """The decompressed stream of a text object: by the manifest's codec, else by the key's suffix (objects of
    other writers)."""
    suffix = _DECOMPRESS_BY_CODEC.get(codec or "") or next(
        (s for s in _DECOMPRESS_BY_CODEC.values() if key.endswith(s)), "")
    if suffix == ".gz":
        return gzip.GzipFile(fileobj=f)
    if suffix == ".bz2":
        return bz2.BZ2File(f)
    if suffix == ".zst":
        return zstd.ZstdFile(f)  # the library the commit compresses with (commit.publish_compressed)
    return io.BufferedReader(f)


def spool(s3: Any, bucket: str, obj: dict) -> Any:
    """The object downloaded to a temporary file (not memory), its size checked against the manifest's; the
    caller closes it."""
    key = obj["key"]
    f = tempfile.TemporaryFile(prefix="s3-archive-restore-")
    try:
        s3.download_fileobj(bucket, key, f)
        # Not f.tell(): a multipart download (objects over 8 MB) writes its ranges out of order, so the position
        # after the last write need not be the end.
        size = f.seek(0, 2)
        if size != obj["size"]:
            raise ArchiveIntegrityError(f"s3://{bucket}/{key} is {size} bytes, its manifest says {obj['size']}; "
                                        "the archive was changed after it was committed")
        f.seek(0)
        return f
    except BaseException:
        f.close()
        raise


Opener = Callable[[dict], Any]  # manifest object -> spooled file (see spool, Prefetch)


class Prefetch:
    """Downloads the next object of a run while the current one is read (one object ahead, in a thread): the
    restore reads the objects in a known order (windows in order, each window's objects, then its dead letters),
    and S3 then no longer waits for Kafka or the other way round. An object asked for out of that order is
    downloaded on the spot."""

    def __init__(self, s3: Any, bucket: str, objects: list[dict]) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.s3, self.bucket, self.order, self.pos = s3, bucket, objects, 0
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="s3-archive-restore-prefetch")
        self.pending: tuple[str, Any] | None = None
        self._next()

    def _next(self) -> None:
        self.pending = None
        if self.pos < len(self.order):
            obj = self.order[self.pos]
            self.pos += 1
            self.pending = (obj["key"], self.pool.submit(spool, self.s3, self.bucket, obj))

    def __call__(self, obj: dict) -> Any:
        if self.pending is not None and self.pending[0] == obj["key"]:
            fut = self.pending[1]
            self._next()
            return fut.result()
        return spool(self.s3, self.bucket, obj)

    def close(self) -> None:
        if self.pending is not None:
            fut, self.pending = self.pending[1], None
            fut.cancel()
            if not fut.cancelled():
                try:
                    fut.result().close()
                except Exception:  # noqa: BLE001 - an object nobody reads any more
                    pass
        self.pool.shutdown(wait=True)


def object_batches(s3: Any, bucket: str, obj: dict, fmt: str, codec: str | None = None,
                   opener: Opener | None = None) -> Iterator[list[tuple]]:
    """One archived object's records in file order, in lists (ArchivedRecords, or plain tuples in its field
    order). The object is spooled to a temporary file (not memory; `opener`, default `spool`), then read a batch
    at a time."""
    key = obj["key"]
    if fmt not in FORMATS:
        raise ArchiveIntegrityError(f"s3://{bucket}/{key}: unknown archive format {fmt!r}")
    if fmt not in RESTORABLE_FORMATS:
        raise InvalidRestore(f"s3://{bucket}/{key}: format {fmt!r} does not keep key, value and headers byte for "
                             f"byte, so it cannot be restored; restorable formats: {', '.join(RESTORABLE_FORMATS)}")
    with (opener(obj) if opener is not None else spool(s3, bucket, obj)) as f:
        if fmt == "parquet":
            yield from parquet_batches(f)
        elif fmt == "avro":
            yield from _batched(avro_records(f))
        else:
            with _text_stream(f, key, codec) as stream:
                if fmt == "jsonl":
                    yield from _batched(jsonl_records(stream))
                else:
                    yield from _batched(json_array_records(stream, f"s3://{bucket}/{key}"))


def object_records(s3: Any, bucket: str, obj: dict, fmt: str, codec: str | None = None) -> Iterator[ArchivedRecord]:
    """One archived object's records, in file order."""
    for batch in object_batches(s3, bucket, obj, fmt, codec):
        yield from map(ArchivedRecord._make, batch)


def _batches(s3: Any, bucket: str, objects: list[dict], fmt: str, codec: str | None,
             opener: Opener | None) -> Iterator[list[tuple]]:
    for obj in objects:
        yield from object_batches(s3, bucket, obj, fmt, codec, opener)


def window_objects(manifest: dict) -> list[dict]:
    """A window's objects in the order `window_records` opens them: its objects, then its dead letters."""
    return [*manifest["objects"], *manifest.get("dead_letter_objects", ())]


def window_records(s3: Any, bucket: str, window: OffsetWindow, manifest: dict,
                   interleaved: bool = False, opener: Opener | None = None) -> Iterator[tuple]:
    """A committed window's records in offset order (tuples in ArchivedRecord's field order); checks they
    belong to the window.

    A window's objects follow each other in offset order (rotation parts), unless `interleaved`: a layout whose
    `partition_by` or record-level template values split the window into buckets, each bucket's objects in
    offset order. Dead letters (records whose value did not decode, kept apart as raw-envelope Parquet) are
    such a bucket too. Everything that does not simply follow is merged by offset (a k-way merge: every merged
    object is open at once, one batch of each in memory)."""
    fmt, codec = manifest["format"], manifest.get("compression")
    main = manifest["objects"]
    streams = ([_batches(s3, bucket, [o], fmt, codec, opener) for o in main] if interleaved
               else [_batches(s3, bucket, main, fmt, codec, opener)])
    streams += [_batches(s3, bucket, [o], "parquet", None, opener)
                for o in manifest.get("dead_letter_objects", ())]
    if len(streams) == 1:
        batches: Iterator[list[tuple]] = streams[0]
    else:
        batches = _batched(heapq.merge(*[itertools.chain.from_iterable(b) for b in streams], key=_OFFSET))
    last, p, start, end = -1, window.partition, window.start, window.end
    for batch in batches:
        for r in batch:
            if r[0] != p or r[1] <= last or not start <= r[1] < end:
                hint = ("; or its objects interleave (a layout whose partition_by splits windows), which a "
                        "restore called without interleaved objects cannot tell") \
                    if not interleaved and len(main) > 1 else ""
                raise ArchiveIntegrityError(
                    f"window {window.key} (s3://{bucket}/, objects {[o['key'] for o in main][:3]}…): record at "
                    f"partition {r[0]} offset {r[1]} does not follow offset {last} inside the window; the archive "
                    f"is corrupt{hint}")
            last = r[1]
        yield from batch


_ENVELOPE = [c for c, _ in ENVELOPE_COLUMNS]


def unrestorable_reason(manifest: dict) -> str | None:
    """Why a committed window cannot be restored byte for byte; None when it can. Manifests from before
    `restorable` existed are judged by their format (they always kept the whole envelope as bytes)."""
    fmt = manifest.get("format")
    reasons = []
    if fmt not in RESTORABLE_FORMATS:
        reasons.append(f"format {fmt!r} does not keep key, value and headers byte for byte (restorable formats: "
                       f"{', '.join(RESTORABLE_FORMATS)})")
    env = manifest.get("envelope")
    missing = [c for c in _ENVELOPE if c not in env] if isinstance(env, list) else []
    if missing and fmt in RESTORABLE_FORMATS:
        reasons.append(f"its envelope lacks {', '.join(missing)} (a restore needs every part: key, value, headers, "
                       "metadata)")
    if manifest.get("value_decoding") == "utf8":
        reasons.append("its values were stored as UTF-8 text (value_decoding utf8), not as their bytes")
    if not reasons and manifest.get("restorable") is False:
        reasons.append("its manifest says restorable: false")
    return "; ".join(reasons) or None


def check_restorable(topic: str, manifests: dict[OffsetWindow, dict]) -> None:
    """Refuse, before anything is produced, windows whose archive cannot be replayed (naming each, and why)."""
    bad = [(w, why) for w, m in sorted(manifests.items()) if (why := unrestorable_reason(m)) is not None]
    if bad:
        shown = "; ".join(f"window {w.key}: {why}" for w, why in bad[:5])
        more = f" (and {len(bad) - 5} more)" if len(bad) > 5 else ""
        raise InvalidRestore(f"{len(bad)} of {len(manifests)} selected windows of topic {topic!r} are not "
                             f"restorable: {shown}{more}. Nothing was produced")


# --------------------------------------------------------------------------------------------------------------
# The restore


@dataclass(frozen=True)
class RestoreRequest:
    source_topic: str
    target_topic: str
    mapping: PartitionMapping = PartitionMapping()
    filters: Filters = Filters()
    provenance_headers: bool = False
    dry_run: bool = False
    allow_source_topic: bool = False
    transaction_records: int = DEFAULT_TRANSACTION_RECORDS

    def __post_init__(self) -> None:
        if not self.target_topic:
            raise InvalidRestore("target_topic is required")
        if self.target_topic == self.source_topic and not self.allow_source_topic:
            raise InvalidRestore(
                f"target topic {self.target_topic!r} is the archived topic itself: restoring into it appends every "
                "record again. Set allow_source_topic: true to do that on purpose, or restore into another topic")
        if self.transaction_records < 1:
            raise InvalidRestore(f"transaction_records must be >= 1, got {self.transaction_records}")

    @property
    def ledger_id(self) -> str:
        return ledger_id(self.source_topic, self.target_topic, self.filters)


@dataclass
class PartitionCount:
    records: int = 0
    bytes: int = 0


@dataclass
class WindowReport:
    window: OffsetWindow
    dry_run: bool
    archived: int = 0  # records in the window's manifest
    restored: int = 0  # produced (dry run: would be produced)
    skipped: int = 0  # already in the target, per the ledger
    filtered: int = 0  # outside the time or offset filter
    bytes: int = 0  # key + value + header bytes of the restored records
    timestamps_replaced: int = 0  # timestamp <= 0: the producer stamps these with its own time
    transactions: int = 0
    seconds: float = 0.0
    partitions: dict[int, PartitionCount] = field(default_factory=dict)

    def metadata(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "records_archived": self.archived,
            "records_restored": self.restored,
            "records_skipped_already_present": self.skipped,
            "records_filtered": self.filtered,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
            "records_per_second": round(self.restored / self.seconds, 1) if self.seconds > 0 else 0.0,
            "transactions": self.transactions,
            "target_partitions": sorted(self.partitions),
            "per_target_partition": {str(p): {"records": c.records, "bytes": c.bytes}
                                     for p, c in sorted(self.partitions.items())},
            "timestamps_replaced": self.timestamps_replaced,
        }


def _record_bytes(key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]]) -> int:
    n = len(key or b"") + len(value or b"")
    for k, v in headers:
        n += len(k.encode()) + len(v or b"")
    return n


def _kafka_error(e: BaseException) -> Any:
    return e.args[0] if e.args and hasattr(e.args[0], "code") else None


_COORDINATOR_BUSY = frozenset({KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                               KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.UNSTABLE_OFFSET_COMMIT,
                               KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT})


_FENCED = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})


class _Ledger:
    """The ledger as committed-offset metadata of consumer group `request.ledger_id` on the target topic."""

    def __init__(self, kafka: KafkaResource, request: RestoreRequest, num_target: int) -> None:
        self.request, self.num_target, self.timeout = request, num_target, kafka.timeout_s
        # read_committed: the coordinator then never returns offsets of a transaction still pending.
        self.consumer = Consumer(kafka.client_config(**{"group.id": request.ledger_id, "enable.auto.commit": False,
                                                         "isolation.level": "read_committed"}))

    def read(self) -> dict[int, RangeSet]:
        tps = [TopicPartition(self.request.target_topic, b) for b in range(self.num_target)]
        deadline = time.monotonic() + max(60.0, self.timeout * 4)
        delay = 0.05
        while True:
            try:
                got = self.consumer.committed(tps, timeout=self.timeout)
                break
            except KafkaException as e:
                err = _kafka_error(e)
                # The group coordinator may be moving or loading (NOT_COORDINATOR is not flagged retriable), and a
                # transaction of an earlier run may still be completing: its offsets are "unstable" a moment.
                if err is not None and (err.retriable() or err.code() in _COORDINATOR_BUSY) \
                        and time.monotonic() < deadline:
                    time.sleep(delay)
                    delay = min(delay * 2, 1.0)
                    continue
                raise RestoreFailed(f"reading the restore ledger (consumer group {self.request.ledger_id!r}) "
                                    f"failed: {e}") from None
        for tp in got:
            if tp.error is not None:
                raise RestoreFailed(f"reading the restore ledger (consumer group {self.request.ledger_id!r}) "
                                    f"partition {tp.partition}: {tp.error}")
        return decode_ledger(self.request.source_topic, [tp.metadata for tp in got if tp.offset >= 0])

    def entries(self, ledger: dict[int, RangeSet], source_partition: int) -> list:
        enc = encode_ledger(self.request.source_topic, ledger, self.num_target,
                            [source_partition % self.num_target])
        return [TopicPartition(self.request.target_topic, b, off, meta) for b, (off, meta) in enc.items()]

    def group_metadata(self) -> Any:
        return self.consumer.consumer_group_metadata()

    def close(self) -> None:
        self.consumer.close()


class _Producer:
    """A transactional producer that turns Kafka's errors into clear ones.

    No per-record delivery callback: a record that fails delivery puts the transaction in the abortable state, so
    `commit_transaction` fails and nothing of the transaction becomes visible. (Python callbacks running while the
    client raises a fatal error, e.g. fenced, also confuse confluent-kafka.)"""

    def __init__(self, kafka: KafkaResource, request: RestoreRequest) -> None:
        self.request, self.timeout = request, max(30.0, kafka.timeout_s)
        self.producer = kafka.producer(**{
            "transactional.id": request.ledger_id,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 20,
            "message.max.bytes": 64 << 20,
            "queue.buffering.max.messages": 200_000,
            "delivery.report.only.error": True,
            "transaction.timeout.ms": 300_000,
        })
        self.in_txn = False
        try:
            # Aborts a transaction a crashed run left open, and fences that run's producer.
            self.producer.init_transactions(self.timeout)
        except KafkaException as e:
            raise RestoreFailed(f"init_transactions for transactional.id {request.ledger_id!r} failed: {e}. "
                                "Does the target cluster allow transactions (transaction.state.log.*)?") from None

    def failed(self, what: str, e: KafkaException) -> RestoreFailed:
        err = _kafka_error(e)
        code = err.code() if err is not None else None
        if code == KafkaError._FATAL:
            # Calls after a fatal error fail with a generic _FATAL; poll raises the fatal error itself (e.g. fenced).
            try:
                self.producer.poll(0)
            except KafkaException as fatal:
                e = fatal
                code = getattr(_kafka_error(fatal), "code", lambda: code)()
        if code in _FENCED:
            return RestoreFailed(f"the restore was fenced: another run of the same restore (transactional.id "
                                 f"{self.request.ledger_id!r}) started, and only one may run at a time; this run "
                                 f"stopped, and its open transaction is aborted. Kafka said: {e}")
        return RestoreFailed(f"{what} {self.request.target_topic!r} failed: {e}")

    def begin(self) -> None:
        if not self.in_txn:
            try:
                self.producer.begin_transaction()
            except KafkaException as e:
                raise self.failed("producing to", e) from None
            self.in_txn = True

    def produce(self, partition: int, key: bytes | None, value: bytes | None,
                headers: list[tuple[str, bytes | None]], timestamp_ms: int) -> None:
        """The slow path of `_Run.window`'s produce call (which calls the client directly): waits while the
        local queue is full."""
        self.begin()
        try:
            while True:
                try:
                    # timestamp 0 means "now" to librdkafka: timestamps <= 0 cannot be kept (the caller counts them)
                    self.producer.produce(self.request.target_topic, value=value, key=key, partition=partition,
                                          headers=headers or None, timestamp=max(timestamp_ms, 0))
                    return
                except BufferError:  # the local queue is full: let it drain
                    self.producer.poll(0.05)
        except KafkaException as e:
            raise self.failed("producing to", e) from None

    def commit(self, offsets: list, group_metadata: Any) -> None:
        try:
            self.producer.send_offsets_to_transaction(offsets, group_metadata, self.timeout)
            for attempt in range(3):
                try:
                    # Flushes first; fails if any record of the transaction was not delivered.
                    self.producer.commit_transaction(self.timeout)
                    break
                except KafkaException as e:
                    err = _kafka_error(e)
                    if err is not None and err.retriable() and attempt < 2:
                        continue
                    raise
        except KafkaException as e:
            err = _kafka_error(e)
            if err is not None and err.txn_requires_abort():
                self.abort()
            raise self.failed("committing a restore transaction to", e) from None
        self.in_txn = False

    def abort(self) -> None:
        if self.in_txn:
            try:
                self.producer.abort_transaction(self.timeout)
            except KafkaException as e:
                err = _kafka_error(e)
                if err is None or err.code() not in _FENCED:  # fenced: the new run aborts it for us
                    raise
            finally:
                self.in_txn = False


def target_partition_count(kafka: KafkaResource, topic: str) -> int:
    try:
        return len(kafka.partitions(topic))
    except UnknownTopic:
        raise InvalidRestore(f"target topic {topic!r} does not exist on {kafka.bootstrap_servers}; create it first "
                             "(a restore never creates topics: partitions, retention and compaction are yours to "
                             "choose)") from None


def target_warnings(kafka: KafkaResource, topic: str, manifests: Iterable[dict]) -> list[str]:
    """Target topic settings that would silently change restored records (best effort: needs DescribeConfigs)."""
    try:
        res = ConfigResource("TOPIC", topic)
        admin = kafka.admin()  # keep a reference: a collected client never resolves its futures
        configs = admin.describe_configs([res], request_timeout=kafka.timeout_s)[res].result(timeout=kafka.timeout_s)
    except Exception as e:  # noqa: BLE001 - a missing permission must not stop the restore, but is said
        return [f"could not read the config of target topic {topic!r} ({type(e).__name__}): its timestamp type "
                "and retention were not checked against the archived records"]
    out = []
    if configs.get("message.timestamp.type") is not None and configs["message.timestamp.type"].value == \
            "LogAppendTime":
        out.append(f"target topic {topic!r} has message.timestamp.type=LogAppendTime: the broker replaces the "
                   "archived timestamps with its own")
    retention = int(configs["retention.ms"].value) if configs.get("retention.ms") is not None else -1
    oldest = min((m["min_timestamp_ms"] for m in manifests if m.get("min_timestamp_ms") is not None), default=None)
    if retention >= 0 and oldest is not None and oldest < time.time() * 1000 - retention:
        out.append(f"target topic {topic!r} has retention.ms={retention}, but the oldest record to restore is from "
                   f"{datetime.fromtimestamp(oldest / 1000, UTC).isoformat()}: the broker will delete such records "
                   "soon after they are restored. Set retention.ms=-1 on the target first")
    return out


@dataclass(frozen=True)
class WindowSource:
    """One window to restore and how to read it: our archives (a manifest) and archives written by others
    (`s3_archive.foreign_restore`) both come in as these, so the exactly-once machinery is one."""

    window: OffsetWindow
    records: Callable[[], Iterator[tuple]]  # ArchivedRecords (or plain tuples in its field order), offset order
    record_count: int | None = None  # None: unknown until read (counted while reading)
    min_timestamp_ms: int | None = None
    max_timestamp_ms: int | None = None
    # The window's end is not known (the last object of a foreign partition): records at or past `window.end`
    # never come, and the ledger records the window as done up to its last record read, not up to `window.end`.
    open_end: bool = False


def restore_windows(kafka: KafkaResource, s3: Any, bucket: str, prefix: str, request: RestoreRequest,
                    windows: Iterable[OffsetWindow], log: Any, fault: Fault = no_fault,
                    cold: ColdOptions | None = ColdOptions(), interleaved: bool = False) -> Iterator[WindowReport]:
    """Restore `windows` of `request.source_topic` into `request.target_topic`; yield each window's report once
    its records are committed (dry run: once counted). Windows run in (partition, start) order so that records
    of a source partition reach the target in offset order. `fault(step)` lets tests crash after
    `produced:<n>` (n-th record of the run handed to the producer) or `committed:<n>` (n-th transaction).

    Before producing: every window must be archived and restorable, and the objects to read must be readable
    (`cold`: objects in GLACIER / DEEP_ARCHIVE get a RestoreObject request, then the run fails with their count
    or waits; None skips the check). `interleaved`: the archive's layout splits windows into buckets (see
    `window_records`)."""
    ws = sorted(set(windows))
    topic = request.source_topic
    manifests = read_manifests(s3, bucket, prefix, topic, ws)
    check_restorable(topic, manifests)
    f = request.filters
    to_read = [manifests[w] for w in ws if f.offset_scope(w) is not None
               and f.time_may_match(manifests[w].get("min_timestamp_ms"), manifests[w].get("max_timestamp_ms"))]
    if cold is not None:
        objects = head_storage_classes(s3, bucket, [o for m in to_read for o in window_objects(m)])
        if any(o.storage_class in COLD_CLASSES for o in objects):
            target_partition_count(kafka, request.target_topic)  # a wrong target fails before any RestoreObject
            prepare_cold(s3, bucket, objects, cold, f"topic {topic!r} in s3://{bucket}/{prefix}", log)

    prefetch = Prefetch(s3, bucket, [o for m in to_read for o in window_objects(m)])

    def source(w: OffsetWindow, m: dict) -> WindowSource:
        return WindowSource(w, lambda: window_records(s3, bucket, w, m, interleaved, prefetch), m["record_count"],
                            m.get("min_timestamp_ms"), m.get("max_timestamp_ms"))

    try:
        yield from restore_sources(kafka, request, [source(w, manifests[w]) for w in ws], log, fault)
    finally:
        prefetch.close()


def restore_sources(kafka: KafkaResource, request: RestoreRequest, sources: Iterable[WindowSource], log: Any,
                    fault: Fault = no_fault) -> Iterator[WindowReport]:
    """The restore itself, for windows from any archive: one transactional producer, the ledger, windows in
    (partition, start) order."""
    srcs = sorted(sources, key=lambda s: s.window)
    num_target = target_partition_count(kafka, request.target_topic)
    request.mapping.check({s.window.partition for s in srcs}, num_target, request.target_topic)
    for warning in target_warnings(kafka, request.target_topic,
                                   [{"min_timestamp_ms": s.min_timestamp_ms} for s in srcs]):
        log.warning(warning)
    run = _Run(kafka, request, num_target, fault)
    try:
        run.ledger = run.ledger_store.read()  # after init_transactions: no transaction of ours is pending now
        if not run.ledger:
            earliest, latest = kafka.offsets(request.target_topic, "earliest"), kafka.offsets(request.target_topic,
                                                                                           "latest")
            present = sum(latest[p] - earliest.get(p, 0) for p in latest)
            if present > 0:
                log.warning(f"target topic {request.target_topic!r} already holds up to {present} records, but no "
                            f"ledger of this restore exists (consumer group {request.ledger_id!r}). If they came "
                            "from an earlier run of this restore whose ledger expired (offsets.retention.minutes), "
                            "this run restores them again")
        log.info(f"restore {request.ledger_id}: {len(srcs)} windows into {request.target_topic!r} ({num_target} "
                 f"partitions, mapping {request.mapping.mode}); the ledger already covers "
                 f"{sum(rs.size() for rs in run.ledger.values())} source offsets"
                 + (" [dry run]" if request.dry_run else ""))
        for src in srcs:
            yield from run.window(src)
        yield from run.finish()
    except BaseException:
        # A failure or an interruption (Dagster's run termination) aborts at once, so read_committed consumers of the
        # target are not held back until the transaction times out. (A killed process cannot: the next run's
        # init_transactions aborts its transaction.)
        if run.producer is not None:
            try:
                run.producer.abort()
            except Exception as e:  # the original error matters more
                log.warning(f"aborting the restore transaction failed too: {e}")
        raise
    finally:
        run.ledger_store.close()


class _Run:
    """State of one restore run: the producer, the ledger as last committed, and what is done but unrecorded.

    A transaction may span consecutive windows of one source partition (their records follow each other in the
    target anyway): it is committed every `transaction_records` records, every TRANSACTION_SECONDS, when the next
    window is of another source partition, and at the end of the run. A window's report is yielded once the
    transaction holding its last records is committed."""

    def __init__(self, kafka: KafkaResource, request: RestoreRequest, num_target: int, fault: Fault) -> None:
        self.request, self.fault = request, fault
        self.route = request.mapping.compiled(num_target)
        self.producer = None if request.dry_run else _Producer(kafka, request)
        self.ledger_store = _Ledger(kafka, request, num_target)
        self.ledger: dict[int, RangeSet] = {}
        # Offsets handled but not yet in the ledger (a window's tail after its last commit): recorded with the
        # next commit of the same source partition, so the ledger's ranges stay merged.
        self.unrecorded: dict[int, RangeSet] = {}
        self.committed = 0  # transactions committed by this run
        self.produced = 0  # records produced by this run
        # The open transaction: its source partition, the source offsets it covers so far (records produced,
        # plus skipped, filtered and absent offsets of windows done), its record count and start time.
        self.txn_sp: int | None = None
        self.txn_ranges = RangeSet()
        self.txn_records = 0
        self.txn_t0 = 0.0
        self.waiting: list[WindowReport] = []  # windows done, whose last records are in the open transaction

    def _commit(self, rep: WindowReport) -> list[WindowReport]:
        """Commit the open transaction together with the ledger grown by its ranges; returns the waiting reports
        it completes. `rep` is the window counted as committing it."""
        sp = self.txn_sp
        assert sp is not None
        new = {p: rs.copy() for p, rs in self.ledger.items()}
        rs = new.setdefault(sp, RangeSet())
        for a, b in self.txn_ranges.ranges() + self.unrecorded.pop(sp, RangeSet()).ranges():
            rs.add(a, b)
        self.producer.commit(self.ledger_store.entries(new, sp), self.ledger_store.group_metadata())
        self.ledger = new
        self.committed += 1
        rep.transactions += 1
        self.txn_sp, self.txn_ranges, self.txn_records = None, RangeSet(), 0
        done, self.waiting = self.waiting, []
        self.fault(f"committed:{self.committed}")
        return done

    def finish(self) -> list[WindowReport]:
        """Commit what is still open; the last reports."""
        if self.producer is not None and self.producer.in_txn:
            return self._commit(self.waiting[-1])
        done, self.waiting = self.waiting, []
        return done

    def window(self, src: WindowSource) -> list[WindowReport]:
        """Restore one window; returns the reports now complete (this one, earlier ones its commits complete)."""
        t0 = time.monotonic()
        request, filters, producer, w = self.request, self.request.filters, self.producer, src.window
        rep = WindowReport(w, request.dry_run, archived=src.record_count or 0)
        ready: list[WindowReport] = []
        scope = filters.offset_scope(w)
        if scope is None or not filters.time_may_match(src.min_timestamp_ms, src.max_timestamp_ms):
            rep.filtered = rep.archived  # nothing of this window can match: its objects are not even read
            rep.seconds = time.monotonic() - t0
            (self.waiting if self.waiting else ready).append(rep)
            return ready
        sp = w.partition
        if producer is not None and producer.in_txn and self.txn_sp != sp:
            ready += self._commit(self.waiting[-1])  # a transaction's ledger entry is one source partition's
        done = self.ledger.get(sp, RangeSet())
        check_done = any(a < scope[1] and scope[0] < b for a, b in done.ranges())  # else no record is in it
        has_time = filters.has_time
        # `same` routes everything to sp: counted once at the end instead of per record
        route = None if request.mapping.mode == "same" else self.route
        counts = rep.partitions
        topic, max_txn, provenance_headers = request.target_topic, request.transaction_records, \
            request.provenance_headers
        lo, hi = scope
        seg_start, last, tp = lo, -1, sp
        archived = restored = skipped = filtered = nbytes = replaced = 0
        provenance = [(PROVENANCE_TOPIC, request.source_topic.encode()), (PROVENANCE_PARTITION, str(sp).encode())]
        kproduce = producer.producer.produce if producer is not None else None
        faulty = self.fault is not no_fault
        n_txn = self.txn_records  # records in the open transaction (kept in a local: this loop is per record)
        for _p, offset, key, value, headers, ts, size in src.records():
            last = offset
            archived += 1
            if not lo <= offset < hi:
                filtered += 1  # also records past a foreign window's end: the next object holds them too
                continue
            if check_done and offset in done:
                skipped += 1
                continue
            if has_time and not filters.time_ok(ts):
                filtered += 1
                continue
            if size is None:
                size = _record_bytes(key, value, headers)
            if route is not None:
                tp = route(sp, key)
                c = counts.get(tp)
                if c is None:
                    c = counts[tp] = PartitionCount()
                c.records += 1
                c.bytes += size
            restored += 1
            nbytes += size
            if ts <= 0:
                replaced += 1
            if kproduce is None:
                continue
            if provenance_headers:
                headers = headers + provenance + [(PROVENANCE_OFFSET, str(offset).encode())]
            if n_txn == 0:
                producer.begin()
                self.txn_sp, self.txn_t0 = sp, time.monotonic()
            try:
                # timestamp 0 means "now" to librdkafka: timestamps <= 0 cannot be kept (counted above)
                kproduce(topic, value, key, partition=tp, headers=headers or None, timestamp=ts if ts > 0 else 0)
            except BufferError:  # the local queue is full: the slow path lets it drain
                producer.produce(tp, key, value, headers, ts)
            except KafkaException as e:
                raise producer.failed("producing to", e) from None
            n_txn += 1
            if faulty:  # skip building the step name per record in real runs
                self.produced += 1
                self.fault(f"produced:{self.produced}")
            # Bounded transactions: a crash loses little work, and none nears transaction.timeout.ms (the clock
            # is read every 256 records).
            if n_txn >= max_txn or ((n_txn & 255) == 0 and time.monotonic() - self.txn_t0 > TRANSACTION_SECONDS):
                self.txn_ranges.add(seg_start, offset + 1)
                self.txn_records = n_txn
                ready += self._commit(rep)
                seg_start, n_txn = offset + 1, 0
        self.txn_records = n_txn
        if not faulty:
            self.produced += restored if kproduce is not None else 0
        if route is None and restored:
            counts[sp] = PartitionCount(restored, nbytes)
        rep.filtered, rep.skipped, rep.restored, rep.bytes, rep.timestamps_replaced = \
            filtered, skipped, restored, nbytes, replaced
        if src.record_count is None:
            rep.archived = archived
        if producer is not None:
            # The rest of the scope (incl. offsets with no record) is done once the window's records are in; an
            # open-ended window only up to its last record (later records may still be written by the sink).
            end = min(hi, last + 1) if src.open_end else hi
            if producer.in_txn:  # records of this partition are uncommitted: this window waits for their commit
                self.txn_ranges.add(seg_start, max(end, seg_start))
                rep.seconds = time.monotonic() - t0
                self.waiting.append(rep)
                return ready
            if end > seg_start:
                self.unrecorded.setdefault(sp, RangeSet()).add(seg_start, end)
        rep.seconds = time.monotonic() - t0
        ready.append(rep)
        return ready
