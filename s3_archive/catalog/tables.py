"""The Glue table of one topic: its input (columns, SerDe, parameters, partition projection), the equivalent Athena
DDL, schema evolution of decoded fields, and the diff against a table that exists. Pure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from s3_archive.catalog.mappings import mapping, no_table_reason
from s3_archive.catalog.table_partitions import PARTITION_KEY, partition_keys, projectable, projection_refused
from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.catalog import CatalogOptions
from s3_archive.config.settings import KeyPaths, Settings, config_error
from s3_archive.model.columns import PART_FIELD, SOURCE_FIELD, column_names
from s3_archive.model.formats import ENVELOPE_COLUMNS, FORMATS

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructField, StructType

# Table parameters this module writes. Any other parameter on the table (Athena's, a person's) is kept on update.
_MANAGED = ("EXTERNAL", "classification", "storage.location.template")
_MANAGED_PREFIXES = ("projection.", "s3_archive.")


def options_for(cfg: ArchiveConfig, options: Mapping[str, CatalogOptions] | None = None) -> CatalogOptions:
    """Explicit mapping first, then `ArchiveConfig.catalog`, then the defaults.

    A custom layout that projection cannot describe (anything but `kafka_partition=<p>/` directories) defaults to
    `explicit`; asking for `projection` there is a ValueError."""
    chosen = (options or {}).get(cfg.name) or cfg.catalog or CatalogOptions()
    layout = cfg.layout
    if chosen.partitions == "explicit" or layout is None or projectable(layout):
        return chosen
    if "partitions" in chosen.model_fields_set:
        raise ValueError(projection_refused(cfg.name, layout))
    return chosen.model_copy(update={"partitions": "explicit"})


def table_name(topic: str, options: CatalogOptions = CatalogOptions()) -> str:
    """The topic as a Glue/Athena table name: lowercase, anything but [a-z0-9_] becomes '_'."""
    name = re.sub(r"[^a-z0-9_]", "_", (options.table_prefix + topic).lower())
    if len(name) > 255:
        raise ValueError(f"table name for topic {topic!r} is {len(name)} characters; Glue allows 255")
    return name


def check_table_names(tables: Iterable[tuple[str, str, str, str]]) -> None:
    """(database, table, topic, the topic's key path) quadruples: two topics must not land on one table (`a.b` and
    `a_b` both give `a_b`); InvalidConfig naming both key paths."""
    seen: dict[tuple[str, str], tuple[str, str]] = {}
    for database, table, topic, path in tables:
        other, other_path = seen.setdefault((database, table), (topic, path))
        if other != topic:
            same = other_path.split(".")[0] == path.split(".")[0]
            fix = ("topics of one archive share its catalog options: archive one of them in another archive"
                   if same else "set another catalog.table_prefix or catalog.database in one of the two archives")
            raise config_error(f"{path}: topic {topic!r} maps to the Glue table {database}.{table}, as does topic "
                               f"{other!r} ({other_path}); {fix}")


def catalog_tables(settings: Settings, options: Mapping[str, CatalogOptions] | None, paths: KeyPaths,
                   ) -> list[tuple[ArchiveConfig, str, CatalogOptions]]:
    """(archive, topic, its catalog options) of every topic with a table; a config the catalog cannot honour is
    refused naming its key path."""
    chosen = []
    for a in settings.archives:
        if no_table_reason(a) is not None:
            continue
        try:
            o = options_for(a, options)
        except ValueError as e:  # projection asked for a layout it cannot describe
            raise config_error(f"{paths.archives[a.name]}.catalog.partitions: {e}") from None
        for t in a.topics:
            try:
                table_name(t, o)
            except ValueError as e:
                raise config_error(f"{paths.topic(a.name, t)}: {e} (catalog.table_prefix + topic)") from None
            chosen.append((a, t, o))
    check_table_names((o.database, table_name(t, o), t, paths.topic(a.name, t)) for a, t, o in chosen)
    return chosen


def location(cfg: ArchiveConfig, topic: str) -> str:
    return f"s3://{cfg.bucket}/{cfg.prefix}{topic}/"


def table_columns(cfg: ArchiveConfig) -> list[dict[str, str]]:
    """The columns of the archive's objects as its format stores them (the table's columns before evolution):
    the kept envelope parts (`envelope`), the value as a string when decoded as UTF-8. Decoded JSON fields are
    added from the archived windows' schemas (decoded_columns)."""
    cols = mapping(cfg).columns(cfg)
    if not FORMATS[cfg.format].envelope:
        return cols
    kept = set(cfg.envelope.columns())
    cols = [c for c in cols if c["Name"] in kept]
    if cfg.value_decoding.type == "utf8":
        cols = [{**c, "Type": "string", "Comment": "record value as UTF-8 text; null for a tombstone"}
                if c["Name"] == "value" else c for c in cols]
    return cols


def hive_type(data_type: DataType) -> str:
    """A Spark type (pyspark.sql.types, as parsed from a manifest's `schema`) as a Hive/Glue column type. Struct
    field names come from record payloads: each is a valid name or renamed (`column_names`), so no name can change
    the type string."""
    from pyspark.sql import types as T  # when a schema is read, not at load (pyspark costs a second)

    # Spark types whose simpleString() is the Hive/Glue type too. Anything else (variant, void, intervals, char
    # and varchar) has no Hive/Athena type a JSON-decoded field could use: its column is `string` (JSON text).
    hive_atomic = (T.LongType, T.IntegerType, T.ShortType, T.ByteType, T.BooleanType, T.DoubleType, T.FloatType,
                   T.BinaryType, T.DateType, T.TimestampType, T.DecimalType)
    if isinstance(data_type, T.StructType):
        names = column_names([f.name for f in data_type.fields])
        return "struct<" + ",".join(f"{names[f.name]}:{hive_type(f.dataType)}" for f in data_type.fields) + ">"
    if isinstance(data_type, T.ArrayType):
        return f"array<{hive_type(data_type.elementType)}>"
    if isinstance(data_type, T.MapType):
        return f"map<{hive_type(data_type.keyType)},{hive_type(data_type.valueType)}>"
    if isinstance(data_type, T.TimestampNTZType):
        return "timestamp"  # Hive's timestamp has no zone either
    if isinstance(data_type, hive_atomic):
        return data_type.simpleString()
    return "string"  # StringType too: its simpleString names a collation Hive does not know


def parse_schema(text: str) -> StructType:
    """A manifest's `schema` (Spark's StructType JSON); ValueError saying why it does not parse."""
    from pyspark.sql.types import StructType

    try:
        parsed = json.loads(text)
        if not isinstance(parsed, dict) or parsed.get("type") != "struct":
            raise ValueError("not a Spark struct type (JSON object with \"type\": \"struct\")")
        return StructType.fromJson(parsed)
    # pyspark raises KeyError/TypeError for missing or mistyped keys, and an AssertionError when it formats its
    # own error for an unknown type name (pyspark 4.0)
    except (ValueError, KeyError, TypeError, AttributeError, AssertionError) as e:
        raise ValueError(f"{type(e).__name__}: {e}") from None


def decoded_columns(cfg: ArchiveConfig, schemas: Mapping[str, str],
                    ) -> tuple[list[dict[str, str]], dict[str, str]]:
    """Columns of decoded value fields found in archived windows' schemas (manifest key -> manifest `schema`,
    Spark JSON), in order of first appearance; envelope columns are not repeated. A field whose type differs
    between windows keeps its first type (Glue has one type per column). A field name that is not a valid column name
    (spaces, quotes, backticks, `;`, non-ASCII, a leading digit, a clash after case folding) is renamed
    (`column_names`) and its comment gives the field's own name, as does the comment of a column the archive
    stored renamed (`model/columns.py::stored_names`); nothing from a payload reaches DDL unchecked. Also returns
    the schemas that do not parse (manifest key -> why), for the caller to report: their fields are not columns."""
    envelope = {c for c, _ in ENVELOPE_COLUMNS}
    fields: dict[str, StructField] = {}
    skipped: dict[str, str] = {}
    for key, text in schemas.items():
        if not text:
            continue  # no schema recorded: nothing to parse
        try:
            parsed = parse_schema(text).fields
        except ValueError as e:
            skipped[key] = str(e)
            continue
        for f in parsed:
            if f.name not in envelope and f.name not in fields:
                fields[f.name] = f
    taken = [*envelope, *(c["Name"] for c in partition_keys(cfg))]
    names = column_names(list(fields), taken)
    out = []
    for name, f in fields.items():
        part = (f.metadata or {}).get(PART_FIELD, "value")
        decoding = cfg.key_decoding.type if part == "key" else cfg.value_decoding.type
        comment = f"decoded from the record {part} ({part}_decoding: {decoding})"
        # The archive stored the field under another name (archive/driver/spark_job.py): its own is in the column's
        # metadata.
        source = (f.metadata or {}).get(SOURCE_FIELD)
        source = source if isinstance(source, str) else None
        if names[name] != name.lower() or source is not None:
            shown = json.dumps(source or name)  # ASCII, one line; cut to stay within Glue's 255-character comment
            shown = shown if len(shown) <= 160 else shown[:156] + '..."'
            comment = f"decoded from the record {part} field {shown} ({part}_decoding: {decoding}); renamed"
        out.append({"Name": names[name], "Type": hive_type(f.dataType), "Comment": comment})
    return out, skipped


def merge_columns(desired: Sequence[dict[str, str]], existing: Sequence[dict[str, str]]) -> list[dict[str, str]]:
    """Schema evolution: the desired columns, then every column the table already has and they lack, so a field
    only older windows carry stays queryable. Names compare case-folded, as Hive's do (a table made when decoded
    names kept their case, `userId`, gets `userid` and not both)."""
    names = {c["Name"].lower() for c in desired}
    return [dict(c) for c in desired] + [{k: c[k] for k in ("Name", "Type", "Comment") if k in c}
                                         for c in existing if c["Name"].lower() not in names]


def build_table_input(cfg: ArchiveConfig, topic: str, options: CatalogOptions, partition_count: int,
                      columns: Sequence[dict[str, str]] | None = None,
                      writer_schema: str | None = None) -> dict[str, Any]:
    """Glue `TableInput` for the topic; `columns` defaults to the columns of the archive's format. `writer_schema`:
    the schema in an archived object's header, required by the formats whose SerDe reads with it (avro; see
    avro_header.newest_writer_schema), ignored by the others."""
    fm = mapping(cfg)
    if partition_count < 1:
        raise ValueError(f"topic {topic!r}: partition_count must be >= 1, got {partition_count}")
    serde_params = fm.serde_parameters(cfg)
    if fm.writer_schema_parameter is not None:
        if writer_schema is None:
            raise ValueError(f"topic {topic!r}: a {cfg.format} table needs the writer schema of an archived object "
                             f"for {fm.writer_schema_parameter}")
        serde_params[fm.writer_schema_parameter] = writer_schema
    loc = location(cfg, topic)
    params = {"EXTERNAL": "TRUE", "classification": fm.classification, "s3_archive.archive": cfg.name,
              "s3_archive.topic": topic, "s3_archive.format": cfg.format, "s3_archive.compression": cfg.codec}
    if cfg.decodes_fields:
        params["s3_archive.evolve"] = "true"  # decoded fields come and go between windows: never drop a column
    if cfg.sink_output.csv_header:
        params["skip.header.line.count"] = "1"  # each object's first line names the columns
    layout = cfg.layout
    if options.partitions == "projection" and layout is not None and not projectable(layout):
        raise ValueError(projection_refused(cfg.name, layout))
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
            "SerdeInfo": {"SerializationLibrary": fm.serde, "Parameters": serde_params},
        },
    }


def _quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _ident(name: str) -> str:
    """`name` as a backquoted Hive identifier (a backtick inside is doubled)."""
    return "`" + name.replace("`", "``") + "`"


def athena_ddl(database: str, table_input: dict[str, Any]) -> str:
    """The Athena (Hive DDL) statement that creates the same table as `table_input`."""
    sd = table_input["StorageDescriptor"]

    def col(c: dict[str, str]) -> str:
        return f"  {_ident(c['Name'])} {c['Type']}" + (f" COMMENT {_quote(c['Comment'])}" if c.get("Comment") else "")

    serde_params = sd["SerdeInfo"].get("Parameters") or {}
    props = {k: v for k, v in table_input["Parameters"].items() if k != "EXTERNAL"}
    lines = [f"CREATE EXTERNAL TABLE IF NOT EXISTS {_ident(database)}.{_ident(table_input['Name'])} (",
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
    return ", ".join(f"{_ident(c['Name'])} {c['Type']}" for c in cols)


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
