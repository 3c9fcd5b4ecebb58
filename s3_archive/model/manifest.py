"""Manifest: the commit record of one window, JSON at
`<prefix>_manifests/<topic>/kafka_partition=<p>/<window key>.json`, written once with `If-None-Match: *`
(archive/driver/commit.py). Every consumer reads it through `parse_manifest` (from S3: `io/s3.py::read_manifest`), never
as a dict.

Versions. Version 2 is version 1 plus `schemas` (the Schema Registry schemas a window used, by id and content
hash), written only by archives that decode registry payloads. Version 3, what this code writes, adds tamper
evidence: each object's `sha256` (computed by the write task as it wrote the bytes), the window's `generation` (1;
a rewrite of the window, e.g. an erasure, commits generation 2 and lists the generations it `supersedes`), the link
to the previous committed manifest of the partition (`previous_manifest`: its key, generation and the SHA-256 of its
committed bytes: a chain per partition), the offsets an erasure removed (`erased_offsets`) and, under
`retention_lock`, the window's Object Lock (`retention`); its `schemas` are optional. Versions 1 and 2 are read as
they are ("unhashed" to `verify`). Those written before the output options
(value decoding, envelope selection, dead letters) lack `envelope`, `value_decoding`, `undecodable_records`,
`restorable` and `dead_letter_objects`, and their objects lack `offset`: they parse with those fields None (empty
for dead letters) and serialize back without them. A version this code does not know, a key it does not know, a
missing key or a value of the wrong type is refused with `InvalidManifest` naming what is wrong: a manifest is
never half read. A new field therefore comes with a new `manifest_version` (and its reader here).
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_serializer, model_validator

from s3_archive.model.base import StrictModel
from s3_archive.model.errors import InvalidManifest
from s3_archive.model.windows import InvalidWindow, OffsetWindow

MANIFEST_VERSION = 3  # the version this code writes: hashed and chained, with or without registry schemas
PLAIN_VERSION = 1  # before hashes
REGISTRY_VERSION = 2  # before hashes, with registry schemas
KNOWN_VERSIONS = (1, 2, 3)  # the versions it reads

# A `[from, to)` offset range, as JSON writes it: a two-element list.
OffsetRange = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=2, max_length=2)]

# Fields absent from manifests written before the output options; None means absent and is not written back.
_LATER_FIELDS = ("envelope", "value_decoding", "undecodable_records", "restorable", "iceberg_table",
                 "iceberg_snapshot_id", "schemas", "unplaceable_records", "skipped_records", "tombstones_skipped",
                 "generation", "previous_manifest", "retention", "erasure_records")
# version 3's (with `supersedes`, `erased_offsets`, objects' sha256)
_HASHED_FIELDS = ("generation", "previous_manifest", "retention", "erasure_records")


def iso(ms: int | None) -> str | None:
    """A record timestamp (epoch milliseconds) as the manifest writes it (`min_timestamp`, `max_timestamp`)."""
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


class ManifestObject(StrictModel):
    """One object of a committed window: its final key, size and ETag as published."""

    key: str
    size: int = Field(ge=0)
    etag: str
    offset: int | None = None  # the `bytes` format (one object per record): the record's offset
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")  # version 3: of the bytes, as written

    @model_serializer(mode="wrap")
    def _without_absent(self, handler: Any) -> dict[str, Any]:
        out = handler(self)
        for name in ("offset", "sha256"):
            if getattr(self, name) is None:
                out.pop(name, None)
        return out


class ManifestLink(StrictModel):
    """A committed manifest named by another one: its key, its generation and the SHA-256 of its bytes as
    committed (the chain of a partition; an erasure's earlier generations)."""

    key: str
    generation: int = Field(ge=1)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class Retention(StrictModel):
    """The Object Lock a window's objects and manifest carry (`retention_lock`): S3's mode and RetainUntilDate."""

    mode: Literal["GOVERNANCE", "COMPLIANCE"]
    retain_until: str  # ISO-8601, UTC: committed_at + retention_lock.days

    @field_validator("retain_until")
    @classmethod
    def _iso(cls, v: str) -> str:
        datetime.fromisoformat(v)
        return v

    @property
    def until(self) -> datetime:
        return datetime.fromisoformat(self.retain_until)


class ManifestSchema(StrictModel):
    """A Schema Registry schema a window's records (or its reader schema) used: its id in the source registry, and
    the object in the bucket that keeps it (`<prefix>_schemas/<sha256>.json`)."""

    part: Literal["value", "key"]
    id: int = Field(ge=0)
    schema_type: str  # AVRO | PROTOBUF | JSON
    subject: str | None = None
    version: int | None = None
    sha256: str
    key: str
    reader: bool = False  # the one schema all the window's values were read as; false: each read with its own


class Manifest(StrictModel):
    """The commit record of one window (see docs/commit-protocol.md, "Manifest fields")."""

    # `schema` is a BaseModel attribute: the field is `spark_schema` in Python, `schema` in JSON.
    model_config = ConfigDict(validate_by_name=True, validate_by_alias=True, serialize_by_alias=True)

    manifest_version: Literal[1, 2, 3]
    writer: str
    topic: str
    partition: int
    start_offset: int
    end_offset: int  # exclusive
    window_key: str
    format: str
    compression: str
    envelope: list[str] | None = None  # the archived columns
    value_decoding: str | None = None  # bytes | utf8 | json
    undecodable_records: int | None = None  # records whose value did not decode (kept as dead letters)
    # Written only when not 0: records the layout could not place (layout.on_missing), and records an error
    # policy `skip` dropped (not in the objects, not in record_count; their offsets are not absent either)
    unplaceable_records: int | None = None
    skipped_records: int | None = None
    tombstones_skipped: int | None = None  # sink_output.skip_tombstones: records with a null value, not written
    restorable: bool | None = None  # None: written before the flag existed (restore judges by `format`)
    record_count: int = Field(ge=0)
    bytes_read: int = Field(ge=0)  # key + value + header bytes read from Kafka
    bytes_written: int = Field(ge=0)  # sum of `objects` sizes
    first_offset: int | None
    last_offset: int | None
    min_timestamp_ms: int | None
    max_timestamp_ms: int | None
    min_timestamp: str | None  # ISO-8601, UTC
    max_timestamp: str | None
    absent_offsets: list[OffsetRange]  # ranges with no committed record (compaction, markers, aborted)
    absent_offsets_truncated: bool
    absent_offset_count: int
    lost_offsets: list[OffsetRange]  # ranges deleted by retention before they were archived
    spark_schema: str = Field(alias="schema")  # the staged DataFrame's schema, Spark JSON
    attempt: str
    committed_at: str  # ISO-8601
    objects: list[ManifestObject]
    dead_letter_objects: list[ManifestObject] = []  # undecodable records, raw-envelope Parquet
    # format iceberg: the table (catalog.database.table) and the snapshot that committed the window's rows
    iceberg_table: str | None = None
    iceberg_snapshot_id: int | None = None
    schemas: list[ManifestSchema] | None = None  # manifest_version 2 (3: optional): the registry schemas used
    # manifest_version 3: tamper evidence (the objects' sha256 with them) and the window's Object Lock
    generation: int | None = Field(default=None, ge=1)
    previous_manifest: ManifestLink | None = None  # None: the first committed manifest of its partition
    supersedes: list[ManifestLink] = []  # the earlier generations of this window's manifest (a rewrite)
    # an erasure (generation > 1): the offsets whose records were erased, as ranges (dropped from the objects, or
    # kept with their value and headers nulled: `erasure.mode`); a restore skips them and counts them
    erased_offsets: list[OffsetRange] = []
    # how many records the erasure that wrote this generation erased (`attempt` is that erasure's id): an audit
    # record completed after the erasure was killed counts them from here
    erasure_records: int | None = Field(default=None, ge=0)
    retention: Retention | None = None

    @field_validator("committed_at")
    @classmethod
    def _iso_time(cls, v: str) -> str:
        datetime.fromisoformat(v)  # a ValueError names the value
        return v

    @model_validator(mode="after")
    def _window_matches(self) -> Manifest:
        try:
            key = OffsetWindow(self.partition, self.start_offset, self.end_offset).key
        except InvalidWindow as e:
            raise ValueError(str(e)) from None
        if key != self.window_key:
            raise ValueError(f"window_key {self.window_key!r} is not the window of partition {self.partition} "
                             f"offsets [{self.start_offset}, {self.end_offset}) ({key})")
        if (self.manifest_version == REGISTRY_VERSION and self.schemas is None) or (
                self.manifest_version == PLAIN_VERSION and self.schemas is not None):
            raise ValueError(f"`schemas` is a field of manifest_version {REGISTRY_VERSION} (and required there) and "
                             f"{MANIFEST_VERSION}; this manifest is version {self.manifest_version}")
        hashed = self.manifest_version == MANIFEST_VERSION
        late = [n for n in _HASHED_FIELDS if getattr(self, n) is not None] + [
            n for n in ("supersedes", "erased_offsets") if getattr(self, n)]
        late += ["objects[].sha256"] * any(o.sha256 for o in self.all_objects)
        names = [f"`{n}`" for n in dict.fromkeys(late)]
        if not hashed and names:
            raise ValueError(f"{', '.join(names)} {'is a field' if len(names) == 1 else 'are fields'} of "
                             f"manifest_version {MANIFEST_VERSION}; this manifest is version {self.manifest_version}")
        if hashed and self.generation is None:
            raise ValueError(f"`generation` is required in manifest_version {MANIFEST_VERSION}")
        return self

    @model_serializer(mode="wrap")
    def _without_absent(self, handler: Any) -> dict[str, Any]:
        out = handler(self)
        for name in _LATER_FIELDS:
            if getattr(self, name) is None:
                out.pop(name, None)
        if not self.dead_letter_objects:
            out.pop("dead_letter_objects", None)
        for name in ("supersedes", "erased_offsets"):
            if not getattr(self, name):
                out.pop(name, None)
        return out

    @property
    def window(self) -> OffsetWindow:
        return OffsetWindow(self.partition, self.start_offset, self.end_offset)

    @property
    def all_objects(self) -> list[ManifestObject]:
        """The window's objects, then its dead letters: every object the window's commit published."""
        return [*self.objects, *self.dead_letter_objects]

    @property
    def erased_count(self) -> int:
        return sum(b - a for a, b in self.erased_offsets)

    def is_erased(self, offset: int) -> bool:
        """Whether an erasure removed the record at `offset` (erased_offsets are sorted and disjoint)."""
        i = bisect_right(self.erased_offsets, offset, key=lambda r: r[0]) - 1
        return i >= 0 and offset < self.erased_offsets[i][1]

    @property
    def lost_offset_count(self) -> int:
        return sum(b - a for a, b in self.lost_offsets)

    @property
    def committed_time(self) -> datetime:
        """`committed_at` as an aware datetime (UTC when the text has no offset)."""
        t = datetime.fromisoformat(self.committed_at)
        return t if t.tzinfo else t.replace(tzinfo=UTC)

    def with_objects(self, objects: list[ManifestObject], dead_letter_objects: list[ManifestObject]) -> Manifest:
        """This manifest with the window's published objects (and `bytes_written`, their total size)."""
        return self.model_copy(update={"objects": list(objects), "dead_letter_objects": list(dead_letter_objects),
                                       "bytes_written": sum(o.size for o in objects)})

    @property
    def hashed(self) -> bool:
        """Whether every object the window published carries its SHA-256 (versions 1 and 2 never do; format
        iceberg's data files, written by Iceberg, do not)."""
        return all(o.sha256 for o in self.all_objects)

    def dumps(self) -> bytes:
        """The JSON written to S3 (one-space indent, sorted keys)."""
        return json.dumps(self.model_dump(mode="json"), indent=1, sort_keys=True).encode()


def _problems(errors: list[Any], version: int) -> list[str]:
    """Validation errors as `field: what is wrong (got value)`, the missing fields named together."""
    missing, out = [], []
    for err in errors:
        msg = str(err["msg"]).removeprefix("Value error, ")
        where = ".".join(str(p) for p in err["loc"])
        if not where:  # a check across fields: the message names the values
            out.append(msg)
        elif err["type"] == "missing":
            missing.append(f"`{where}`")
        elif err["type"] == "extra_forbidden":
            out.append(f"`{where}` is not a field of manifest_version {version}")
        else:
            out.append(f"`{where}`: {msg} (got {err['input']!r:.80})")
    if missing:
        out.insert(0, f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing")
    return out


def parse_manifest(data: bytes | str | Mapping[str, Any], source: str = "") -> Manifest:
    """A manifest of any version written so far, from its JSON (or the decoded JSON object). `source` names it
    in errors (e.g. its S3 URL). Raises InvalidManifest: not JSON, not an object, an unknown version, or fields
    missing, unknown or of the wrong type."""
    what = f"manifest {source}" if source else "manifest"
    if isinstance(data, bytes | str):
        try:
            data = json.loads(data)
        except ValueError as e:
            raise InvalidManifest(f"{what} is not JSON: {e}") from None
    if not isinstance(data, Mapping):
        raise InvalidManifest(f"{what} is not a JSON object but {type(data).__name__}")
    version = data.get("manifest_version")
    if version is None:
        raise InvalidManifest(f"{what} has no manifest_version; this s3-archive reads versions "
                              f"{', '.join(map(str, KNOWN_VERSIONS))}")
    if version not in KNOWN_VERSIONS or isinstance(version, bool):
        newer = isinstance(version, int) and not isinstance(version, bool) and version > max(KNOWN_VERSIONS)
        raise InvalidManifest(
            f"{what} has manifest_version {version!r}; this s3-archive reads versions "
            f"{', '.join(map(str, KNOWN_VERSIONS))}" + ("; it was written by a newer s3-archive: upgrade to read it"
                                                        if newer else ""))
    try:
        return Manifest.model_validate(dict(data))
    except ValidationError as e:
        raise InvalidManifest(f"{what} (manifest_version {version}) is malformed: "
                              + "; ".join(_problems(e.errors(include_url=False), version))) from None
