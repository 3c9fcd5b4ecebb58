"""What the driver sends each write task and what comes back: the one contract between the two sides of the write
(archive/driver/ plans and commits, archive/executor/ reads records and writes objects). Pure: no Spark, no I/O (an
S3Connection's client is io/s3.py's, made when a side asks for it); it imports no module of either side, and the
driver reaches the executors' side only through the functions Spark runs in the tasks (executor/task.py's
`write_task`, `read_task`, `envelope_task`; executor/registry_decode.py's `table_rows`).

A run's windows are cut into slices, each read by one Spark task and written by the same task straight to the
window's final object keys. A window is one slice unless it may be split (`splittable`): then slice i of n is
offsets [start + i*size/n, ...) and writes the object numbered i. Each task sends back one row per object it wrote
(`ObjectRow`) and one row of statistics per slice (`RecordStats`); the driver merges a window's slices
(`window_stats`). A slice with no committed record sends no row at all: it is all absent.

A task gets a `WriteJob`: the run's `JobTemplate` (where objects go, how tasks reach S3 and Kafka: `S3Connection`,
`KafkaConnection`, the slices) joined with a `JobShape` (the format, layout and decoding the driver derived from the
archive's output and the records' schema, driver/spark_job.py::write_frame).
"""

from __future__ import annotations

import bisect
import json
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any

from s3_archive.io.registry_client import RegistryConnection, RegistrySchema
from s3_archive.keys.layout import KafkaPartition, OutputLayout
from s3_archive.keys.objects import WindowLocation
from s3_archive.model.windows import OffsetWindow

MULTIPART_THRESHOLD = 256 << 20  # larger objects are multipart uploads (S3's single PUT allows up to 5 GiB)
PART_SIZE = 64 << 20  # multipart part size (S3: at least 5 MiB, except the last part)
# The envelope as Spark's Kafka source gives it (driver/spark_job.py::_kafka's columns), and as the tasks that read
# with librdkafka give it back (executor/kafka_read.py).
ENVELOPE_DDL = ("key binary, value binary, headers array<struct<key:string,value:binary>>, topic string, "
                "partition int, offset long, timestamp timestamp, timestamp_type int")
MAX_GAP_RANGES = 10_000


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


# Stored envelope columns a write task makes itself instead of receiving them (driver/spark_job.py::_derived):
# each one's source in the task's batches, or TOPIC for the job's topic.
TOPIC = ""
DERIVED = {"topic": TOPIC, "partition": "_partition", "offset": "_offset"}


# The Parquet columns a data object dictionary-encodes (FormatPlan.dictionary, top-level columns; not key/value: all
# distinct). Header names are not: compressed, their repeated names take almost nothing either way, for the same
# CPU (bench.tools.task_read_profile --split). Dead-letter objects encode none. An erasure's rewrite
# (erasure/rewrite.py) encodes with the same plan.
PARQUET_DICTIONARY = ("topic", "partition", "timestamp_type")


@dataclass(frozen=True)
class FormatPlan:
    """How a task encodes objects of the archive's format (executor/encoders.py)."""

    name: str  # parquet | avro | jsonl | json | csv | text | bytes
    codec: str
    suffix: str  # object name suffix (extension + codec suffix)
    spark_schema: str = ""  # JSON of the stored columns' Spark schema (Parquet metadata, the Avro schema)
    avro_schema: str = ""  # the Avro writer schema (JSON), for avro
    dictionary: tuple[str, ...] = ()  # Parquet columns dictionary-encoded (not key/value: all distinct)
    # Parquet columns compressed with another codec than `codec`, at that codec's default level: (column, codec)
    column_codecs: tuple[tuple[str, str], ...] = ()
    row_group_bytes: int = 32 << 20  # Parquet: Arrow bytes buffered per row group
    level: int | None = None  # the codec's compression level (None: its default)
    header: bytes = b""  # csv with a header row: the first line of every object


_CONNECTION_SETTINGS = ("bootstrap.servers", "security.protocol", "sasl.", "ssl.")


@dataclass(frozen=True)
class KafkaConnection:
    """How write tasks reach Kafka with librdkafka (`read_path: librdkafka`, executor/kafka_read.py): the connection
    settings of the driver's `KafkaResource.client_config`, certificate files inlined as PEM
    (driver/task_read_job.py). Picklable; the settings (a SASL password, a key) stay out of repr, so they never
    reach a log or an error."""

    servers: str
    settings: tuple[tuple[str, Any], ...] = field(repr=False)

    @classmethod
    def of_config(cls, config: dict[str, Any]) -> KafkaConnection:
        kept = {k: v for k, v in config.items() if k.startswith(_CONNECTION_SETTINGS) and v is not None}
        return cls(str(config["bootstrap.servers"]), tuple(sorted(kept.items())))


@dataclass(frozen=True)
class S3Connection:
    """How executors (and the driver) reach S3 with boto3: picklable, so a Spark task can rebuild the client.

    Secrets are excluded from repr, so they never reach a log or an error message."""

    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    path_style: bool = False
    verify: bool | str | None = None
    # Extra PutObject / CreateMultipartUpload arguments for every data object (e.g. ServerSideEncryption,
    # SSEKMSKeyId, StorageClass).
    put_args: tuple[tuple[str, str], ...] = ()
    # botocore's own retries (S3Resource.max_attempts / retry_mode): throttling, 5xx and dropped connections.
    # max_attempts is botocore's `retries.max_attempts`: retries after the first try.
    max_attempts: int = 5
    retry_mode: str = "standard"

    def client(self, payload_signing: bool = True) -> Any:
        """A boto3 S3 client (one per process, connection and `payload_signing`: io/s3.py::shared_client)."""
        from s3_archive.io.s3 import shared_client

        return shared_client(self, payload_signing)

    @classmethod
    def of_resource(cls, resource: Any) -> S3Connection:
        """The connection of the runs' `S3Resource` (io/s3_resource.py), for the executors: endpoint, region, path
        style, CA bundle, credentials (None: the executors' default chain) and the SSE-KMS key and storage class
        every data object is written with."""
        return cls(endpoint_url=resource.endpoint_url or None, region=resource.region_name,
                   access_key_id=resource.aws_access_key_id, secret_access_key=resource.aws_secret_access_key,
                   session_token=resource.aws_session_token, path_style=resource.path_style,
                   verify=resource.ca_bundle or resource.verify,
                   put_args=tuple(sorted(resource.object_write_args("data").items())),
                   max_attempts=resource.max_attempts, retry_mode=resource.retry_mode)

    @classmethod
    def of_client(cls, s3: Any) -> S3Connection:
        """The connection of a boto3 client (tests, benchmarks): its endpoint, region, addressing style and the
        credentials it signs with (None: the executors use the default credential chain)."""
        creds = s3._request_signer._credentials  # botocore has no public accessor for a client's credentials
        frozen = creds.get_frozen_credentials() if creds is not None else None
        retries = s3.meta.config.retries or {}
        return cls(endpoint_url=s3.meta.endpoint_url, region=s3.meta.region_name,
                   access_key_id=frozen.access_key if frozen else None,
                   secret_access_key=frozen.secret_key if frozen else None,
                   session_token=frozen.token if frozen else None,
                   path_style=(s3.meta.config.s3 or {}).get("addressing_style") == "path",
                   # botocore keeps total_max_attempts (the first try + retries; 3 by default in standard mode).
                   max_attempts=retries.get("total_max_attempts", 3) - 1,
                   retry_mode=retries.get("mode", "standard"))


@dataclass(frozen=True)
class DecodedPart:
    """How one part of the record (value or key) decodes (executor/registry_decode.py)."""

    part: str  # "value" | "key"
    kind: str  # avro | protobuf | json_schema
    subject: str
    schemas: tuple[RegistrySchema, ...]  # the writer schemas known when the job was planned
    struct_type: str  # Spark type JSON of the decoded struct; its fields in stored order
    columns: tuple[str, ...]  # the stored column of each field of struct_type

    def fields(self) -> list[dict[str, Any]]:
        return json.loads(self.struct_type)["fields"]


@dataclass(frozen=True)
class DecodePlan:
    """What a write task needs to decode registry payloads (made by driver/registry_plan.py): picklable, and its
    repr holds no secret (the connection hides its password)."""

    topic: str
    parts: tuple[DecodedPart, ...]
    registry: RegistryConnection | None = None  # for ids the plan lacks; None: such an id is unknown
    dead_letter_schema: str = ""  # Spark schema JSON of `_raw` (the raw envelope and `reason`); "": no dead letters
    # layout dimensions on decoded fields: (index in partition_by, part, field path); their bucket segment is
    # filled in by the task (driver/bucket_column.py's placeholder)
    bucket_fields: tuple[tuple[int, str, str], ...] = ()

    def stored_columns(self) -> list[str]:
        return [c for p in self.parts for c in p.columns]


class TaskFault(StrEnum):
    """Tests: where a write task stops on purpose (WriteJob.fault)."""

    MID_UPLOAD = "mid_upload"  # the worker is killed with a multipart upload open

    @staticmethod
    def after_objects(n: int) -> str:
        """The task raises after writing n objects."""
        return f"object:{n}"


@dataclass(frozen=True, kw_only=True)
class JobTemplate:
    """What a run's write jobs share before their format is known: where the objects go, how the tasks reach S3
    (and, reading with librdkafka, Kafka), the slices they read, and the tests' levers. Enough to read the slices'
    envelope (executor/task.py::envelope_task); a `JobShape` makes it a `WriteJob`."""

    topic: str
    bucket: str
    prefix: str
    conn: S3Connection
    slices: tuple[Slice, ...] = ()
    multipart_threshold: int = MULTIPART_THRESHOLD
    part_size: int = PART_SIZE
    fault: str | None = None  # tests: a TaskFault
    # read_path librdkafka: how tasks reach Kafka, and how long a read may make no progress before it fails
    kafka: KafkaConnection | None = None
    read_stall_s: float = 120.0
    task_reader: str = "native"  # native: executor/native_read.py; python: executor/kafka_read.py


@dataclass(frozen=True, kw_only=True)
class JobShape:
    """What a write task does with the records, as the driver derives it from the archive's output and the
    records' schema (driver/spark_job.py::write_frame): the format, the layout, decoding and its error policies,
    the columns it is sent and stores."""

    fmt: FormatPlan
    layout: OutputLayout | None = None
    bucketed: bool = False  # the layout splits a window by record content (input sorted by bucket, offset)
    max_records: int | None = None
    max_bytes: int | None = None
    decoding: bool = False  # a `_good` column says which records decode
    dead_letter: bool = False  # undecodable records go to dead-letter objects (else: the slice writes nothing)
    skip_bad: bool = False  # undecodable records are counted and dropped (value_decoding.on_error skip)
    on_missing: str = "bucket"  # layout.on_missing: a record lacking a layout value: bucket | fail | skip | dead_letter
    missing_segments: tuple[int, ...] = ()  # where in `_bucket`'s `/`-separated values a `(null)` is a lacking one
    skip_tombstones: bool = False  # a `_tomb` column marks records with a null value: counted, not written
    payload: tuple[str, ...] = ()  # the stored columns of each Arrow batch
    payload_columns: tuple[str, ...] = ()  # the sent ones' names in the batches when not theirs (spark_job.py)
    derived: tuple[tuple[str, str], ...] = ()  # stored columns not sent, with their source (DERIVED)
    ts_stored: bool = False  # `_ts` is not sent: the task computes it from the stored `timestamp`
    dead_letter_schema: str = ""  # Spark schema JSON of the raw envelope (`_raw`), for the dead-letter Parquet
    decode: DecodePlan | None = None  # Schema Registry payloads the task decodes (executor/registry_decode.py)


@dataclass(frozen=True)
class LinePlan:
    """read_path librdkafka: how a task renders each record's csv, jsonl or json line from the envelope
    (executor/task_lines.py), as driver/spark_job.py::_payload does in Spark. `kind` csv or json; `fields` the csv
    fields or the stored envelope columns, in order; `value_text` (csv) the raw value last, unquoted; `value_utf8`
    (json) the value stored as a string (value_decoding utf8)."""

    kind: str
    fields: tuple[str, ...]
    value_text: bool = False
    value_utf8: bool = False


@dataclass(frozen=True, kw_only=True)
class WriteJob(JobShape, JobTemplate):
    """Everything a write task needs: sent with the task (pickled), so it holds no client and no session."""

    undecodable_only: bool = False  # with `decode`: write only the records that do not decode (their dead letters)
    task_schema: str = ""  # read_path librdkafka: the Spark schema (JSON) of the task batches the tasks make
    lines: LinePlan | None = None  # read_path librdkafka, csv / jsonl / json: how the task renders `_line`
    _index: dict[int, tuple[list[int], list[Slice]]] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, template: JobTemplate, shape: JobShape, **more: Any) -> WriteJob:
        """The job of `template`'s run in `shape`; `more`: the job's own fields (undecodable_only, task_schema)."""
        return cls(**{f.name: getattr(template, f.name) for f in fields(JobTemplate)},
                   **{f.name: getattr(shape, f.name) for f in fields(JobShape)}, **more)

    def location(self, window: OffsetWindow) -> WindowLocation:
        return WindowLocation(self.bucket, self.prefix, self.topic, window, self.fmt.suffix, self.layout)

    def slice_at(self, partition: int, offset: int) -> Slice:
        if not self._index:
            by: dict[int, list[Slice]] = {}
            for s in self.slices:
                by.setdefault(s.window.partition, []).append(s)
            for p, ss in by.items():
                ss.sort(key=lambda s: s.start)
                self._index[p] = ([s.start for s in ss], ss)
        starts, ss = self._index[partition]
        i = bisect.bisect_right(starts, offset) - 1
        if i < 0 or not ss[i].start <= offset < ss[i].end:
            raise ValueError(f"offset {offset} of partition {partition} is in no slice of this job")
        return ss[i]


def _min(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


@dataclass
class RecordStats:
    """Statistics of the records read: a slice's (counted by its write task) or a window's (its slices' merged by
    the driver). `absent`: offset ranges with no committed record (compaction, transaction markers, aborted
    records), in offset order."""

    records: int = 0
    bytes_read: int = 0  # key + value + header bytes (what the connectors' flush.size counts)
    first_offset: int | None = None
    last_offset: int | None = None
    min_timestamp_ms: int | None = None
    max_timestamp_ms: int | None = None
    undecodable: int = 0
    first_undecodable_offset: int | None = None
    first_undecodable_reason: str | None = None  # registry decoding: why the first undecodable record is
    schema_ids: dict[str, list[int]] = field(default_factory=dict)  # registry decoding: writer ids per part
    unplaceable: int = 0  # records the layout cannot place (layout.on_missing other than bucket)
    first_unplaceable_offset: int | None = None
    skipped: int = 0  # records dropped by an error policy `skip` (counted in `records`, not written)
    tombstones_skipped: int = 0  # sink_output.skip_tombstones: records with a null value, not written
    absent: list[list[int]] = field(default_factory=list)
    absent_truncated: bool = False
    committed_elsewhere: bool = False  # a task found the window committed by another attempt

    def add(self, other: RecordStats) -> None:
        """Merge `other`, which follows this one in offset order (adjacent absent ranges join)."""
        self.records += other.records
        self.bytes_read += other.bytes_read
        self.first_offset = _min(self.first_offset, other.first_offset)
        self.last_offset = _max(self.last_offset, other.last_offset)
        self.min_timestamp_ms = _min(self.min_timestamp_ms, other.min_timestamp_ms)
        self.max_timestamp_ms = _max(self.max_timestamp_ms, other.max_timestamp_ms)
        self.undecodable += other.undecodable
        self.tombstones_skipped += other.tombstones_skipped
        mine, theirs = self.first_undecodable_offset, other.first_undecodable_offset
        if theirs is not None and (mine is None or theirs < mine):
            self.first_undecodable_reason = other.first_undecodable_reason
        self.first_undecodable_offset = _min(self.first_undecodable_offset, other.first_undecodable_offset)
        for part, ids in other.schema_ids.items():
            self.schema_ids[part] = sorted(set(self.schema_ids.get(part, [])) | set(ids))
        self.unplaceable += other.unplaceable
        self.first_unplaceable_offset = _min(self.first_unplaceable_offset, other.first_unplaceable_offset)
        self.skipped += other.skipped
        self.absent_truncated |= other.absent_truncated
        self.committed_elsewhere |= other.committed_elsewhere
        for a, b in other.absent:
            if self.absent and self.absent[-1][1] == a:
                self.absent[-1][1] = b
            else:
                self.absent.append([a, b])
        if len(self.absent) > MAX_GAP_RANGES:
            self.absent, self.absent_truncated = self.absent[:MAX_GAP_RANGES], True

    def row(self, window: OffsetWindow, index: int) -> dict[str, Any]:
        """The slice row a task sends back."""
        return {"kind": "slice", "window": window.key, "slice": index, **asdict(self),
                "absent": json.dumps(self.absent), "schema_ids": json.dumps(self.schema_ids)}

    @classmethod
    def of_row(cls, row: dict[str, Any]) -> RecordStats:
        """A slice row's statistics (a field the row lacks or leaves null: none counted)."""
        values = {f.name: row[f.name] for f in fields(cls) if row.get(f.name) is not None}
        values["absent"] = json.loads(row.get("absent") or "[]")
        values["schema_ids"] = json.loads(row.get("schema_ids") or "{}")
        return cls(**values)


@dataclass(frozen=True)
class ObjectRow:
    """One object a task wrote: kind "object" (data) or "dead" (dead letters)."""

    kind: str
    window: str
    slice: int
    key: str
    size: int
    etag: str
    records: int
    record_offset: int | None = None  # format bytes: the record the object holds
    sha256: str | None = None  # of the object's bytes, as the task wrote them (the manifest's tamper evidence)

    def row(self) -> dict[str, Any]:
        return asdict(self)


_SPARK_TYPES = {"int": "long", "int | None": "long", "bool": "boolean", "list[list[int]]": "string",
                "str | None": "string", "dict[str, list[int]]": "string"}
# The rows every task sends back (DataFrame.mapInArrow's output schema): an object's fields, and a slice's
# RecordStats under the same names (absent as JSON).
RESULT_SCHEMA = ", ".join(
    ["kind string", "window string", "slice int", "key string", "size long", "etag string", "record_offset long",
     "sha256 string"]
    + [f"{f.name} {_SPARK_TYPES[str(f.type)]}" for f in fields(RecordStats)])


def window_stats(slices: list[Slice], rows: list[dict[str, Any]]) -> RecordStats:
    """One window's statistics from its slices' rows (`kind` == "slice"); a slice without a row had no record."""
    out = RecordStats()
    by_index = {r["slice"]: r for r in rows}
    for s in sorted(slices, key=lambda s: s.start):
        r = by_index.get(s.index)
        out.add(RecordStats.of_row(r) if r is not None else RecordStats(absent=[[s.start, s.end]]))
    return out


@dataclass(frozen=True)
class JobOutput:
    """What a write job gave back: every task's rows, and the stored columns' Spark schema (the manifest's)."""

    rows: list[dict[str, Any]]
    schema_json: str

    def of_window(self, window: OffsetWindow) -> JobOutput:
        return JobOutput([r for r in self.rows if r["window"] == window.key], self.schema_json)

    def objects(self, kind: str) -> list[dict[str, Any]]:
        """The object rows of `kind` ("object": data, "dead": dead letters)."""
        return [r for r in self.rows if r["kind"] == kind]

    def slice_rows(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["kind"] == "slice"]
