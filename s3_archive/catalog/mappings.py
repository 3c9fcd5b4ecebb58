"""How a Glue/Athena table reads each archive format (MAPPINGS, one entry per format), and the formats that get no
table, with the reason. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from s3_archive.catalog.table_partitions import layout_reason
from s3_archive.config.archive import ArchiveConfig
from s3_archive.model.formats import ENVELOPE_COLUMNS

PARQUET_SERDE = "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"
PARQUET_INPUT = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat"
PARQUET_OUTPUT = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat"
AVRO_SERDE = "org.apache.hadoop.hive.serde2.avro.AvroSerDe"
AVRO_INPUT = "org.apache.hadoop.hive.ql.io.avro.AvroContainerInputFormat"
AVRO_OUTPUT = "org.apache.hadoop.hive.ql.io.avro.AvroContainerOutputFormat"
JSON_SERDE = "org.openx.data.jsonserde.JsonSerDe"
CSV_SERDE = "org.apache.hadoop.hive.serde2.OpenCSVSerde"
LAZY_SERDE = "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe"
TEXT_INPUT = "org.apache.hadoop.mapred.TextInputFormat"
TEXT_OUTPUT = "org.apache.hadoop.hive.ql.io.HiveIgnoreKeyTextOutputFormat"

# The archived envelope as Hive types (parquet stores exactly these), in the order of formats.ENVELOPE_COLUMNS
# (a unit test keeps them equal): (column, type, comment).
ENVELOPE: tuple[tuple[str, str, str], ...] = (
    ("key", "binary", "record key bytes; null when the record had no key"),
    ("value", "binary", "record value bytes; null for a tombstone"),
    ("headers", "array<struct<key:string,value:binary>>", "record headers in order, duplicates and null values kept"),
    ("topic", "string", "Kafka topic"),
    ("partition", "int", "Kafka partition (equal to kafka_partition)"),
    ("offset", "bigint", "Kafka offset"),
    ("timestamp", "timestamp", "record timestamp, UTC, exact to the Kafka millisecond"),
    ("timestamp_type", "int", "0 = CreateTime, 1 = LogAppendTime"),
)
assert tuple(c[0] for c in ENVELOPE) == tuple(c for c, _ in ENVELOPE_COLUMNS)

# Per format, the envelope columns whose type or comment differs from parquet's.
# jsonl: binary fields are base64 text, and a JSON SerDe has no base64 decoding.
_JSONL = {
    "key": ("string", "record key bytes, base64 (from_base64(key) in Athena); null when the record had no key"),
    "value": ("string", "record value bytes, base64 (from_base64(value) in Athena); null for a tombstone"),
    "headers": ("array<struct<key:string,value:string>>",
                "record headers in order, duplicates and null values kept; values base64"),
}
# sink_output.value: the value as JSON (jsonl; the JSON SerDe gives a string column the JSON text of an object) or
# as its raw text last in a csv line.
_JSON_VALUE = {"value": ("string", "record value as JSON (sink_output.value json): the value when it parsed as JSON, "
                                   "else its text; null for a tombstone")}
_CSV_RAW_VALUE = ("string", "record value as raw text (sink_output.value text); a null value is an empty field")
# avro: Spark writes the timestamp as Avro `timestamp-micros`. Hive's AvroSerDe and Athena (Trino) map only
# `timestamp-millis` to `timestamp`; a `timestamp-micros` long is a `bigint` for them, so the table says bigint.
_AVRO = {
    "timestamp": ("bigint", "record timestamp, epoch microseconds UTC (avro timestamp-micros; in Athena "
                            "from_unixtime(timestamp / 1e6))"),
}
# csv: Aiven's fields, in the configured order, as archive/write.to_output writes them.
CSV_COLUMNS: dict[str, tuple[str, str]] = {
    "key": ("string", "record key bytes, base64 (from_base64(key) in Athena); a null key is an empty field"),
    "value": ("string", "record value bytes, base64 (from_base64(value) in Athena); a null value is an empty field"),
    "offset": ("bigint", "Kafka offset"),
    "timestamp": ("bigint", "record timestamp, epoch milliseconds UTC (in Athena from_unixtime(timestamp / 1e3))"),
    "headers": ("string", "record headers in order as base64(name):base64(value) joined by ';' (a null value is "
                          "empty)"),
}
# The writer's csv options (formats.FormatSpec.spark_options): ',' separated, '"' quoted only where needed (in
# practice only the empty string, `""`: base64, digits, ':' and ';' never need quoting). OpenCSV refuses an escape
# character equal to the quote character and reads a doubled quote inside quotes as one quote anyway, so the
# escape is its default backslash, which no field can contain.
CSV_SERDE_PARAMETERS = {"separatorChar": ",", "quoteChar": '"', "escapeChar": "\\"}


def _columns(spec: Iterable[tuple[str, str, str]]) -> list[dict[str, str]]:
    return [{"Name": n, "Type": t, "Comment": c} for n, t, c in spec]


def _envelope(overrides: Mapping[str, tuple[str, str]]) -> list[dict[str, str]]:
    return _columns((n, *overrides.get(n, (t, c))) for n, t, c in ENVELOPE)


# --- the table mapping of each format -------------------------------------------------------------------------------


@dataclass(frozen=True)
class FormatMapping:
    """How a Glue/Athena table reads one archive format. Adding a format is one entry in MAPPINGS."""

    serde: str
    input_format: str
    output_format: str
    classification: str
    columns: Callable[[ArchiveConfig], list[dict[str, str]]]
    serde_parameters: Callable[[ArchiveConfig], dict[str, str]] = lambda cfg: {}
    # Whole-object compression read by the input format from the object's extension (.gz, .bz2); a parquet or
    # avro codec is inside the file, which Hive does not call compressed.
    whole_file_compression: bool = False
    # The SerDe parameter holding the writer schema of an archived object (read at run time, avro_header.py).
    writer_schema_parameter: str | None = None


MAPPINGS: dict[str, FormatMapping] = {
    "parquet": FormatMapping(PARQUET_SERDE, PARQUET_INPUT, PARQUET_OUTPUT, "parquet", lambda cfg: _envelope({}),
                             lambda cfg: {"serialization.format": "1"}),
    # The literal is exactly the writer schema in the objects' headers (record `topLevelRecord`, nullable unions
    # `[type, "null"]`), so Hive/Athena resolve nothing.
    "avro": FormatMapping(AVRO_SERDE, AVRO_INPUT, AVRO_OUTPUT, "avro", lambda cfg: _envelope(_AVRO),
                          writer_schema_parameter="avro.schema.literal"),
    # A malformed line is an error to see, not a row to drop silently.
    "jsonl": FormatMapping(JSON_SERDE, TEXT_INPUT, TEXT_OUTPUT, "json",
                           lambda cfg: _envelope(_JSONL | (_JSON_VALUE if cfg.sink_output.value == "json" else {})),
                           lambda cfg: {"ignore.malformed.json": "false"}, whole_file_compression=True),
    "csv": FormatMapping(CSV_SERDE, TEXT_INPUT, TEXT_OUTPUT, "csv",
                         lambda cfg: _columns((f, *(_CSV_RAW_VALUE if f == "value" and cfg.sink_output.value == "text"
                                                    else CSV_COLUMNS[f])) for f in cfg.csv_fields),
                         lambda cfg: dict(CSV_SERDE_PARAMETERS), whole_file_compression=True),
    # One line per record: the whole line is the one column (LazySimpleSerDe's field delimiter \x01 would cut a
    # value containing that byte; Hive reads the text `\N` as NULL).
    "text": FormatMapping(LAZY_SERDE, TEXT_INPUT, TEXT_OUTPUT, "text",
                          lambda cfg: _columns([("value", "string", "record value decoded as UTF-8; empty when "
                                                                    "null")]),
                          lambda cfg: {"serialization.format": "1"}, whole_file_compression=True),
}


# Formats no Hive SerDe reads, with the reason (shown when definitions load, and in docs).
NO_TABLE: dict[str, str] = {
    "json": "each object is one JSON array, and Hive/Athena JSON SerDes read one JSON object per line "
            "(use jsonl for a table)",
    "bytes": "each object is one raw record value, which is not a table (use parquet or avro for a table)",
    "iceberg": "the Iceberg catalog owns the table: the archive run creates and commits it (Glue or JDBC), and a "
               "Hive table over its files would read deleted and uncommitted ones",
}


class UnsupportedFormat(ValueError):
    """The archive's format (or options) have no Glue table mapping."""


def no_table_reason(cfg: ArchiveConfig) -> str | None:
    """Why an archive gets no Glue table, or None when it gets one."""
    if cfg.format in NO_TABLE:
        return f"format {cfg.format!r}: {NO_TABLE[cfg.format]}"
    if cfg.format not in MAPPINGS:
        return f"format {cfg.format!r} has no Glue table mapping; catalogued formats: {', '.join(MAPPINGS)}"
    if cfg.layout is not None and (why := layout_reason(cfg.layout)) is not None:
        return f"layout: {why}"
    if cfg.format == "csv" and cfg.sink_output.value == "text":
        return ("csv with sink_output.value text: the raw value is written unquoted, so a value holding a comma or a "
                "quote would be split by the CSV SerDe (keep value base64 for a table)")
    if cfg.format == "avro" and cfg.decodes_fields:
        return (f"avro with value_decoding {cfg.value_decoding.type} (or key_decoding): the avro.schema.literal "
                "would have to follow every window's decoded fields (use parquet for a table of decoded fields)")
    return None


def mapping(cfg: ArchiveConfig) -> FormatMapping:
    reason = no_table_reason(cfg)
    if reason is not None:
        raise UnsupportedFormat(f"archive {cfg.name!r}: no Glue table: {reason}")
    return MAPPINGS[cfg.format]
