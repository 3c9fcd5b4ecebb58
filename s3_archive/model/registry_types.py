"""The columns a Schema Registry payload decodes into: each schema (Avro; JSON Schema in model/json_schema_types.py,
Protobuf in archive/protobuf_schemas.py) as a Spark type, as JSON (`StructType.jsonValue()`), the one vocabulary
the manifest's `schema`, the objects' metadata and the catalog share, and the union of a subject's versions'
fields (`merge_types`). Pure.

Avro follows Spark's own mapping (spark-avro's SchemaConverters): records are structs, a union with "null" is a
nullable field, enums and uuids are strings, fixed and bytes are binary, decimals are decimals, date is a date,
timestamp-millis/micros are timestamps, local-timestamp-* are timestamps without a zone. A union of several types
other than null (which Spark makes a struct of `member0`, `member1`, ...) is stored as its value's JSON text. The
other way round, `avro_schema` is the Avro writer schema Spark's avro writer derives from a Spark schema (the
avro format's objects).
"""

from __future__ import annotations

import json
from typing import Any

from s3_archive.model.json_schema_types import json_schema_to_spark

_AVRO_PRIMITIVES = {"boolean": "boolean", "int": "integer", "long": "long", "float": "float", "double": "double",
                    "bytes": "binary", "string": "string", "null": "null"}
_AVRO_LOGICAL = {"date": "date", "timestamp-millis": "timestamp", "timestamp-micros": "timestamp",
                 "local-timestamp-millis": "timestamp_ntz", "local-timestamp-micros": "timestamp_ntz"}
UNION_AS_JSON = "string"  # a union of several non-null types: its value's JSON text
NOT_A_RECORD = "decoded"  # the one field of a payload that is not a record (a string key, an array)


class UnsupportedSchema(ValueError):
    """A schema that cannot be stored as columns; the message names the construct."""


def struct(fields: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "struct", "fields": fields}


def field(name: str, data_type: Any, nullable: bool) -> dict[str, Any]:
    return {"name": name, "type": data_type, "nullable": nullable, "metadata": {}}


def avro_to_spark(schema: Any, named: dict[str, Any] | None = None) -> tuple[Any, bool]:
    """(Spark type JSON, nullable) of an Avro schema (parsed JSON). `named`: the named types seen so far (a
    record, enum or fixed may be referred to by name after its definition)."""
    named = {} if named is None else named
    if isinstance(schema, str):
        if schema in _AVRO_PRIMITIVES:
            return _AVRO_PRIMITIVES[schema], schema == "null"
        short = schema.rsplit(".", 1)[-1]
        found = [n for n in named if n == schema or n.rsplit(".", 1)[-1] == short]
        if not found:
            raise UnsupportedSchema(f"Avro type {schema!r} is not defined before its use")
        if named[found[0]] is None:
            raise UnsupportedSchema(f"Avro record {found[0]!r} is recursive; columns cannot hold a recursive type")
        return named[found[0]], False
    if isinstance(schema, list):
        types = [t for t in schema if t != "null"]
        nullable = len(types) < len(schema)
        if not types:
            return "null", True
        if len(types) == 1:
            return avro_to_spark(types[0], named)[0], nullable
        converted = {json.dumps(avro_to_spark(t, named)[0]) for t in types}  # a record's type is a dict
        if converted <= {'"integer"', '"long"'}:
            return "long", nullable
        if converted <= {'"float"', '"double"'}:
            return "double", nullable
        return UNION_AS_JSON, True
    kind = schema.get("type")
    logical = schema.get("logicalType")
    if kind in ("bytes", "fixed") and logical == "decimal":
        out: Any = f"decimal({schema['precision']},{schema.get('scale', 0)})"
    elif logical in _AVRO_LOGICAL and kind in ("int", "long"):
        out = _AVRO_LOGICAL[logical]
    elif kind == "record" or kind == "error":
        name = _full_name(schema)
        named[name] = None  # being defined: a field referring to it is recursive
        fields = [field(f["name"], *avro_to_spark(f["type"], named)) for f in schema["fields"]]
        out = struct(fields)
        named[name] = out
    elif kind == "enum":
        named[_full_name(schema)] = "string"
        out = "string"
    elif kind == "fixed":
        named[_full_name(schema)] = "binary"
        out = "binary"
    elif kind == "array":
        t, nullable = avro_to_spark(schema["items"], named)
        out = {"type": "array", "elementType": t, "containsNull": nullable}
    elif kind == "map":
        t, nullable = avro_to_spark(schema["values"], named)
        out = {"type": "map", "keyType": "string", "valueType": t, "valueContainsNull": nullable}
    else:  # {"type": "long"}, {"type": {...}}: the type itself
        return avro_to_spark(kind, named)
    return out, False


def _full_name(schema: dict[str, Any]) -> str:
    name = schema["name"]
    ns = schema.get("namespace")
    return f"{ns}.{name}" if ns and "." not in name else name


def avro_columns(schema_text: str) -> dict[str, Any]:
    """The Spark struct an Avro schema's values decode into: a record's fields, or one field `decoded` holding a
    value that is not a record."""
    t, nullable = avro_to_spark(json.loads(schema_text))
    if isinstance(t, dict) and t.get("type") == "struct":
        return t
    return struct([field(NOT_A_RECORD, t, nullable)])


def avro_type(data_type: Any, nullable: bool, record_name: str, namespace: str) -> Any:
    """The other way round: Spark's avro writer's schema for a Spark type (its SchemaConverters.toAvroType), from
    the type's JSON (`StructType.jsonValue()`): nullable types are unions [type, "null"], records are named after
    their field within the enclosing record's name, timestamps are timestamp-micros longs."""
    t: Any
    if isinstance(data_type, str):
        simple = {"boolean": "boolean", "byte": "int", "short": "int", "integer": "int", "long": "long",
                  "float": "float", "double": "double", "string": "string", "binary": "bytes", "null": "null",
                  "date": {"type": "int", "logicalType": "date"},
                  "timestamp": {"type": "long", "logicalType": "timestamp-micros"},
                  "timestamp_ntz": {"type": "long", "logicalType": "local-timestamp-micros"}}
        if data_type.startswith(("char", "varchar")):
            t = "string"
        elif data_type.startswith("decimal"):
            precision, scale = (int(x) for x in data_type[len("decimal("):-1].split(","))
            size = next(n for n in range(1, 32) if 2 ** (8 * n - 1) > 10 ** precision)
            name = f"{record_name}.fixed" if not namespace else f"{namespace}.{record_name}.fixed"
            t = {"type": "fixed", "name": name, "size": size, "logicalType": "decimal", "precision": precision,
                 "scale": scale}
        elif data_type in simple:
            t = simple[data_type]
        else:
            raise ValueError(f"no avro type for the Spark type {data_type!r}")
    elif data_type["type"] == "array":
        t = {"type": "array", "items": avro_type(data_type["elementType"], data_type["containsNull"], record_name,
                                                 namespace)}
    elif data_type["type"] == "map":
        if data_type["keyType"] != "string":
            raise ValueError(f"avro maps have string keys; got a map of {data_type['keyType']!r}")
        t = {"type": "map", "values": avro_type(data_type["valueType"], data_type["valueContainsNull"], record_name,
                                                namespace)}
    elif data_type["type"] == "struct":
        child = f"{namespace}.{record_name}" if namespace else record_name
        t = {"type": "record", "name": record_name,
             "fields": [{"name": f["name"], "type": avro_type(f["type"], f["nullable"], f["name"], child)}
                        for f in data_type["fields"]]}
        if namespace:
            t["namespace"] = namespace
    else:
        raise ValueError(f"no avro type for the Spark type {data_type!r}")
    return [t, "null"] if nullable and data_type != "null" else t


def avro_schema(spark_schema_json: str) -> str:
    """The Avro writer schema (JSON) of a Spark schema, as Spark's avro writer writes it."""
    return json.dumps(avro_type(json.loads(spark_schema_json), False, "topLevelRecord", ""),
                      separators=(",", ":"))


def json_schema_columns(schema_text: str) -> dict[str, Any]:
    """The Spark struct a JSON Schema's values decode into (model/json_schema_types.py): an object's properties, or
    one field `decoded` holding a value that is not one."""
    t, nullable = json_schema_to_spark(json.loads(schema_text))
    if isinstance(t, dict) and t.get("type") == "struct":
        return t
    return struct([field(NOT_A_RECORD, t, nullable)])


class IncompatibleFields(ValueError):
    """Two schemas give one field different types: `path` names the field."""

    def __init__(self, path: str, a: Any, b: Any) -> None:
        super().__init__(f"field {path!r} is {_show(a)} in one schema and {_show(b)} in the other")
        self.path = path


def _show(t: Any) -> str:
    return t if isinstance(t, str) else t.get("type", "?")


_NUMBERS = {"integer": 0, "long": 1, "float": 2, "double": 3}


def merge_types(a: Any, b: Any, path: str = "") -> Any:
    """The union of two Spark types' fields (structs merged by field name, in first-seen order; arrays and maps by
    their element types; numbers as the wider of the two, Avro's promotions int → long → float → double);
    IncompatibleFields where a field's type differs otherwise."""
    if a == b:
        return a
    if isinstance(a, dict) and isinstance(b, dict) and a.get("type") == b.get("type"):
        kind = a["type"]
        if kind == "struct":
            by_name = {f["name"]: dict(f) for f in a["fields"]}
            for f in b["fields"]:
                sub = f"{path}.{f['name']}" if path else f["name"]
                if f["name"] in by_name:
                    mine = by_name[f["name"]]
                    mine["type"] = merge_types(mine["type"], f["type"], sub)
                    mine["nullable"] = mine["nullable"] or f["nullable"]
                else:
                    by_name[f["name"]] = {**f, "nullable": True}  # absent from older values
            in_b = {f["name"] for f in b["fields"]}
            for name, f in by_name.items():
                if name not in in_b:
                    f["nullable"] = True  # absent from newer values
            fields = [by_name[f["name"]] for f in a["fields"]]
            fields += [by_name[f["name"]] for f in b["fields"] if f["name"] not in {x["name"] for x in a["fields"]}]
            return struct(fields)
        if kind == "array":
            return {**a, "elementType": merge_types(a["elementType"], b["elementType"], path + "[]"),
                    "containsNull": a["containsNull"] or b["containsNull"]}
        if kind == "map":
            return {**a, "valueType": merge_types(a["valueType"], b["valueType"], path + "{}"),
                    "valueContainsNull": a["valueContainsNull"] or b["valueContainsNull"]}
    if isinstance(a, str) and isinstance(b, str) and {a, b} <= _NUMBERS.keys():
        return max(a, b, key=_NUMBERS.__getitem__)  # the wider, as Avro's promotions widen
    raise IncompatibleFields(path or "(the value)", a, b)
