"""The driver's side of Schema Registry decoding: a run's `DecodePlan` (archive/protocol.py) from the
registry, and each committed window's schemas kept in the bucket.

One schema per window and part, known before any object is written: the subject's versions when the run starts
(TopicNameStrategy: `<topic>-value`, `<topic>-key`; or the configured subject), their fields' union (Avro, Protobuf
and JSON Schema alike): each record is decoded with its own writer schema and its fields matched by name, a field
its version lacks null. A producer registers (or looks up) its schema before it produces, so every record of a
window cut before the run has an id among those versions: no field of a record is lost to the window's columns,
not even one a later version removed. A version that changes a field's type fails the run before anything is
written. Finding them costs one registry request per part and run (the subject's versions; each version is read
once per process) and no read of the window (docs/formats.md, "Schema Registry").
"""

from __future__ import annotations

import json
import threading
from typing import Any

from botocore.exceptions import ClientError

from s3_archive.archive.driver.output import Output
from s3_archive.archive.protocol import DecodedPart, DecodePlan
from s3_archive.io.registry_client import REGISTRY_TYPE, RegistryConnection, RegistrySchema
from s3_archive.io.s3 import CONFLICT, PRECONDITION_FAILED, S3Client, error_code
from s3_archive.keys.objects import schema_key
from s3_archive.model.columns import PART_FIELD, SOURCE_FIELD, stored_names
from s3_archive.model.errors import IncompatibleSchema, InvalidConfig, SchemaRegistryUnavailable
from s3_archive.model.manifest import ManifestSchema
from s3_archive.model.registry_types import (
    IncompatibleFields,
    UnsupportedSchema,
    avro_columns,
    json_schema_columns,
    merge_types,
)

REASON_FIELD = {"name": "reason", "type": "string", "nullable": True, "metadata": {}}


def _columns_of(kind: str, schema: RegistrySchema) -> dict[str, Any]:
    if kind == "avro":
        return avro_columns(schema.text)
    if kind == "json_schema":
        return json_schema_columns(schema.text)
    from s3_archive.archive.protobuf_schemas import protobuf_columns

    return protobuf_columns(schema)


def _struct(kind: str, topic: str, subject: str, versions: list[RegistrySchema]) -> dict[str, Any]:
    """The decoded struct of a part: the union of every version's fields, in first-seen order."""
    try:
        merged = _columns_of(kind, versions[0])
        for older, v in zip(versions, versions[1:], strict=False):
            try:
                merged = merge_types(merged, _columns_of(kind, v))
            except IncompatibleFields as e:
                raise IncompatibleSchema(
                    f"topic {topic!r}: subject {subject!r} version {v.version} (schema id {v.id}) changes the type "
                    f"of a field of version {older.version} (schema id {older.id}): {e}; their values cannot share "
                    "one column. Register the change as a new field instead") from None
        return merged
    except UnsupportedSchema as e:
        raise IncompatibleSchema(f"topic {topic!r}: subject {subject!r}: {e}") from None


def decode_plan(conn: RegistryConnection, out: Output, topic: str) -> DecodePlan:
    """The run's plan: each decoded part's subject, schemas, columns and their stored names."""
    client = conn.client()
    parts: list[DecodedPart] = []
    taken = list(out.columns)
    for part, kind, subject, prefix in out.registry_parts(topic):
        versions = client.versions(subject)
        if not versions:
            raise SchemaRegistryUnavailable(
                f"topic {topic!r}: {conn.who} has no version of subject {subject!r}; {part}_decoding.type {kind!r} "
                f"reads the window's {part}s as the subject's newest schema (set {part}_decoding.subject when the "
                "producers use another subject name strategy)")
        wrong = [v for v in versions if v.schema_type != REGISTRY_TYPE[kind]]
        if wrong:
            raise InvalidConfig(f"{part}_decoding.type is {kind!r}, but subject {subject!r} version "
                                f"{wrong[0].version} (schema id {wrong[0].id}) is a {wrong[0].schema_type} schema")
        struct = _struct(kind, topic, subject, versions)
        fields = struct["fields"]
        prefixed = [prefix + f["name"] for f in fields]
        clash = sorted(set(prefixed) & set(taken))
        if clash:
            raise InvalidConfig(f"{part}_decoding: decoded field(s) {clash} clash with stored columns; set "
                                f"{part}_decoding.column_prefix (e.g. '{part}_') or turn those envelope parts off")
        names = stored_names(prefixed, taken)
        stored = []
        for f, p in zip(fields, prefixed, strict=True):
            meta = {SOURCE_FIELD: f["name"]} if names[p] != p else {}
            if part == "key":
                meta[PART_FIELD] = "key"
            stored.append({**f, "nullable": True, "metadata": meta})  # null for a tombstone
        taken += [names[p] for p in prefixed]
        parts.append(DecodedPart(part, kind, subject, tuple(versions),
                                 json.dumps({"type": "struct", "fields": stored}),
                                 tuple(names[p] for p in prefixed)))
    return DecodePlan(topic, tuple(parts), conn)


def stored_schema(schema_json: str, plan: DecodePlan) -> str:
    """The stored columns' Spark schema: the envelope's, then each part's decoded columns."""
    schema = json.loads(schema_json)
    for part in plan.parts:
        for f, name in zip(part.fields(), part.columns, strict=True):
            schema["fields"].append({**f, "name": name})
    return json.dumps(schema, separators=(",", ":"))


def dead_letter_schema(envelope_json: str) -> str:
    """The dead letters' schema: the raw envelope, and why the record did not decode."""
    schema = json.loads(envelope_json)
    schema["fields"].append(REASON_FIELD)
    return json.dumps(schema, separators=(",", ":"))


class SchemasKept:
    """The schemas a run's windows keep in the bucket, with the run's plan: each schema object is written once per
    run, not once per window. A run's windows share their schemas and commit side by side (a thread per partition),
    so a window whose schema another window is putting waits for that PUT instead of sending its own."""

    def __init__(self, plan: DecodePlan) -> None:
        self.plan = plan
        self._keys: set[str] = set()  # put (or found there) by this run
        self._lock = threading.Lock()

    def keep(self, s3: S3Client, bucket: str, prefix: str, used: dict[str, list[int]]) -> list[ManifestSchema]:
        """Every schema the window used (`used`: its ids by part) stored once in the bucket by content hash, and
        listed for the manifest: the archive stays readable and restorable without the registry."""
        listed: dict[tuple[str, int], ManifestSchema] = {}
        for part in self.plan.parts:
            known = {s.id: s for s in part.schemas}
            for i in sorted(set(used.get(part.part, []))):
                s = known.get(i) or self.plan.registry.client().by_id(i)  # type: ignore[union-attr]
                key = schema_key(prefix, s.sha256)
                with self._lock:
                    if key not in self._keys:
                        _put_once(s3, bucket, key, s)
                        self._keys.add(key)
                listed[(part.part, s.id)] = ManifestSchema(
                    part=part.part, id=s.id, schema_type=s.schema_type, subject=s.subject, version=s.version,
                    sha256=s.sha256, key=key)
        return list(listed.values())


def keep_schemas(s3: S3Client, bucket: str, prefix: str, plan: DecodePlan, used: dict[str, list[int]],
                 ) -> list[ManifestSchema]:
    """`SchemasKept.keep` for one window (or a run that commits once)."""
    return SchemasKept(plan).keep(s3, bucket, prefix, used)


def _put_once(s3: S3Client, bucket: str, key: str, s: RegistrySchema) -> None:
    body = json.dumps({"schemaType": s.schema_type, "schema": s.text, "references": [
        {"name": n, "schema": t} for n, t in s.references]}, sort_keys=True).encode()
    try:
        s3.put_object(Bucket=bucket, Key=key, Body=body, IfNoneMatch="*", ContentType="application/json")
    except ClientError as e:  # already there (its name is its content's hash) or being written by another run
        if error_code(e) not in PRECONDITION_FAILED + CONFLICT:
            raise
