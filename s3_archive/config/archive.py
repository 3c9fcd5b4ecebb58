"""One archive of the YAML (`archives:`): which topics, where, in which format and layout, and when windows are cut."""

from __future__ import annotations

import re
from typing import Literal

from croniter import croniter
from pydantic import Field, ValidationInfo, field_validator, model_validator

from s3_archive.config.catalog import CatalogOptions
from s3_archive.config.iceberg import IcebergOptions
from s3_archive.config.lifecycle import LifecyclePolicy
from s3_archive.config.names import TOPIC, check_name
from s3_archive.config.restore import RestoreTarget
from s3_archive.keys.layout import OutputLayout, RecordTime
from s3_archive.keys.objects import WindowLocation
from s3_archive.keys.template import InvalidTemplate
from s3_archive.model.base import StrictModel
from s3_archive.model.formats import CODEC_LEVELS, FORMATS, REGISTRY_TYPES, envelope_columns, parse_ddl_fields
from s3_archive.model.windows import OffsetWindow

REGISTRY_FORMATS = ("parquet", "avro", "iceberg")  # formats that store decoded registry payloads
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


class FlushPolicy(StrictModel):
    """When a sensor cuts a window (like the connectors' flush.count / flush.size / flush.interval)."""

    count: int = Field(default=10_000, ge=1, description="records per full window")
    bytes: int | None = Field(default=None, ge=1, description="cap a window's size, estimated from recent windows")
    interval_seconds: float | None = Field(default=600, gt=0, description="cut a partial window once its oldest "
                                                                          "record is this old")


class Envelope(StrictModel):
    """Which parts of each record an archive stores (Lenses `store.envelope.fields.*`, Aiven `format.output.fields`).

    metadata = topic, partition, offset, timestamp, timestamp_type. Restore needs all four parts."""

    key: bool = True
    value: bool = True
    headers: bool = True
    metadata: bool = True

    def columns(self) -> list[str]:
        return envelope_columns(key=self.key, value=self.value, headers=self.headers, metadata=self.metadata)

    @property
    def complete(self) -> bool:
        return self.key and self.value and self.headers and self.metadata




class ValueDecoding(StrictModel):
    """How the record value is stored: raw bytes (lossless), UTF-8 text, JSON whose top-level fields become columns,
    or a Schema Registry payload (Confluent-framed Avro, Protobuf or JSON Schema) whose fields become typed columns
    (next to the raw `value`, unless `envelope.value` is off)."""

    type: Literal["bytes", "utf8", "json", "avro", "protobuf", "json_schema"] = "bytes"
    json_schema: str | None = Field(
        default=None, description="json only: the fields as a Spark DDL string, e.g. 'id BIGINT, name STRING'; "
                                  "None: inferred per window from the window's values")
    column_prefix: str = Field(default="", description="json and the registry types: prepended to each decoded "
                                                       "field's column name")
    subject: str | None = Field(
        default=None, description="registry types: the subject whose newest version is the window's reader schema; "
                                  "None: '<topic>-value' (TopicNameStrategy)")
    on_error: Literal["fail", "dead_letter"] = Field(
        default="fail", description="a value that does not decode (not UTF-8; for json also not a JSON object; for "
                                    "the registry types not framed, an unknown schema id, or not decodable with "
                                    "its schema): fail the window naming topic, partition, offset and the reason, "
                                    "or write the raw record under <prefix>_dead_letter/ (committed with the "
                                    "window, never dropped)")

    @model_validator(mode="after")
    def _json_only(self) -> ValueDecoding:
        if self.type != "json" and self.json_schema is not None:
            raise ValueError(f"json_schema applies to type 'json' only, not {self.type!r}")
        if self.type not in ("json", *REGISTRY_TYPES) and self.column_prefix:
            raise ValueError(f"column_prefix applies to types json, {', '.join(REGISTRY_TYPES)}, not {self.type!r}")
        if self.type not in REGISTRY_TYPES and self.subject is not None:
            raise ValueError(f"subject applies to types {', '.join(REGISTRY_TYPES)}, not {self.type!r}")
        if self.json_schema is not None:
            parse_ddl_fields(self.json_schema)  # raises ValueError naming the problem
        return self

    @property
    def registry(self) -> bool:
        """Decoded with schemas from a Schema Registry."""
        return self.type in REGISTRY_TYPES


class KeyDecoding(StrictModel):
    """How the record key is decoded besides its raw bytes: not at all (`bytes`), or a Schema Registry payload
    whose fields become typed columns named `column_prefix` + field (a key that is not a record: one column,
    `column_prefix` without its trailing `_`)."""

    type: Literal["bytes", "avro", "protobuf", "json_schema"] = "bytes"
    column_prefix: str = Field(default="key_", description="prepended to each decoded key field's column name")
    subject: str | None = Field(default=None, description="the subject whose newest version is the window's "
                                                          "reader schema; None: '<topic>-key'")

    @property
    def registry(self) -> bool:
        return self.type in REGISTRY_TYPES


class SinkOutput(StrictModel):
    """Objects shaped as a Kafka Connect S3 sink writes them, for the readers of its bucket (docs/formats.md,
    "Sink-compatible output"). Lossy by nature: an archive with `value` other than base64 or `skip_tombstones` is
    not restorable."""

    value: Literal["base64", "json", "text"] = Field(
        default="base64", description="jsonl, json: base64 (lossless) or json: the value as JSON when it parses, "
                                      "else as a string of its text; csv: base64 or text: the raw value, unquoted "
                                      "(Aiven format.output.fields.value.encoding: none)")
    csv_header: bool = Field(default=False, description="csv: each object starts with a row of the csv_fields "
                                                        "names (Lenses CSV_WITHHEADERS)")
    skip_tombstones: bool = Field(default=False, description="records with a null value are not written, only "
                                                             "counted (tombstones_skipped; Confluent "
                                                             "behavior.on.null.values=ignore, Lenses "
                                                             "connect.s3.skip.null.values)")

    @property
    def lossy(self) -> bool:
        return self.value != "base64" or self.skip_tombstones


class GroupStart(StrictModel):
    """Start where a consumer group stopped: a Kafka Connect sink's own group (`connect-<connector name>`), so the
    sink's objects and the archive's windows hold every record once (docs/import-connect.md, "Taking over")."""

    consumer_group: str = Field(min_length=1, max_length=249, description="the group whose committed offsets "
                                                                          "the first windows start at")


class ArchiveConfig(StrictModel):
    name: str
    topics: list[str] = Field(default_factory=list)
    topic_pattern: str | None = Field(
        default=None, description="a regex (full match); matching topics are added to `topics` when definitions "
                                  "load (see resolve_topic_patterns)")
    bucket: str
    prefix: str = ""
    format: Literal["parquet", "avro", "jsonl", "json", "csv", "text", "bytes", "iceberg"] = "parquet"
    compression: str | None = Field(default=None, description="None: the format's default codec")
    compression_level: int | None = Field(
        default=None, description="gzip 1-9, zstd 1-22, brotli 0-11 (parquet), deflate 1-9 (avro); None: the "
                                  "codec's default (gzip 6)")
    sink_output: SinkOutput = Field(default=SinkOutput(), description="objects shaped as a Kafka Connect sink "
                                                                      "writes them (lossy; docs/formats.md)")
    csv_fields: list[Literal["key", "value", "offset", "timestamp", "headers"]] = Field(
        default=["key", "value", "offset", "timestamp", "headers"], min_length=1,
        description="csv only: the columns, in order (Aiven's format.output.fields)")
    envelope: Envelope = Field(default=Envelope(), description="which record parts to store (parquet, avro, "
                                                                "jsonl, json; csv uses csv_fields)")
    value_decoding: ValueDecoding = ValueDecoding()
    key_decoding: KeyDecoding = Field(default=KeyDecoding(), description="decode Schema Registry keys into typed "
                                                                        "columns (the raw `key` stays)")
    flush: FlushPolicy = FlushPolicy()
    max_records_per_object: int | None = Field(default=None, ge=1, description="split a window's output into "
                                                                               "numbered parts")
    max_bytes_per_object: int | None = Field(
        default=None, ge=1024, description="split a window's output into numbered parts holding at most this many "
                                           "bytes of record data (key + value + headers) each")
    layout: OutputLayout | None = Field(
        default=None, description="object key template and partition_by; None: the default layout "
                                  "(docs/layout.md)")
    on_data_loss: Literal["fail", "record_gap"] = Field(
        default="fail", description="a window whose offsets Kafka already deleted: fail the run, or record the "
                                    "lost range in the manifest and archive what is left")
    windows_per_run: int = Field(default=8, ge=1, le=500, description="backfill: windows per run")
    retire_after_days: float | None = Field(
        default=7, gt=0, description="windows committed longer ago leave the Dagster instance's partition set once "
                                     "their manifests are verified (the manifests stay the record; docs/windows.md); "
                                     "null: every window stays a partition")
    lifecycle: LifecyclePolicy | None = Field(default=None, description="S3 lifecycle rules; None: defaults")
    catalog: CatalogOptions | None = Field(default=None, description="Glue table; None: database s3_archive, "
                                                                      "partition projection")
    iceberg: IcebergOptions | None = Field(default=None, description="format iceberg only: the Iceberg catalog "
                                                                     "and warehouse; None: Glue, under the prefix")
    schedule_cron: str | None = Field(
        default=None, description="a cron string (UTC): at each of its ticks the offsets sensor also cuts every "
                                  "partition's rest up to the last stable offset")
    retention_warn_fraction: float = Field(
        default=0.8, gt=0, le=1, description="retention_headroom warns when the oldest unarchived record is older "
                                             "than this fraction of the topic's retention.ms")
    start_position: Literal["earliest", "latest"] | int | GroupStart = Field(
        default="earliest", description="where a partition with no window starts: its log start, its end when "
                                        "first seen, the first offset at/after an epoch-ms timestamp (-1: latest), "
                                        "or {consumer_group: <group>}: the group's committed offset")
    restore_targets: list[RestoreTarget] = Field(
        default_factory=list, description="restores declared here: one restore asset per target and topic, "
                                          "launchable over selected windows with no run config")

    @field_validator("schedule_cron")
    @classmethod
    def _cron(cls, v: str | None) -> str | None:
        # strict: refuse days that never come (e.g. '0 0 30 2 *'); five fields: minute resolution, no seconds.
        if v is not None and not (croniter.is_valid(v, strict=True) and len(croniter.expand(v)[0]) == 5):
            raise ValueError(f"not a valid cron string: {v!r} (five fields, e.g. '*/15 * * * *')")
        return v

    @field_validator("csv_fields")
    @classmethod
    def _csv_fields(cls, v: list[str], info: ValidationInfo) -> list[str]:
        # Runs only when csv_fields is given; `format` is declared before it, so it is validated already.
        fmt = info.data.get("format")
        if fmt is not None and fmt != "csv":
            raise ValueError(f"applies to format 'csv' only; this archive's format is {fmt!r} (remove csv_fields, "
                             "or set format: csv)")
        if len(set(v)) != len(v):
            raise ValueError(f"lists a field twice: {v}")
        return v

    @field_validator("start_position")
    @classmethod
    def _start(cls, v: str | int | GroupStart) -> str | int | GroupStart:
        if isinstance(v, int) and v < -1:
            raise ValueError(f"must be 'earliest', 'latest', an epoch-ms timestamp >= 0, or -1 (latest), got {v}")
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_name(v)

    @field_validator("topics")
    @classmethod
    def _topics(cls, v: list[str]) -> list[str]:
        for t in v:
            if not TOPIC.fullmatch(t) or t in (".", ".."):
                raise ValueError(f"not a valid Kafka topic name: {t!r} (allowed: 1-249 of a-z A-Z 0-9 . _ -)")
        if len(set(v)) != len(v):
            raise ValueError(f"topics listed twice: {sorted({t for t in v if v.count(t) > 1})}")
        return v

    @field_validator("bucket")
    @classmethod
    def _bucket(cls, v: str) -> str:
        if not _BUCKET.fullmatch(v) or ".." in v:
            raise ValueError(f"not a valid S3 bucket name: {v!r} (3-63 of a-z 0-9 . -, starting and ending with "
                             "a letter or digit)")
        return v

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        if v.startswith("/"):
            raise ValueError(f"must not start with '/', got {v!r}")
        return v if v == "" or v.endswith("/") else v + "/"

    @field_validator("topic_pattern")
    @classmethod
    def _pattern(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as e:
                raise ValueError(f"not a valid regular expression: {v!r} ({e})") from None
        return v

    @model_validator(mode="after")
    def _codec(self) -> ArchiveConfig:
        if not self.topics and self.topic_pattern is None:
            raise ValueError("give `topics` (a list of topic names), `topic_pattern` (a regex), or both")
        spec = FORMATS[self.format]
        if self.compression is not None and self.compression not in spec.codecs:
            raise ValueError(f"compression {self.compression!r} is not supported for format {self.format!r}; "
                             f"supported: {', '.join(spec.codecs)}")
        self._check_sink_output()
        if "envelope" in self.model_fields_set and not spec.envelope:
            raise ValueError(f"envelope applies to formats {', '.join(f for f, s in FORMATS.items() if s.envelope)}; "
                             f"format {self.format!r} stores {spec.stores}")
        dec = self.value_decoding
        if dec.type != "bytes" and not spec.envelope:
            raise ValueError(f"value_decoding.type {dec.type!r} needs a format with columns "
                             f"({', '.join(f for f, s in FORMATS.items() if s.envelope)}); format {self.format!r} "
                             f"stores {spec.stores}")
        if not self.envelope.columns() and dec.type != "json" and not dec.registry:
            raise ValueError("envelope: every part is off; keep at least one of key, value, headers, metadata")
        self._check_registry_decoding()
        if dec.type == "json" and dec.json_schema is not None:
            clash = sorted({dec.column_prefix + f for f in parse_ddl_fields(dec.json_schema)}
                           & set(self.envelope.columns()))
            if clash:
                raise ValueError(f"value_decoding: decoded field(s) {clash} clash with envelope columns; set "
                                 "value_decoding.column_prefix (e.g. 'value_') or turn those envelope parts off")
        if spec.table:
            self._check_table_format()
        elif "iceberg" in self.model_fields_set:
            raise ValueError(f"iceberg applies to format 'iceberg' only; this archive's format is {self.format!r}")
        if self.format == "bytes" and (self.max_records_per_object or self.max_bytes_per_object):
            raise ValueError("format 'bytes' writes one object per record; max_records_per_object and "
                             "max_bytes_per_object do not apply")
        if self.layout is not None and self.format == "bytes":
            raise ValueError("layout applies to formats other than 'bytes' (its objects are named by offset)")
        if self.layout is not None:
            # A split window (rotation) needs {{part}} in the key.
            rotation = self.max_records_per_object is not None or self.max_bytes_per_object is not None
            try:
                self.layout.check(rotation=rotation)
            except InvalidTemplate as e:
                raise ValueError(f"layout.template: {e}") from None
        self._check_restore_targets()
        return self

    def _check_registry_decoding(self) -> None:
        sides = [(n, d) for n, d in (("value_decoding", self.value_decoding), ("key_decoding", self.key_decoding))
                 if d.registry]
        for name, d in sides:
            if self.format not in REGISTRY_FORMATS:
                allowed = f"{', '.join(REGISTRY_FORMATS[:-1])} or {REGISTRY_FORMATS[-1]}"
                raise ValueError(f"{name}.type {d.type!r} needs format {allowed} (the text formats' lines are "
                                 f"rendered before decoding); this archive's format is {self.format!r}")
        if self.value_decoding.registry and self.layout is not None:
            for i, d in enumerate(self.layout.partition_by):
                if isinstance(d, RecordTime) and d.source == "value":
                    raise ValueError(f"layout.partition_by[{i}]: a time from a value field is not supported with "
                                     f"value_decoding.type {self.value_decoding.type!r} (partition by the decoded "
                                     "field with kind value, or by the Kafka timestamp)")
        if self.format == "iceberg" and self.key_decoding.registry and self.value_decoding.type in ("utf8", "json"):
            raise ValueError(f"key_decoding.type {self.key_decoding.type!r} with value_decoding.type "
                             f"{self.value_decoding.type!r} is not supported for format 'iceberg' (decode the value "
                             "with a registry type too, or use parquet)")
        if self.key_decoding.registry and self.key_decoding.column_prefix == self.value_decoding.column_prefix:
            raise ValueError(f"key_decoding.column_prefix and value_decoding.column_prefix are both "
                             f"{self.key_decoding.column_prefix!r}: key and value fields would share column names")

    def _check_sink_output(self) -> None:
        if self.compression_level is not None:
            levels = CODEC_LEVELS.get(self.codec)
            if levels is None or self.format == "iceberg":
                raise ValueError(f"compression_level: codec {self.codec!r} of format {self.format!r} takes no level; "
                                 f"codecs with a level: {', '.join(CODEC_LEVELS)} (iceberg: none)")
            if not levels[0] <= self.compression_level <= levels[1]:
                raise ValueError(f"compression_level: {self.codec} takes {levels[0]}-{levels[1]}, got "
                                 f"{self.compression_level}")
        out = self.sink_output
        if out.value == "json" and self.format not in ("jsonl", "json"):
            raise ValueError(f"sink_output.value: json applies to formats jsonl and json, not {self.format!r}")
        if out.value == "json" and not self.envelope.value:
            raise ValueError("sink_output.value: json writes the value, but envelope.value is off")
        if out.value == "text" and self.format != "csv":
            raise ValueError(f"sink_output.value: text applies to format csv, not {self.format!r}")
        if out.value == "text" and self.csv_fields[-1] != "value":
            raise ValueError(f"sink_output.value: text needs value as the last of csv_fields (a raw value may hold "
                             f"commas), got {self.csv_fields}")
        if out.csv_header and self.format != "csv":
            raise ValueError(f"sink_output.csv_header applies to format csv, not {self.format!r}")
        if out.skip_tombstones and self.format == "iceberg":
            raise ValueError("sink_output.skip_tombstones does not apply to format 'iceberg' (the table keeps every "
                             "row)")

    def _check_restore_targets(self) -> None:
        if self.restore_targets and not self.restorable:
            raise ValueError(f"restore_targets: archive {self.name!r} is not restorable (format {self.format!r}, "
                             "envelope, value_decoding, sink_output); restore needs a lossless format (parquet, "
                             "avro, jsonl, json), the whole envelope, value_decoding bytes or json, and no lossy "
                             "sink_output (value base64, skip_tombstones false)")
        names: set[str] = set()
        for i, t in enumerate(self.restore_targets):
            if t.name in names:
                raise ValueError(f"restore_targets[{i}].name: {t.name!r} is used twice; names must be unique within "
                                 "an archive")
            names.add(t.name)
            if t.topics is not None and self.topic_pattern is None:
                unknown = sorted(set(t.topics) - set(self.topics))
                if unknown:
                    raise ValueError(f"restore_targets[{i}].topics: {unknown} are not topics of this archive "
                                     f"(topics: {self.topics})")
            own = sorted(s for s in self.topics if t.applies_to(s) and t.target_for(s) == s)
            if own and not t.allow_source_topic:
                raise ValueError(f"restore_targets[{i}].target_topic: {t.target_topic!r} is the archived topic "
                                 f"itself for {own}; restoring into it appends every record again. Set "
                                 "allow_source_topic: true to do that on purpose")

    def _check_table_format(self) -> None:
        """What a table format (Iceberg) cannot honour: its data files are Iceberg's, not objects of ours."""
        for option in ("max_records_per_object", "max_bytes_per_object", "layout"):
            if getattr(self, option) is not None:
                raise ValueError(f"{option} does not apply to format {self.format!r} (Iceberg names and sizes its "
                                 "own data files); remove it")
        ice = self.iceberg
        if ice is not None and ice.warehouse and not ice.warehouse.startswith(f"s3://{self.bucket}/"):
            raise ValueError(f"iceberg.warehouse {ice.warehouse!r} must be in the archive's bucket "
                             f"(s3://{self.bucket}/...): the manifests list the tables' data files there")
        if ice is not None and ice.warehouse:
            inside = [t for t in self.topics if f"{ice.warehouse}/".startswith(f"s3://{self.bucket}/{self.prefix}{t}/")]
            if inside:
                raise ValueError(f"iceberg.warehouse {ice.warehouse!r} is under topic {inside[0]!r}'s data prefix, "
                                 "which the archive's S3 lifecycle rules act on; choose another path")
        if not self.envelope.metadata:
            raise ValueError(f"format {self.format!r} needs envelope.metadata (a window's rows are found by their "
                             "partition and offset)")
        dec = self.value_decoding
        known = set(self.envelope.columns())
        if dec.type == "json" and dec.json_schema is not None:
            known |= {dec.column_prefix + f for f in parse_ddl_fields(dec.json_schema)}
        # decoded columns known per window only
        inferred = dec.type == "json" and dec.json_schema is None or dec.registry or self.key_decoding.registry
        unknown = [c for c in (ice.partition_columns() if ice else ["partition"]) if c not in known]
        if unknown and not inferred:
            raise ValueError(f"iceberg.partition_by: column(s) {unknown} are not stored; stored columns: "
                             f"{', '.join(sorted(known))}")
        life = self.lifecycle
        if life is not None and (life.expiration_days is not None or life.transitions):
            raise ValueError(f"lifecycle.expiration_days and lifecycle.transitions do not apply to format "
                             f"{self.format!r}: S3 must not expire or archive files under an Iceberg table (its "
                             "metadata would point to missing or unreadable files); old snapshots and orphan "
                             "files go through Iceberg's snapshot expiration instead")

    @property
    def restorable(self) -> bool:
        """The archive keeps key, value, headers and coordinates byte for byte, so restore can replay it."""
        return (FORMATS[self.format].lossless and self.envelope.complete
                and self.value_decoding.type != "utf8" and not self.sink_output.lossy)

    @property
    def decodes_fields(self) -> bool:
        """Columns decoded from payloads (json, or a Schema Registry decoding of the value or key), which vary
        between windows."""
        return self.value_decoding.type == "json" or self.value_decoding.registry or self.key_decoding.registry

    @property
    def lifecycle_policy(self) -> LifecyclePolicy:
        """`lifecycle`, or the defaults."""
        return self.lifecycle or LifecyclePolicy()

    @property
    def codec(self) -> str:
        return self.compression or FORMATS[self.format].default_codec

    @property
    def object_suffix(self) -> str:
        """How data object names end: the format's extension (or the layout's `extension`), then the codec's."""
        spec = FORMATS[self.format]
        ext = self.layout.extension if self.layout is not None and self.layout.extension is not None else spec.extension
        return ext + spec.codec_suffix.get(self.codec, "")

    def location(self, topic: str, window: OffsetWindow) -> WindowLocation:
        """Where the window of `topic` lives in this archive's bucket."""
        return WindowLocation(self.bucket, self.prefix, topic, window, self.object_suffix, self.layout)
