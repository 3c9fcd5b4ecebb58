"""Protobuf schemas of a registry compiled into descriptors (grpcio-tools' protoc) and payloads decoded into the
columns' values: nested messages, repeated fields, oneof, maps, enums, Timestamp and wrappers; the Confluent wire
format's message indexes."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

from google.protobuf import descriptor_pb2, message_factory

from s3_archive.archive.protobuf_schemas import (
    ProtobufDecoder,
    compile_schema,
    message_indexes,
    protobuf_columns,
)
from s3_archive.io.registry_client import RegistrySchema

PROTO = """syntax = "proto3";
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
  google.protobuf.Int64Value qty = 9;
  uint64 big = 10;
  enum Status { NEW = 0; PAID = 1; }
  message Address { string city = 1; }
}
message Other { string x = 1; }
"""
SCHEMA = RegistrySchema(3, "PROTOBUF", PROTO)


def test_columns_follow_spark_protobufs_mapping():
    fields = {f["name"]: f["type"] for f in protobuf_columns(SCHEMA)["fields"]}
    assert fields["id"] == "long" and fields["big"] == "decimal(20,0)" and fields["status"] == "string"
    assert fields["tags"] == {"type": "array", "elementType": "string", "containsNull": False}
    assert fields["ship"]["type"] == "struct" and fields["at"] == "timestamp" and fields["qty"] == "long"
    assert fields["counts"]["type"] == "map" and fields["card"] == "string"


def test_payloads_decode_by_their_message_indexes():
    file = compile_schema(SCHEMA)
    order_cls = message_factory.GetMessageClass(file.message_types_by_name["Order"])
    o = order_cls(id=7, tags=["a"], iban="NO9", counts={"x": 1}, status=1, big=2**63 + 5)
    o.at.FromDatetime(datetime(2026, 1, 2, tzinfo=UTC))
    o.qty.value = 4
    decoder = ProtobufDecoder(SCHEMA)
    value = decoder(b"\x00" + o.SerializeToString())  # indexes [0]: the first message
    assert value == {"id": 7, "tags": ["a"], "ship": None, "card": None, "iban": "NO9",
                     "at": datetime(2026, 1, 2, tzinfo=UTC), "counts": {"x": 1}, "status": "PAID", "qty": 4,
                     "big": 2**63 + 5}
    other = message_factory.GetMessageClass(file.message_types_by_name["Other"])(x="y")
    assert decoder(b"\x02\x02" + other.SerializeToString()) == {"x": "y"}  # indexes [1]: the second message
    assert message_indexes(b"\x04\x02\x00rest") == ([1, 0], 3)


def test_a_schema_given_as_a_serialized_descriptor():
    fdp = descriptor_pb2.FileDescriptorProto()
    compile_schema(SCHEMA).CopyToProto(fdp)
    serialized = RegistrySchema(4, "PROTOBUF", base64.b64encode(fdp.SerializeToString()).decode())
    assert json.dumps(protobuf_columns(serialized)) == json.dumps(protobuf_columns(SCHEMA))


def test_a_recursive_message_is_refused_naming_it():
    import pytest

    from s3_archive.model.registry_types import UnsupportedSchema

    tree = RegistrySchema(4, "PROTOBUF", 'syntax = "proto3";\npackage t;\nmessage Tree {\n  string name = 1;\n'
                                         '  repeated Tree kids = 2;\n}\n')
    with pytest.raises(UnsupportedSchema, match="Protobuf message 't.Tree' is recursive; columns cannot hold a "
                                                "recursive type"):
        protobuf_columns(tree)
