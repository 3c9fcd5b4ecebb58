"""A restore into another Schema Registry: each schema an archived window used (kept in the bucket, listed in its
manifest) registered in the target registry under the subject of a naming strategy, and the 4-byte schema id of
every restored record rewritten to the target's id. Without it a restore is byte-exact (the ids stay as archived).

Strategies (Confluent's subject name strategies): `topic_name` — `<target topic>-value` / `-key`; `record_name` —
the record's full name (Avro `namespace.name`, Protobuf `package.Message`, JSON Schema `title`); `topic_record_name`
— `<target topic>-<record name>`. Records that are not framed are restored as they are.

A framed record whose id the window's manifest does not list (a dead letter: its id unknown to the registry, or a
record that did not decode, so its schema was never kept) is one the restore cannot vouch for: the target's
registry may give that id to another schema, and no consumer could read the record. Unless the source registry
(`source`) still resolves the id (its schema is then registered in the target like the listed ones), the restore
refuses it before producing it — `unlisted: keep` restores such records as they are. The window's dead letters are
read before the window's first record is produced, so a window whose unlisted ids are all among its dead letters
(the case of an archive that decodes) is refused before anything of it is produced; every other framed record is
checked as its batch is read, before the batch is produced.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

from s3_archive.io.registry_client import HEADER_BYTES, RegistryConnection, RegistrySchema, UnknownSchemaId
from s3_archive.io.s3 import S3Client
from s3_archive.model.errors import InvalidRestore
from s3_archive.model.manifest import Manifest
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.batch import Records
from s3_archive.restore.sources import object_batches

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


UNLISTED = ("refuse", "keep")


@dataclass
class RewriteCounts:
    """A window's ids: schemas newly registered in the target, framed records whose id was rewritten, framed
    records restored as they were (`unlisted: keep`)."""

    schemas_registered: int = 0
    ids_rewritten: int = 0
    kept_as_they_were: int = 0

    def metadata(self) -> dict[str, int]:
        return {"schemas_registered": self.schemas_registered, "schema_ids_rewritten": self.ids_rewritten,
                "records_kept_with_unlisted_ids": self.kept_as_they_were}


@dataclass
class SchemaRewrite:
    """How a restore re-registers archived schemas and rewrites record ids (one per run). `unlisted`: what a framed
    record whose id the window's manifest does not list gets (refuse | keep); `source`: the registry the archive
    was written with, if it still answers, to resolve such ids."""

    registry: RegistryConnection
    strategy: str = "topic_name"
    unlisted: str = "refuse"
    source: RegistryConnection | None = None
    counts: dict[OffsetWindow, RewriteCounts] = field(default_factory=dict, repr=False)
    _ids: dict[tuple[str, str, str], int] = field(default_factory=dict, repr=False)  # (part, sha256, subject) -> id
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise InvalidRestore(f"schema subject strategy {self.strategy!r} is not known; allowed: "
                                 f"{', '.join(STRATEGIES)}")
        if self.unlisted not in UNLISTED:
            raise InvalidRestore(f"unlisted_schema_ids {self.unlisted!r} is not known; allowed: {', '.join(UNLISTED)}")

    def _register(self, window: OffsetWindow, part: str, schema: RegistrySchema, sha256: str,
                  target_topic: str) -> int:
        name = subject(self.strategy, target_topic, part, schema)
        key = (part, sha256, name)
        with self._lock:
            found = self._ids.get(key)
        if found is None:
            found = self.registry.client().register(name, schema)
            with self._lock:
                self._ids[key] = found
                self.counts.setdefault(window, RewriteCounts()).schemas_registered += 1
        return found

    def id_map(self, s3: S3Client, bucket: str, window: OffsetWindow, manifest: Manifest, target_topic: str,
               ) -> dict[str, dict[int, int | None]]:
        """Per part, archived id -> the target registry's id, registering each schema the window lists; then the
        window's dead letters checked (`_check_dead_letters`), before anything of the window is produced."""
        out: dict[str, dict[int, int | None]] = {"key": {}, "value": {}}
        self.counts.setdefault(window, RewriteCounts())
        for ref in manifest.schemas or []:
            body = json.loads(s3.get_object(Bucket=bucket, Key=ref.key)["Body"].read())
            schema = RegistrySchema(ref.id, body["schemaType"], body["schema"],
                                    tuple((r["name"], r["schema"]) for r in body.get("references", [])))
            out.setdefault(ref.part, {})[ref.id] = self._register(window, ref.part, schema, ref.sha256, target_topic)
        for o in manifest.dead_letter_objects:
            for b in object_batches(s3, bucket, o, "parquet"):
                for part, payloads in (("key", b.keys), ("value", b.values)):
                    for i, p in enumerate(payloads):
                        sid = framed_id(p)
                        if sid is not None and sid not in out[part]:
                            out[part][sid] = self._unlisted(window, part, sid, b.offsets[i], target_topic,
                                                            "nothing was restored")
        return out

    def _unlisted(self, window: OffsetWindow, part: str, sid: int, offset: int, target_topic: str,
                  done: str) -> int | None:
        """The target's id for an id the window does not list: resolved in the source registry and registered, or
        None (restored as it is) with `unlisted: keep`; else InvalidRestore."""
        if self.source is not None:
            try:
                schema = self.source.client().by_id(sid)
            except UnknownSchemaId:
                pass
            else:
                return self._register(window, part, schema, schema.sha256, target_topic)
        if self.unlisted == "keep":
            return None
        where = f"the source registry ({self.source.who}) does not know it either" if self.source is not None \
            else "no source registry was given to resolve it"
        raise InvalidRestore(
            f"window {window.key}: the {part} of the record at offset {offset} is framed with schema id {sid}, which "
            f"the window's manifest does not list (a dead letter, or a record that did not decode) and {where}. "
            f"Restoring it with its id unchanged could point it at another schema of {self.registry.who}, and "
            f"rewriting it needs its schema: {done}. Set unlisted_schema_ids: keep to restore such records as they "
            "are, or restore with schema_subjects: keep_ids")

    def rewritten(self, window: OffsetWindow, batches: Iterator[Records], ids: dict[str, dict[int, int | None]],
                  target_topic: str) -> Iterator[Records]:
        """The batches with each framed key and value carrying the target registry's schema id; a framed record
        with an id the window does not list resolved, kept or refused (`_unlisted`) before its batch goes on. Keys
        and values are read as Python bytes, one per record: the framing is checked and rewritten record by
        record."""
        counts = self.counts.setdefault(window, RewriteCounts())
        for b in batches:
            values = self._rewrite(window, "value", b.values, b.offsets, ids["value"], counts, target_topic)
            keys = self._rewrite(window, "key", b.keys, b.offsets, ids["key"], counts, target_topic)
            if values is not b.values or keys is not b.keys:
                b = b.with_columns(keys=keys, values=values)  # the other columns as they came (Arrow)
            yield b

    def _rewrite(self, window: OffsetWindow, part: str, payloads: list[bytes | None], offsets: list[int],
                 ids: dict[int, int | None], counts: RewriteCounts, target_topic: str) -> list[bytes | None]:
        out, changed = [], False
        for i, p in enumerate(payloads):
            sid = framed_id(p)
            if sid is not None:
                if sid not in ids:
                    ids[sid] = self._unlisted(window, part, sid, offsets[i], target_topic,
                                              "the restore stopped before producing it (the records before it are "
                                              "in the target and its ledger: a re-run goes on from there)")
                new = ids[sid]
                if new is None:
                    counts.kept_as_they_were += 1
                else:
                    counts.ids_rewritten += 1
                    if new != sid:
                        p, changed = b"\x00" + new.to_bytes(4, "big") + p[HEADER_BYTES:], True
            out.append(p)
        return out if changed else payloads


def framed_id(payload: bytes | None) -> int | None:
    """The schema id of a Confluent-framed payload (magic byte 0, then 4 bytes); None for anything else."""
    if payload is None or len(payload) < HEADER_BYTES or payload[0] != 0:
        return None
    return int.from_bytes(payload[1:HEADER_BYTES], "big", signed=True)  # a Java int, as the serializers write it
