"""A Schema Registry (Confluent's REST API: Confluent Schema Registry, Apicurio's `/apis/ccompat/v7`, Karapace),
reached with confluent-kafka's `SchemaRegistryClient`: by the driver (the subject's versions), the write tasks
(a writer schema by id) and the restore (re-registering archived schemas in a target registry).

`RegistryConnection` is picklable (it travels with each write task) and keeps the password out of its repr; every
error names the registry's URL and the user, never the password. Every request has a timeout and reads are retried:
a registry behind a load balancer (or a freshly started one) may leave a request unanswered.

The Confluent wire format of a framed payload: magic byte 0, the schema id (4 bytes, big-endian), then the encoded
record (for Protobuf, first the message indexes).
"""

from __future__ import annotations

import functools
import hashlib
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from s3_archive.model.errors import SchemaRegistryUnavailable

MAGIC = 0
HEADER_BYTES = 5  # magic byte + 4-byte schema id
SCHEMA_TYPES = {"AVRO": "avro", "PROTOBUF": "protobuf", "JSON": "json_schema"}  # registry's name -> ours
REGISTRY_TYPE = {v: k for k, v in SCHEMA_TYPES.items()}


def schema_hash(schema_type: str, text: str) -> str:
    """The content hash a schema is stored under in the bucket (sha256 of its type and text)."""
    return hashlib.sha256(f"{schema_type}\n{text}".encode()).hexdigest()


@dataclass(frozen=True)
class RegistrySchema:
    """One schema as the registry gives it (and as the bucket keeps it): id, type (AVRO, PROTOBUF, JSON), text,
    and the schemas it references (name -> text, for Protobuf imports and JSON `$ref`s)."""

    id: int
    schema_type: str
    text: str
    references: tuple[tuple[str, str], ...] = ()
    subject: str | None = None
    version: int | None = None

    @property
    def sha256(self) -> str:
        return schema_hash(self.schema_type, self.text)


class UnknownSchemaId(LookupError):
    """The registry has no schema with this id (HTTP 404)."""


@dataclass(frozen=True)
class RegistryConnection:
    """How the driver, the executors and the restore reach one Schema Registry."""

    url: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_location: str | None = None
    timeout_s: float = 10.0
    attempts: int = 4  # tries of a read whose answer does not come within timeout_s (or a 5xx)

    @property
    def who(self) -> str:
        """The registry and the login, for errors (never the password)."""
        return f"the Schema Registry at {self.url}" + (f" as user {self.username!r}" if self.username else "")

    def client(self) -> RegistryClient:
        """One client per connection and process (a forked executor makes its own)."""
        return _client(self, os.getpid())


@functools.lru_cache(maxsize=16)
def _client(conn: RegistryConnection, pid: int) -> RegistryClient:
    return RegistryClient(conn)


class RegistryClient:
    """The few calls s3-archive makes, over confluent-kafka's client, with retries and errors that name the
    registry. Schemas by id are cached for the life of the process (ids are immutable)."""

    def __init__(self, conn: RegistryConnection) -> None:
        from confluent_kafka.schema_registry import SchemaRegistryClient

        conf: dict[str, Any] = {"url": conn.url, "timeout": conn.timeout_s, "max.retries": 0}
        if conn.username is not None:
            conf["basic.auth.user.info"] = f"{conn.username}:{conn.password or ''}"
        if conn.ca_location:
            conf["ssl.ca.location"] = conn.ca_location
        self.conn = conn
        self._client = SchemaRegistryClient(conf)
        self._by_id: dict[int, RegistrySchema] = {}
        self._lock = threading.Lock()

    def _call(self, what: str, fn: Any, *args: Any) -> Any:
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        last: BaseException | None = None
        start = time.monotonic()
        for _ in range(self.conn.attempts):
            try:
                return fn(*args)
            except SchemaRegistryError as e:
                if e.http_status_code == 404:  # no such schema id, subject or version
                    raise UnknownSchemaId(self._scrub(str(e))) from None
                if e.http_status_code is not None and e.http_status_code < 500:
                    raise SchemaRegistryUnavailable(f"{self.conn.who} refused {what}: "
                                                    f"{self._scrub(e.error_message)} (HTTP {e.http_status_code})"
                                                    ) from None
                last = e
            except Exception as e:  # timeouts and refused connections (httpx's), retried
                last = e
        raise SchemaRegistryUnavailable(
            f"cannot reach {self.conn.who} ({what}): {self.conn.attempts} tries in {time.monotonic() - start:.1f}s "
            f"(timeout {self.conn.timeout_s:g}s each): "
            f"{type(last).__name__}: {self._scrub(str(last))}. Check $S3_ARCHIVE_SCHEMA_REGISTRY_URL, the network "
            "and the credentials") from None

    def _scrub(self, text: str) -> str:
        return text.replace(self.conn.password, "***") if self.conn.password else text

    def _schema(self, schema_id: int, s: Any, subject: str | None = None, version: int | None = None,
                ) -> RegistrySchema:
        refs = tuple((r.name, self._reference_text(r)) for r in (s.references or []))
        return RegistrySchema(schema_id, s.schema_type or "AVRO", s.schema_str, refs, subject, version)

    def _reference_text(self, ref: Any) -> str:
        reg = self._call(f"reading reference {ref.subject!r} version {ref.version}", self._client.get_version,
                         ref.subject, ref.version)
        return reg.schema.schema_str

    def by_id(self, schema_id: int) -> RegistrySchema:
        """The schema with this id; UnknownSchemaId if the registry has none."""
        with self._lock:
            found = self._by_id.get(schema_id)
        if found is not None:
            return found
        s = self._call(f"reading schema id {schema_id}", self._client.get_schema, schema_id)
        out = self._schema(schema_id, s)
        with self._lock:
            self._by_id[schema_id] = out
        return out

    def versions(self, subject: str) -> list[RegistrySchema]:
        """Every version of `subject`, oldest first (none: the subject does not exist)."""
        try:
            numbers = self._call(f"listing the versions of subject {subject!r}", self._client.get_versions,
                                 subject)
        except UnknownSchemaId:
            return []
        out = []
        for v in sorted(numbers):
            reg = self._call(f"reading subject {subject!r} version {v}", self._client.get_version, subject, v)
            out.append(self._schema(reg.schema_id, reg.schema, subject, v))
            with self._lock:
                self._by_id.setdefault(reg.schema_id, out[-1])
        return out

    def register(self, subject: str, schema: RegistrySchema) -> int:
        """Register `schema` under `subject` (an existing identical version: its id); the id in this registry."""
        from confluent_kafka.schema_registry import Schema

        if schema.references:
            raise SchemaRegistryUnavailable(
                f"schema id {schema.id} references other schemas ({', '.join(n for n, _ in schema.references)}); "
                "re-registering schemas with references is not supported")
        return self._call(f"registering a schema under subject {subject!r}", self._client.register_schema,
                          subject, Schema(schema.text, schema.schema_type))
