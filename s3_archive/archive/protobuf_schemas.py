"""Protobuf schemas of a Schema Registry: the schema's .proto text compiled with protoc (grpcio-tools' bundled
compiler and well-known types) into descriptors, each schema id in a descriptor pool of its own (two versions of one
subject define the same message names); payloads decoded with the protobuf runtime into the columns' values.

Columns (a Spark type per field, as spark-protobuf maps them): int32/sint32/sfixed32 integer, int64/sint64/sfixed64
and uint32/fixed32 long, uint64/fixed64 decimal(20,0), float, double, bool, string, bytes binary, enums their
value's name, nested messages structs, repeated fields arrays, maps maps, google.protobuf.Timestamp a timestamp, the
wrappers (Int64Value, StringValue, ...) their nullable value. A field of a oneof that is not set is null, as is a
message field that is not set. The message of the columns is the schema's first one (the one producers use unless
they name another with the message indexes of the wire format; any of the file's messages decodes, its fields
matched by name).

Both sides use it: the driver for a run's columns (driver/registry_plan.py), the write tasks to decode
(executor/registry_decode.py). It imports nothing of Spark or Dagster.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import tempfile
from datetime import UTC
from pathlib import Path
from typing import Any

from s3_archive.io.registry_client import RegistrySchema
from s3_archive.model.registry_types import UnsupportedSchema, field, struct

_WRAPPERS = {"google.protobuf.DoubleValue": "double", "google.protobuf.FloatValue": "float",
             "google.protobuf.Int64Value": "long", "google.protobuf.UInt64Value": "decimal(20,0)",
             "google.protobuf.Int32Value": "integer", "google.protobuf.UInt32Value": "long",
             "google.protobuf.BoolValue": "boolean", "google.protobuf.StringValue": "string",
             "google.protobuf.BytesValue": "binary"}
_TIMESTAMP = "google.protobuf.Timestamp"


def _scalar_types() -> dict[int, str]:
    from google.protobuf.descriptor import FieldDescriptor as F

    return {F.TYPE_INT32: "integer", F.TYPE_SINT32: "integer", F.TYPE_SFIXED32: "integer",
            F.TYPE_INT64: "long", F.TYPE_SINT64: "long", F.TYPE_SFIXED64: "long",
            F.TYPE_UINT32: "long", F.TYPE_FIXED32: "long", F.TYPE_UINT64: "decimal(20,0)",
            F.TYPE_FIXED64: "decimal(20,0)", F.TYPE_FLOAT: "float", F.TYPE_DOUBLE: "double", F.TYPE_BOOL: "boolean",
            F.TYPE_STRING: "string", F.TYPE_BYTES: "binary", F.TYPE_ENUM: "string"}


def compile_schema(schema: RegistrySchema) -> Any:
    """The FileDescriptor of a Protobuf schema (its references compiled beside it); UnsupportedSchema with
    protoc's message when it does not compile."""
    return _compile(schema.text, schema.references)


def _serialized(text: str) -> Any:
    """The FileDescriptorProto of a schema given as a base64 serialized descriptor (what some registries hand
    back for a schema a client registered that way), or None for .proto text."""
    import base64
    import binascii

    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    if "{" in text or ";" in text:
        return None
    try:
        fdp = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(text, validate=True))
    except (binascii.Error, ValueError, DecodeError):
        return None
    return fdp if fdp.message_type else None


def _well_known(name: str) -> Any:
    """The FileDescriptorProto of a well-known type's file (google/protobuf/timestamp.proto, ...)."""
    import importlib

    from google.protobuf import descriptor_pb2

    module = importlib.import_module("google.protobuf." + name.removeprefix("google/protobuf/")
                                     .removesuffix(".proto") + "_pb2")
    fdp = descriptor_pb2.FileDescriptorProto()
    module.DESCRIPTOR.CopyToProto(fdp)
    return fdp


@functools.lru_cache(maxsize=64)
def _compile(text: str, references: tuple[tuple[str, str], ...]) -> Any:
    import grpc_tools
    from google.protobuf import descriptor_pb2, descriptor_pool

    serialized = _serialized(text)
    if serialized is not None:
        pool = descriptor_pool.DescriptorPool()
        for dep in serialized.dependency:
            if not dep.startswith("google/protobuf/"):
                raise UnsupportedSchema(f"the Protobuf schema imports {dep!r}, which is not a well-known type")
            pool.Add(_well_known(dep))
        pool.Add(serialized)
        return pool.FindFileByName(serialized.name)

    include = Path(grpc_tools.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory(prefix="s3-archive-proto-") as tmp:
        root = Path(tmp)
        for name, ref_text in references:
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(ref_text)
        (root / "_schema.proto").write_text(text)
        out = root / "_set.pb"
        # protoc in a child process: grpc_tools.protoc.main prints to this process's stderr and keeps state
        done = subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{root}", f"-I{include}",
                               f"--descriptor_set_out={out}", "--include_imports", "_schema.proto"],
                              capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise UnsupportedSchema(f"the Protobuf schema does not compile: {done.stderr.strip()[:500]}")
        fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for f in fds.file:
        pool.Add(f)
    return pool.FindFileByName("_schema.proto")


def _type_of(fd: Any, seen: tuple[str, ...]) -> Any:
    if fd.message_type is not None:
        m = fd.message_type
        if m.GetOptions().map_entry:
            key, value = m.fields_by_name["key"], m.fields_by_name["value"]
            return {"type": "map", "keyType": _type_of(key, seen), "valueType": _type_of(value, seen),
                    "valueContainsNull": True}
        t = _message_type(m, seen)
    else:
        t = _scalar_types()[fd.type]
    if _repeated(fd):
        return {"type": "array", "elementType": t, "containsNull": False}
    return t


def _repeated(fd: Any) -> bool:
    return fd.label == fd.LABEL_REPEATED


def _message_type(m: Any, seen: tuple[str, ...]) -> Any:
    if m.full_name == _TIMESTAMP:
        return "timestamp"
    if m.full_name in _WRAPPERS:
        return _WRAPPERS[m.full_name]
    if m.full_name in seen:
        raise UnsupportedSchema(f"Protobuf message {m.full_name!r} is recursive; columns cannot hold a recursive type")
    return struct([field(f.name, _type_of(f, (*seen, m.full_name)), True) for f in m.fields])


def protobuf_columns(schema: RegistrySchema) -> dict[str, Any]:
    """The Spark struct of the schema's first message."""
    file = compile_schema(schema)
    if not file.message_types_by_name:
        raise UnsupportedSchema("the Protobuf schema defines no message")
    first = next(iter(file.message_types_by_name.values()))
    return _message_type(first, ())


def _value(fd: Any, v: Any) -> Any:
    if fd.message_type is not None:
        m = fd.message_type
        if m.GetOptions().map_entry:
            vf = m.fields_by_name["value"]
            return {k: _value(vf, x) for k, x in v.items()}
        return _message_value(m, v)
    if fd.type == fd.TYPE_ENUM:
        found = fd.enum_type.values_by_number.get(v)
        return found.name if found is not None else str(v)
    return v


def _message_value(m: Any, msg: Any) -> Any:
    if m.full_name == _TIMESTAMP:
        return msg.ToDatetime(tzinfo=UTC)
    if m.full_name in _WRAPPERS:
        return msg.value
    return _fields(m, msg)


def _fields(m: Any, msg: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for fd in m.fields:
        if _repeated(fd):
            v = getattr(msg, fd.name)
            out[fd.name] = (_value(fd, v) if fd.message_type is not None and fd.message_type.GetOptions().map_entry
                            else [_value(fd, x) for x in v])
        elif fd.has_presence and not msg.HasField(fd.name):
            out[fd.name] = None
        else:
            out[fd.name] = _value(fd, getattr(msg, fd.name))
    return out


def _varint(data: bytes, at: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if at >= len(data):
            raise ValueError("truncated message indexes")
        b = data[at]
        result |= (b & 0x7F) << shift
        at += 1
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), at  # zig-zag
        shift += 7


def message_indexes(body: bytes) -> tuple[list[int], int]:
    """The Confluent wire format's message indexes (the path to the message in the file) and where the message
    starts: a count then that many indexes, each a zig-zag varint; a count of 0 is the first message."""
    count, at = _varint(body, 0)
    if count == 0:
        return [0], at
    out = []
    for _ in range(count):
        i, at = _varint(body, at)
        out.append(i)
    return out, at


class ProtobufDecoder:
    """Payloads of one schema id (after the 5-byte header) into the values of its first message's columns."""

    record = True

    def __init__(self, writer: RegistrySchema) -> None:
        self._file = compile_schema(writer)
        self._classes: dict[tuple[int, ...], Any] = {}

    def _message(self, path: list[int]) -> tuple[Any, Any]:
        from google.protobuf import message_factory

        key = tuple(path)
        if key not in self._classes:
            m = list(self._file.message_types_by_name.values())[path[0]]
            for i in path[1:]:
                m = m.nested_types[i]
            self._classes[key] = (m, message_factory.GetMessageClass(m))
        return self._classes[key]

    def __call__(self, body: bytes) -> Any:
        path, at = message_indexes(body)
        m, cls = self._message(path)
        return _fields(m, cls.FromString(body[at:]))

