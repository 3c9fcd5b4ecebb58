"""The Glue Data Catalog table of an archived topic, so Athena (or Spark, Trino) can query the archive in place.

Pure part: the table input (columns from the archived envelope, SerDe and formats of the archive's format, the
partition keys of the layout's Hive-style directories, `kafka_partition int` by default; partition projection), the
equivalent Athena `CREATE EXTERNAL TABLE` DDL, and the diff against a table that exists.
I/O part (a Glue and an S3 client passed in): create the database and the table, update the table only when its
input changed, and in the explicit-partitions mode register the partition directories that exist.

Two partition modes:
- `projection` (default): `projection.*` table parameters tell Athena the partitions are `0..N-1` (N from Kafka),
  and `storage.location.template` where each one lives; no partition is registered, no MSCK REPAIR is needed.
- `explicit`: one Glue partition per `kafka_partition=<p>/` directory that exists (engines that ignore projection:
  Spark and Trino through the Glue metastore, Redshift Spectrum).

Every archive format has a mapping (MAPPINGS, one entry per format): parquet (ParquetHiveSerDe), avro (AvroSerDe with
Spark's writer schema as `avro.schema.literal`), jsonl (OpenX JsonSerDe), csv (OpenCSVSerde over the configured
`csv_fields`) and text (LazySimpleSerDe, one `value` column). Where a format stores bytes as base64 text (jsonl,
csv) the columns are `string` (`from_base64(key)` in Athena gives the bytes back).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from botocore.exceptions import ClientError
from pydantic import BaseModel, ConfigDict, field_validator

from s3_archive import partitioners as P
from s3_archive.formats import ENVELOPE_COLUMNS, FORMATS

if TYPE_CHECKING:  # settings.py imports this module for its config fields: no import cycle at run time
    from s3_archive.settings import ArchiveConfig

PARTITION_KEY = "kafka_partition"
DEFAULT_DATABASE = "s3_archive"
_GLUE_NAME = re.compile(r"[a-z0-9_]{1,255}")
_PART_DIR = re.compile(rf"{PARTITION_KEY}=(\d+)/$")
BATCH = 100  # BatchCreatePartition's limit per call

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
# avro: Spark writes the timestamp as Avro `timestamp-micros`. Hive's AvroSerDe and Athena (Trino) map only
# `timestamp-millis` to `timestamp`; a `timestamp-micros` long is a `bigint` for them, so the table says bigint.
_AVRO = {
    "timestamp": ("bigint", "record timestamp, epoch microseconds UTC (avro timestamp-micros; in Athena "
                            "from_unixtime(timestamp / 1e6))"),
}
# csv: Aiven's fields, in the configured order, as stage.to_output writes them.
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


# --- avro: the writer schema of Spark's avro data source, derived from the envelope --------------------------------

_AVRO_PRIMITIVES = {"binary": "bytes", "string": "string", "int": "int", "bigint": "long",
                    "timestamp": {"type": "long", "logicalType": "timestamp-micros"}}


def _split_top(text: str) -> list[str]:
    """`a:int,b:array<x>` -> ['a:int', 'b:array<x>'] (commas inside <> stay)."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "<") - (ch == ">")
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [*parts, cur]


def _avro_type(hive_type: str, name: str, namespace: str) -> Any:
    """A nullable Avro type for a Hive type, named as Spark's SchemaConverters.toAvroType names nested records
    (record name = field name, namespace = the enclosing record's full name). Every envelope field is nullable
    in Spark's Kafka source, and Spark writes a nullable field as the union [type, "null"]."""
    if hive_type in _AVRO_PRIMITIVES:
        base: Any = _AVRO_PRIMITIVES[hive_type]
    elif hive_type.startswith("array<") and hive_type.endswith(">"):
        base = {"type": "array", "items": _avro_type(hive_type[6:-1], name, namespace)}
    elif hive_type.startswith("struct<") and hive_type.endswith(">"):
        full = f"{namespace}.{name}" if namespace else name
        fields = [f.split(":", 1) for f in _split_top(hive_type[7:-1])]
        base = {"type": "record", "name": name, **({"namespace": namespace} if namespace else {}),
                "fields": [{"name": n, "type": _avro_type(t, n, full)} for n, t in fields]}
    else:
        raise ValueError(f"no Avro type for Hive type {hive_type!r}")
    return [base, "null"]


def avro_writer_schema(columns: Sequence[str] | None = None, utf8_value: bool = False) -> dict[str, Any]:
    """The schema Spark's avro writer puts in every archived `.avro` object's header (record `topLevelRecord`):
    the envelope `columns` kept (all by default), the value as a string when decoded as UTF-8."""
    keep = set(columns) if columns is not None else {n for n, _, _ in ENVELOPE}
    return {"type": "record", "name": "topLevelRecord",
            "fields": [{"name": n, "type": _avro_type("string" if n == "value" and utf8_value else t, n,
                                                      "topLevelRecord")}
                       for n, t, _ in ENVELOPE if n in keep]}


def avro_schema_literal(cfg: ArchiveConfig | None = None) -> str:
    """`avro.schema.literal` for the AvroSerDe: the writer schema itself, so Hive/Athena resolve nothing."""
    if cfg is None:
        schema = avro_writer_schema()
    else:
        schema = avro_writer_schema(cfg.envelope.columns(), cfg.value_decoding.type == "utf8")
    return json.dumps(schema, separators=(",", ":"))


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


MAPPINGS: dict[str, FormatMapping] = {
    "parquet": FormatMapping(PARQUET_SERDE, PARQUET_INPUT, PARQUET_OUTPUT, "parquet", lambda cfg: _envelope({}),
                             lambda cfg: {"serialization.format": "1"}),
    "avro": FormatMapping(AVRO_SERDE, AVRO_INPUT, AVRO_OUTPUT, "avro", lambda cfg: _envelope(_AVRO),
                          lambda cfg: {"avro.schema.literal": avro_schema_literal(cfg)}),
    # A malformed line is an error to see, not a row to drop silently.
    "jsonl": FormatMapping(JSON_SERDE, TEXT_INPUT, TEXT_OUTPUT, "json", lambda cfg: _envelope(_JSONL),
                           lambda cfg: {"ignore.malformed.json": "false"}, whole_file_compression=True),
    "csv": FormatMapping(CSV_SERDE, TEXT_INPUT, TEXT_OUTPUT, "csv",
                         lambda cfg: _columns((f, *CSV_COLUMNS[f]) for f in cfg.csv_fields),
                         lambda cfg: dict(CSV_SERDE_PARAMETERS), whole_file_compression=True),
    # One line per record: the whole line is the one column (LazySimpleSerDe's field delimiter \x01 would cut a
    # value containing that byte; Hive reads the text `\N` as NULL).
    "text": FormatMapping(LAZY_SERDE, TEXT_INPUT, TEXT_OUTPUT, "text",
                          lambda cfg: _columns([("value", "string", "record value decoded as UTF-8; empty when "
                                                                    "null")]),
                          lambda cfg: {"serialization.format": "1"}, whole_file_compression=True),
}

# Table parameters this module writes. Any other parameter on the table (Athena's, a person's) is kept on update.
_MANAGED = ("EXTERNAL", "classification", "storage.location.template")
_MANAGED_PREFIXES = ("projection.", "s3_archive.")


# Formats no Hive SerDe reads, with the reason (shown when definitions load, and in docs).
NO_TABLE: dict[str, str] = {
    "json": "each object is one JSON array, and Hive/Athena JSON SerDes read one JSON object per line "
            "(use jsonl for a table)",
    "bytes": "each object is one raw record value, which is not a table (use parquet or avro for a table)",
}


class UnsupportedFormat(ValueError):
    """The archive's format (or options) have no Glue table mapping."""


def no_table_reason(cfg: ArchiveConfig) -> str | None:
    """Why an archive gets no Glue table, or None when it gets one."""
    if cfg.format in NO_TABLE:
        return f"format {cfg.format!r}: {NO_TABLE[cfg.format]}"
    if cfg.format not in MAPPINGS:
        return f"format {cfg.format!r} has no Glue table mapping; catalogued formats: {', '.join(MAPPINGS)}"
    layout = getattr(cfg, "layout", None)
    if layout is not None and (why := layout_reason(layout)) is not None:
        return f"layout: {why}"
    decoding = getattr(cfg, "value_decoding", None)
    if cfg.format == "avro" and decoding is not None and decoding.type == "json":
        return ("avro with value_decoding json: the avro.schema.literal would have to follow every window's "
                "inferred fields (use parquet or jsonl for a table of decoded fields)")
    return None


def mapping(cfg: ArchiveConfig) -> FormatMapping:
    reason = no_table_reason(cfg)
    if reason is not None:
        raise UnsupportedFormat(f"archive {cfg.name!r}: no Glue table: {reason}")
    return MAPPINGS[cfg.format]


class CatalogOptions(BaseModel):
    """Where and how an archive's topics are catalogued."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    database: str = DEFAULT_DATABASE
    table_prefix: str = ""
    partitions: Literal["projection", "explicit"] = "projection"

    @field_validator("database")
    @classmethod
    def _database(cls, v: str) -> str:
        if not _GLUE_NAME.fullmatch(v):
            raise ValueError(f"must be 1-255 of a-z 0-9 _ (Glue and Athena database names), got {v!r}")
        return v

    @field_validator("table_prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        if v and not _GLUE_NAME.fullmatch(v):
            raise ValueError(f"must be a-z 0-9 _ only, got {v!r}")
        return v


def options_for(cfg: ArchiveConfig, options: Mapping[str, CatalogOptions] | None = None) -> CatalogOptions:
    """Explicit mapping first, then `ArchiveConfig.catalog` once settings.py has it, then the defaults.

    A custom layout that projection cannot describe (anything but `kafka_partition=<p>/` directories) defaults to
    `explicit`; asking for `projection` there is a ValueError."""
    chosen = (options or {}).get(cfg.name) or getattr(cfg, "catalog", None) or CatalogOptions()
    layout = getattr(cfg, "layout", None)
    if chosen.partitions == "explicit" or layout is None or projectable(layout):
        return chosen
    if "partitions" in chosen.model_fields_set:
        raise ValueError(_projection_refused(cfg.name, layout))
    return chosen.model_copy(update={"partitions": "explicit"})


def table_name(topic: str, options: CatalogOptions = CatalogOptions()) -> str:
    """The topic as a Glue/Athena table name: lowercase, anything but [a-z0-9_] becomes '_'."""
    name = re.sub(r"[^a-z0-9_]", "_", (options.table_prefix + topic).lower())
    if len(name) > 255:
        raise ValueError(f"table name for topic {topic!r} is {len(name)} characters; Glue allows 255")
    return name


def check_table_names(tables: Iterable[tuple[str, str, str]]) -> None:
    """(database, table, topic) triples: two topics must not land on one table (`a.b` and `a_b` both give `a_b`)."""
    seen: dict[tuple[str, str], str] = {}
    for database, table, topic in tables:
        other = seen.setdefault((database, table), topic)
        if other != topic:
            raise ValueError(f"topics {other!r} and {topic!r} both map to table {database}.{table}; set a "
                             "different catalog table_prefix or database for one of their archives")


def location(cfg: ArchiveConfig, topic: str) -> str:
    return f"s3://{cfg.bucket}/{cfg.prefix}{topic}/"


def table_columns(cfg: ArchiveConfig) -> list[dict[str, str]]:
    """The columns of the archive's objects as its format stores them (the table's columns before evolution):
    the kept envelope parts (`envelope`), the value as a string when decoded as UTF-8. Decoded JSON fields are
    added from the archived windows' schemas (decoded_columns)."""
    cols = mapping(cfg).columns(cfg)
    envelope = getattr(cfg, "envelope", None)
    if envelope is None or not FORMATS[cfg.format].envelope:
        return cols
    kept = set(envelope.columns())
    cols = [c for c in cols if c["Name"] in kept]
    if cfg.value_decoding.type == "utf8":
        cols = [{**c, "Type": "string", "Comment": "record value as UTF-8 text; null for a tombstone"}
                if c["Name"] == "value" else c for c in cols]
    return cols


def hive_type(spark_type: Any) -> str:
    """A Spark schema JSON type (as in a manifest's `schema`) as a Hive/Glue column type."""
    simple = {"string": "string", "long": "bigint", "integer": "int", "short": "smallint", "byte": "tinyint",
              "boolean": "boolean", "double": "double", "float": "float", "binary": "binary", "date": "date",
              "timestamp": "timestamp", "timestamp_ntz": "timestamp"}
    if isinstance(spark_type, str):
        if spark_type.startswith("decimal"):
            return spark_type.replace(" ", "")
        return simple.get(spark_type, "string")  # variant, void, intervals: JSON text
    kind = spark_type.get("type")
    if kind == "struct":
        return "struct<" + ",".join(f"{f['name']}:{hive_type(f['type'])}" for f in spark_type["fields"]) + ">"
    if kind == "array":
        return f"array<{hive_type(spark_type['elementType'])}>"
    if kind == "map":
        return f"map<{hive_type(spark_type['keyType'])},{hive_type(spark_type['valueType'])}>"
    return "string"


def decoded_columns(cfg: ArchiveConfig, schemas: Iterable[str]) -> list[dict[str, str]]:
    """Columns of decoded value fields found in archived windows' schemas (manifest `schema`, Spark JSON), in
    order of first appearance; envelope columns are not repeated. A field whose type differs between windows
    keeps its first type (Glue has one type per column)."""
    envelope = {c for c, _ in ENVELOPE_COLUMNS}
    out: dict[str, dict[str, str]] = {}
    for text in schemas:
        try:
            fields = json.loads(text).get("fields", []) if text else []
        except ValueError:
            continue
        for f in fields:
            if f["name"] not in envelope and f["name"] not in out:
                out[f["name"]] = {"Name": f["name"], "Type": hive_type(f["type"]),
                                  "Comment": "decoded from the record value (value_decoding: json)"}
    return list(out.values())


def latest_schemas(s3: Any, bucket: str, prefix: str, topic: str) -> list[str]:
    """The `schema` of the newest committed window of each Kafka partition (one GET per partition)."""
    from s3_archive import layout
    from s3_archive.commit import list_objects, read_manifest

    newest: dict[str, str] = {}
    for o in list_objects(s3, bucket, layout.manifest_prefix(prefix, topic)):
        directory = o["Key"].rsplit("/", 1)[0]
        newest[directory] = max(newest.get(directory, ""), o["Key"])  # window keys sort by start offset
    schemas = []
    for key in sorted(newest.values()):
        m = read_manifest(s3, bucket, key)
        if m and m.get("schema"):
            schemas.append(m["schema"])
    return schemas


def merge_columns(desired: Sequence[dict[str, str]], existing: Sequence[dict[str, str]]) -> list[dict[str, str]]:
    """Schema evolution: the desired columns, then every column the table already has and they lack, so a field
    only older windows carry stays queryable."""
    names = {c["Name"] for c in desired}
    return [dict(c) for c in desired] + [{k: c[k] for k in ("Name", "Type", "Comment") if k in c}
                                         for c in existing if c["Name"] not in names]


def build_table_input(cfg: ArchiveConfig, topic: str, options: CatalogOptions, partition_count: int,
                      columns: Sequence[dict[str, str]] | None = None) -> dict[str, Any]:
    """Glue `TableInput` for the topic; `columns` defaults to the columns of the archive's format."""
    fm = mapping(cfg)
    if partition_count < 1:
        raise ValueError(f"topic {topic!r}: partition_count must be >= 1, got {partition_count}")
    loc = location(cfg, topic)
    params = {"EXTERNAL": "TRUE", "classification": fm.classification, "s3_archive.archive": cfg.name,
              "s3_archive.topic": topic, "s3_archive.format": cfg.format, "s3_archive.compression": cfg.codec}
    decoding = getattr(cfg, "value_decoding", None)
    if decoding is not None and decoding.type == "json":
        params["s3_archive.evolve"] = "true"  # decoded fields come and go between windows: never drop a column
    layout = getattr(cfg, "layout", None)
    if options.partitions == "projection" and layout is not None and not projectable(layout):
        raise ValueError(_projection_refused(cfg.name, layout))
    if options.partitions == "projection":
        params |= {"projection.enabled": "true",
                   f"projection.{PARTITION_KEY}.type": "integer",
                   f"projection.{PARTITION_KEY}.range": f"0,{partition_count - 1}",
                   "storage.location.template": f"{loc}{PARTITION_KEY}=${{{PARTITION_KEY}}}/"}
    return {
        "Name": table_name(topic, options),
        "Description": f"Kafka topic {topic} archived by s3-archive (archive {cfg.name}, {cfg.format}/{cfg.codec}); "
                       f"one row per record",
        "TableType": "EXTERNAL_TABLE",
        "Parameters": params,
        "PartitionKeys": partition_keys(cfg),
        "StorageDescriptor": {
            "Columns": [dict(c) for c in (columns if columns is not None else table_columns(cfg))],
            "Location": loc,
            "InputFormat": fm.input_format,
            "OutputFormat": fm.output_format,
            "Compressed": fm.whole_file_compression and cfg.codec != "none",
            "SerdeInfo": {"SerializationLibrary": fm.serde, "Parameters": fm.serde_parameters(cfg)},
        },
    }


def _quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def athena_ddl(database: str, table_input: dict[str, Any]) -> str:
    """The Athena (Hive DDL) statement that creates the same table as `table_input`."""
    sd = table_input["StorageDescriptor"]

    def col(c: dict[str, str]) -> str:
        return f"  `{c['Name']}` {c['Type']}" + (f" COMMENT {_quote(c['Comment'])}" if c.get("Comment") else "")

    serde_params = sd["SerdeInfo"].get("Parameters") or {}
    props = {k: v for k, v in table_input["Parameters"].items() if k != "EXTERNAL"}
    lines = [f"CREATE EXTERNAL TABLE IF NOT EXISTS `{database}`.`{table_input['Name']}` (",
             ",\n".join(col(c) for c in sd["Columns"]),
             ")"]
    if table_input.get("Description"):
        lines.append(f"COMMENT {_quote(table_input['Description'])}")
    lines.append("PARTITIONED BY (\n" + ",\n".join(col(c) for c in table_input["PartitionKeys"]) + ")")
    lines.append(f"ROW FORMAT SERDE {_quote(sd['SerdeInfo']['SerializationLibrary'])}")
    if serde_params:
        lines.append("WITH SERDEPROPERTIES (\n" + ",\n".join(f"  {_quote(k)} = {_quote(v)}"
                                                            for k, v in serde_params.items()) + ")")
    lines.append(f"STORED AS INPUTFORMAT {_quote(sd['InputFormat'])}")
    lines.append(f"OUTPUTFORMAT {_quote(sd['OutputFormat'])}")
    lines.append(f"LOCATION {_quote(sd['Location'])}")
    if props:
        lines.append("TBLPROPERTIES (\n" + ",\n".join(f"  {_quote(k)} = {_quote(v)}" for k, v in props.items())
                     + ")")
    return "\n".join(lines) + ";"


def spark_schema_ddl(table_input: dict[str, Any]) -> str:
    """The table's columns and partition key as a Spark DDL schema: read the location as the catalog declares it."""
    cols = [*table_input["StorageDescriptor"]["Columns"], *table_input["PartitionKeys"]]
    return ", ".join(f"`{c['Name']}` {c['Type']}" for c in cols)


# --- custom layouts (pure) ----------------------------------------------------------------------------------------

_COLUMN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"  # the partition value Hive, Spark and Athena read as NULL
_DEFAULT_KEYS = [{"Name": PARTITION_KEY, "Type": "int",
                  "Comment": f"Kafka partition (the layout directory {PARTITION_KEY}=<p>)"}]


def layout_reason(layout: P.OutputLayout) -> str | None:
    """Why a Hive table cannot describe this layout, or None. A table can when every object lies in
    `<topic>/<partition_by path>/<file name>`, the path made only of Hive-style `name=value` segments."""
    parts = layout.key_template.parts
    head = [p if isinstance(p, str) else p.name for p in parts[:3]]
    rest = parts[3:]
    if (not layout.partition_by or head != ["topic", "/", "partition_by"] or not rest
            or not isinstance(rest[0], str) or not rest[0].startswith("/")):
        return (f"template {layout.template!r} does not start with '{{{{topic}}}}/{{{{partition_by}}}}/' (a table "
                "needs its partitions as the directories under <prefix><topic>/)")
    name = [rest[0][1:], *rest[1:]]
    if any("/" in p for p in name if isinstance(p, str)) or any(
            not isinstance(p, str) and p.name == "partition_by" for p in name):
        return (f"template {layout.template!r}: the file name after '{{{{partition_by}}}}/' makes more directories "
                "(a '/' or a second {{partition_by}}), which are not partitions a table declares")
    if name[0] and name[0][0] in "._":
        return (f"template {layout.template!r}: file names starting with {name[0][0]!r} are hidden files to "
                "Hive, Spark and Athena, which would read no data")
    for i, d in enumerate(layout.partition_by):
        if isinstance(d, P.RecordTime):
            names = d.hive_names()
            if len(names) != d.segments or not all(_COLUMN.fullmatch(n) for n in names):
                return (f"partition_by[{i}] (time): path_format {d.path_format!r} is not name=value segments with "
                        "column names (e.g. 'year'=yyyy/'month'=MM)")
        elif not d.hive:
            return (f"partition_by[{i}] ({d.kind}) has hive: false; a table needs name=value directories "
                    "(hive: true)")
    return None


def projectable(layout: P.OutputLayout) -> bool:
    """Partition projection describes only `kafka_partition=<p>/` (an integer range); other keys would need every
    value enumerated or `injected` (a WHERE on each key in every query), so they are registered explicitly."""
    return [type(d) for d in layout.partition_by] == [P.KafkaPartition]


def _projection_refused(archive: str, layout: P.OutputLayout) -> str:
    keys = ", ".join(k["Name"] for k in _layout_keys(layout))
    return (f"archive {archive!r}: catalog partitions 'projection' cannot describe the layout's partition keys "
            f"({keys}); only kafka_partition alone can be projected. Set `catalog: {{partitions: explicit}}` (the "
            "default for such layouts)")


def _layout_keys(layout: P.OutputLayout) -> list[dict[str, str]]:
    keys: list[dict[str, str]] = []
    for d in layout.partition_by:
        if isinstance(d, P.KafkaPartition):
            keys.append(_DEFAULT_KEYS[0])
        elif isinstance(d, P.RecordTime):
            source = d.source if d.field is None else f"{d.source} {d.field!r}"
            keys += [{"Name": n, "Type": "string",
                      "Comment": f"record time ({source}), path_format {d.path_format}, "
                                 f"{layout.time_zone(d)}"} for n in d.hive_names()]
        else:
            if isinstance(d, P.ValueField):
                what = f"value field {d.field!r}"
            elif isinstance(d, P.KeyField):
                what = "record key" if d.field is None else f"key field {d.field!r}"
            else:
                what = f"header {d.header!r}"
            keys.append({"Name": d.column, "Type": "string",
                         "Comment": f"{what} as text; null when absent"})
    return keys


def partition_keys(cfg: ArchiveConfig) -> list[dict[str, str]]:
    """The table's partition keys: `kafka_partition int`, or the layout's Hive names in order (time keys and
    field values `string`)."""
    layout = getattr(cfg, "layout", None)
    return [dict(k) for k in (_DEFAULT_KEYS if layout is None else _layout_keys(layout))]


def partition_values(layout: P.OutputLayout, path: str) -> list[str]:
    """The Glue partition values of one partition_by path (`day=2024-03-31/region=eu%2Fwest` -> ['2024-03-31',
    'eu/west']): decoded, as Spark's and Hive's partition discovery give them; null is HIVE_NULL, a binary value
    that is not UTF-8 keeps its `(hex)…` text. ValueError for a path the layout does not write."""
    out: list[str] = []
    for d, v in zip(layout.partition_by, P.parse_path(layout, path), strict=True):
        if isinstance(d, P.RecordTime):
            names = d.hive_names()
            out += [HIVE_NULL] * len(names) if v is None else [s.split("=", 1)[1] for s in str(v).split("/")]
        elif v is None:
            out.append(HIVE_NULL)
        elif isinstance(v, bytes):
            out.append(P.encode_bytes(v))
        else:
            out.append(str(v))
    return out


def layout_partition_dirs(layout: P.OutputLayout, keys: Iterable[str]) -> dict[str, list[str]]:
    """Partition directory (relative to the table location, no trailing '/') -> values, for object keys given
    relative to the location. Keys outside partition_by directories are ignored. Two directories with the same
    values (e.g. a non-UTF-8 key `(hex)FF` and the text '(hex)FF') cannot both be partitions: ValueError."""
    dirs: dict[str, list[str]] = {}
    for key in keys:
        directory = key.rpartition("/")[0]
        if directory in dirs or not directory:
            continue
        try:
            dirs[directory] = partition_values(layout, directory)
        except ValueError:
            continue
    seen: dict[tuple[str, ...], str] = {}
    for directory, values in sorted(dirs.items()):
        other = seen.setdefault(tuple(values), directory)
        if other != directory:
            raise ValueError(f"directories {other!r} and {directory!r} have the same partition values {values}; "
                             "a table can register only one of them")
    return dict(sorted(dirs.items()))


def layout_partition_input(table_input: dict[str, Any], directory: str, values: Sequence[str]) -> dict[str, Any]:
    sd = table_input["StorageDescriptor"]
    return {"Values": list(values), "StorageDescriptor": {**sd, "Location": f"{sd['Location']}{directory}/"}}


# --- diff (pure) ------------------------------------------------------------------------------------------------


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        out = {k: _clean(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in (None, "", {}, [])}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _managed(key: str) -> bool:
    return key in _MANAGED or key.startswith(_MANAGED_PREFIXES)


_SD_FIELDS = ("Columns", "Location", "InputFormat", "OutputFormat", "Compressed", "SerdeInfo")


def table_changes(existing: dict[str, Any], desired: dict[str, Any]) -> list[str]:
    """The fields where a table from `get_table` differs from `desired` (a table input); empty: up to date.

    Only what we declare is compared: parameters we do not manage (Athena's, a person's) are not a change.
    """
    changes = [k for k in ("Description", "TableType", "PartitionKeys")
               if _clean(existing.get(k)) != _clean(desired.get(k))]
    have = {k: v for k, v in (existing.get("Parameters") or {}).items() if _managed(k)}
    want = desired.get("Parameters") or {}
    changes += [f"Parameters.{k}" for k in sorted(set(have) | set(want)) if have.get(k) != want.get(k)]
    esd, dsd = existing.get("StorageDescriptor") or {}, desired["StorageDescriptor"]
    changes += [f"StorageDescriptor.{k}" for k in _SD_FIELDS if _clean(esd.get(k)) != _clean(dsd.get(k))]
    return changes


def update_input(existing: dict[str, Any], desired: dict[str, Any]) -> dict[str, Any]:
    """`desired`, keeping the table parameters we do not manage."""
    foreign = {k: v for k, v in (existing.get("Parameters") or {}).items() if not _managed(k)}
    return {**desired, "Parameters": {**foreign, **desired["Parameters"]}}


def partition_input(table_input: dict[str, Any], partition: int) -> dict[str, Any]:
    sd = table_input["StorageDescriptor"]
    return {"Values": [str(partition)],
            "StorageDescriptor": {**sd, "Location": f"{sd['Location']}{PARTITION_KEY}={partition}/"}}


# --- sync (I/O on Glue and S3 clients) --------------------------------------------------------------------------


class TableConflict(ValueError):
    """The table name is taken by a table this archive did not create."""


def _code(e: ClientError) -> str:
    return str(e.response.get("Error", {}).get("Code", ""))


def ensure_database(glue: Any, name: str) -> bool:
    """Create the database if missing; True if this call created it."""
    try:
        glue.get_database(Name=name)
        return False
    except ClientError as e:
        if _code(e) != "EntityNotFoundException":
            raise
    try:
        glue.create_database(DatabaseInput={"Name": name, "Description": "Kafka topics archived by s3-archive"})
    except ClientError as e:
        if _code(e) == "AlreadyExistsException":  # created concurrently (another topic's catalog run)
            return False
        raise
    return True


def ensure_table(glue: Any, database: str, table_input: dict[str, Any]) -> tuple[str, list[str]]:
    """Create the table, or update it if its input changed: ("created" | "updated" | "unchanged", changed fields)."""
    name = table_input["Name"]
    try:
        existing = glue.get_table(DatabaseName=database, Name=name)["Table"]
    except ClientError as e:
        if _code(e) != "EntityNotFoundException":
            raise
        try:
            glue.create_table(DatabaseName=database, TableInput=table_input)
            return "created", []
        except ClientError as e2:
            if _code(e2) != "AlreadyExistsException":
                raise
            existing = glue.get_table(DatabaseName=database, Name=name)["Table"]
    owner = (existing.get("Parameters") or {}).get("s3_archive.topic")
    wanted = table_input["Parameters"]["s3_archive.topic"]
    if owner != wanted:
        # Never take over a table someone else made (or another topic's): updating would replace its definition.
        what = "was not created by s3-archive" if owner is None else f"catalogues topic {owner!r}"
        raise TableConflict(f"table {database}.{name} {what}, not topic {wanted!r}; drop or rename it, or set a "
                            "different catalog table_prefix or database")
    if (table_input["Parameters"] or {}).get("s3_archive.evolve") == "true":
        sd = table_input["StorageDescriptor"]
        table_input = {**table_input, "StorageDescriptor": {
            **sd, "Columns": merge_columns(sd["Columns"], (existing.get("StorageDescriptor") or {}).get("Columns")
                                           or [])}}
    changes = table_changes(existing, table_input)
    if not changes:
        return "unchanged", []
    glue.update_table(DatabaseName=database, TableInput=update_input(existing, table_input))
    return "updated", changes


def partition_dirs(s3: Any, bucket: str, prefix: str, topic: str) -> list[int]:
    """The Kafka partitions that have a `kafka_partition=<p>/` directory (at least one object) under the topic."""
    found = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}{topic}/",
                                                              Delimiter="/"):
        for cp in page.get("CommonPrefixes", []):
            m = _PART_DIR.search(cp["Prefix"])
            if m:
                found.append(int(m.group(1)))
    return sorted(found)


def registered_values(glue: Any, database: str, table: str) -> set[tuple[str, ...]]:
    out: set[tuple[str, ...]] = set()
    for page in glue.get_paginator("get_partitions").paginate(DatabaseName=database, TableName=table):
        out |= {tuple(p["Values"]) for p in page.get("Partitions", [])}
    return out


def registered_partitions(glue: Any, database: str, table: str) -> set[int]:
    return {int(v[0]) for v in registered_values(glue, database, table)}


def register_partition_inputs(glue: Any, database: str, table: str, inputs: Sequence[dict[str, Any]],
                              ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Register the partition inputs whose values are not yet in the catalog: (added, already registered).
    Existing partitions are untouched; one registered concurrently counts as added."""
    have = registered_values(glue, database, table)
    missing = [i for i in inputs if tuple(i["Values"]) not in have]
    added: list[dict[str, Any]] = []
    for n in range(0, len(missing), BATCH):
        chunk = missing[n:n + BATCH]
        r = glue.batch_create_partition(DatabaseName=database, TableName=table, PartitionInputList=chunk)
        errors = r.get("Errors", [])
        # Registered concurrently by another run: as good as added by us.
        raced = {tuple(e["PartitionValues"]) for e in errors
                 if e.get("ErrorDetail", {}).get("ErrorCode") == "AlreadyExistsException"}
        failed = [e for e in errors if e.get("ErrorDetail", {}).get("ErrorCode") != "AlreadyExistsException"]
        if failed:
            detail = "; ".join(f"{e['PartitionValues']}: {e['ErrorDetail'].get('ErrorCode')} "
                               f"{e['ErrorDetail'].get('ErrorMessage', '')}" for e in failed[:5])
            raise RuntimeError(f"registering partitions of {database}.{table} failed: {detail}")
        added += [i for i in chunk if tuple(i["Values"]) not in raced]
    return added, [i for i in inputs if tuple(i["Values"]) in have]


def register_partitions(glue: Any, database: str, table_input: dict[str, Any],
                        partitions: Sequence[int]) -> tuple[list[int], list[int]]:
    """Register the Kafka partitions not yet in the catalog: (added, already registered)."""
    added, existing = register_partition_inputs(glue, database, table_input["Name"],
                                                [partition_input(table_input, p) for p in sorted(set(partitions))])
    return [int(i["Values"][0]) for i in added], [int(i["Values"][0]) for i in existing]


def layout_partitions(s3: Any, cfg: ArchiveConfig, topic: str, table_input: dict[str, Any]) -> list[dict[str, Any]]:
    """Partition inputs of every partition_by directory under the topic that holds an object (one listing)."""
    from s3_archive.commit import list_objects

    base = f"{cfg.prefix}{topic}/"
    keys = (o["Key"][len(base):] for o in list_objects(s3, cfg.bucket, base))
    return [layout_partition_input(table_input, d, v)
            for d, v in layout_partition_dirs(cfg.layout, keys).items()]


@dataclass(frozen=True)
class CatalogSync:
    database: str
    table: str
    database_created: bool
    table_action: str  # "created" | "updated" | "unchanged"
    changes: list[str] = field(default_factory=list)
    # Kafka partitions (default layout) or partition directories relative to the location (custom layout)
    partitions_added: list[int] | list[str] = field(default_factory=list)
    partitions_existing: list[int] | list[str] = field(default_factory=list)


def sync_catalog(glue: Any, s3: Any, cfg: ArchiveConfig, topic: str, options: CatalogOptions,
                 table_input: dict[str, Any]) -> CatalogSync:
    """Database, table, and (explicit mode) partitions of one topic, each written only when missing or changed."""
    created = ensure_database(glue, options.database)
    action, changes = ensure_table(glue, options.database, table_input)
    added: list[int] | list[str] = []
    existing: list[int] | list[str] = []
    if options.partitions == "explicit" and getattr(cfg, "layout", None) is not None:
        base = len(table_input["StorageDescriptor"]["Location"])
        new, old = register_partition_inputs(glue, options.database, table_input["Name"],
                                             layout_partitions(s3, cfg, topic, table_input))
        added, existing = ([i["StorageDescriptor"]["Location"][base:-1] for i in x] for x in (new, old))
    elif options.partitions == "explicit":
        added, existing = register_partitions(glue, options.database, table_input,
                                              partition_dirs(s3, cfg.bucket, cfg.prefix, topic))
    return CatalogSync(options.database, table_input["Name"], created, action, changes, added, existing)
