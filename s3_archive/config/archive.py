"""One archive of the YAML (`archives:`): which topics, where, in which format and layout, and when windows are cut."""

from __future__ import annotations

import re
from typing import Literal

from croniter import croniter
from pydantic import Field, ValidationInfo, field_validator, model_validator

from s3_archive.config.catalog import CatalogOptions
from s3_archive.config.compliance import DrillOptions, ErasureOptions, RetentionLock, VerifyOptions
from s3_archive.config.continuous import ContinuousOptions
from s3_archive.config.disaster_recovery import RecoveryCapture
from s3_archive.config.iceberg import IcebergOptions
from s3_archive.config.lifecycle import LifecyclePolicy
from s3_archive.config.names import TOPIC, check_name
from s3_archive.config.payload import Envelope, KeyDecoding, SinkOutput, ValueDecoding
from s3_archive.config.restore import RestoreTarget
from s3_archive.keys.layout import OutputLayout, RecordTime
from s3_archive.keys.objects import WindowLocation
from s3_archive.keys.template import InvalidTemplate
from s3_archive.model.base import StrictModel
from s3_archive.model.formats import CODEC_LEVELS, FORMATS, parse_ddl_fields
from s3_archive.model.windows import OffsetWindow

REGISTRY_FORMATS = ("parquet", "avro", "iceberg")  # formats that store decoded registry payloads
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_GROUP = re.compile(r"[!-~]{1,255}")  # printable ASCII, no space: what every Kafka tool takes unquoted


class FlushPolicy(StrictModel):
    """When a sensor cuts a window (like the connectors' flush.count / flush.size / flush.interval)."""

    # Windows are sized by bytes, as the connectors' files are (flush.size): a window of 64 MiB is a few seconds of a
    # run's work, so a run's fixed cost is spread over it, while a write task still holds at most a quarter of it
    # (docs/sensors.md, "Window size"; docs/performance.md, "The deployed shape"). The count caps tiny records.
    count: int = Field(default=1_000_000, ge=1, description="records per full window at most")
    bytes: int | None = Field(default=64 << 20, ge=1, description="cap a window's size, estimated from recent "
                                                                  "windows; null: windows of `count` records")
    interval_seconds: float | None = Field(default=600, gt=0, description="cut a partial window once its oldest "
                                                                          "record is this old")


class Retries(StrictModel):
    """How a failed window run is tried again (docs/sensors.md, "Retries"): its step, in the same run, after a
    growing delay (Dagster's RetryPolicy); then the whole run again, requested by the offsets sensor, up to `reruns`
    times. An error no retry can fix (a missing bucket, refused credentials, data lost to retention) is not
    retried."""

    max: int = Field(default=3, ge=0, le=10, description="retries of a failed run's step, in the same run")
    backoff_seconds: float = Field(default=30, ge=0, le=3600, description="delay before the first retry; the n-th "
                                                                          "after (2^n - 1) x this, +/- this at random")
    reruns: int = Field(default=2, ge=0, le=10, description="times the offsets sensor requests again the windows "
                                                            "of a run that failed after its retries")


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
    compression: str | None = Field(default=None, description="None: the format's default codec (parquet with "
                                                              "Schema Registry value decoding: the raw value zstd)")
    compression_level: int | None = Field(
        default=None, description="gzip 1-9, zstd 1-22, brotli 0-11 (parquet), deflate 1-9 (avro); None: the "
                                  "library's default (text formats gzip 6, zstd 3; parquet pyarrow's)")
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
    read_path: Literal["librdkafka", "spark"] = Field(
        default="librdkafka", description="how a run's tasks read their offset ranges: librdkafka, each write task "
                                          "consuming its own range; spark, Spark's Kafka source (its jars on the "
                                          "session's classpath; docs/performance.md)")
    task_reader: Literal["native", "python"] = Field(
        default="native", description="read_path librdkafka: how a write task reads its range; native, the Rust "
                                      "reader built by `make setup` (native/: records straight into Arrow buffers); "
                                      "python, confluent-kafka's consumer, a Python object per record "
                                      "(docs/performance.md)")
    windows_per_run: int = Field(default=100, ge=1, le=500, description="windows per run at most (the offsets "
                                                                        "sensor's runs and UI backfills)")
    bytes_per_run: int | None = Field(
        default=2 << 30, ge=1, description="the offsets sensor's runs: consecutive windows packed into one run up to "
                                           "this many estimated input bytes (a backlog is caught up in a few runs, "
                                           "each paying a run's fixed cost once); null: windows_per_run alone")
    retire_after_days: float | None = Field(
        default=7, gt=0, description="windows committed longer ago leave the Dagster instance's partition set once "
                                     "their manifests are verified (the manifests stay the record; docs/windows.md); "
                                     "null: every window stays a partition")
    lifecycle: LifecyclePolicy | None = Field(default=None, description="S3 lifecycle rules; None: defaults")
    retention_lock: RetentionLock | None = Field(default=None, description="S3 Object Lock on every committed "
                                                 "window (docs/compliance.md)")
    verify: VerifyOptions = Field(default=VerifyOptions(), description="the daily `verify` check's budget and pace")
    erasure: ErasureOptions = Field(default=ErasureOptions(), description="how `erase` rewrites windows "
                                                                         "(docs/compliance.md)")
    drill: DrillOptions | None = Field(default=None, description="the restore drill check (docs/compliance.md); "
                                                                 "null: no drill (it creates topics and writes to "
                                                                 "the cluster, so it is turned on explicitly)")
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
    dead_letter_topic: str | None = Field(
        default=None, description="dead letters (value_decoding.on_error or layout.on_missing dead_letter) are also "
                                  "produced to this Kafka topic after their window commits, with context headers; "
                                  "{topic} is the archived topic")
    retries: Retries = Retries()
    consumer_group: str | None = Field(
        default=None, description="the Kafka consumer group whose offsets are the archive's committed ends, for "
                                  "Kafka's lag tools (written, never joined); default s3-archive.<name>; "
                                  "consumer_group_offsets: false turns it off")
    consumer_group_offsets: bool = Field(default=True, description="write the committed ends as consumer group "
                                                                   "offsets after each commit")
    freshness_factor: float = Field(
        default=2, ge=1, le=1000, description="the check archive_fresh fails when a record older than this x "
                                              "flush.interval_seconds is in no committed window")
    sensor_interval_seconds: int = Field(default=30, ge=5, le=86_400, description="the offsets sensor (and the "
                                             "follow sensors of its restore targets) is evaluated at most this often")
    disaster_recovery: RecoveryCapture = Field(default=RecoveryCapture(), description="topic configs, consumer "
                                               "group offsets and ACLs kept beside the windows "
                                               "(docs/disaster-recovery.md)")
    continuous: ContinuousOptions | None = Field(default=None, description="one long-lived run per topic cuts "
                                                 "and archives its windows in a loop (docs/sensors.md); null: the "
                                                 "offsets sensor's runs")
    sensor_default: Literal["running", "stopped"] = Field(
        default="running", description="the offsets sensor's status when Dagster first loads it: running archives "
                                       "with no human step; stopped waits for a click in the UI")
    broker_outage_seconds: float = Field(
        default=60.0, ge=0, le=3600, description="how long a run's driver keeps asking Kafka (offsets, metadata) "
                                                 "while the cluster is unreachable before the run fails")

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

    @field_validator("consumer_group")
    @classmethod
    def _group(cls, v: str | None) -> str | None:
        if v is not None and not _GROUP.fullmatch(v):
            raise ValueError(f"not a usable Kafka consumer group id: {v!r} (1-255 characters, no spaces or control "
                             "characters)")
        return v

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
        self._check_error_policy()
        self._check_restore_targets()
        self._check_lock()
        self._check_drill()
        return self

    def _check_drill(self) -> None:
        """A drill restores the archive: its format must keep records byte for byte, and its scratch topic must not
        be an archived topic (the drill would append records to it)."""
        drill = self.drill
        if drill is None:
            return
        if not FORMATS[self.format].lossless or self.value_decoding.type == "utf8":
            lossless = ", ".join(f for f, s in FORMATS.items() if s.lossless)
            why = (f"format {self.format!r}" if not FORMATS[self.format].lossless
                   else "value_decoding.type 'utf8' (values stored as text)")
            raise ValueError(f"drill: a drill restores the archive, and {why} does not keep records byte for byte "
                             f"(restorable formats: {lossless}, with values kept as bytes); remove drill")
        if drill.scratch_topic is not None and drill.scratch_topic in self.topics:
            raise ValueError(f"drill.scratch_topic {drill.scratch_topic!r} is an archived topic: the drill would "
                             "append restored records to it; name a topic of its own")

    def _check_lock(self) -> None:
        """An expiration must not hide a window while it is locked: S3 would put a delete marker over it."""
        lock, policy = self.retention_lock, self.lifecycle
        if lock is not None and policy is not None and policy.expiration_days is not None \
                and policy.expiration_days <= lock.days:
            raise ValueError(f"lifecycle.expiration_days {policy.expiration_days} must be more than "
                             f"retention_lock.days {lock.days}: an expiration would hide windows that are still "
                             f"locked (set it to at least {lock.days + 1}, or remove it)")

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

    def _check_error_policy(self) -> None:
        """value_decoding.on_error, layout.on_missing and dead_letter_topic fit together and the format."""
        layout = self.layout
        if layout is not None and layout.on_missing != "bucket" and not layout.missing_segments:
            raise ValueError(f"layout.on_missing {layout.on_missing!r}: this layout never lacks a value (no value, "
                             "key or header dimension, no time from a field or header, no {{key}}); remove it")
        if self.value_decoding.on_error == "skip" and FORMATS[self.format].table:
            raise ValueError(f"value_decoding.on_error 'skip' does not apply to format {self.format!r} (its rows go "
                             "to the table by Spark); use fail or dead_letter")
        if self.dead_letter_topic is None:
            return
        dead = self.value_decoding.on_error == "dead_letter" or (layout is not None
                                                                 and layout.on_missing == "dead_letter")
        if not dead:
            raise ValueError("dead_letter_topic is set, but no record becomes a dead letter: set "
                             "value_decoding.on_error or layout.on_missing to dead_letter, or remove it")
        for t in self.topics or ["t"]:
            name = self.dead_letter_topic.replace("{topic}", t)
            if not TOPIC.fullmatch(name) or name in (".", "..") or name == t:
                raise ValueError(f"dead_letter_topic {self.dead_letter_topic!r} gives {name!r} for topic {t!r}: "
                                 "not a valid Kafka topic name (1-249 of a-z A-Z 0-9 . _ -), or the archived topic "
                                 "itself")

    def dead_letter_topic_for(self, topic: str) -> str | None:
        return None if self.dead_letter_topic is None else self.dead_letter_topic.replace("{topic}", topic)

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
        for option in ("max_records_per_object", "max_bytes_per_object", "layout", "retention_lock"):
            if getattr(self, option) is not None:
                raise ValueError(f"{option} does not apply to format {self.format!r} (Iceberg names, sizes and "
                                 "removes its own data files); remove it")
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
    def group_id(self) -> str | None:
        """The consumer group the committed ends are written to; None: none."""
        if not self.consumer_group_offsets:
            return None
        return self.consumer_group or f"s3-archive.{self.name}"

    @property
    def freshness_bound_seconds(self) -> float | None:
        """How old an uncommitted record may be before the archive is stale (None: flush.interval_seconds null)."""
        interval = self.flush.interval_seconds
        return None if interval is None else interval * self.freshness_factor

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
