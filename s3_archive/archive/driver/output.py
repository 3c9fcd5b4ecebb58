"""How a window is written, as the driver's write job sees the archive config: format, codec, kept envelope
columns, value decoding, rotation and layout (config/archive.py is where they are validated)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from s3_archive.keys.layout import KafkaPartition, OutputLayout
from s3_archive.model.formats import FORMATS, REGISTRY_TYPES, FormatSpec

if TYPE_CHECKING:
    from s3_archive.config.archive import ArchiveConfig


# Parquet with value decoding into columns (JSON or Schema Registry: COLUMN_DECODINGS) keeps the raw value beside the
# decoded columns (for restore, which reads it back whole); with the format's default codec that column is written
# with zstd: a copy of the bytes the decoded columns hold, in fewer bytes and usually less CPU than snappy
# (docs/formats.md).
RAW_VALUE_CODEC = "zstd"
COLUMN_DECODINGS = ("json", *REGISTRY_TYPES)


@dataclass(frozen=True)
class Output:
    """Everything the write job needs from the archive config."""

    fmt: FormatSpec
    codec: str
    columns: tuple[str, ...]  # envelope columns kept, envelope order
    csv_fields: tuple[str, ...] = ()
    decoding: str = "bytes"  # bytes | utf8 | json | avro | protobuf | json_schema
    json_schema: str | None = None  # json: Spark DDL of the fields; None: inferred per window
    column_prefix: str = ""
    on_error: str = "fail"  # fail | dead_letter
    max_records: int | None = None
    max_bytes: int | None = None
    layout: OutputLayout | None = None  # None: the default layout, no bucket column
    suffix: str | None = None  # how object names end (ArchiveConfig.object_suffix); None: the format's
    subject: str | None = None  # registry value decoding: the subject; None: <topic>-value
    key_decoding: str = "bytes"  # bytes | avro | protobuf | json_schema
    key_prefix: str = "key_"
    key_subject: str | None = None
    read_path: str = "spark"  # librdkafka: each task reads its range (task_read_job.py); spark: Spark's source
    task_reader: str = "native"  # read_path librdkafka: native (executor/native_read.py) | python (kafka_read.py)
    # Sink-compatible output (ArchiveConfig.sink_output) and the codec's level
    value_as: str = "base64"  # base64 | json (jsonl, json) | text (csv)
    csv_header: bool = False
    skip_tombstones: bool = False
    codec_level: int | None = None
    value_codec: str | None = None  # the raw value column's codec when not `codec` (RAW_VALUE_CODEC)

    @classmethod
    def of(cls, cfg: ArchiveConfig) -> Output:
        d, k, so = cfg.value_decoding, cfg.key_decoding, cfg.sink_output
        return cls(FORMATS[cfg.format], cfg.codec, tuple(cfg.envelope.columns()), tuple(cfg.csv_fields), d.type,
                   d.json_schema, d.column_prefix, d.on_error, cfg.max_records_per_object, cfg.max_bytes_per_object,
                   cfg.layout, cfg.object_suffix, d.subject, k.type, k.column_prefix, k.subject,
                   read_path=cfg.read_path, task_reader=cfg.task_reader, value_as=so.value, csv_header=so.csv_header,
                   skip_tombstones=so.skip_tombstones, codec_level=cfg.compression_level,
                   value_codec=RAW_VALUE_CODEC if cfg.format == "parquet" and cfg.compression is None
                   and d.type in COLUMN_DECODINGS and cfg.envelope.value else None)

    def registry_parts(self, topic: str) -> list[tuple[str, str, str, str]]:
        """(part, type, subject, column prefix) of each part decoded with Schema Registry schemas."""
        out = []
        if self.decoding in REGISTRY_TYPES:
            out.append(("value", self.decoding, self.subject or f"{topic}-value", self.column_prefix))
        if self.key_decoding in REGISTRY_TYPES:
            out.append(("key", self.key_decoding, self.key_subject or f"{topic}-key", self.key_prefix))
        return out

    @property
    def registry(self) -> bool:
        """Some part is decoded with Schema Registry schemas (in the write tasks)."""
        return self.decoding in REGISTRY_TYPES or self.key_decoding in REGISTRY_TYPES

    @property
    def spark_decoding(self) -> str:
        """The value decoding Spark does (bytes when the write tasks decode the value)."""
        return "bytes" if self.decoding in REGISTRY_TYPES else self.decoding

    @property
    def dead_letters(self) -> bool:
        """The window may have dead letters: undecodable values, or records the layout cannot place."""
        return self.on_error == "dead_letter" or (self.layout is not None and self.layout.on_missing == "dead_letter")

    @property
    def rotates(self) -> bool:
        return bool(self.max_records or self.max_bytes)

    @property
    def bucketed(self) -> bool:
        """The layout splits a window by record content (more than its Kafka partition)."""
        return self.layout is not None and (
            any(not isinstance(d, KafkaPartition) for d in self.layout.partition_by)
            or bool(self.layout.template_slots))
