"""The Glue table input, the Athena DDL, the table diff, and the catalog assets' definitions (pure)."""

import copy
import datetime
import io
import json
import re
import string

import dagster as dg
import fastavro
import pytest
from pydantic import ValidationError

from s3_archive.catalog.avro_header import header_schema
from s3_archive.catalog.mappings import (
    CSV_SERDE_PARAMETERS,
    ENVELOPE,
    MAPPINGS,
    NO_TABLE,
    UnsupportedFormat,
    no_table_reason,
)
from s3_archive.catalog.table_partitions import (
    HIVE_NULL,
    layout_partition_dirs,
    layout_partition_input,
    partition_input,
    partition_values,
)
from s3_archive.catalog.tables import (
    athena_ddl,
    build_table_input,
    decoded_columns,
    merge_columns,
    options_for,
    spark_schema_ddl,
    table_changes,
    table_columns,
    table_name,
    update_input,
)
from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.catalog import CatalogOptions
from s3_archive.config.settings import Settings
from s3_archive.defs.archive.partitions import archive_asset_key, window_partitions
from s3_archive.defs.catalog.assets import build_catalog_defs, catalog_asset_key
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.s3_resource import S3Resource
from s3_archive.keys.buckets import render_path
from s3_archive.model.columns import SOURCE_FIELD
from s3_archive.model.errors import InvalidConfig
from s3_archive.model.formats import ENVELOPE_COLUMNS, FORMATS


def cfg(fmt: str = "parquet", topics: tuple[str, ...] = ("demo.orders",), name: str = "demo", **kw) -> ArchiveConfig:
    return ArchiveConfig(name=name, topics=list(topics), bucket="bkt-one", format=fmt, **{"prefix": "archive/", **kw})


def parquet_input(count: int = 3, **opts) -> dict:
    return build_table_input(cfg(), "demo.orders", CatalogOptions(**opts), count)


def as_glue_returns(table_input: dict, database: str = "s3_archive") -> dict:
    """What get_table gives back for a table created from `table_input`."""
    return {**copy.deepcopy(table_input), "DatabaseName": database, "CatalogId": "123456789012", "VersionId": "1",
            "CreateTime": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC), "IsRegisteredWithLakeFormation": False}


# --- names and options -------------------------------------------------------------------------------------------


def test_envelope_columns_follow_the_archived_envelope():
    assert [c[0] for c in ENVELOPE] == [c for c, _ in ENVELOPE_COLUMNS]


@pytest.mark.parametrize("topic,prefix,expected", [
    ("demo.orders", "", "demo_orders"), ("Orders-V2", "", "orders_v2"), ("a_b", "kafka_", "kafka_a_b"),
])
def test_table_names_are_sanitized(topic, prefix, expected):
    assert table_name(topic, CatalogOptions(table_prefix=prefix)) == expected


def test_two_topics_on_one_table_name_are_rejected_naming_both():
    with pytest.raises(InvalidConfig, match=r"archives\[1\].topics\[0\]: topic 'a_b' maps to the Glue table "
                                            r"s3_archive.a_b, as does topic 'a.b' \(archives\[0\].topics\[0\]\)"):
        build_catalog_defs(Settings(archives=[cfg(topics=("a.b",)), cfg(topics=("a_b",), name="other",
                                                                                prefix="other/")]))
    # ...unless they live in different databases.
    build_catalog_defs(Settings(archives=[cfg(topics=("a.b",)), cfg(topics=("a_b",), name="other")]),
                       {"other": CatalogOptions(database="other_db")})


@pytest.mark.parametrize("kw,needle", [
    ({"database": "My-DB"}, "database\n  Value error, must be 1-255 of a-z 0-9 _ (Glue and Athena database names), "
                            "got 'My-DB'"),
    ({"table_prefix": "x."}, "must be a-z 0-9 _ only, got 'x.'"),
    ({"partitions": "msck"}, "partitions"),
    ({"databse": "x"}, "databse"),
])
def test_bad_catalog_options_are_named(kw, needle):
    with pytest.raises(ValidationError) as e:
        CatalogOptions(**kw)
    assert needle in str(e.value)


# --- table input -------------------------------------------------------------------------------------------------


def test_parquet_table_input_with_partition_projection():
    ti = parquet_input()
    sd = ti["StorageDescriptor"]
    assert ti["Name"] == "demo_orders" and ti["TableType"] == "EXTERNAL_TABLE"
    assert [(c["Name"], c["Type"]) for c in sd["Columns"]] == [
        ("key", "binary"), ("value", "binary"), ("headers", "array<struct<key:string,value:binary>>"),
        ("topic", "string"), ("partition", "int"), ("offset", "bigint"), ("timestamp", "timestamp"),
        ("timestamp_type", "int")]
    assert [(c["Name"], c["Type"]) for c in ti["PartitionKeys"]] == [("kafka_partition", "int")]
    assert sd["Location"] == "s3://bkt-one/archive/demo.orders/"
    assert sd["SerdeInfo"]["SerializationLibrary"] == "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"
    assert sd["InputFormat"] == "org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat"
    assert sd["OutputFormat"] == "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat"
    assert {k: v for k, v in ti["Parameters"].items() if k.startswith(("projection", "storage"))} == {
        "projection.enabled": "true",
        "projection.kafka_partition.type": "integer",
        "projection.kafka_partition.range": "0,2",
        "storage.location.template": "s3://bkt-one/archive/demo.orders/kafka_partition=${kafka_partition}/",
    }
    assert ti["Parameters"]["EXTERNAL"] == "TRUE" and ti["Parameters"]["classification"] == "parquet"


def test_jsonl_table_input_uses_the_openx_serde_and_base64_strings():
    ti = build_table_input(cfg("jsonl", compression="gzip"), "demo.orders", CatalogOptions(), 1)
    sd = ti["StorageDescriptor"]
    assert sd["SerdeInfo"]["SerializationLibrary"] == "org.openx.data.jsonserde.JsonSerDe"
    assert sd["InputFormat"] == "org.apache.hadoop.mapred.TextInputFormat"
    assert sd["OutputFormat"] == "org.apache.hadoop.hive.ql.io.HiveIgnoreKeyTextOutputFormat"
    assert sd["Compressed"] is True and ti["Parameters"]["classification"] == "json"
    types = {c["Name"]: c["Type"] for c in sd["Columns"]}
    assert types["key"] == types["value"] == "string"
    assert types["headers"] == "array<struct<key:string,value:string>>"
    assert ti["Parameters"]["projection.kafka_partition.range"] == "0,0"


# What Spark 4.0's avro writer put in the header of an archived object (read with fastavro). The catalog reads the
# literal from an archived object's header at run time (avro_header.py; the integration test
# test_catalog_lifecycle.py checks the table's literal against a freshly archived object's header).
SPARK_AVRO_HEADER = (
    '{"type":"record","name":"topLevelRecord","fields":[{"name":"key","type":["bytes","null"]},{"name":"value",'
    '"type":["bytes","null"]},{"name":"headers","type":[{"type":"array","items":[{"type":"record","name":"headers",'
    '"namespace":"topLevelRecord","fields":[{"name":"key","type":["string","null"]},{"name":"value","type":["bytes",'
    '"null"]}]},"null"]},"null"]},{"name":"topic","type":["string","null"]},{"name":"partition","type":["int",'
    '"null"]},{"name":"offset","type":["long","null"]},{"name":"timestamp","type":[{"type":"long","logicalType":'
    '"timestamp-micros"},"null"]},{"name":"timestamp_type","type":["int","null"]}]}')


def test_avro_table_reads_with_sparks_writer_schema():
    ti = build_table_input(cfg("avro", compression="zstd"), "demo.orders", CatalogOptions(), 2,
                           writer_schema=SPARK_AVRO_HEADER)
    sd = ti["StorageDescriptor"]
    assert (sd["SerdeInfo"]["SerializationLibrary"], sd["InputFormat"], sd["OutputFormat"]) == (
        "org.apache.hadoop.hive.serde2.avro.AvroSerDe", "org.apache.hadoop.hive.ql.io.avro.AvroContainerInputFormat",
        "org.apache.hadoop.hive.ql.io.avro.AvroContainerOutputFormat")
    assert sd["SerdeInfo"]["Parameters"] == {"avro.schema.literal": SPARK_AVRO_HEADER}
    # the columns are the fields Spark writes, in its order
    assert [f["name"] for f in json.loads(SPARK_AVRO_HEADER)["fields"]] == [c["Name"] for c in sd["Columns"]]
    with pytest.raises(ValueError, match="topic 'demo.orders': a avro table needs the writer schema of an archived "
                                         "object for avro.schema.literal"):
        build_table_input(cfg("avro"), "demo.orders", CatalogOptions(), 2)
    # timestamp-micros is a bigint to Hive's AvroSerDe and Athena (only timestamp-millis maps to timestamp).
    assert [(c["Name"], c["Type"]) for c in sd["Columns"]] == [
        ("key", "binary"), ("value", "binary"), ("headers", "array<struct<key:string,value:binary>>"),
        ("topic", "string"), ("partition", "int"), ("offset", "bigint"), ("timestamp", "bigint"),
        ("timestamp_type", "int")]
    assert sd["Compressed"] is False and ti["Parameters"]["classification"] == "avro"


def test_the_writer_schema_is_the_avro_header_verbatim_read_without_the_records():
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(json.loads(SPARK_AVRO_HEADER)),
                    [{"key": b"k", "value": None, "headers": [], "topic": "t", "partition": 0, "offset": i,
                      "timestamp": 0, "timestamp_type": 0} for i in range(10_000)], codec="deflate")
    data = buf.getvalue()
    stream = io.BytesIO(data)
    literal = header_schema(stream)
    assert literal.encode() in data and json.loads(literal)["name"] == "topLevelRecord"
    assert stream.tell() < 2048 < len(data), "only the header is read"
    with pytest.raises(ValueError, match="is it an avro file"):
        header_schema(io.BytesIO(b"PAR1 not avro"))


@pytest.mark.parametrize("fields", [["key", "value", "offset", "timestamp", "headers"], ["value"],
                                    ["timestamp", "offset", "key"]])
def test_csv_table_columns_follow_csv_fields_in_order(fields):
    ti = build_table_input(cfg("csv", csv_fields=fields, compression="gzip"), "demo.orders", CatalogOptions(), 1)
    sd = ti["StorageDescriptor"]
    types = {"key": "string", "value": "string", "offset": "bigint", "timestamp": "bigint", "headers": "string"}
    assert [(c["Name"], c["Type"]) for c in sd["Columns"]] == [(f, types[f]) for f in fields]
    assert sd["SerdeInfo"] == {"SerializationLibrary": "org.apache.hadoop.hive.serde2.OpenCSVSerde",
                               "Parameters": {"separatorChar": ",", "quoteChar": '"', "escapeChar": "\\"}}
    assert (sd["InputFormat"], sd["Compressed"], ti["Parameters"]["classification"]) == (
        "org.apache.hadoop.mapred.TextInputFormat", True, "csv")


def test_csv_fields_never_contain_the_serdes_special_characters():
    # What stage.to_output writes: base64 (key, value, header names and values), decimal digits (offset, epoch
    # ms), ':' and ';' (headers). None needs the escape character, so OpenCSV's backslash default is safe.
    written = set(string.ascii_letters + string.digits + "+/=" + "-" + ":;")
    assert not written & set(CSV_SERDE_PARAMETERS.values())


def test_text_table_has_one_value_column():
    ti = build_table_input(cfg("text", compression="bzip2"), "demo.orders", CatalogOptions(), 1)
    sd = ti["StorageDescriptor"]
    assert [(c["Name"], c["Type"]) for c in sd["Columns"]] == [("value", "string")]
    assert sd["SerdeInfo"]["SerializationLibrary"] == "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe"
    assert (sd["InputFormat"], sd["Compressed"]) == ("org.apache.hadoop.mapred.TextInputFormat", True)
    uncompressed = build_table_input(cfg("text"), "demo.orders", CatalogOptions(), 1)
    assert uncompressed["StorageDescriptor"]["Compressed"] is False


def test_every_archive_format_has_a_table_mapping_or_a_reason_and_only_mapped_ones_get_an_asset():
    assert set(MAPPINGS) | set(NO_TABLE) == set(FORMATS)
    assert not set(MAPPINGS) & set(NO_TABLE)
    settings = Settings(archives=[cfg(f, topics=(f"t_{f}",), name=f, prefix=f"{f}/") for f in FORMATS])
    assert {a.key for a in build_catalog_defs(settings).assets} == {catalog_asset_key(f"t_{f}")
                                                                    for f in MAPPINGS}
    for f in NO_TABLE:
        with pytest.raises(UnsupportedFormat, match=f"format '{f}'"):
            build_table_input(cfg(f), "t", CatalogOptions(), 1)


def test_envelope_selection_and_utf8_value_shape_the_columns():
    c = cfg("parquet", envelope={"headers": False, "metadata": False}, value_decoding={"type": "utf8"})
    cols = build_table_input(c, "t", CatalogOptions(), 1)["StorageDescriptor"]["Columns"]
    assert [(x["Name"], x["Type"]) for x in cols] == [("key", "binary"), ("value", "string")]
    a = cfg("avro", envelope={"headers": False})
    avro_cols = build_table_input(a, "t", CatalogOptions(), 1, writer_schema="{}")["StorageDescriptor"]["Columns"]
    assert [c["Name"] for c in avro_cols] == ["key", "value", "topic", "partition", "offset", "timestamp",
                                              "timestamp_type"]


def test_avro_json_decoding_gets_no_table_with_a_reason():
    assert "avro.schema.literal" in no_table_reason(cfg("avro", value_decoding={"type": "json"}))
    assert no_table_reason(cfg("parquet", value_decoding={"type": "json"})) is None


def test_csv_with_raw_values_gets_no_table_with_a_reason():
    assert "unquoted" in no_table_reason(cfg("csv", csv_fields=["offset", "value"], sink_output={"value": "text"}))
    assert no_table_reason(cfg("csv", csv_fields=["offset", "value"], sink_output={"csv_header": True})) is None


def test_decoded_columns_from_window_schemas():
    s1 = json.dumps({"type": "struct", "fields": [
        {"name": "key", "type": "binary", "nullable": True, "metadata": {}},
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "tags", "type": {"type": "array", "elementType": "string", "containsNull": True},
         "nullable": True, "metadata": {}}]})
    s2 = json.dumps({"type": "struct", "fields": [
        {"name": "id", "type": "string", "nullable": True, "metadata": {}},
        {"name": "o", "type": {"type": "struct", "fields": [
            {"name": "d", "type": "decimal(10,2)", "nullable": True, "metadata": {}},
            {"name": "m", "type": {"type": "map", "keyType": "string", "valueType": "integer",
                                   "valueContainsNull": True}, "nullable": True, "metadata": {}}]},
         "nullable": True, "metadata": {}}]})
    cols, _ = decoded_columns(cfg("parquet", value_decoding={"type": "json"}),
                              {"m/1.json": s1, "m/2.json": s2, "m/3.json": "", "m/4.json": "not json"})
    assert [(c["Name"], c["Type"]) for c in cols] == [
        ("id", "bigint"), ("tags", "array<string>"), ("o", "struct<d:decimal(10,2),m:map<string,int>>")]


def field(name: str, spark_type) -> dict:
    return {"name": name, "type": spark_type, "nullable": True, "metadata": {}}


def test_decoded_column_types_follow_sparks_types_and_hive_lacks_some():
    nested = {"type": "struct", "fields": [field("ntz", "timestamp_ntz"), field("v", "variant")]}
    schema = json.dumps({"type": "struct", "fields": [
        field("b", "byte"), field("s", "short"), field("i", "integer"), field("l", "long"), field("f", "float"),
        field("d", "double"), field("z", "boolean"), field("bin", "binary"), field("dt", "date"),
        field("ts", "timestamp"), field("ntz", "timestamp_ntz"), field("dec", "decimal(38,0)"),
        field("var", "variant"), field("nul", "void"), field("dti", "interval day to second"),
        field("ymi", "interval year to month"), field("str", "string"),
        field("arr", {"type": "array", "elementType": nested, "containsNull": True}),
        field("map", {"type": "map", "keyType": "string", "valueType": "timestamp_ntz", "valueContainsNull": True})]})
    cols, skipped = decoded_columns(cfg("parquet", value_decoding={"type": "json"}), {"m.json": schema})
    assert skipped == {}
    assert [(c["Name"], c["Type"]) for c in cols] == [
        ("b", "tinyint"), ("s", "smallint"), ("i", "int"), ("l", "bigint"), ("f", "float"), ("d", "double"),
        ("z", "boolean"), ("bin", "binary"), ("dt", "date"), ("ts", "timestamp"), ("ntz", "timestamp"),
        ("dec", "decimal(38,0)"), ("var", "string"), ("nul", "string"), ("dti", "string"), ("ymi", "string"),
        ("str", "string"), ("arr", "array<struct<ntz:timestamp,v:string>>"), ("map", "map<string,timestamp>")]


# Field names record payloads can carry, each with the column it becomes.
PAYLOAD_NAMES = [
    ("id", "id"),
    ("userId", "userid"),  # Hive folds case: kept, lowercased
    ("first name", "first_name"),
    ("it's", "it_s"),
    ('say "hi"', "say__hi_"),
    ("a`b", "a_b"),
    ("x; DROP TABLE t; --", "x__drop_table_t____"),
    ("über", "uber"),
    ("名前", "field_2"),  # nothing ASCII left; "" sorts first and takes `field`
    ("1st", "_1st"),
    ("ID", "id_2"),        # the same as `id` after case folding
    ("key", None),         # an envelope column: not repeated
    ("Key", "key_2"),      # an envelope column's name after case folding
    ("kafka_partition", "kafka_partition_2"),  # the partition key
    ("a:string>,b", "a_string__b"),
    ("", "field"),
]


def test_payload_field_names_become_valid_column_names_and_never_reach_ddl_raw():
    nested = {"type": "struct", "fields": [field("in ner", "long"), field("x:int>", "long"), field("In Ner", "long")]}
    schema = json.dumps({"type": "struct", "fields": [field(n, "string") for n, _ in PAYLOAD_NAMES]
                         + [field("o`", nested)]})
    c = cfg("parquet", value_decoding={"type": "json"})
    cols, skipped = decoded_columns(c, {"m.json": schema})
    assert skipped == {}
    want = [col for _, col in PAYLOAD_NAMES if col is not None] + ["o_"]
    assert [col["Name"] for col in cols] == want
    assert all(re.fullmatch(r"[a-z_][a-z0-9_]*", col["Name"]) for col in cols)
    assert cols[-1]["Type"] == "struct<in_ner:bigint,x_int_:bigint,in_ner_2:bigint>"
    # A renamed column says which field it holds; a kept one does not need to.
    by_name = {col["Name"]: col["Comment"] for col in cols}
    assert by_name["x__drop_table_t____"] == ('decoded from the record value field "x; DROP TABLE t; --" '
                                              "(value_decoding: json); renamed")
    assert by_name["field_2"] == 'decoded from the record value field "\\u540d\\u524d" (value_decoding: json); renamed'
    assert by_name["id"] == by_name["userid"] == "decoded from the record value (value_decoding: json)"
    # The DDL: every column a quoted, valid identifier; the payload's text only inside quoted comments.
    table = build_table_input(c, "demo.orders", CatalogOptions(), 1, table_columns(c) + cols)
    ddl = athena_ddl("db", table)
    for line in ddl.split("(\n", 1)[1].split("\n)", 1)[0].split(",\n"):
        assert re.fullmatch(r"  `[a-z_][a-z0-9_]*` [a-z0-9<>:,_()]+( COMMENT '([^'\\]|\\.)*')?", line), line
    assert "DROP TABLE" not in ddl.replace("'decoded from the record value field \"x; DROP TABLE t; --\"", "")
    spark_names = re.findall(r"(?:^|, )`((?:[^`]|``)*)` ", spark_schema_ddl(table))
    assert spark_names == [col["Name"] for col in table["StorageDescriptor"]["Columns"] + table["PartitionKeys"]]


def test_a_column_the_archive_stored_renamed_keeps_its_name_and_says_which_field_it_holds():
    # archive/driver/spark_job.py stores `ID` next to `id` as `id_2` (model/columns.py::stored_names), its own name in metadata
    schema = json.dumps({"type": "struct", "fields": [
        field("id", "long"), {**field("id_2", "string"), "metadata": {SOURCE_FIELD: "ID"}}, field("userId", "long")]})
    cols, _ = decoded_columns(cfg("parquet", value_decoding={"type": "json"}), {"m.json": schema})
    assert [(c["Name"], c["Type"]) for c in cols] == [("id", "bigint"), ("id_2", "string"), ("userid", "bigint")]
    assert cols[1]["Comment"] == 'decoded from the record value field "ID" (value_decoding: json); renamed'
    assert cols[0]["Comment"] == cols[2]["Comment"] == "decoded from the record value (value_decoding: json)"


def test_merging_with_a_table_whose_columns_kept_their_case_gives_one_column_per_name():
    existing = [{"Name": "userId", "Type": "bigint"}, {"Name": "old", "Type": "string"}]
    merged = merge_columns([{"Name": "userid", "Type": "bigint"}], existing)
    assert [c["Name"] for c in merged] == ["userid", "old"]


def test_a_backtick_in_a_name_is_doubled_in_ddl():
    table = build_table_input(cfg("parquet"), "demo.orders", CatalogOptions(), 1, [{"Name": "a`b", "Type": "int"}])
    assert "  `a``b` int" in athena_ddl("d`b", table) and "`d``b`.`demo_orders`" in athena_ddl("d`b", table)
    assert spark_schema_ddl(table).startswith("`a``b` int")


def test_a_schema_that_does_not_parse_is_reported_by_manifest_key_and_the_rest_still_count():
    good = json.dumps({"type": "struct", "fields": [field("id", "long")]})
    bad = {
        "_manifests/t/kafka_partition=0/a.json": "not json",
        "_manifests/t/kafka_partition=1/b.json": json.dumps({"type": "struct", "fields": [field("x", "weird")]}),
        "_manifests/t/kafka_partition=2/c.json": json.dumps({"type": "struct", "fields": [{"name": "x"}]}),
        "_manifests/t/kafka_partition=3/d.json": json.dumps(["id"]),
    }
    cols, skipped = decoded_columns(cfg("parquet", value_decoding={"type": "json"}),
                                    {**bad, "_manifests/t/kafka_partition=4/e.json": good})
    assert [(c["Name"], c["Type"]) for c in cols] == [("id", "bigint")]
    assert list(skipped) == list(bad)
    assert skipped["_manifests/t/kafka_partition=0/a.json"].startswith("JSONDecodeError: Expecting value")
    assert "weird" in skipped["_manifests/t/kafka_partition=1/b.json"]
    assert skipped["_manifests/t/kafka_partition=2/c.json"] == "KeyError: 'type'"
    assert "not a Spark struct type" in skipped["_manifests/t/kafka_partition=3/d.json"]


def test_merge_columns_keeps_what_older_windows_have():
    desired = [{"Name": "key", "Type": "binary", "Comment": ""}, {"Name": "b", "Type": "int", "Comment": ""}]
    existing = [{"Name": "key", "Type": "binary"}, {"Name": "a", "Type": "string", "Comment": "old"}]
    assert [c["Name"] for c in merge_columns(desired, existing)] == ["key", "b", "a"]


def test_a_format_without_a_mapping_is_named():
    unknown = cfg().model_copy(update={"format": "orc"})  # a format added to the archive but not to MAPPINGS
    with pytest.raises(UnsupportedFormat, match="archive 'demo': no Glue table: format 'orc' has no Glue "
                                                        "table mapping; catalogued formats: parquet, avro, jsonl, "
                                                        "csv, text"):
        build_table_input(unknown, "demo.orders", CatalogOptions(), 1)


def test_explicit_mode_has_no_projection():
    ti = parquet_input(partitions="explicit")
    assert not [k for k in ti["Parameters"] if k.startswith("projection.") or k == "storage.location.template"]


def test_a_topic_has_at_least_one_partition():
    with pytest.raises(ValueError, match="partition_count must be >= 1, got 0"):
        parquet_input(0)


def test_partition_input_points_at_the_layout_directory():
    p = partition_input(parquet_input(), 7)
    assert p["Values"] == ["7"]
    assert p["StorageDescriptor"]["Location"] == "s3://bkt-one/archive/demo.orders/kafka_partition=7/"
    assert p["StorageDescriptor"]["Columns"] == parquet_input()["StorageDescriptor"]["Columns"]


# --- DDL ---------------------------------------------------------------------------------------------------------


def test_athena_ddl_matches_the_table_input():
    ddl = athena_ddl("s3_archive", parquet_input())
    assert ddl.startswith("CREATE EXTERNAL TABLE IF NOT EXISTS `s3_archive`.`demo_orders` (\n  `key` binary COMMENT")
    for line in ["  `headers` array<struct<key:string,value:binary>> COMMENT",
                 "  `partition` int COMMENT", "  `offset` bigint COMMENT", "  `timestamp` timestamp COMMENT",
                 "PARTITIONED BY (\n  `kafka_partition` int COMMENT",
                 "ROW FORMAT SERDE 'org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe'",
                 "STORED AS INPUTFORMAT 'org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat'",
                 "OUTPUTFORMAT 'org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat'",
                 "LOCATION 's3://bkt-one/archive/demo.orders/'",
                 "  'projection.kafka_partition.range' = '0,2'",
                 "  'storage.location.template' = "
                 "'s3://bkt-one/archive/demo.orders/kafka_partition=${kafka_partition}/'"]:
        assert line in ddl
    assert "'EXTERNAL'" not in ddl  # implied by CREATE EXTERNAL TABLE
    assert ddl.endswith(");")


def test_avro_ddl_carries_the_schema_literal():
    ddl = athena_ddl("s3_archive", build_table_input(cfg("avro"), "demo.orders", CatalogOptions(), 1,
                                                     writer_schema=SPARK_AVRO_HEADER))
    assert f"WITH SERDEPROPERTIES (\n  'avro.schema.literal' = '{SPARK_AVRO_HEADER}')" in ddl
    assert "  `timestamp` bigint COMMENT" in ddl


def test_ddl_escapes_quotes():
    ti = parquet_input()
    ti["Description"] = "it's a \\ test"
    assert "COMMENT 'it\\'s a \\\\ test'" in athena_ddl("db", ti)


def test_spark_schema_lists_columns_then_the_partition_key():
    assert spark_schema_ddl(parquet_input()) == (
        "`key` binary, `value` binary, `headers` array<struct<key:string,value:binary>>, `topic` string, "
        "`partition` int, `offset` bigint, `timestamp` timestamp, `timestamp_type` int, `kafka_partition` int")


# --- diff --------------------------------------------------------------------------------------------------------


def test_a_table_as_glue_returns_it_is_unchanged_even_with_foreign_parameters():
    existing = as_glue_returns(parquet_input())
    existing["Parameters"]["transient_lastDdlTime"] = "1700000000"
    assert table_changes(existing, parquet_input()) == []


def test_changes_are_named():
    existing = as_glue_returns(parquet_input(3))
    assert table_changes(existing, parquet_input(5)) == ["Parameters.projection.kafka_partition.range"]
    wider = parquet_input(3)
    wider["StorageDescriptor"]["Columns"].append({"Name": "leader_epoch", "Type": "int"})
    assert table_changes(existing, wider) == ["StorageDescriptor.Columns"]
    assert table_changes(existing, parquet_input(3, partitions="explicit")) == [
        "Parameters.projection.enabled", "Parameters.projection.kafka_partition.range",
        "Parameters.projection.kafka_partition.type", "Parameters.storage.location.template"]


def test_an_update_keeps_parameters_we_do_not_manage_and_drops_stale_ones():
    existing = as_glue_returns(parquet_input())
    existing["Parameters"]["owner_team"] = "data"
    merged = update_input(existing, parquet_input(partitions="explicit"))
    assert merged["Parameters"]["owner_team"] == "data"
    assert "projection.enabled" not in merged["Parameters"]
    assert "CatalogId" not in merged and "CreateTime" not in merged


# --- definitions -------------------------------------------------------------------------------------------------


def test_catalog_assets_depend_on_the_archive_and_are_not_partitioned():
    defs = build_catalog_defs(Settings(archives=[cfg(topics=("demo.orders", "demo.clicks"))]))
    assets = {a.key: a for a in defs.assets}
    assert set(assets) == {catalog_asset_key("demo.orders"), catalog_asset_key("demo.clicks")}
    a = assets[catalog_asset_key("demo.orders")]
    assert a.partitions_def is None
    assert set(a.asset_deps[a.key]) == {archive_asset_key("demo.orders")}
    assert a.metadata_by_key[a.key]["table"] == "s3_archive.demo_orders"


def test_code_version_follows_the_config_not_the_partition_count():
    def version(**kw) -> str:
        a = next(iter(build_catalog_defs(Settings(archives=[cfg(**kw)])).assets))
        return a.code_versions_by_key[a.key]
    assert version() == version() != version(fmt="jsonl")
    assert version(fmt="csv") != version(fmt="csv", csv_fields=["value", "key"])
    # avro: no I/O at load (the writer schema is read at run time), yet the config that shapes it changes it
    assert version(fmt="avro") == version(fmt="avro") != version(fmt="avro", envelope={"headers": False})
    assert version(fmt="avro") != version(fmt="avro", value_decoding={"type": "utf8"})


def test_the_table_refreshes_when_a_window_lands_even_while_other_windows_are_missing():
    topic = "demo.orders"
    archive = dg.AssetSpec(archive_asset_key(topic), partitions_def=window_partitions(topic))
    [catalog_asset] = build_catalog_defs(Settings(archives=[cfg(topics=(topic,))])).assets
    defs = dg.Definitions(assets=[archive, catalog_asset],
                          resources={"kafka": KafkaResource(bootstrap_servers="unused:9092"), "s3": S3Resource()})
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(window_partitions(topic).name, ["p00000-a", "p00000-b", "p00001-a"])
    state = {"cursor": None}

    def tick() -> int:
        r = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=state["cursor"],
                                              asset_selection=dg.AssetSelection.keys(catalog_asset_key(topic)))
        state["cursor"] = r.cursor
        return r.total_requested

    assert [tick(), tick()] == [0, 1]  # missing table: created on deploy (after Dagster's first, silent tick)
    instance.report_runless_asset_event(dg.AssetMaterialization(catalog_asset_key(topic)))
    assert tick() == 0
    # One window lands; the two others are still missing (eager() would wait for them).
    instance.report_runless_asset_event(dg.AssetMaterialization(archive_asset_key(topic), partition="p00000-a"))
    assert tick() == 1
    instance.report_runless_asset_event(dg.AssetMaterialization(catalog_asset_key(topic)))
    assert tick() == 0


# --- custom layouts ------------------------------------------------------------------------------------------------

FILE = "{{topic}}+{{partition}}+{{start_offset}}+{{part}}"
DAY_REGION = {"template": "{{topic}}/{{partition_by}}/" + FILE,
              "partition_by": [{"kind": "time", "path_format": "'day'=yyyy-MM-dd", "timezone": "Europe/Berlin",
                                "duration_seconds": 86400},
                               {"kind": "value", "field": "region"}]}


def keys_of(table_input: dict) -> list[tuple[str, str]]:
    return [(k["Name"], k["Type"]) for k in table_input["PartitionKeys"]]


def test_a_hive_style_layout_gets_a_table_with_its_partition_keys_and_explicit_partitions():
    c = cfg("parquet", layout=DAY_REGION)
    assert no_table_reason(c) is None
    options = options_for(c)
    assert options.partitions == "explicit"  # projection cannot describe day/region: the default follows
    ti = build_table_input(c, "demo.orders", options, 3)
    assert keys_of(ti) == [("day", "string"), ("region", "string")]
    assert ti["StorageDescriptor"]["Location"] == "s3://bkt-one/archive/demo.orders/"
    assert not [k for k in ti["Parameters"] if k.startswith(("projection.", "storage."))]
    ddl = athena_ddl("s3_archive", ti)
    assert "PARTITIONED BY (\n  `day` string COMMENT" in ddl and "`region` string COMMENT 'value field" in ddl
    # asking for projection is refused, at load, naming the keys and the fix
    for opts in ({"demo": CatalogOptions(partitions="projection")}, None):
        with pytest.raises(ValueError, match=r"archive 'demo': catalog partitions 'projection' cannot describe the "
                                             r"layout's partition keys \(day, region\).*partitions: explicit"):
            if opts is None:
                build_table_input(c, "demo.orders", CatalogOptions(), 3)
            else:
                build_catalog_defs(Settings(archives=[c]), opts)
    [asset] = build_catalog_defs(Settings(archives=[c])).assets
    assert "partitioned by day, region (explicit)" in asset.specs_by_key[catalog_asset_key("demo.orders")] \
        .description


def test_layout_keys_follow_partition_by_in_order_with_types():
    layout = {"template": "{{topic}}/{{partition_by}}/" + FILE + "+{{key}}",  # record-level values in the name
              "partition_by": [{"kind": "kafka_partition"}, {"kind": "time"}, {"kind": "header", "header": "tenant"},
                               {"kind": "key", "field": "id", "name": "kid"}]}
    c = cfg("jsonl", layout=layout, catalog={"partitions": "explicit"})
    assert no_table_reason(c) is None
    assert keys_of(build_table_input(c, "t", options_for(c), 1)) == [
        ("kafka_partition", "int"), ("year", "string"), ("month", "string"), ("day", "string"), ("hour", "string"),
        ("tenant", "string"), ("kid", "string")]


def test_a_layout_of_kafka_partition_directories_alone_keeps_projection():
    c = cfg("parquet", layout={"template": "{{topic}}/{{partition_by}}/data-{{partition}}-{{start_offset}}",
                               "partition_by": [{"kind": "kafka_partition"}]})
    assert no_table_reason(c) is None and options_for(c).partitions == "projection"
    ti = build_table_input(c, "demo.orders", options_for(c), 3)
    assert ti == parquet_input()  # same table as the default layout's


@pytest.mark.parametrize("layout,reason", [
    ({"template": "{{partition_by}}/{{topic}}+{{partition}}+{{start_offset}}"},
     r"does not start with '\{\{topic\}\}/\{\{partition_by\}\}/'"),
    ({"template": "data/{{topic}}/{{partition_by}}/{{topic}}+{{partition}}+{{start_offset}}"}, "does not start with"),
    ({"template": "{{topic}}/{{partition_by}}/{{partition}}/{{topic}}+{{start_offset}}"}, "makes more directories"),
    ({"template": "{{topic}}/{{partition_by}}/_{{topic}}+{{partition}}+{{start_offset}}"}, "hidden files"),
    ({"partition_by": [{"kind": "kafka_partition", "hive": False}]},
     r"partition_by\[0\] \(kafka_partition\) has hive: false"),
    ({"partition_by": [{"kind": "kafka_partition"}, {"kind": "value", "field": "r", "hive": False}]},
     r"partition_by\[1\] \(value\) has hive: false"),
    ({"partition_by": [{"kind": "time", "path_format": "yyyy/MM/dd"}]}, r"path_format 'yyyy/MM/dd' is not name=value"),
    ({"partition_by": [{"kind": "time", "path_format": "'year'=yyyy/MM"}]}, "is not name=value"),
    ({"partition_by": [{"kind": "time", "path_format": "'my-year'=yyyy"}]}, "is not name=value"),
])
def test_layouts_a_table_cannot_describe_get_no_table_with_the_reason(layout, reason):
    c = cfg("parquet", layout=layout)
    assert re.search(r"^layout: .*" + reason, no_table_reason(c))
    with pytest.raises(UnsupportedFormat, match=reason):
        build_table_input(c, "t", CatalogOptions(partitions="explicit"), 1)
    assert build_catalog_defs(Settings(archives=[c])).assets == []


def test_partition_values_are_the_decoded_values_and_null_is_hives_default_partition():
    layout = cfg("parquet", layout=DAY_REGION).layout
    for values, glue in [(["day=2024-03-31", "eu/west"], ["2024-03-31", "eu/west"]),
                         (["day=2024-03-31", "a b=c%é"], ["2024-03-31", "a b=c%é"]),
                         ([None, None], [HIVE_NULL, HIVE_NULL]),
                         (["day=2024-03-31", ""], ["2024-03-31", ""]),
                         (["day=2024-03-31", "(null)"], ["2024-03-31", "(null)"])]:
        path = render_path(layout, values)
        assert partition_values(layout, path) == glue, path
    hdr = cfg("parquet", layout={"partition_by": [{"kind": "kafka_partition"},
                                                  {"kind": "time", "path_format": "'y'=yyyy/'m'=MM"},
                                                  {"kind": "header", "header": "h"}]}).layout
    assert partition_values(hdr, render_path(hdr, [7, None, b"\xff"])) == [
        "7", HIVE_NULL, HIVE_NULL, "(hex)FF"]
    assert partition_values(hdr, "kafka_partition=7/y=2024/m=03/h=x") == ["7", "2024", "03", "x"]
    with pytest.raises(ValueError):
        partition_values(hdr, "kafka_partition=7/y=2024/h=x")


def test_layout_partition_dirs_from_object_keys():
    layout = cfg("parquet", layout=DAY_REGION).layout
    keys = ["day=2024-03-31/region=eu%2Fwest/t+0+0+00000.parquet",
            "day=2024-03-31/region=eu%2Fwest/t+0+9+00000.parquet",
            "day=2024-03-30/region=(null)/t+0+0+00000.parquet", "day=2024-03-30/region=(empty)/t+0+0+00000.parquet",
            "top-level-file", "day=2024-03-30/not-a-region/x", "other/dir/x", "day=2024-03-30/region=a%2f/x"]
    dirs, _ = layout_partition_dirs(layout, keys)
    assert dirs == {
        "day=2024-03-30/region=(empty)": ["2024-03-30", ""],
        "day=2024-03-30/region=(null)": ["2024-03-30", HIVE_NULL],
        "day=2024-03-31/region=eu%2Fwest": ["2024-03-31", "eu/west"]}
    ti = build_table_input(cfg("parquet", layout=DAY_REGION), "t", CatalogOptions(partitions="explicit"), 1)
    pi = layout_partition_input(ti, "day=2024-03-31/region=eu%2Fwest", ["2024-03-31", "eu/west"])
    assert pi["Values"] == ["2024-03-31", "eu/west"]
    assert pi["StorageDescriptor"]["Location"] == "s3://bkt-one/archive/t/day=2024-03-31/region=eu%2Fwest/"
    assert pi["StorageDescriptor"]["Columns"] == ti["StorageDescriptor"]["Columns"]
    # a non-UTF-8 key and the text "(hex)FF" would be one partition: refused, naming both directories
    kl = cfg("parquet", layout={"partition_by": [{"kind": "key"}]}).layout
    with pytest.raises(ValueError,
                       match=r"directories 'kafka_key=%28hex%29FF' and 'kafka_key=\(hex\)FF' have the same"):
        layout_partition_dirs(kl, ["kafka_key=(hex)FF/a", "kafka_key=%28hex%29FF/b"])


def test_directories_the_layout_does_not_parse_are_returned_with_an_object_and_the_reason():
    layout = cfg("parquet", layout=DAY_REGION).layout
    keys = ["day=2024-03-31/region=eu/t+0+0+00000.parquet", "top-level-file", "other/dir/x", "other/dir/y",
            "day=2024-03-30/not-a-region/x", "day=31-03-2024/region=eu/x", "a/b/c/x", "day=2024-03-31/region=eu/z"]
    dirs, skipped = layout_partition_dirs(layout, keys)
    assert dirs == {"day=2024-03-31/region=eu": ["2024-03-31", "eu"]}
    assert [(d.directory, d.key) for d in skipped] == [
        ("", "top-level-file"), ("a/b/c", "a/b/c/x"), ("day=2024-03-30/not-a-region", "day=2024-03-30/not-a-region/x"),
        ("day=31-03-2024/region=eu", "day=31-03-2024/region=eu/x"), ("other/dir", "other/dir/x")]
    reasons = {d.directory: d.reason for d in skipped}
    assert reasons[""] == "not in a partition directory"
    # the layout's own parse error says why (keys.buckets.parse_path)
    assert "path segments" in reasons["a/b/c"]
    assert "'not-a-region'" in reasons["day=2024-03-30/not-a-region"] and "region=" in reasons[
        "day=2024-03-30/not-a-region"]
    assert "'day=31-03-2024'" in reasons["day=31-03-2024/region=eu"] and "path_format" in reasons[
        "day=31-03-2024/region=eu"]
    assert "'other'" in reasons["other/dir"]
