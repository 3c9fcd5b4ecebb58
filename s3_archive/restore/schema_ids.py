"""A restore into another Schema Registry: each schema an archived window used (kept in the bucket, listed in its
manifest) registered in the target registry under the subject of a naming strategy, and the 4-byte schema id of
every restored record rewritten to the target's id. Without it a restore is byte-exact (the ids stay as archived).

Strategies (Confluent's subject name strategies): `topic_name` — `<target topic>-value` / `-key`; `record_name` —
the record's full name (Avro `namespace.name`, Protobuf `package.Message`, JSON Schema `title`); `topic_record_name`
— `<target topic>-<record name>`. Records that are not framed, or name an id the manifest does not list (dead
letters), are restored as they are.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

from s3_archive.io.registry_client import HEADER_BYTES, RegistryConnection, RegistrySchema
from s3_archive.io.s3 import S3Client
from s3_archive.model.errors import InvalidRestore
from s3_archive.model.manifest import Manifest
from s3_archive.restore.batch import Records

Strategy = Literal["topic_name", "record_name", "topic_record_name"]
STRATEGIES = ("topic_name", "record_name", "topic_record_name")
_PACKAGE = re.compile(r"^\s*package\s+([\w.]+)\s*;", re.M)
_MESSAGE = re.compile(r"^\s*message\s+(\w+)", re.M)  # the first top-level message (producers' default)


def record_name(schema: RegistrySchema) -> str:
    """The schema's record name (RecordNameStrategy's subject)."""
    if schema.schema_type == "AVRO":
        s = json.loads(schema.text)
        if isinstance(s, dict) and s.get("name"):
            ns = s.get("namespace")
            return f"{ns}.{s['name']}" if ns and "." not in s["name"] else s["name"]
    elif schema.schema_type == "PROTOBUF":
        message = _MESSAGE.search(schema.text)
        if message:
            package = _PACKAGE.search(schema.text)
            return f"{package[1]}.{message[1]}" if package else message[1]
    else:
        s = json.loads(schema.text)
        if isinstance(s, dict) and isinstance(s.get("title"), str):
            return s["title"]
    raise InvalidRestore(f"schema id {schema.id} ({schema.schema_type}) has no record name, which the record_name "
                         "and topic_record_name strategies need; use schema_subjects: topic_name")


def subject(strategy: str, target_topic: str, part: str, schema: RegistrySchema) -> str:
    if strategy == "topic_name":
        return f"{target_topic}-{part}"
    if strategy == "record_name":
        return record_name(schema)
    return f"{target_topic}-{record_name(schema)}"


@dataclass
class SchemaRewrite:
    """How a restore re-registers archived schemas and rewrites record ids (one per run)."""

    registry: RegistryConnection
    strategy: str = "topic_name"
    _ids: dict[tuple[str, str, str], int] = field(default_factory=dict, repr=False)  # (part, sha256, subject) -> id
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise InvalidRestore(f"schema subject strategy {self.strategy!r} is not known; allowed: "
                                 f"{', '.join(STRATEGIES)}")

    def id_map(self, s3: S3Client, bucket: str, manifest: Manifest, target_topic: str,
               ) -> dict[str, dict[int, int]]:
        """Per part, archived id -> the target registry's id, registering each schema the window lists."""
        out: dict[str, dict[int, int]] = {}
        for ref in manifest.schemas or []:
            body = json.loads(s3.get_object(Bucket=bucket, Key=ref.key)["Body"].read())
            schema = RegistrySchema(ref.id, body["schemaType"], body["schema"],
                                    tuple((r["name"], r["schema"]) for r in body.get("references", [])))
            name = subject(self.strategy, target_topic, ref.part, schema)
            key = (ref.part, ref.sha256, name)
            with self._lock:
                found = self._ids.get(key)
            if found is None:
                found = self.registry.client().register(name, schema)
                with self._lock:
                    self._ids[key] = found
            out.setdefault(ref.part, {})[ref.id] = found
        return out


def _rewrite(payloads: list[bytes | None], ids: dict[int, int]) -> list[bytes | None]:
    if not ids or all(a == b for a, b in ids.items()):
        return payloads
    out = []
    for p in payloads:
        if p is not None and len(p) >= HEADER_BYTES and p[0] == 0:
            new = ids.get(int.from_bytes(p[1:HEADER_BYTES], "big"))
            if new is not None:
                p = b"\x00" + new.to_bytes(4, "big") + p[HEADER_BYTES:]
        out.append(p)
    return out


def rewritten(batches: Iterator[Records], ids: dict[str, dict[int, int]]) -> Iterator[Records]:
    """The batches with each framed key and value carrying the target registry's schema id."""
    for b in batches:
        values, keys = _rewrite(b.values, ids.get("value", {})), _rewrite(b.keys, ids.get("key", {}))
        if values is not b.values or keys is not b.keys:
            b = Records(b.partitions, b.offsets, keys, values, b.headers, b.timestamps, b.sizes)
        yield b
