"""What a restore is asked to do, what it runs with and what it reports: the request (target, mapping, filters),
the run's context and test hooks, the record tuple every reader yields, and a window's report.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from s3_archive.model.errors import InvalidRestore
from s3_archive.model.logger import Logger
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.groups import check_producers
from s3_archive.restore.routing import PartitionMapping

if TYPE_CHECKING:  # the clients' modules load with the run, not with the definitions that import this one
    from s3_archive.io.kafka import KafkaResource
    from s3_archive.io.s3 import S3Client
    from s3_archive.restore.offset_map_store import OffsetMapStore
    from s3_archive.restore.schema_ids import SchemaRewrite

Fault = Callable[[str], None]

PROVENANCE_TOPIC = "s3archive.source.topic"
PROVENANCE_PARTITION = "s3archive.source.partition"
PROVENANCE_OFFSET = "s3archive.source.offset"


# Records per transaction unless configured: each commit costs ~0.05-0.25 s (send_offsets_to_transaction +
# commit_transaction, draining the producer), during which its producer sends nothing; a crash redoes at most this
# many records (and at most TRANSACTION_SECONDS of work).
DEFAULT_TRANSACTION_RECORDS = 500_000
# Commit at least this often (besides every `transaction_records`); the producer's transaction.timeout.ms is 5 min.
TRANSACTION_SECONDS = 20.0
# How long a run keeps re-initialising its producer after it found the target cluster unreachable (restore/run.py).
DEFAULT_BROKER_OUTAGE_SECONDS = 60.0
# Transactional producers a run uses side by side, each owning whole ledger entries (restore/groups.py): with two,
# one group's commits and the start of its windows overlap the other's producing (docs/performance.md, "Restore").
DEFAULT_PRODUCERS = 2
# The client that produces (`producer`): native, native/'s producer of Arrow batches (native_producer.py); python,
# confluent-kafka's call per record (producer.py).
PRODUCER_CLIENTS = ("python", "native")
DEFAULT_PRODUCER = "native"


def no_fault(step: str) -> None:
    return None


@dataclass(frozen=True)
class RestoreContext:
    """What a restore run carries from its start to its last commit: the target cluster, the S3 client of the
    archive, the log, and, for our archives only, the Schema Registry rewrite (restore/schema_ids.py; None:
    byte-exact); `offset_map`: where the run keeps its source -> target offset map (restore/offset_map.py; None:
    not kept)."""

    kafka: KafkaResource
    s3: S3Client
    log: Logger
    schemas: SchemaRewrite | None = None
    offset_map: OffsetMapStore | None = None


@dataclass(frozen=True)
class RestoreHooks:
    """Tests' hooks into a run; production passes none. `fault(step)` may raise to crash the run after
    `produced:<n>` (the n-th record of the run handed to the producer) or `committed:<n>` (the n-th transaction)."""

    fault: Fault = no_fault


NO_HOOKS = RestoreHooks()


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


class ArchivedRecord(NamedTuple):
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp_ms: int
    size: int | None = None  # key + value + header bytes when the reader computed them (else: record_bytes)


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
    broker_outage_seconds: float = DEFAULT_BROKER_OUTAGE_SECONDS
    producers: int = DEFAULT_PRODUCERS
    producer: str = DEFAULT_PRODUCER

    def __post_init__(self) -> None:
        if not self.target_topic:
            raise InvalidRestore("target_topic is required")
        if self.target_topic == self.source_topic and not self.allow_source_topic:
            raise InvalidRestore(
                f"target topic {self.target_topic!r} is the archived topic itself: restoring into it appends every "
                "record again. Set allow_source_topic: true to do that on purpose, or restore into another topic")
        if self.transaction_records < 1:
            raise InvalidRestore(f"transaction_records must be >= 1, got {self.transaction_records}")
        if not 0 <= self.broker_outage_seconds <= 3600:
            raise InvalidRestore(f"broker_outage_seconds must be between 0 and 3600, got {self.broker_outage_seconds}")
        check_producers(self.producers)
        if self.producer not in PRODUCER_CLIENTS:
            raise InvalidRestore(f"producer must be one of {', '.join(PRODUCER_CLIENTS)}; got {self.producer!r}")

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
    objects: int = 0  # objects (and dead-letter objects) the window has
    erased: int = 0  # records erased from the window (its manifest's erased_offsets): skipped
    max_timestamp_ms: int | None = None  # of the window's newest record, when known

    def metadata(self, now_ms: int | None = None) -> dict[str, Any]:
        """Plain values, the same keys and types for every window (no None): `records`, `bytes`, `seconds`,
        `records_per_second`, `lag_seconds` are the plot keys shared with the archive asset."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        lag = (now_ms - self.max_timestamp_ms) / 1000 if self.max_timestamp_ms is not None else 0.0
        return {
            "dry_run": self.dry_run,
            "records": self.restored,
            "objects": self.objects,
            "lag_seconds": round(max(lag, 0.0), 3),
            "records_archived": self.archived,
            "records_restored": self.restored,
            "records_skipped_already_present": self.skipped,
            "records_filtered": self.filtered,
            "records_erased": self.erased,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
            "records_per_second": round(self.restored / self.seconds, 1) if self.seconds > 0 else 0.0,
            "transactions": self.transactions,
            "target_partitions": sorted(self.partitions),
            "per_target_partition": {str(p): {"records": c.records, "bytes": c.bytes}
                                     for p, c in sorted(self.partitions.items())},
            "timestamps_replaced": self.timestamps_replaced,
        }


def record_bytes(key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]]) -> int:
    n = len(key or b"") + len(value or b"")
    for k, v in headers:
        n += len(k.encode()) + len(v or b"")
    return n
