"""Archives written by others (Kafka Connect S3 sinks): object names -> ordered windows, objects -> records.
Pure: no S3, no Kafka. `s3_archive.foreign_restore` lists, downloads and hands the windows to the restore.

Two layouts:
- **aiven**: keys follow `file.name.template` (`{{topic}}-{{partition}}-{{start_offset}}` by default, with
  `{{partition:padding=true}}` (10 digits), `{{start_offset:padding=true}}` (20 digits),
  `{{timestamp:unit=yyyy|MM|dd|HH}}` and `{{key}}`), after `aws.s3.prefix`, plus `.gz`/`.snappy`/`.zst` when
  `file.compression.type` is set. Contents: `format.output.type` csv, jsonl, json, avro or parquet with the fields
  of `format.output.fields` (key, value, offset, timestamp, headers), and `bytes` (an object is one raw value, or
  raw values split by a separator).
- **confluent** (DefaultPartitioner): `<topics.dir>/<topic>/partition=<p>/<topic>+<p>+<start offset>.<ext>`,
  values only (avro, json, parquet, bytes), keys from the `.keys.<ext>` sibling when `store.kafka.keys` was on.

A window is one object: (partition, start offset from the name, up to the next object's start offset). The
last object of a partition has an open end: the restore records it as done up to its last record.
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import re
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from s3_archive.windows import MAX_OFFSET, OffsetWindow

LAYOUTS = ("aiven", "confluent")
AIVEN_FORMATS = ("csv", "jsonl", "json", "avro", "parquet", "bytes")
CONFLUENT_FORMATS = ("avro", "json", "parquet", "bytes")
FIELDS = ("key", "value", "offset", "timestamp", "headers")
COMPRESSIONS = {"none": "", "gzip": ".gz", "snappy": ".snappy", "zstd": ".zst"}
DEFAULT_AIVEN_TEMPLATE = "{{topic}}-{{partition}}-{{start_offset}}"
# Storage classes whose objects must be restored (RestoreObject) before a GET; GLACIER_IR is read directly.
COLD_CLASSES = frozenset({"GLACIER", "DEEP_ARCHIVE"})

_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
_DIGITS = frozenset("0123456789")


class InvalidTemplate(ValueError):
    """A file name template that is malformed, or whose parse would be ambiguous."""


class InvalidForeignObject(ValueError):
    """An object of a foreign archive whose name or contents do not fit its configured layout."""


# --------------------------------------------------------------------------------------------------------------
# file.name.template


@dataclass(frozen=True)
class Var:
    """One `{{name}}` or `{{name:param=value}}` of a template."""

    name: str
    param: str | None = None  # "padding" | "unit"
    arg: str | None = None

    @property
    def text(self) -> str:
        return f"{{{{{self.name}}}}}" if self.param is None else f"{{{{{self.name}:{self.param}={self.arg}}}}}"

    @property
    def width(self) -> int | None:
        """Fixed width of the rendered value, or None when it varies."""
        if self.name == "partition" and self.arg == "true":
            return 10
        if self.name == "start_offset" and self.arg == "true":
            return 20
        if self.name == "timestamp":
            return 4 if self.arg == "yyyy" else 2
        return None

    @property
    def regex(self) -> str:
        if self.width is not None:
            return rf"[0-9]{{{self.width}}}"
        if self.name in ("partition", "start_offset"):
            return r"0|[1-9][0-9]*"  # Java's Long.toString: no leading zeros
        if self.name == "topic":
            return r"[a-zA-Z0-9._-]+"
        return r".*"  # key: whatever the key's string form is

    def may_contain(self, c: str) -> bool:
        if self.name in ("partition", "start_offset", "timestamp"):
            return c in _DIGITS
        if self.name == "topic":
            return c in _TOPIC_CHARS
        return True

    def render(self, value: Any) -> str:
        if self.name in ("partition", "start_offset"):
            return f"{value:0{self.width}d}" if self.width else str(value)
        if self.name == "timestamp":
            return {"yyyy": f"{value.year:04d}", "MM": f"{value.month:02d}", "dd": f"{value.day:02d}",
                    "HH": f"{value.hour:02d}"}[self.arg]
        return str(value)


_PARAMS = {"partition": ("padding", ("true", "false"), False), "start_offset": ("padding", ("true", "false"), False),
           "timestamp": ("unit", ("yyyy", "MM", "dd", "HH"), True), "topic": None, "key": None}
_VAR = re.compile(r"\{\{\s*([A-Za-z_]+)\s*(?::\s*([A-Za-z_]+)\s*=\s*([A-Za-z0-9_]+)\s*)?\}\}")


@dataclass(frozen=True)
class KeyTemplate:
    """A parsed `file.name.template`: literals and variables alternating (`literals` has one more item)."""

    text: str
    literals: tuple[str, ...]
    variables: tuple[Var, ...]

    @property
    def names(self) -> set[str]:
        return {v.name for v in self.variables}

    def render(self, topic: str = "", partition: int = 0, start_offset: int = 0, timestamp: datetime | None = None,
               key: str = "") -> str:
        values = {"topic": topic, "partition": partition, "start_offset": start_offset, "key": key,
                  "timestamp": timestamp or datetime(1970, 1, 1, tzinfo=UTC)}
        out = [self.literals[0]]
        for v, lit in zip(self.variables, self.literals[1:]):
            out += [v.render(values[v.name]), lit]
        return "".join(out)

    def compiled(self) -> re.Pattern[str]:
        parts = [re.escape(self.literals[0])]
        for i, (v, lit) in enumerate(zip(self.variables, self.literals[1:])):
            parts += [f"(?P<v{i}>{v.regex})", re.escape(lit)]
        return re.compile("".join(parts), re.DOTALL)

    def parse(self, name: str, pattern: re.Pattern[str] | None = None) -> dict[str, Any] | None:
        """The values of an object name (after the prefix and compression suffix), or None if it does not fit.
        Keys: topic, partition, start_offset (ints), timestamp (dict unit -> int), key."""
        m = (pattern or self.compiled()).fullmatch(name)
        if m is None:
            return None
        out: dict[str, Any] = {}
        for i, v in enumerate(self.variables):
            text = m[f"v{i}"]
            if v.name == "timestamp":
                out.setdefault("timestamp", {})[v.arg] = int(text)
            elif v.name in ("partition", "start_offset"):
                out[v.name] = int(text)
            else:
                out[v.name] = text
        return out


def parse_template(text: str) -> KeyTemplate:
    """Parse and check a template; ambiguous templates are refused with the reason."""
    literals: list[str] = []
    variables: list[Var] = []
    pos = 0
    for m in _VAR.finditer(text):
        literals.append(text[pos:m.start()])
        name, param, arg = m[1], m[2], m[3]
        if name not in _PARAMS:
            raise InvalidTemplate(f"template {text!r}: unknown variable {{{{{name}}}}}; allowed: topic, partition, "
                                  "start_offset, timestamp, key")
        spec = _PARAMS[name]
        if param is not None:
            if spec is None or param != spec[0]:
                allowed = f"only {spec[0]}" if spec else "none"
                raise InvalidTemplate(f"template {text!r}: {{{{{name}}}}} has no parameter {param!r} "
                                      f"(allowed: {allowed})")
            if arg not in spec[1]:
                raise InvalidTemplate(f"template {text!r}: {{{{{name}:{param}={arg}}}}}: {param} must be one of "
                                      f"{', '.join(spec[1])}")
        elif spec is not None and spec[2]:
            raise InvalidTemplate(f"template {text!r}: {{{{{name}}}}} needs {spec[0]}=" + "|".join(spec[1]))
        variables.append(Var(name, param, arg if param is not None else None))
        pos = m.end()
    literals.append(text[pos:])
    for lit in literals:
        if "{{" in lit or "}}" in lit:
            raise InvalidTemplate(f"template {text!r}: malformed variable near {lit!r}; variables look like "
                                  "{{name}} or {{name:param=value}}")
    seen: set[tuple[str, str | None]] = set()
    for v in variables:
        ident = (v.name, v.arg if v.name == "timestamp" else None)
        if ident in seen:
            raise InvalidTemplate(f"template {text!r}: {v.text} appears twice")
        seen.add(ident)
    t = KeyTemplate(text, tuple(literals), tuple(variables))
    _check_unambiguous(t)
    return t


def _check_unambiguous(t: KeyTemplate) -> None:
    """Every variable's span must follow from the template alone, for every key it can render.

    From the left: variable i starts where i-1 ends; it ends after its fixed width, or at the first occurrence of
    the next literal when that literal has a character variable i can never contain. From the right, symmetrically
    (the last variable ends where the trailing literal starts). A variable is located when its start and end are
    both known, from either side; otherwise two splits of one name would be possible."""
    vs, lits, n = t.variables, t.literals, len(t.variables)
    if n == 0:
        return

    def bounded_by(v: Var, lit: str) -> bool:
        return any(not v.may_contain(c) for c in lit)

    start_l, end_l = [False] * n, [False] * n
    known = True
    for i, v in enumerate(vs):
        start_l[i] = known
        end_l[i] = known = known and (v.width is not None or bounded_by(v, lits[i + 1]))
    start_r, end_r = [False] * n, [False] * n
    known = True
    for i in range(n - 1, -1, -1):
        end_r[i] = known
        start_r[i] = known = known and (vs[i].width is not None or bounded_by(vs[i], lits[i]))
    for i, v in enumerate(vs):
        if (start_l[i] or start_r[i]) and (end_l[i] or end_r[i]):
            continue
        # Name the first undetermined boundary.
        j = i if not (end_l[i] or end_r[i]) else i - 1
        a, b, lit = vs[j], vs[j + 1], lits[j + 1]
        if lit == "":
            why = f"{a.text} and {b.text} are adjacent with no separator"
        else:
            why = (f"every character of the separator {lit!r} between {a.text} and {b.text} can occur in both, "
                   "and neither side pins the boundary down")
        raise InvalidTemplate(
            f"template {t.text!r} is ambiguous: {why}, so one object name could be split in more than one way. "
            "Separate variables with a character that cannot occur in one of them (e.g. '/' after {{topic}}, "
            "'-' between numbers), or use padding=true for fixed-width numbers")


# --------------------------------------------------------------------------------------------------------------
# Config of a foreign source (validated when the archive YAML loads)


class ForeignSource(BaseModel):
    """A restore source written by a Kafka Connect S3 sink (`foreign_sources:` in the archive YAML)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str = Field(description="asset name: kafka_restore_foreign/<name>")
    layout: Literal["aiven", "confluent"]
    bucket: str
    prefix: str | None = Field(default=None, description="aiven: aws.s3.prefix (default ''); confluent: "
                                                         "topics.dir + '/' (default 'topics/')")
    topic: str = Field(description="the Kafka topic the sink archived (names the restore ledger)")
    template: str | None = Field(default=None, description="aiven: file.name.template")
    format: Literal["csv", "jsonl", "json", "avro", "parquet", "bytes"] = Field(
        default="csv", description="aiven: format.output.type (bytes: raw values); confluent: avro, json, parquet, "
                                   "bytes")
    fields: list[Literal["key", "value", "offset", "timestamp", "headers"]] = Field(
        default=["value"], min_length=1, description="aiven: format.output.fields, in order")
    value_encoding: Literal["base64", "none"] = Field(
        default="base64", description="aiven: format.output.fields.value.encoding")
    envelope: bool = Field(default=True, description="aiven: format.output.envelope")
    compression: Literal["none", "gzip", "snappy", "zstd"] = Field(
        default="none", description="aiven: file.compression.type; confluent json/bytes: gzip = s3.compression.type")
    line_separator: str | None = Field(
        default=None, description="bytes: separator between raw values (confluent: format.bytearray.separator, "
                                  "default newline); aiven: none, an object is one value")
    # Cold storage: what the restore does with GLACIER / DEEP_ARCHIVE objects.
    cold_restore_days: int = Field(default=7, ge=1, description="RestoreObject Days")
    cold_restore_tier: Literal["Standard", "Bulk", "Expedited"] = "Standard"

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not re.fullmatch(r"[a-z][a-z0-9_]{0,62}", v):
            raise ValueError(f"must match [a-z][a-z0-9_]{{0,62}} (lowercase letters, digits, _), got {v!r}")
        return v

    @field_validator("topic")
    @classmethod
    def _topic(cls, v: str) -> str:
        if not re.fullmatch(r"[a-zA-Z0-9._-]{1,249}", v) or v in (".", ".."):
            raise ValueError(f"not a valid Kafka topic name: {v!r} (allowed: 1-249 of a-z A-Z 0-9 . _ -)")
        return v

    @model_validator(mode="after")
    def _check(self) -> ForeignSource:
        if self.prefix is not None and self.prefix.startswith("/"):
            raise ValueError(f"prefix must not start with '/', got {self.prefix!r}")
        if len(set(self.fields)) != len(self.fields):
            raise ValueError(f"fields lists a field twice: {self.fields}")
        if self.layout == "confluent":
            if "format" not in self.model_fields_set:
                raise ValueError(f"layout 'confluent' needs format: one of {', '.join(CONFLUENT_FORMATS)} (the "
                                 "sink's format.class)")
            if self.format not in CONFLUENT_FORMATS:
                raise ValueError(f"format {self.format!r} is not a Confluent S3 sink format; allowed: "
                                 f"{', '.join(CONFLUENT_FORMATS)}")
            for key in ("template", "fields", "value_encoding", "envelope"):
                if key in self.model_fields_set:
                    raise ValueError(f"{key} applies to layout 'aiven' only")
            if self.compression not in ("none", "gzip") or (self.compression == "gzip"
                                                             and self.format not in ("json", "bytes")):
                raise ValueError(f"compression {self.compression!r}: the Confluent sink compresses only json and "
                                 "bytes objects, with gzip (avro and parquet compress inside the file)")
            return self
        try:
            t = parse_template(self.template or DEFAULT_AIVEN_TEMPLATE)
        except InvalidTemplate as e:
            raise ValueError(str(e)) from None
        if "partition" not in t.names or "start_offset" not in t.names:
            raise ValueError(f"template {t.text!r} needs {{{{partition}}}} and {{{{start_offset}}}} to be restored in "
                             "order (a {{key}} template keeps only the latest record per key: not a log)")
        if "key" in t.names:
            raise ValueError(f"template {t.text!r}: {{{{key}}}} groups records by key, keeping only the latest of "
                             "each; such objects are not a log and cannot be restored in order")
        if self.format == "bytes" and "fields" in self.model_fields_set and self.fields != ["value"]:
            raise ValueError("format 'bytes' carries only the value; fields must be [value]")
        if not self.envelope and len(self.fields) != 1:
            raise ValueError("envelope: false needs exactly one field (the sink writes the value unwrapped)")
        if "value" not in self.fields:
            raise ValueError(f"fields {self.fields} have no value: nothing to restore")
        if self.format == "csv" and self.value_encoding == "none" and self.fields[-1] != "value":
            raise ValueError("csv with value_encoding none: value must be the last field (a raw value may contain "
                             "commas)")
        if self.format in ("avro", "parquet") and self.compression != "none":
            raise ValueError(f"format {self.format!r} compresses inside the file; compression must be none")
        return self

    @property
    def key_prefix(self) -> str:
        p = self.prefix if self.prefix is not None else ("topics/" if self.layout == "confluent" else "")
        return p if p == "" or p.endswith("/") or self.layout == "aiven" else p + "/"

    @property
    def key_template(self) -> KeyTemplate:
        return parse_template(self.template or DEFAULT_AIVEN_TEMPLATE)

    @property
    def separator(self) -> bytes | None:
        if self.line_separator is not None:
            return self.line_separator.encode()
        return b"\n" if self.layout == "confluent" else None

    @property
    def has_timestamps(self) -> bool:
        return self.layout == "aiven" and "timestamp" in self.fields and self.envelope


# --------------------------------------------------------------------------------------------------------------
# Listing -> windows


@dataclass(frozen=True)
class ListedObject:
    key: str
    size: int
    storage_class: str = "STANDARD"


@dataclass(frozen=True)
class ForeignWindow:
    """One object of the source: its records are the source partition's offsets [start, end)."""

    window: OffsetWindow
    obj: ListedObject
    open_end: bool  # the partition's last object: its end is its last record + 1
    keys_obj: ListedObject | None = None  # confluent: the .keys.<ext> sibling

    @property
    def objects(self) -> list[ListedObject]:
        return [self.obj] + ([self.keys_obj] if self.keys_obj else [])


@dataclass
class Plan:
    windows: list[ForeignWindow]
    ignored: list[str]  # keys under the prefix that are not objects of this source (other topics, other files)


_CONFLUENT_EXT = {"avro": (".avro",), "json": (".json",), "parquet": (".parquet",), "bytes": (".bin",)}


def _confluent_parse(source: ForeignSource, rest: str) -> tuple[int, int, str] | None:
    """(partition, start offset, 'values'|'keys') of a Confluent object name (after the prefix), or None."""
    m = re.fullmatch(r"([^/]+)/partition=(0|[1-9][0-9]*)/([^/+]+)\+(0|[1-9][0-9]*)\+([0-9]+)((?:\.[^./]+)+)",
                     rest)
    if m is None or m[1] != source.topic or m[3] != source.topic or m[2] != m[4]:
        return None
    exts = m[6]
    kind = "values"
    for marker in (".keys", ".headers"):
        if exts.startswith(marker + "."):
            kind, exts = marker[1:], exts[len(marker):]
    gz = ".gz" if source.compression == "gzip" else ""
    ok = exts in tuple(e + gz for e in _CONFLUENT_EXT[source.format])
    if source.format == "parquet":  # <codec>.parquet, e.g. .snappy.parquet
        ok = ok or re.fullmatch(r"\.[a-z0-9]+\.parquet", exts) is not None
    return (int(m[2]), int(m[5]), kind) if ok else None


def plan(source: ForeignSource, listing: Iterable[ListedObject]) -> Plan:
    """The source's objects as windows in (partition, start offset) order. Two objects claiming the same
    (partition, start offset) are refused: which one holds the records cannot be guessed."""
    prefix = source.key_prefix
    found: dict[tuple[int, int], ListedObject] = {}
    keys_files: dict[tuple[int, int], ListedObject] = {}
    ignored: list[str] = []
    if source.layout == "aiven":
        tmpl = source.key_template
        pattern = tmpl.compiled()
        suffix = COMPRESSIONS[source.compression]
    for o in listing:
        if not o.key.startswith(prefix):
            ignored.append(o.key)
            continue
        rest = o.key[len(prefix):]
        if source.layout == "aiven":
            if not rest.endswith(suffix):
                ignored.append(o.key)
                continue
            got = tmpl.parse(rest[:len(rest) - len(suffix)] if suffix else rest, pattern)
            if got is None or got.get("topic", source.topic) != source.topic:
                ignored.append(o.key)
                continue
            coords, kind = (got["partition"], got["start_offset"]), "values"
        else:
            parsed = _confluent_parse(source, rest)
            if parsed is None:
                ignored.append(o.key)
                continue
            coords, kind = parsed[:2], parsed[2]
        if kind == "headers":
            ignored.append(o.key)
            continue
        target = keys_files if kind == "keys" else found
        if coords in target:
            raise InvalidForeignObject(
                f"s3://{source.bucket}/{target[coords].key} and s3://{source.bucket}/{o.key} both claim partition "
                f"{coords[0]} start offset {coords[1]}; remove the one that is not the sink's")
        target[coords] = o
    windows: list[ForeignWindow] = []
    ordered = sorted(found)
    for i, (p, start) in enumerate(ordered):
        nxt = ordered[i + 1] if i + 1 < len(ordered) and ordered[i + 1][0] == p else None
        end = nxt[1] if nxt else MAX_OFFSET
        windows.append(ForeignWindow(OffsetWindow(p, start, end), found[(p, start)], nxt is None,
                                     keys_files.get((p, start))))
    ignored += [o.key for c, o in keys_files.items() if c not in found]
    return Plan(windows, ignored)


def cold_state(storage_class: str, restore_header: str | None) -> Literal["ready", "request", "pending"]:
    """Whether an object can be read now: `ready`; in GLACIER/DEEP_ARCHIVE with no restore asked (`request`) or
    with a restore still running (`pending`). `restore_header` is HeadObject's `Restore`
    (`ongoing-request="true"` or `ongoing-request="false", expiry-date="…"`)."""
    if storage_class not in COLD_CLASSES:
        return "ready"
    if restore_header is None:
        return "request"
    return "pending" if 'ongoing-request="true"' in restore_header else "ready"


# --------------------------------------------------------------------------------------------------------------
# Decompression


def decompress(data: bytes, compression: str) -> bytes:
    if compression == "none":
        return data
    if compression == "gzip":
        return gzip.decompress(data)
    if compression == "zstd":
        from backports import zstd  # as restore.py and commit.py

        return zstd.decompress(data)
    if compression == "snappy":
        return snappy_stream_decompress(data)
    raise ValueError(f"unknown compression {compression!r}; allowed: {', '.join(COMPRESSIONS)}")


_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_FRAMED_MAGIC = b"\xff\x06\x00\x00sNaPpY"


def snappy_stream_decompress(data: bytes) -> bytes:
    """A snappy *stream*: xerial's SnappyOutputStream (Java; magic, then [int32 length][raw block]...) or the
    snappy framing format."""
    import cramjam

    if data.startswith(_FRAMED_MAGIC):
        return bytes(cramjam.snappy.decompress(data))
    if not data.startswith(_XERIAL_MAGIC):
        raise InvalidForeignObject("not a snappy stream: neither xerial's SnappyOutputStream header nor the snappy "
                                   "framing format")
    out, pos = [], 16  # magic (8), version (4), compatible version (4)
    while pos < len(data):
        if pos + 4 > len(data):
            raise InvalidForeignObject("truncated snappy stream")
        (n,) = struct.unpack(">i", data[pos:pos + 4])
        block = data[pos + 4:pos + 4 + n]
        if len(block) != n:
            raise InvalidForeignObject("truncated snappy stream")
        out.append(bytes(cramjam.snappy.decompress_raw(block)))
        pos += 4 + n
    return b"".join(out)


# --------------------------------------------------------------------------------------------------------------
# Decoding: object bytes -> (offset or None, key, value, headers, timestamp ms or -1)

Decoded = tuple[int | None, bytes | None, bytes | None, list[tuple[str, bytes | None]], int]


def _b64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text, validate=True)


def _bytes(v: Any) -> bytes | None:
    """A key/value/header as stored by avro/parquet/json: bytes, text (utf-8), or a structure (compact JSON)."""
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, bytearray | memoryview):
        return bytes(v)
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False, default=str).encode()


def _ts_ms(v: Any) -> int:
    if v is None:
        return -1
    if isinstance(v, datetime):
        td = v - datetime(1970, 1, 1, tzinfo=UTC) if v.tzinfo else v - datetime(1970, 1, 1)
        return (td.days * 86_400 + td.seconds) * 1000 + td.microseconds // 1000
    if isinstance(v, int | float):
        return int(v)
    return _ts_ms(datetime.fromisoformat(str(v).replace("Z", "+00:00")))


def _headers(v: Any) -> list[tuple[str, bytes | None]]:
    """Headers as avro/parquet maps (dict or pyarrow's list of (k, v)) or JSON lists of {key, value}."""
    if not v:
        return []
    items = v.items() if isinstance(v, dict) else v
    out = []
    for h in items:
        k, val = (h["key"], h.get("value")) if isinstance(h, dict) else h
        out.append((k, _bytes(val)))
    return out


class Decoder:
    """Decodes one foreign object's bytes. Fields absent from the format are None / -1 / []."""

    def __init__(self, source: ForeignSource) -> None:
        self.source = source
        self.fields = tuple(source.fields) if source.layout == "aiven" else ("value",)

    def decode(self, data: bytes, what: str) -> Iterator[Decoded]:
        s, fmt = self.source, self.source.format
        try:
            if fmt == "bytes":
                sep = s.separator
                if sep is None:
                    yield None, None, data, [], -1
                    return
                parts = data.split(sep)
                if parts and parts[-1] == b"":  # the separator ends every value, the last one included
                    parts.pop()
                for v in parts:
                    yield None, None, v, [], -1
            elif fmt == "csv":
                yield from self._csv(data)
            elif fmt in ("jsonl", "json"):
                yield from self._json(data, fmt)
            elif fmt == "avro":
                import fastavro

                for r in fastavro.reader(io.BytesIO(data)):
                    yield self._row(r)
            elif fmt == "parquet":
                import pyarrow.parquet as pq

                for batch in pq.ParquetFile(io.BytesIO(data)).iter_batches(batch_size=2048):
                    for r in batch.to_pylist():
                        yield self._row(r)
        except InvalidForeignObject:
            raise
        except (ValueError, KeyError, TypeError, IndexError, OSError) as e:
            raise InvalidForeignObject(f"{what} is not a {s.layout} {fmt} object with fields {list(self.fields)}: "
                                       f"{type(e).__name__}: {e}") from None

    def _row(self, r: Any) -> Decoded:
        """An avro/parquet row: the envelope's fields, or (confluent, envelope false) the value itself."""
        if self.source.layout == "confluent" or not self.source.envelope:
            if isinstance(r, dict) and len(r) == 1 and self.source.layout == "aiven":
                r = next(iter(r.values()))
            return None, None, _bytes(r), [], -1
        return (r.get("offset"), _bytes(r.get("key")), self._value(r.get("value")), _headers(r.get("headers")),
                _ts_ms(r.get("timestamp")))

    def _value(self, v: Any) -> bytes | None:
        if isinstance(v, str) and self.source.value_encoding == "base64" and self.source.format in ("jsonl", "json"):
            return _b64(v)
        return _bytes(v)

    def _csv(self, data: bytes) -> Iterator[Decoded]:
        fields, raw = self.fields, self.source.value_encoding == "none"
        # Aiven separates records with "\n" and ends the object without one, so every line is a record, an empty
        # one too (a null or empty value alone).
        for line in data.split(b"\n"):
            cols = line.split(b",", len(fields) - 1) if raw else line.split(b",")
            if len(cols) != len(fields):
                raise InvalidForeignObject(f"csv line has {len(cols)} fields, expected {len(fields)} "
                                           f"({','.join(fields)}): {line[:200]!r}")
            rec: dict[str, Any] = dict(zip(fields, cols))
            key = base64.b64decode(rec["key"], validate=True) if rec.get("key") else None
            v = rec.get("value", b"")
            value = (v if raw else base64.b64decode(v, validate=True)) if v else None
            headers = []
            for h in (rec.get("headers") or b"").split(b";"):
                if h:
                    k, _, hv = h.partition(b":")
                    headers.append((base64.b64decode(k, validate=True).decode(), base64.b64decode(hv, validate=True)))
            off = int(rec["offset"]) if "offset" in rec else None
            ts = int(rec["timestamp"]) if rec.get("timestamp") else -1
            yield off, key, value, headers, ts

    def _json(self, data: bytes, fmt: str) -> Iterator[Decoded]:
        if self.source.layout == "confluent":
            # One JSON value per line; the line is the value as the sink's converter wrote it.
            for line in data.split(b"\n"):
                if line.strip():
                    yield None, None, line.rstrip(b"\r"), [], -1
            return
        rows: Iterable[Any]
        if fmt == "json":
            rows = json.loads(data)
        else:
            rows = (json.loads(line) for line in data.split(b"\n") if line.strip())
        for r in rows:
            if not self.source.envelope:
                yield None, None, self._value(r), [], -1
                continue
            h = r.get("headers")
            headers = [(x["key"], _b64(x.get("value")) if isinstance(x.get("value"), str) else _bytes(x.get("value")))
                       for x in h or ()]
            key = r.get("key")
            yield (r.get("offset"), _b64(key) if isinstance(key, str) else _bytes(key), self._value(r.get("value")),
                   headers, _ts_ms(r.get("timestamp")))


def with_keys(values: Iterator[Decoded], keys: Iterator[Decoded] | None, what: str) -> Iterator[Decoded]:
    """Confluent: pair each value with the key at the same position of the `.keys` sibling."""
    if keys is None:
        yield from values
        return
    sentinel = object()
    while True:
        v, k = next(values, sentinel), next(keys, sentinel)
        if v is sentinel and k is sentinel:
            return
        if v is sentinel or k is sentinel:
            raise InvalidForeignObject(f"{what}: the values object and its .keys sibling hold different numbers of "
                                       "records")
        off, _, value, headers, ts = v  # type: ignore[misc]
        yield off, k[2], value, headers, ts  # type: ignore[index]


def numbered(decoded: Iterable[Decoded], fw: ForeignWindow, what: str,
             record: Callable[..., Any]) -> Iterator[Any]:
    """Records with offsets: the stored one (Aiven `offset` field), else start offset + position. Offsets must
    increase and start at the window's start or later."""
    last = fw.window.start - 1
    p = fw.window.partition
    for i, (off, key, value, headers, ts) in enumerate(decoded):
        o = fw.window.start + i if off is None else off
        if o <= last:
            raise InvalidForeignObject(f"{what}: record {i} has offset {o}, not above {last} (the object's start "
                                       f"offset {fw.window.start} or the record before); the object does not fit "
                                       "its name")
        last = o
        yield record(p, o, key, value, headers, ts)
