"""Schema Registry decoding in the config (value_decoding / key_decoding avro, protobuf, json_schema), its connection
resource, its import from Kafka Connect converters, and the pure parts around it: the columns of a schema, the
manifest listing the schemas, the id rewrite of a restore."""

from __future__ import annotations

import json

import pytest
import yaml

from s3_archive.config.connect_import.convert import import_connect
from s3_archive.config.settings import parse_settings
from s3_archive.io.registry_client import RegistryConnection, RegistrySchema
from s3_archive.io.schema_registry import SchemaRegistryResource
from s3_archive.model.errors import InvalidConfig
from s3_archive.model.manifest import parse_manifest
from s3_archive.model.registry_types import IncompatibleFields, json_schema_columns, merge_types
from s3_archive.restore.batch import Records
from s3_archive.restore.schema_ids import SchemaRewrite, subject
from s3_archive_tests.manifests import hand_manifest
from s3_archive_tests.unit.config.parsed import cfg, err


def test_registry_types_are_restorable_with_the_raw_value():
    a = cfg(value_decoding={"type": "avro", "on_error": "dead_letter", "column_prefix": "v_"},
            key_decoding={"type": "protobuf"})
    assert a.value_decoding.registry and a.key_decoding.registry and a.restorable


def test_registry_decoding_needs_parquet_or_avro():
    assert "archives[0]: value_decoding.type 'avro' needs format parquet, avro or iceberg" in err(
        format="jsonl", value_decoding={"type": "avro"})
    assert "key_decoding.type 'json_schema' needs format parquet, avro or iceberg" in err(
        format="csv", key_decoding={"type": "json_schema"})


def test_registry_options_apply_to_their_types():
    assert "subject applies to types avro, protobuf, json_schema, not 'json'" in err(
        value_decoding={"type": "json", "subject": "x"})
    assert "key_decoding.column_prefix and value_decoding.column_prefix are both 'k_'" in err(
        value_decoding={"type": "avro", "column_prefix": "k_"}, key_decoding={"type": "avro", "column_prefix": "k_"})
    assert "layout.partition_by[0]: a time from a value field is not supported with value_decoding.type 'avro'" in err(
        value_decoding={"type": "avro"},
        layout={"partition_by": [{"kind": "time", "source": "value", "field": "at"}], "template":
                "{{topic}}/{{partition_by}}/{{topic}}+{{partition}}+{{start_offset}}"})
    assert cfg(value_decoding={"type": "avro"}, layout={"partition_by": [{"kind": "value", "field": "a.b"}], "template":
               "{{topic}}/{{partition_by}}/{{topic}}+{{partition}}+{{start_offset}}"}).layout is not None


def test_the_resource_checks_its_settings_and_hides_the_password():
    assert SchemaRegistryResource().connection() is None
    conn = SchemaRegistryResource(url="https://r:8081/", username="u", password="p@ss").connection()
    assert conn == RegistryConnection("https://r:8081", "u", "p@ss", None, 10) and "p@ss" not in repr(conn)
    with pytest.raises(InvalidConfig, match=r"\$S3_ARCHIVE_SCHEMA_REGISTRY_URL is 'r:8081'; it must start with"):
        SchemaRegistryResource(url="r:8081").connection()
    with pytest.raises(InvalidConfig, match="needs both"):
        SchemaRegistryResource(url="http://r", username="u").connection()


def test_json_schema_columns_and_the_union_of_versions():
    v1 = json_schema_columns(json.dumps({"type": "object", "properties": {"a": {"type": "integer"}}}))
    v2 = json_schema_columns(json.dumps({"type": "object", "properties": {
        "a": {"type": "integer"}, "b": {"type": "object", "properties": {"c": {"type": ["null", "string"]}}}}}))
    merged = merge_types(v1, v2)
    assert [f["name"] for f in merged["fields"]] == ["a", "b"]
    assert merged["fields"][1]["type"]["fields"][0]["type"] == "string"
    changed = json_schema_columns(json.dumps({"type": "object", "properties": {"a": {"type": "string"}}}))
    with pytest.raises(IncompatibleFields, match="field 'a' is long in one schema and string in the other"):
        merge_types(v1, changed)


def test_a_manifest_listing_schemas_is_version_2():
    m = json.loads(hand_manifest("t", manifest_version=1).dumps())
    listed = [{"part": "value", "id": 7, "schema_type": "AVRO", "subject": "t-value", "version": 1,
               "sha256": "ab", "key": "_schemas/ab.json", "reader": True}]
    v2 = parse_manifest({**m, "manifest_version": 2, "schemas": listed})
    assert v2.schemas[0].id == 7 and json.loads(v2.dumps())["schemas"][0]["key"] == "_schemas/ab.json"
    assert parse_manifest(v2.dumps()) == v2
    with pytest.raises(Exception, match="`schemas` is a field of manifest_version 2"):
        parse_manifest({**m, "schemas": listed})
    with pytest.raises(Exception, match="`schemas` is a field of manifest_version 2"):
        parse_manifest({**m, "manifest_version": 2})
    assert "schemas" not in json.loads(parse_manifest(m).dumps())  # version 1 stays as it was
    v3 = parse_manifest({**m, "manifest_version": 3, "generation": 1, "schemas": listed})
    assert v3.schemas == v2.schemas and "schemas" not in json.loads(hand_manifest("t").dumps())


def test_restore_rewrites_framed_ids_and_refuses_or_keeps_an_unlisted_one():
    from s3_archive.io.registry_client import RegistryConnection
    from s3_archive.model.errors import InvalidRestore
    from s3_archive.model.windows import OffsetWindow

    window = OffsetWindow(0, 0, 3)
    batch = Records([0, 0, 0], [0, 1, 2], [b"\x00\x00\x00\x00\x08k", None, b"raw"],
                    [b"\x00\x00\x00\x00\x07v", b"plain", b"\x00\x00\x00\x00\x09u"], [[], [], []], [1, 2, 3],
                    [1, 1, 1])
    target = RegistryConnection("http://127.0.0.1:9", timeout_s=1, attempts=1)  # never asked: no schema to register
    keep = SchemaRewrite(target, "topic_name", "keep")
    [out] = keep.rewritten(window, iter([batch]), {"value": {7: 42}, "key": {8: 43}}, "t2")
    assert out.values == [b"\x00\x00\x00\x00\x2av", b"plain", b"\x00\x00\x00\x00\x09u"]  # 9: kept as it is
    assert out.keys == [b"\x00\x00\x00\x00\x2bk", None, b"raw"]  # b"raw" is not framed
    assert keep.counts[window].metadata() == {"schemas_registered": 0, "schema_ids_rewritten": 2,
                                              "records_kept_with_unlisted_ids": 1}
    refuse = SchemaRewrite(target, "topic_name")
    with pytest.raises(InvalidRestore, match="window p00000-0+-0+3: the value of the record at offset 2 is framed "
                                             "with schema id 9, which the window's manifest does not list"):
        list(refuse.rewritten(window, iter([batch]), {"value": {7: 42}, "key": {8: 43}}, "t2"))
    with pytest.raises(InvalidRestore, match="unlisted_schema_ids 'drop' is not known; allowed: refuse, keep"):
        SchemaRewrite(target, "topic_name", "drop")


def test_subject_name_strategies():
    avro = RegistrySchema(1, "AVRO", json.dumps({"type": "record", "name": "User", "namespace": "crm", "fields": []}))
    proto = RegistrySchema(2, "PROTOBUF", 'syntax = "proto3";\npackage shop.v1;\nmessage Order { int64 id = 1; }\n')
    assert subject("topic_name", "new", "value", avro) == "new-value"
    assert subject("record_name", "new", "value", avro) == "crm.User"
    assert subject("topic_record_name", "new", "key", proto) == "new-shop.v1.Order"


def test_import_connect_maps_registry_converters():
    text = json.dumps({
        "connector.class": "io.confluent.connect.s3.S3SinkConnector", "topics": "orders",
        "s3.bucket.name": "archive-b", "format.class": "io.confluent.connect.s3.format.parquet.ParquetFormat",
        "flush.size": "1000", "value.converter": "io.confluent.connect.avro.AvroConverter",
        "value.converter.schema.registry.url": "https://sr-1:8081,https://sr-2:8081",
        "value.converter.basic.auth.credentials.source": "USER_INFO",
        "value.converter.basic.auth.user.info": "u:secret-pw",
        "key.converter": "io.confluent.connect.protobuf.ProtobufConverter",
        "key.converter.schema.registry.url": "https://sr-1:8081"})
    out = import_connect(text)
    [a] = parse_settings(yaml.safe_load(out)).archives
    assert a.value_decoding.type == "avro" and a.key_decoding.type == "protobuf"
    assert "S3_ARCHIVE_SCHEMA_REGISTRY_URL=https://sr-1:8081" in out
    assert "S3_ARCHIVE_SCHEMA_REGISTRY_PASSWORD=..." in out and "secret-pw" not in out


def test_the_registry_resource_is_bound_to_its_variables(monkeypatch):
    import dagster as dg

    from s3_archive.defs.resources import build_resources

    for var, value in {"S3_ARCHIVE_SCHEMA_REGISTRY_URL": "https://sr:8081", "S3_ARCHIVE_SCHEMA_REGISTRY_USERNAME": "u",
                       "S3_ARCHIVE_SCHEMA_REGISTRY_PASSWORD": "pw-secret", "S3_ARCHIVE_SCHEMA_REGISTRY_TIMEOUT_S": "3",
                       "S3_ARCHIVE_KAFKA_BOOTSTRAP_SERVERS": "k:9092"}.items():
        monkeypatch.setenv(var, value)
    got: list[RegistryConnection] = []

    @dg.asset
    def probe(schema_registry: SchemaRegistryResource) -> None:
        got.append(schema_registry.connection())

    resources = build_resources()
    dg.materialize([probe], resources={"schema_registry": resources["schema_registry"]})
    assert got == [RegistryConnection("https://sr:8081", "u", "pw-secret", None, 3)]
    assert "pw-secret" not in repr(got[0]) and "pw-secret" not in repr(resources["schema_registry"])


def test_the_raw_value_beside_decoded_columns_is_zstd_while_compression_is_the_default():
    from s3_archive.archive.driver.output import RAW_VALUE_CODEC, Output

    assert RAW_VALUE_CODEC == "zstd"
    assert Output.of(cfg(value_decoding={"type": "avro"})).value_codec == "zstd"
    assert Output.of(cfg(value_decoding={"type": "protobuf"})).value_codec == "zstd"
    assert Output.of(cfg(value_decoding={"type": "json"})).value_codec == "zstd"  # JSON fields as columns, raw kept
    # an explicit codec is every column's; nothing else keeps a raw value beside decoded columns
    assert Output.of(cfg(value_decoding={"type": "avro"}, compression="snappy")).value_codec is None
    assert Output.of(cfg(value_decoding={"type": "avro"}, compression="gzip")).value_codec is None
    assert Output.of(cfg(value_decoding={"type": "avro"}, envelope={"value": False})).value_codec is None
    assert Output.of(cfg(value_decoding={"type": "avro"}, format="avro")).value_codec is None
    assert Output.of(cfg(key_decoding={"type": "avro"})).value_codec is None
    assert Output.of(cfg()).value_codec is None
    assert Output.of(cfg(value_decoding={"type": "utf8"})).value_codec is None  # the value itself, as a string
