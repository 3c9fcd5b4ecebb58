"""The columns a JSON Schema payload decodes into, and how a decoded JSON value is made to fit them. Pure.

A JSON Schema maps to a Spark type (as JSON) where its values have one fixed shape, and to JSON text where they do
not: objects with `properties` are structs (every field nullable: a JSON value may be null or absent whatever
`required` says), an object without `properties` whose `additionalProperties` is a schema a map of that type,
arrays with one `items` schema arrays, `integer` long, `number` double, `string`, `boolean`; a type list or a
`oneOf`/`anyOf` of one type and `null` that type, nullable; `$ref`s within the schema (`#/definitions/...`,
`#/$defs/...`) are followed. Anything else — a free-form object (`{"type": "object"}`, `additionalProperties:
true`), `oneOf`/`anyOf`/`allOf` of several types, several types, no type, a tuple of `items`, a `$ref` to itself
(recursive) — is a `string` column holding the value's compact JSON text (a string value too: `"a"` with its
quotes), so that every value of the column is written the same way and reads back with one `json.loads`.

`json_reader(schema)` gives the function that turns a value parsed by `json.loads` into what the columns hold (the
JSON text of each value stored as text); the two come from one walk of the schema, so they cannot disagree.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

_SCALARS = {"integer": "long", "number": "double", "string": "string", "boolean": "boolean"}
_NULL = {"type": "null"}

Convert = Callable[[Any], Any] | None  # None: the value fits as json.loads gives it


def json_text(value: Any) -> str | None:
    """A value stored as JSON text: compact, its keys in the payload's order, non-ASCII kept."""
    return None if value is None else json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _struct(fields: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "struct", "fields": fields}


def _as_text() -> tuple[Any, bool, Convert]:
    return "string", True, json_text


def _resolve(ref: str, root: Any) -> Any:
    target: Any = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        target = target.get(part) if isinstance(target, dict) else None
    return target


def _one_branch(schema: dict[str, Any]) -> Any:
    """The one non-null schema of a `oneOf`/`anyOf` of it and `null` (pydantic's Optional), or None."""
    for word in ("oneOf", "anyOf"):
        branches = schema.get(word)
        if isinstance(branches, list):
            rest = [b for b in branches if b != _NULL]
            if len(rest) == 1 and len(branches) == 2:
                return rest[0]
    return None


def _walk(schema: Any, root: Any, refs: tuple[str, ...]) -> tuple[Any, bool, Convert]:
    """(Spark type, nullable, converter) of a JSON Schema."""
    if not isinstance(schema, dict):
        return _as_text()  # true, false
    ref = schema.get("$ref")
    if isinstance(ref, str):
        if not ref.startswith("#/") or ref in refs:  # another document's, or recursive
            return _as_text()
        target = _resolve(ref, root)
        return _walk(target, root, (*refs, ref)) if isinstance(target, dict) else _as_text()
    branch = _one_branch(schema)
    if branch is not None:
        return _walk(branch, root, refs)
    if any(isinstance(schema.get(w), list) for w in ("oneOf", "anyOf", "allOf")):
        return _as_text()
    kind = schema.get("type")
    if isinstance(kind, list):
        types = [t for t in kind if t != "null"]
        kind = types[0] if len(types) == 1 else None
    if kind == "object":
        return _object(schema, root, refs)
    if kind == "array" and isinstance(schema.get("items"), dict):
        t, _, conv = _walk(schema["items"], root, refs)
        out = {"type": "array", "elementType": t, "containsNull": True}
        return out, True, None if conv is None else (lambda v: None if v is None else [conv(x) for x in v])
    if kind in _SCALARS:
        return _SCALARS[kind], True, None
    return _as_text()


def _object(schema: dict[str, Any], root: Any, refs: tuple[str, ...]) -> tuple[Any, bool, Convert]:
    props = schema.get("properties")
    extra = schema.get("additionalProperties")
    if isinstance(props, dict) and props:
        walked = {name: _walk(sub, root, refs) for name, sub in props.items()}
        fields = [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, (t, _, _) in walked.items()]
        convs = {n: c for n, (_, _, c) in walked.items() if c is not None}
        if not convs:
            return _struct(fields), True, None

        def fit(v: Any) -> Any:
            if not isinstance(v, dict):
                return v  # left for the column to refuse, naming the field
            return {**v, **{n: c(v.get(n)) for n, c in convs.items()}}

        return _struct(fields), True, fit
    if isinstance(extra, dict) and extra and not props:
        t, _, conv = _walk(extra, root, refs)
        out = {"type": "map", "keyType": "string", "valueType": t, "valueContainsNull": True}
        return out, True, None if conv is None else (
            lambda v: None if v is None else {k: conv(x) for k, x in v.items()} if isinstance(v, dict) else v)
    return _as_text()


def json_schema_to_spark(schema: Any) -> tuple[Any, bool]:
    """(Spark type JSON, nullable) of a JSON Schema (parsed)."""
    t, nullable, _ = _walk(schema, schema, ())
    return t, nullable


def json_reader(schema: Any) -> tuple[bool, Convert]:
    """Whether the schema's values are records (an object with `properties`: their fields are the columns), and the
    converter of a parsed value into what the columns hold (None: nothing to convert)."""
    t, _, conv = _walk(schema, schema, ())
    return isinstance(t, dict) and t.get("type") == "struct", conv
