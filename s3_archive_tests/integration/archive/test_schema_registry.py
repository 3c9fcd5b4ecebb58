"""Schema Registry payloads (Confluent-framed Avro, Protobuf, JSON Schema) archived as typed columns, against a real
registry (Apicurio) and broker: producers use confluent-kafka's serializers, readers are pyarrow and the registry's
own API."""

from __future__ import annotations

import io
import json

import pyarrow.parquet as pq
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from s3_archive.archive.driver.archive_run import ArchiveContext
from s3_archive.archive.driver.coordinator import archive_window, archive_windows
from s3_archive.archive.protocol import S3Connection
from s3_archive.io.registry_client import RegistryConnection
from s3_archive.keys.objects import DEAD_LETTER
from s3_archive.model.errors import SchemaRegistryUnavailable, UndecodableValue
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.integration.archive_helpers import archive_config, final_objects, log
from s3_archive_tests.kafka_helpers import create_topic, parquet_codecs, produce

V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"},
    {"name": "name", "type": "string"},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "attrs", "type": {"type": "map", "values": "long"}},
    {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
    {"name": "ship", "type": ["null", {"type": "record", "name": "Ship", "fields": [
        {"name": "city", "type": "string"}]}], "default": None},
]}
# v2 adds a field with a default; v3 removes `name`
V2 = {**V1, "fields": [*V1["fields"], {"name": "email", "type": ["null", "string"], "default": None}]}
V3 = {**V2, "fields": [f for f in V2["fields"] if f["name"] != "name"]}


def _registry_client(url: str) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": url, "timeout": 10})


def _order(i: int, **extra) -> dict:
    from datetime import UTC, datetime
    from decimal import Decimal

    return {"id": i, "name": f"n{i}", "amount": Decimal(f"{i}.25"),
            "at": datetime(2026, 1, 1, 0, 0, i, tzinfo=UTC), "tags": [f"t{i}"], "attrs": {"a": i},
            "status": "PAID" if i % 2 else "NEW", "ship": {"city": "Oslo"} if i % 2 else None, **extra}


def _avro(sr: SchemaRegistryClient, topic: str, schema: dict, values: list[dict]) -> list[bytes]:
    ser = AvroSerializer(sr, json.dumps(schema), conf={"auto.register.schemas": True})
    return [ser(v, SerializationContext(topic, MessageField.VALUE)) for v in values]


def _table(s3, bucket: str, key: str):
    return pq.read_table(io.BytesIO(s3.get_object(Bucket=bucket, Key=key)["Body"].read()))


@pytest.fixture(scope="module")
def registry(registry_server) -> RegistryConnection:
    return RegistryConnection(registry_server.url, timeout_s=10)


def test_avro_values_become_typed_columns_one_schema_per_window(registry_server, registry, kafka, s3, services,
                                                                 spark, unique):
    topic = create_topic(kafka, f"sr-avro-{unique}")
    sr = _registry_client(registry_server.url)
    first = _avro(sr, topic, V1, [_order(1), _order(2)]) + _avro(sr, topic, V2, [_order(3, email="c@x")])
    produce(kafka, topic, [(0, f"k{i}".encode(), v, []) for i, v in enumerate(first)] + [(0, b"gone", None, [])])
    cfg = archive_config(services.bucket, topic, f"sr/{unique}/", value_decoding={"type": "avro"})

    w1 = OffsetWindow(0, 0, 4)
    m1 = archive_window(ArchiveContext.of_client(spark, kafka, s3, log, registry), cfg, topic, w1).manifest
    [key] = final_objects(s3, cfg, topic)
    t = _table(s3, cfg.bucket, key)
    # each record read with its own version, into the union of the versions' fields: v1's records have no email
    assert t.column("id").to_pylist() == [1, 2, 3, None]  # the tombstone decodes to nulls
    assert t.column("name").to_pylist() == ["n1", "n2", "n3", None]
    assert t.column("email").to_pylist() == [None, None, "c@x", None]
    assert [str(a) for a in t.column("amount").to_pylist()[:3]] == ["1.25", "2.25", "3.25"]
    assert t.column("at").to_pylist()[0].isoformat() == "2026-01-01T00:00:01+00:00"
    assert t.column("tags").to_pylist()[:2] == [["t1"], ["t2"]]
    assert dict(t.column("attrs").to_pylist()[0]) == {"a": 1}
    assert t.column("status").to_pylist()[:2] == ["PAID", "NEW"]
    assert t.column("ship").to_pylist()[:2] == [{"city": "Oslo"}, None]
    assert t.column("value").to_pylist()[:3] == first  # the raw framed bytes stay: restore is byte-exact
    codecs = parquet_codecs(s3.get_object(Bucket=cfg.bucket, Key=key)["Body"].read())
    assert codecs.pop("value") == "ZSTD" and set(codecs.values()) == {"SNAPPY"}  # the raw copy zstd, the rest snappy
    assert m1.manifest_version == 3 and m1.schemas and m1.value_decoding == "avro"
    ids = {s.id for s in m1.schemas}
    v1_id, v2_id = sr.get_version(f"{topic}-value", 1).schema_id, sr.get_version(f"{topic}-value", 2).schema_id
    assert ids == {v1_id, v2_id} and not any(s.reader for s in m1.schemas)  # no reader schema: each its own
    for s in m1.schemas:  # each kept in the bucket by its content hash
        kept = json.loads(s3.get_object(Bucket=cfg.bucket, Key=s.key)["Body"].read())
        assert kept["schemaType"] == "AVRO" and json.loads(kept["schema"])["name"] == "Order"
    assert {f["name"] for f in json.loads(m1.spark_schema)["fields"]} >= {"key", "value", "id", "email", "ship"}

    # v3 removes `name`: the next window's columns are still every version's fields, `name` null for v3's record
    later = _avro(sr, topic, V3, [{k: v for k, v in _order(5).items() if k != "name"}])
    produce(kafka, topic, [(0, b"k5", later[0], [])])
    m2 = archive_window(ArchiveContext.of_client(spark, kafka, s3, log, registry), cfg, topic,
                        OffsetWindow(0, 4, 5)).manifest
    fields = [f["name"] for f in json.loads(m2.spark_schema)["fields"]]
    assert "name" in fields and "email" in fields
    assert [s.id for s in m2.schemas] == [sr.get_version(f"{topic}-value", 3).schema_id]


def test_a_new_field_in_a_later_version_is_a_column_of_the_next_run_in_the_same_session(
        registry_server, registry, kafka, s3, services, spark, unique):
    """The session keeps each run's job shape (driver/task_read_job.py::task_shape): a version registered between two
    runs of one archive gives the second run its own shape, the new field a column of its objects."""
    topic = create_topic(kafka, f"sr-next-{unique}")
    sr = _registry_client(registry_server.url)
    produce(kafka, topic, [(0, b"k1", v, []) for v in _avro(sr, topic, V1, [_order(1)])])
    cfg = archive_config(services.bucket, topic, f"sr/{unique}/", value_decoding={"type": "avro"})
    ctx = ArchiveContext.of_client(spark, kafka, s3, log, registry)
    m1 = archive_window(ctx, cfg, topic, OffsetWindow(0, 0, 1)).manifest
    assert "email" not in {f["name"] for f in json.loads(m1.spark_schema)["fields"]}

    produce(kafka, topic, [(0, b"k2", v, []) for v in _avro(sr, topic, V2, [_order(2, email="b@x")])])
    m2 = archive_window(ctx, cfg, topic, OffsetWindow(0, 1, 2)).manifest
    assert "email" in {f["name"] for f in json.loads(m2.spark_schema)["fields"]}
    [obj] = m2.objects
    t = _table(s3, cfg.bucket, obj.key)
    assert t.column("email").to_pylist() == ["b@x"] and t.column("id").to_pylist() == [2]
    assert [s.id for s in m2.schemas] == [sr.get_version(f"{topic}-value", 2).schema_id]


def test_the_kept_task_shape_is_the_one_of_the_runs_decoding_plan(registry_server, registry, spark, unique):
    """task_read_job.py::task_shape with Schema Registry decoding: kept per session for a plan equal to the one it
    was made with (a plan made again from the same versions gets the very shape); a new version of the subject, even
    one that adds no column (a new schema id the tasks must know), or another registry connection gets a new shape,
    holding that plan."""
    from s3_archive.archive.driver.output import Output
    from s3_archive.archive.driver.registry_plan import decode_plan
    from s3_archive.archive.driver.spark_job import write_frame
    from s3_archive.archive.driver.task_read_job import task_shape
    from s3_archive.archive.protocol import ENVELOPE_DDL

    topic, sr = f"sr-shape-{unique}", _registry_client(registry_server.url)
    subject = f"{topic}-value"
    sr.register_schema(subject, Schema(json.dumps(V1), "AVRO"))
    out = Output.of(archive_config("s3-archive-test-shapes", topic, "p/", value_decoding={"type": "avro"}))

    def columns(shape) -> list[str]:
        return [f["name"] for f in json.loads(shape[0].fmt.spark_schema)["fields"]]

    plan = decode_plan(registry, out, topic)
    first = task_shape(spark, out, None, plan)
    frame, shape = write_frame(spark.createDataFrame([], ENVELOPE_DDL), out, None, plan)
    assert first == (shape, frame.schema.json()) and first[0].decode.parts == plan.parts
    again = decode_plan(registry, out, topic)
    assert again is not plan and task_shape(spark, out, None, again) is first  # kept: no write_frame

    sr.register_schema(subject, Schema(json.dumps(V2), "AVRO"))  # adds `email`
    v2 = decode_plan(registry, out, topic)
    second = task_shape(spark, out, None, v2)
    assert "email" in columns(second) and "email" not in columns(first)
    assert second[0].decode.parts == v2.parts and task_shape(spark, out, None, v2) is second

    sr.register_schema(subject, Schema(json.dumps(V3), "AVRO"))  # removes `name`: the same columns, a new id
    v3 = decode_plan(registry, out, topic)
    assert v3.parts[0].struct_type == v2.parts[0].struct_type
    third = task_shape(spark, out, None, v3)
    assert third is not second and columns(third) == columns(second)
    assert [s.id for s in third[0].decode.parts[0].schemas] == [s.id for s in v3.parts[0].schemas]
    assert len(v3.parts[0].schemas) == 3

    other = RegistryConnection(registry_server.url, timeout_s=9)
    elsewhere = task_shape(spark, out, None, decode_plan(other, out, topic))
    assert elsewhere is not third and elsewhere[0].decode.registry == other


def test_bad_records_follow_on_error(registry_server, registry, kafka, s3, services, spark, unique):
    topic = create_topic(kafka, f"sr-bad-{unique}")
    sr = _registry_client(registry_server.url)
    good = _avro(sr, topic, V1, [_order(1)])[0]
    unknown = b"\x00" + (987654).to_bytes(4, "big") + good[5:]
    values = [good, b"plain text", unknown, good[:7]]
    produce(kafka, topic, [(0, None, v, [("h", b"1")]) for v in values])
    window = OffsetWindow(0, 0, len(values))

    fail = archive_config(services.bucket, topic, f"sr/{unique}/fail/", value_decoding={"type": "avro"})
    with pytest.raises(UndecodableValue) as e:
        archive_window(ArchiveContext.of_client(spark, kafka, s3, log, registry), fail, topic, window)
    assert f"topic {topic!r} partition 0: 3 record(s)" in str(e.value)
    assert "first at offset 1: value: not Confluent-framed (first byte 0x70" in str(e.value)
    assert final_objects(s3, fail, topic) == {}  # nothing committed

    dlq = archive_config(services.bucket, topic, f"sr/{unique}/dlq/",
                         value_decoding={"type": "avro", "on_error": "dead_letter"})
    m = archive_window(ArchiveContext.of_client(spark, kafka, s3, log, registry), dlq, topic, window).manifest
    assert m.record_count == 4 and m.undecodable_records == 3
    [key] = final_objects(s3, dlq, topic)
    assert _table(s3, dlq.bucket, key).column("id").to_pylist() == [1]
    [dead] = [o.key for o in m.dead_letter_objects]
    assert dead.startswith(f"{dlq.prefix}{DEAD_LETTER}/{topic}/")
    d = _table(s3, dlq.bucket, dead)
    assert d.column("offset").to_pylist() == [1, 2, 3]
    assert d.column("value").to_pylist() == values[1:]  # raw, byte for byte
    reasons = d.column("reason").to_pylist()
    assert "not Confluent-framed" in reasons[0]
    assert reasons[1] == "value: unknown schema id 987654 (the Schema Registry has no such schema)"
    assert "does not decode with schema id" in reasons[2]


def test_keys_and_json_schema_values(registry_server, registry, kafka, s3, services, spark, unique):
    topic = create_topic(kafka, f"sr-json-{unique}")
    sr = _registry_client(registry_server.url)
    key_ser = AvroSerializer(sr, json.dumps({"type": "record", "name": "K", "fields": [
        {"name": "tenant", "type": "string"}, {"name": "n", "type": "int"}]}))
    schema = {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"},
                                               "dims": {"type": "object", "properties": {"w": {"type": "number"}}}}}
    value_ser = JSONSerializer(json.dumps(schema), sr)
    recs = []
    for i in range(3):
        k = key_ser({"tenant": f"t{i}", "n": i}, SerializationContext(topic, MessageField.KEY))
        v = value_ser({"sku": f"s{i}", "qty": i, "dims": {"w": 1.5 * i}}, SerializationContext(topic, MessageField.VALUE))
        recs.append((0, k, v, []))
    produce(kafka, topic, recs)
    cfg = archive_config(services.bucket, topic, f"sr/{unique}/", value_decoding={"type": "json_schema"},
                         key_decoding={"type": "avro"})
    m = archive_window(ArchiveContext.of_client(spark, kafka, s3, log, registry), cfg, topic,
                       OffsetWindow(0, 0, 3)).manifest
    [key] = final_objects(s3, cfg, topic)
    t = _table(s3, cfg.bucket, key)
    assert t.column("key_tenant").to_pylist() == ["t0", "t1", "t2"] and t.column("key_n").to_pylist() == [0, 1, 2]
    assert t.column("sku").to_pylist() == ["s0", "s1", "s2"] and t.column("qty").to_pylist() == [0, 1, 2]
    assert t.column("dims").to_pylist()[2] == {"w": 3.0}
    assert {s.part for s in m.schemas} == {"key", "value"}


def test_registry_unreachable_fails_the_run_naming_it_and_the_rerun_completes(registry_server, registry, kafka, s3,
                                                                              services, spark, unique):
    topic = create_topic(kafka, f"sr-down-{unique}")
    produce(kafka, topic, [(0, None, v, []) for v in _avro(_registry_client(registry_server.url), topic, V1,
                                                           [_order(1)])])
    cfg = archive_config(services.bucket, topic, f"sr/{unique}/", value_decoding={"type": "avro"})
    down = RegistryConnection("http://127.0.0.1:9", username="u", password="secret-pw", timeout_s=1, attempts=2)
    window = OffsetWindow(0, 0, 1)
    [r] = archive_windows(ArchiveContext.of_client(spark, kafka, s3, log, down), cfg, topic, [window]).values()
    assert isinstance(r, SchemaRegistryUnavailable)
    assert "the Schema Registry at http://127.0.0.1:9 as user 'u'" in str(r) and "secret-pw" not in str(r)
    assert final_objects(s3, cfg, topic) == {}  # nothing written, nothing committed
    again = archive_window(ArchiveContext.of_client(spark, kafka, s3, log, registry), cfg, topic, window)
    assert again.outcome == "committed" and again.manifest.record_count == 1


def test_schema_from_registry_api_registered_directly(registry_server, registry, kafka, s3, services, spark, unique):
    """A subject registered through the registry's API (not by a serializer) is read the same way."""
    topic = create_topic(kafka, f"sr-api-{unique}")
    sr = _registry_client(registry_server.url)
    sid = sr.register_schema(f"{topic}-value", Schema(json.dumps("string"), "AVRO"))
    produce(kafka, topic, [(0, None, b"\x00" + sid.to_bytes(4, "big") + b"\x06abc", [])])
    cfg = archive_config(services.bucket, topic, f"sr/{unique}/", value_decoding={"type": "avro"})
    archive_window(ArchiveContext.of_client(spark, kafka, s3, log, registry), cfg, topic, OffsetWindow(0, 0, 1))
    [key] = final_objects(s3, cfg, topic)
    assert _table(s3, cfg.bucket, key).column("decoded").to_pylist() == ["abc"]


ORDER_PROTO = """syntax = "proto3";
package shop.v1;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";

message Order {
  int64 id = 1;
  repeated string tags = 2;
  Address ship = 3;
  oneof payment { string card = 4; string iban = 5; }
  google.protobuf.Timestamp at = 6;
  map<string, int32> counts = 7;
  Status status = 8;
  google.protobuf.StringValue note = 9;
  enum Status { NEW = 0; PAID = 1; }
  message Address { string city = 1; }
}
"""


def _order_class(tmp_path):
    """The Order message class, compiled from ORDER_PROTO with grpcio-tools' protoc (as a producer's build does)."""
    import subprocess
    import sys
    from pathlib import Path

    import grpc_tools
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    (tmp_path / "order.proto").write_text(ORDER_PROTO)
    include = Path(grpc_tools.__file__).parent / "_proto"
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{tmp_path}", f"-I{include}", "--include_imports",
                    f"--descriptor_set_out={tmp_path / 'set.pb'}", "order.proto"], check=True)
    pool = descriptor_pool.DescriptorPool()
    for f in descriptor_pb2.FileDescriptorSet.FromString((tmp_path / "set.pb").read_bytes()).file:
        pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.v1.Order"))


def test_protobuf_values_become_typed_columns(registry_server, registry, kafka, s3, services, spark, unique,
                                              tmp_path):
    from datetime import UTC, datetime

    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    topic = create_topic(kafka, f"sr-proto-{unique}")
    Order = _order_class(tmp_path)  # noqa: N806
    ser = ProtobufSerializer(Order, _registry_client(registry_server.url), {"use.deprecated.format": False})
    ctx = SerializationContext(topic, MessageField.VALUE)
    a = Order(id=1, tags=["x", "y"], card="4111", counts={"a": 2}, status=1)
    a.ship.city = "Oslo"
    a.at.FromDatetime(datetime(2026, 5, 1, 8, 30, tzinfo=UTC))
    a.note.value = "fragile"
    b = Order(id=2, iban="NO93")
    produce(kafka, topic, [(0, None, ser(a, ctx), []), (0, None, ser(b, ctx), [])])
    cfg = archive_config(services.bucket, topic, f"sr/{unique}/", value_decoding={"type": "protobuf"})
    m = archive_window(ArchiveContext.of_client(spark, kafka, s3, log, registry), cfg, topic,
                       OffsetWindow(0, 0, 2)).manifest
    [key] = final_objects(s3, cfg, topic)
    t = _table(s3, cfg.bucket, key)
    assert t.column("id").to_pylist() == [1, 2]
    assert t.column("tags").to_pylist() == [["x", "y"], []]
    assert t.column("ship").to_pylist() == [{"city": "Oslo"}, None]  # a message field not set is null
    assert t.column("card").to_pylist() == ["4111", None] and t.column("iban").to_pylist() == [None, "NO93"]
    assert t.column("at").to_pylist()[0] == datetime(2026, 5, 1, 8, 30, tzinfo=UTC)
    assert t.column("at").to_pylist()[1] is None
    assert [dict(x) for x in t.column("counts").to_pylist()] == [{"a": 2}, {}]
    assert t.column("status").to_pylist() == ["PAID", "NEW"]
    assert t.column("note").to_pylist() == ["fragile", None]
    assert [s.schema_type for s in m.schemas] == ["PROTOBUF"]


def test_partition_by_a_decoded_field(registry_server, registry, kafka, s3, services, spark, unique):
    from s3_archive.restore.request import RestoreContext, RestoreRequest
    from s3_archive.restore.run import restore_windows
    from s3_archive.restore.sources import ArchiveSource
    from s3_archive_tests.kafka_helpers import consume_all

    topic = create_topic(kafka, f"sr-layout-{unique}")
    sr = _registry_client(registry_server.url)
    schema = {"type": "record", "name": "Sale", "fields": [
        {"name": "id", "type": "long"}, {"name": "shop", "type": {"type": "record", "name": "Shop", "fields": [
            {"name": "region", "type": ["null", "string"], "default": None}]}}]}
    regions = ["eu", "us", "eu", None, "us", "eu"]
    values = _avro(sr, topic, schema, [{"id": i, "shop": {"region": r}} for i, r in enumerate(regions)])
    produced = produce(kafka, topic, [(0, None, v, []) for v in values])
    cfg = archive_config(services.bucket, topic, f"sr/{unique}/", value_decoding={"type": "avro"},
                         max_records_per_object=2,
                         layout={"template": "{{topic}}/{{partition_by}}/{{topic}}+{{partition}}+{{start_offset}}+"
                                             "{{part}}", "partition_by": [{"kind": "value", "field": "shop.region",
                                                                           "name": "region"}]})
    archive_window(ArchiveContext.of_client(spark, kafka, s3, log, registry), cfg, topic, OffsetWindow(0, 0, 6))
    by_dir: dict[str, list[int]] = {}
    for key in sorted(final_objects(s3, cfg, topic)):
        by_dir.setdefault(key.split("/")[-2], []).extend(_table(s3, cfg.bucket, key).column("id").to_pylist())
    assert by_dir == {"region=eu": [0, 2, 5], "region=us": [1, 4], "region=(null)": [3]}
    # rotation counts each bucket's records in offset order: eu's three records make two objects
    assert sum(1 for k in final_objects(s3, cfg, topic) if "/region=eu/" in k) == 2
    target = create_topic(kafka, f"sr-layout-back-{unique}")
    list(restore_windows(RestoreContext(kafka, s3, log), ArchiveSource(cfg.bucket, cfg.prefix, interleaved=True),
                         RestoreRequest(topic, target), [OffsetWindow(0, 0, 6)]))
    assert [g.value for g in consume_all(kafka, target)[0]] == [r.value for r in produced]


def test_avro_evolution_in_iceberg(registry_server, registry, kafka, s3, services, spark, unique):
    """v1 then v2 (a field added with a default): the table gains the column (Iceberg schema evolution); read back
    by pyiceberg, an independent reader."""
    from s3_archive.io.iceberg_catalog import S3Endpoint
    from s3_archive_tests.credentials import TEST_AWS
    from s3_archive_tests.integration.archive.test_iceberg import _table as iceberg_table

    endpoint = S3Endpoint(TEST_AWS["AWS_REGION"], services.s3_endpoint_url, services.s3_endpoint_url, True)
    topic = create_topic(kafka, f"sr-ice-{unique}")
    sr = _registry_client(registry_server.url)
    small1 = {"type": "record", "name": "M", "fields": [{"name": "id", "type": "long"}]}
    small2 = {**small1, "fields": [*small1["fields"], {"name": "tag", "type": ["null", "string"], "default": None}]}
    produce(kafka, topic, [(0, None, v, []) for v in _avro(sr, topic, small1, [{"id": 1}, {"id": 2}])])
    cfg = archive_config(services.bucket, topic, f"srice-{unique}/", format="iceberg",
                         value_decoding={"type": "avro", "on_error": "dead_letter"})
    ctx = ArchiveContext(spark, kafka, s3, S3Connection.of_client(s3), endpoint, log, registry)
    w1 = archive_window(ctx, cfg, topic, OffsetWindow(0, 0, 2)).manifest
    assert w1.manifest_version == 3 and [s.reader for s in w1.schemas] == [False]
    produce(kafka, topic, [(0, None, v, []) for v in _avro(sr, topic, small2, [{"id": 3, "tag": "new"}])]
            + [(0, None, b"not framed", [])])
    w2 = archive_window(ctx, cfg, topic, OffsetWindow(0, 2, 4)).manifest
    assert w2.record_count == 2 and w2.undecodable_records == 1 and len(w2.dead_letter_objects) == 1
    rows = sorted(iceberg_table(services, cfg, topic).scan().to_arrow().to_pylist(), key=lambda r: r["offset"])
    assert [(r["offset"], r["id"], r.get("tag")) for r in rows] == [(0, 1, None), (1, 2, None), (2, 3, "new")]


# --- every shape compared with what confluent-kafka's deserializers read -----------------------------------------
def _by_name(value):
    """A column value as the deserializers give it: Arrow's maps (lists of pairs) as dicts."""
    if isinstance(value, list) and value and all(isinstance(x, tuple) and len(x) == 2 for x in value):
        return {k: _by_name(v) for k, v in value}
    if isinstance(value, dict):
        return {k: _by_name(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_by_name(x) for x in value]
    return value


JSON_SHAPES = {"type": "object", "title": "Event", "properties": {
    "id": {"type": "integer"},
    "meta": {"type": "object"},  # free-form: a very common "metadata" field
    "extra": {"type": "object", "additionalProperties": True},
    "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
    "either": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
    "maybe": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    "lines": {"type": "array", "items": {"$ref": "#/$defs/Line"}},
    "node": {"$ref": "#/$defs/Node"},
}, "$defs": {
    "Line": {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"},
                                              "attrs": {"type": "object"}}},
    "Node": {"type": "object", "properties": {"name": {"type": "string"},
                                              "kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}}}}
JSON_TEXT = ("meta", "extra", "either")  # no fixed type: the value's JSON text


def test_json_schema_shapes_equal_what_the_json_deserializer_reads(registry_server, registry, kafka, s3, services,
                                                                   spark, unique):
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer

    topic = create_topic(kafka, f"sr-jshapes-{unique}")
    sr = _registry_client(registry_server.url)
    ser = JSONSerializer(json.dumps(JSON_SHAPES), sr)
    ctx = SerializationContext(topic, MessageField.VALUE)
    records = [
        {"id": 1, "meta": {"source": "web", "tags": ["a", "b"], "nested": {"x": None}, "ü": "é"},
         "extra": {"k": 1}, "counts": {"a": 1, "b": 2}, "either": "text", "maybe": "yes",
         "lines": [{"sku": "s1", "qty": 2, "attrs": {"color": "red"}}, {"sku": "s2", "qty": 1}],
         "node": {"name": "root", "kids": [{"name": "leaf", "kids": []}]}},
        {"id": 2, "meta": {}, "either": 7, "maybe": None, "lines": []},
        {"id": 3},
    ]
    values = [ser(r, ctx) for r in records]
    produce(kafka, topic, [(0, None, v, []) for v in values])
    cfg = archive_config(services.bucket, topic, f"sr/{unique}/", value_decoding={"type": "json_schema",
                                                                                  "on_error": "dead_letter"})
    m = archive_window(ArchiveContext.of_client(spark, kafka, s3, log, registry), cfg, topic,
                       OffsetWindow(0, 0, len(values))).manifest
    assert m.undecodable_records == 0 and [s.schema_type for s in m.schemas] == ["JSON"]  # none dead-lettered
    [key] = final_objects(s3, cfg, topic)
    t = _table(s3, cfg.bucket, key).to_pylist()
    de = JSONDeserializer(None, schema_registry_client=sr)
    read = [de(v, ctx) for v in values]
    def text(v):
        return None if v is None else json.loads(v)

    for row, want in zip(t, read, strict=True):
        assert row["id"] == want["id"] and row["maybe"] == want.get("maybe")
        assert {n: text(row[n]) for n in JSON_TEXT} == {n: want.get(n) for n in JSON_TEXT}
        assert _by_name(row["counts"]) == want.get("counts")  # additionalProperties of one type: a map
        # arrays of objects: structs, their free-form field as JSON text
        assert (None if row["lines"] is None else [{**x, "attrs": text(x["attrs"])} for x in row["lines"]]) == \
            (None if "lines" not in want else [{"sku": x.get("sku"), "qty": x.get("qty"), "attrs": x.get("attrs")}
                                               for x in want["lines"]])
        # a recursive $ref: the first level a struct, the levels below it JSON text
        assert (None if row["node"] is None else {**row["node"], "kids": [text(k) for k in row["node"]["kids"]]}) \
            == want.get("node")
    assert t[0]["meta"] == '{"source":"web","tags":["a","b"],"nested":{"x":null},"ü":"é"}'  # compact, as produced


AVRO_PAY_V1 = {"type": "record", "name": "Pay", "namespace": "bank", "fields": [
    {"name": "id", "type": "long"},
    {"name": "name", "type": "string"},
    {"name": "raw", "type": "bytes"},
    {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 4}},
    {"name": "via", "type": [
        {"type": "record", "name": "Card", "fields": [{"name": "number", "type": "string"}]},
        {"type": "record", "name": "Iban", "fields": [{"name": "iban", "type": "string"}]}]},
]}
AVRO_PAY_V2 = {**AVRO_PAY_V1, "fields": [*AVRO_PAY_V1["fields"],
                                         {"name": "email", "type": ["null", "string"], "default": None}]}
AVRO_PAY_V3 = {**AVRO_PAY_V2, "fields": [f for f in AVRO_PAY_V2["fields"] if f["name"] != "name"]}  # name removed


def _pay(i: int, v: int) -> dict:
    out = {"id": i, "name": f"n{i}", "raw": bytes([0, i, 255]), "digest": f"d{i:03d}".encode(),
           "via": {"number": f"4{i}"} if i % 2 else {"iban": f"NO{i}"}}
    if v >= 2:
        out["email"] = f"u{i}@x"
    if v == 3:
        del out["name"]
    return out


def test_avro_v1_v2_v3_a_removed_field_keeps_its_values_bytes_fixed_and_unions_of_records(
        registry_server, registry, kafka, s3, services, spark, unique):
    from confluent_kafka.schema_registry.avro import AvroDeserializer

    topic = create_topic(kafka, f"sr-avro3-{unique}")
    sr = _registry_client(registry_server.url)
    values = (_avro(sr, topic, AVRO_PAY_V1, [_pay(1, 1), _pay(2, 1)]) + _avro(sr, topic, AVRO_PAY_V2, [_pay(3, 2)])
              + _avro(sr, topic, AVRO_PAY_V3, [_pay(4, 3), _pay(5, 3)]))
    produce(kafka, topic, [(0, None, v, []) for v in values])
    cfg = archive_config(services.bucket, topic, f"sr/{unique}/", value_decoding={"type": "avro"})
    # archived after v3 is registered: v1's and v2's `name` is still a column, with their values
    m = archive_window(ArchiveContext.of_client(spark, kafka, s3, log, registry), cfg, topic,
                       OffsetWindow(0, 0, len(values))).manifest
    assert len(m.schemas) == 3
    [key] = final_objects(s3, cfg, topic)
    t = _table(s3, cfg.bucket, key).to_pylist()
    de = AvroDeserializer(sr)
    read = [de(v, SerializationContext(topic, MessageField.VALUE)) for v in values]
    assert [r["name"] for r in t] == ["n1", "n2", "n3", None, None]
    assert [r["email"] for r in t] == [None, None, "u3@x", "u4@x", "u5@x"]
    for row, want in zip(t, read, strict=True):
        assert row["id"] == want["id"] and row["raw"] == want["raw"] and row["digest"] == want["digest"]
        assert row["name"] == want.get("name") and row["email"] == want.get("email")
        assert json.loads(row["via"]) == want["via"]  # a union of several records: its JSON text


def test_a_recursive_protobuf_message_is_refused_naming_it(registry_server, registry, kafka, s3, services, spark,
                                                           unique):
    from s3_archive.model.errors import IncompatibleSchema

    topic = create_topic(kafka, f"sr-tree-{unique}")
    sr = _registry_client(registry_server.url)
    sid = sr.register_schema(f"{topic}-value", Schema('syntax = "proto3";\npackage t;\nmessage Tree {\n'
                                                      '  string name = 1;\n  repeated Tree kids = 2;\n}\n',
                                                      "PROTOBUF"))
    produce(kafka, topic, [(0, None, b"\x00" + sid.to_bytes(4, "big") + b"\x00\x0a\x01a", [])])
    cfg = archive_config(services.bucket, topic, f"sr/{unique}/", value_decoding={"type": "protobuf"})
    [r] = archive_windows(ArchiveContext.of_client(spark, kafka, s3, log, registry), cfg, topic,
                          [OffsetWindow(0, 0, 1)]).values()
    assert isinstance(r, IncompatibleSchema)
    assert str(r) == (f"topic {topic!r}: subject '{topic}-value': Protobuf message 't.Tree' is recursive; columns "
                      "cannot hold a recursive type")
    assert final_objects(s3, cfg, topic) == {}  # refused before anything was written


# --- key decoding, format avro and format iceberg, end to end with the same serializers ---------------------------
KEY = {"type": "record", "name": "Key", "namespace": "bank", "fields": [{"name": "tenant", "type": "string"},
                                                                        {"name": "n", "type": "int"}]}


def _keyed(sr: SchemaRegistryClient, topic: str, values: list[bytes]) -> list[tuple]:
    ser = AvroSerializer(sr, json.dumps(KEY))
    return [(0, ser({"tenant": f"t{i}", "n": i}, SerializationContext(topic, MessageField.KEY)), v, [("h", b"1")])
            for i, v in enumerate(values)]


def test_format_avro_with_key_and_value_decoding_reads_as_the_deserializers_and_restores_byte_exact(
        registry_server, registry, kafka, s3, services, spark, unique):
    import fastavro
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer

    from s3_archive.restore.request import RestoreContext, RestoreRequest
    from s3_archive.restore.run import restore_windows
    from s3_archive.restore.sources import ArchiveSource
    from s3_archive_tests.kafka_helpers import consume_all

    topic = create_topic(kafka, f"sr-avrofmt-{unique}")
    sr = _registry_client(registry_server.url)
    vctx = SerializationContext(topic, MessageField.VALUE)
    ser = JSONSerializer(json.dumps(JSON_SHAPES), sr)
    values = [ser({"id": i, "meta": {"i": i, "tags": ["x"]}, "counts": {"a": i}}, vctx) for i in range(3)]
    produced = produce(kafka, topic, _keyed(sr, topic, values))
    cfg = archive_config(services.bucket, topic, f"sr/{unique}/", format="avro",
                         value_decoding={"type": "json_schema"}, key_decoding={"type": "avro"})
    window = OffsetWindow(0, 0, 3)
    m = archive_window(ArchiveContext.of_client(spark, kafka, s3, log, registry), cfg, topic, window).manifest
    assert {s.part for s in m.schemas} == {"key", "value"}
    [key] = final_objects(s3, cfg, topic)
    rows = list(fastavro.reader(io.BytesIO(s3.get_object(Bucket=cfg.bucket, Key=key)["Body"].read())))
    kde, vde = AvroDeserializer(sr), JSONDeserializer(None, schema_registry_client=sr)
    for row, p in zip(rows, produced, strict=True):
        k = kde(p.key, SerializationContext(topic, MessageField.KEY))
        v = vde(p.value, vctx)
        assert (row["key_tenant"], row["key_n"]) == (k["tenant"], k["n"])
        assert row["id"] == v["id"] and json.loads(row["meta"]) == v["meta"] and dict(row["counts"]) == v["counts"]
        assert row["value"] == p.value and row["key"] == p.key  # the raw bytes stay
    target = create_topic(kafka, f"sr-avrofmt-back-{unique}")
    list(restore_windows(RestoreContext(kafka, s3, log), ArchiveSource(cfg.bucket, cfg.prefix),
                         RestoreRequest(topic, target), [window]))
    back = consume_all(kafka, target)[0]
    assert [(g.key, g.value) for g in back] == [(p.key, p.value) for p in produced]


def test_format_iceberg_with_key_decoding_and_a_removed_avro_field(registry_server, registry, kafka, s3, services,
                                                                   spark, unique):
    from confluent_kafka.schema_registry.avro import AvroDeserializer

    from s3_archive.io.iceberg_catalog import S3Endpoint
    from s3_archive_tests.credentials import TEST_AWS
    from s3_archive_tests.integration.archive.test_iceberg import _table as iceberg_table

    endpoint = S3Endpoint(TEST_AWS["AWS_REGION"], services.s3_endpoint_url, services.s3_endpoint_url, True)
    topic = create_topic(kafka, f"sr-icekey-{unique}")
    sr = _registry_client(registry_server.url)
    values = _avro(sr, topic, AVRO_PAY_V1, [_pay(1, 1)]) + _avro(sr, topic, AVRO_PAY_V3, [_pay(2, 3)])
    produced = produce(kafka, topic, _keyed(sr, topic, values))
    cfg = archive_config(services.bucket, topic, f"sricekey-{unique}/", format="iceberg",
                         value_decoding={"type": "avro"}, key_decoding={"type": "avro"})
    ctx = ArchiveContext(spark, kafka, s3, S3Connection.of_client(s3), endpoint, log, registry)
    archive_window(ctx, cfg, topic, OffsetWindow(0, 0, 2))
    rows = sorted(iceberg_table(services, cfg, topic).scan().to_arrow().to_pylist(), key=lambda r: r["offset"])
    kde, vde = AvroDeserializer(sr), AvroDeserializer(sr)
    for row, p in zip(rows, produced, strict=True):
        k = kde(p.key, SerializationContext(topic, MessageField.KEY))
        v = vde(p.value, SerializationContext(topic, MessageField.VALUE))
        assert (row["key_tenant"], row["key_n"]) == (k["tenant"], k["n"])
        assert (row["id"], row["name"], row["email"], row["raw"], row["digest"]) == \
            (v["id"], v.get("name"), v.get("email"), v["raw"], v["digest"])
        assert json.loads(row["via"]) == v["via"]
    assert [r["name"] for r in rows] == ["n1", None]  # v1's value of the field v3 removed is a column
