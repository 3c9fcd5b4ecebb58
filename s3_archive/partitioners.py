"""Partitioners (`partition_by`) and the output layout: which bucket a record goes to, and each bucket's object key.

Pure: config models, the partition-value encoding, the time path format, path and key rendering and parsing, and
a Python reference of what `s3_archive.buckets` computes in Spark (the two are tested to agree).

A window's records are split into buckets. A record's bucket is one string, `/`-joined encoded values: one per
`partition_by` dimension, then one per record-level template placeholder (`{{key}}`, `{{timestamp:unit=…}}`).
Spark computes it per record (`buckets.bucket_column`); `object_key` maps (bucket, window, part, suffix) to the key.
See docs/layout.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime, timedelta
from functools import cached_property
from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from s3_archive import keytemplate as kt
from s3_archive.windows import OffsetWindow

BUCKET_COLUMN = "_bucket"  # the staging directory column holding a record's bucket (buckets.bucket_column)
NULL = "(null)"
EMPTY = "(empty)"
HEX = "(hex)"  # a binary value that is not UTF-8: (hex) and its bytes in upper-case hex
NO_BUCKETS = "(all)"  # the bucket of every record when nothing splits a window

# Data columns of the archived record: a Hive-style partition column may not repeat one (readers refuse it).
RESERVED_NAMES = frozenset({"key", "value", "headers", "topic", "partition", "offset", "timestamp", "timestamp_type"})
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_FIELD = re.compile(r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*")
_EPOCH_MS = re.compile(r"-?[0-9]{1,18}")  # also used as a Spark regex in buckets.py
EPOCH_MS_REGEX = "^" + _EPOCH_MS.pattern + "$"

# --- partition values: a safe, reversible encoding ---------------------------------------------------------------

_UNRESERVED = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_")


def encode_value(v: str | None) -> str:
    """A partition value as a path segment: never empty, never `/`, `=`, space, `+`, `*` or non-ASCII, never
    starting with `.` or `_` (readers skip such directories). UTF-8 bytes outside `A-Za-z0-9.-_` become `%XX`;
    None is `(null)` and "" is `(empty)` — a real "(null)" is `%28null%29`."""
    if v is None:
        return NULL
    if v == "":
        return EMPTY
    out = "".join(chr(b) if b in _UNRESERVED else f"%{b:02X}" for b in v.encode("utf-8"))
    if out[0] in "._":
        out = f"%{ord(out[0]):02X}{out[1:]}"
    return out


def encode_bytes(v: bytes | None) -> str:
    """A binary value (record key, header value): its text if it is UTF-8, else `(hex)<HEX>`."""
    if v is None:
        return NULL
    try:
        return encode_value(v.decode("utf-8"))
    except UnicodeDecodeError:
        return HEX + v.hex().upper()


_ESCAPE = re.compile(r"%([0-9A-F]{2})")


def decode_value(s: str) -> str | bytes | None:
    """The inverse of encode_value / encode_bytes (bytes only for the `(hex)` form); ValueError for text that
    encode_value does not produce."""
    if s == NULL:
        return None
    if s == EMPTY:
        return ""
    if s.startswith(HEX) and re.fullmatch(r"(?:[0-9A-F]{2})+", s[len(HEX):]):
        raw = bytes.fromhex(s[len(HEX):])
        if encode_bytes(raw) == s:
            return raw
        raise ValueError(f"not an encoded partition value: {s!r} (UTF-8 bytes are written as text)")
    try:
        raw = bytes(int(m, 16) if m else ord(c) for c, m in _tokens(s))
        v = raw.decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        raise ValueError(f"not an encoded partition value: {s!r}") from None
    if encode_value(v) != s:
        raise ValueError(f"not an encoded partition value: {s!r} (expected {encode_value(v)!r})")
    return v


def _tokens(s: str):
    i = 0
    while i < len(s):
        if s[i] == "%":
            if not _ESCAPE.match(s, i):
                raise ValueError(s)
            yield "", s[i + 1:i + 3]
            i += 3
        else:
            if ord(s[i]) > 127:
                raise ValueError(s)
            yield s[i], ""
            i += 1


# --- the time path format ---------------------------------------------------------------------------------------

TIME_UNITS = {"yyyy": 4, "MM": 2, "dd": 2, "HH": 2, "mm": 2}
_UNIT_SECONDS = {"dd": 86_400, "HH": 3_600, "mm": 60}
_COARSER = {"yyyy": (), "MM": ("yyyy",), "dd": ("yyyy", "MM"), "HH": ("yyyy", "MM", "dd"),
            "mm": ("yyyy", "MM", "dd", "HH")}
_FORMAT_TOKEN = re.compile(r"'([^']*)'|(yyyy|YYYY|MM|dd|HH|mm)|([/=._-])|(.)")
_QUOTED = re.compile(r"[A-Za-z0-9_.=-]*")


def parse_path_format(fmt: str) -> tuple[str | tuple[str], ...]:
    """A Confluent/Joda-style `path.format` as literals and (unit,) tuples.

    Units: yyyy (or YYYY, both the calendar year), MM, dd, HH, mm; quoted text ('year') and / = . _ - are literal.
    """
    out: list[str | tuple[str]] = []
    for m in _FORMAT_TOKEN.finditer(fmt):
        quoted, unit, sep, other = m.groups()
        if other is not None:
            raise ValueError(f"path_format {fmt!r}: {other!r} at position {m.start()} is neither a unit "
                             "(yyyy MM dd HH mm) nor a literal (quote text: 'year'; or / = . _ -)")
        if quoted is not None and not _QUOTED.fullmatch(quoted):
            raise ValueError(f"path_format {fmt!r}: quoted text {quoted!r} may hold only A-Z a-z 0-9 _ . = -")
        if unit is not None:
            out.append(("yyyy" if unit == "YYYY" else unit,))
        else:
            text = quoted if quoted is not None else sep
            if out and isinstance(out[-1], str):
                out[-1] += text
            elif text:
                out.append(text)
    units = [u[0] for u in out if isinstance(u, tuple)]
    if not units:
        raise ValueError(f"path_format {fmt!r} has no time unit (yyyy MM dd HH mm)")
    if len(set(units)) != len(units):
        raise ValueError(f"path_format {fmt!r} uses a unit twice")
    text = _render_format(out, {u: 0 for u in units})
    if text.startswith("/") or text.endswith("/") or "//" in text:
        raise ValueError(f"path_format {fmt!r} makes an empty path segment")
    return tuple(out)


def _render_format(tokens: Sequence[str | tuple[str]], fields: Mapping[str, int] | None) -> str:
    return "".join(t if isinstance(t, str) else (NULL if fields is None else f"{fields[t[0]]:0{TIME_UNITS[t[0]]}d}")
                   for t in tokens)


def wall_seconds(timestamp_us: int, tz: str) -> int:
    """Seconds since 1970-01-01 00:00 of the wall-clock time in `tz` at this instant (floored)."""
    instant = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=timestamp_us)
    local = instant.astimezone(ZoneInfo(tz)).replace(tzinfo=None)
    return (local - datetime(1970, 1, 1)) // timedelta(seconds=1)


def wall_fields(seconds: int) -> dict[str, int]:
    day = date(1970, 1, 1) + timedelta(days=seconds // 86_400)
    sod = seconds % 86_400
    return {"yyyy": day.year, "MM": day.month, "dd": day.day, "HH": sod // 3_600, "mm": sod % 3_600 // 60}


def _check_timezone(tz: str) -> str:
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        ok = False
    else:
        ok = tz == "UTC" or "/" in tz
    if not ok:
        raise ValueError(f"not an IANA time zone: {tz!r} (e.g. 'UTC', 'Europe/Berlin', 'America/New_York')")
    return tz


# --- partition_by dimensions ------------------------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def _check_field(v: str | None) -> str | None:
    if v is not None and not _FIELD.fullmatch(v):
        raise ValueError(f"not a field path: {v!r} (names of A-Z a-z 0-9 _ -, nested with '.', e.g. 'order.region')")
    return v


class KafkaPartition(_Strict):
    """The Kafka partition (the default): `kafka_partition=3`."""

    kind: Literal["kafka_partition"] = "kafka_partition"
    hive: bool = True

    @property
    def name(self) -> str:
        return "kafka_partition"


class RecordTime(_Strict):
    """Time buckets (Confluent TimeBasedPartitioner): the record's wall-clock time in `timezone`, floored to
    `duration_seconds` if given, written with `path_format`."""

    kind: Literal["time"] = "time"
    source: Literal["kafka_timestamp", "value", "header"] = "kafka_timestamp"
    field: str | None = Field(default=None, description="value: the JSON field; header: the header name. Its "
                                                        "text must be epoch milliseconds")
    path_format: str = "'year'=yyyy/'month'=MM/'day'=dd/'hour'=HH"
    timezone: str | None = Field(default=None, description="IANA name; None: the layout's timezone (UTC default)")
    duration_seconds: int | None = Field(default=None, ge=60, description="bucket size, a multiple of 60; "
                                                                          "None: one bucket per path")

    @field_validator("timezone")
    @classmethod
    def _tz(cls, v: str | None) -> str | None:
        return None if v is None else _check_timezone(v)

    @model_validator(mode="after")
    def _check(self) -> RecordTime:
        if (self.source == "kafka_timestamp") != (self.field is None):
            raise ValueError("time: give `field` with source 'value' (a JSON field) or 'header' (a header name), "
                             "and not with source 'kafka_timestamp'")
        if self.source == "value":
            _check_field(self.field)
        tokens = parse_path_format(self.path_format)
        units = {t[0] for t in tokens if isinstance(t, tuple)}
        for u in units:
            if missing := [c for c in _COARSER[u] if c not in units]:
                raise ValueError(f"path_format {self.path_format!r} has {u} but not {', '.join(missing)}: "
                                 "different buckets would share a path")
        if (d := self.duration_seconds) is not None:
            if d % 60:
                raise ValueError(f"duration_seconds must be a multiple of 60, got {d}")
            need = "dd" if d % 86_400 == 0 else "HH" if d % 3_600 == 0 else "mm"
            if need not in units:
                raise ValueError(f"path_format {self.path_format!r} cannot show buckets of {d} s: it needs {need}")
        return self

    @cached_property
    def tokens(self) -> tuple[str | tuple[str], ...]:
        return parse_path_format(self.path_format)

    @property
    def segments(self) -> int:
        return _render_format(self.tokens, None).count("/") + 1

    def hive_names(self) -> list[str]:
        """The `name=` literals of the path (checked against data columns like the other dimensions' names)."""
        return [seg.split("=", 1)[0] for seg in _render_format(self.tokens, None).split("/") if "=" in seg]


class _FieldDimension(_Strict):
    hive: bool = True
    name: str | None = Field(default=None, description="the Hive column name; default from the field or header")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is not None and not _NAME.fullmatch(v):
            raise ValueError(f"not a column name: {v!r} (a letter or _, then letters, digits, _)")
        return v


class ValueField(_FieldDimension):
    """A JSON field of the record value (Confluent FieldPartitioner, Lenses `_value.f`)."""

    kind: Literal["value"] = "value"
    field: str

    @field_validator("field")
    @classmethod
    def _field(cls, v: str) -> str:
        return _check_field(v)  # type: ignore[return-value]

    @property
    def column(self) -> str:
        return self.name or self.field.replace(".", "_").replace("-", "_")


class KeyField(_FieldDimension):
    """A JSON field of the record key, or the whole key as text (Lenses `_key`, `_key.f`)."""

    kind: Literal["key"] = "key"
    field: str | None = None

    @field_validator("field")
    @classmethod
    def _field(cls, v: str | None) -> str | None:
        return _check_field(v)

    @property
    def column(self) -> str:
        return self.name or ("kafka_key" if self.field is None else self.field.replace(".", "_").replace("-", "_"))


class Header(_FieldDimension):
    """A header's value as text (the last header of that name; Lenses `_header.h`)."""

    kind: Literal["header"] = "header"
    header: str = Field(min_length=1)

    @property
    def column(self) -> str:
        if self.name:
            return self.name
        if not _NAME.fullmatch(self.header):
            raise ValueError(f"header {self.header!r} is not a column name; give `name`")
        return self.header


Dimension = Annotated[KafkaPartition | RecordTime | ValueField | KeyField | Header, Field(discriminator="kind")]


class OutputLayout(_Strict):
    """Object keys and partitioning of an archive's data objects (`layout:` in the config)."""

    template: str = kt.DEFAULT_TEMPLATE
    partition_by: list[Dimension] = Field(default_factory=lambda: [KafkaPartition()])
    padding: kt.Padding = kt.Padding()
    timezone: str = Field(default="UTC", description="for {{timestamp:unit=…}} and time dimensions without one")

    @field_validator("timezone")
    @classmethod
    def _tz(cls, v: str) -> str:
        return _check_timezone(v)

    @model_validator(mode="after")
    def _check(self) -> OutputLayout:
        seen: dict[str, int] = {}
        for i, d in enumerate(self.partition_by):
            for n in _hive_names(d):
                if n.lower() in RESERVED_NAMES:
                    raise ValueError(f"partition_by[{i}]: Hive column {n!r} repeats a data column "
                                     f"({', '.join(sorted(RESERVED_NAMES))}); give another `name`")
                if n.lower() in seen:
                    raise ValueError(f"partition_by[{i}]: Hive column {n!r} is already used by "
                                     f"partition_by[{seen[n.lower()]}]")
                seen[n.lower()] = i
        self.check(rotation=False)
        return self

    def check(self, rotation: bool) -> None:
        """Raise kt.InvalidTemplate unless every key is unique and parses back (rotation: {{part}} required)."""
        record_slots = ("partition_by",) if any(not isinstance(d, KafkaPartition) for d in self.partition_by) else ()
        kt.check_template(self.key_template, rotation=rotation, record_slots=record_slots)

    @cached_property
    def key_template(self) -> kt.KeyTemplate:
        return kt.parse_template(self.template, self.padding, self.path_segments)

    @property
    def path_segments(self) -> int:
        return sum(d.segments if isinstance(d, RecordTime) else 1 for d in self.partition_by)

    @property
    def template_slots(self) -> tuple[str, ...]:
        """Record-level template values in the bucket: `key`, `timestamp:<unit>`."""
        return tuple(s for s in self.key_template.slots if s == "key" or s.startswith("timestamp:"))

    def time_zone(self, d: RecordTime) -> str:
        return d.timezone or self.timezone


def _hive_names(d: KafkaPartition | RecordTime | ValueField | KeyField | Header) -> list[str]:
    if isinstance(d, RecordTime):
        return d.hive_names()
    if not d.hive:
        return []
    return [d.name] if isinstance(d, KafkaPartition) else [d.column]


# --- paths ------------------------------------------------------------------------------------------------------


def render_path(layout: OutputLayout, values: Sequence[object]) -> str:
    """The partition_by path for one value per dimension: kafka_partition an int; time the formatted text (as
    format_time gives) or None; field dimensions str, bytes or None."""
    if len(values) != len(layout.partition_by):
        raise ValueError(f"render_path needs {len(layout.partition_by)} values, got {len(values)}")
    enc = []
    for d, v in zip(layout.partition_by, values, strict=True):
        if isinstance(d, KafkaPartition):
            enc.append(encode_value(str(v)))
        elif isinstance(v, bytes):
            enc.append(encode_bytes(v))
        else:
            enc.append(encode_value(v))  # type: ignore[arg-type]
    return _path_from_encoded(layout, enc)


def _path_from_encoded(layout: OutputLayout, enc: Sequence[str]) -> str:
    segs = []
    for d, e in zip(layout.partition_by, enc, strict=True):
        if isinstance(d, RecordTime):
            text = decode_value(e)
            segs.append(_render_format(d.tokens, None) if text is None else str(text))
        elif d.hive:
            segs.append(f"{d.name if isinstance(d, KafkaPartition) else d.column}={e}")
        else:
            segs.append(e)
    return "/".join(segs)


def parse_path(layout: OutputLayout, path: str) -> list[object]:
    """The inverse of render_path; ValueError for a path render_path does not produce."""
    segs = path.split("/")
    if len(segs) != layout.path_segments:
        raise ValueError(f"{path!r}: expected {layout.path_segments} path segments for partition_by")
    out: list[object] = []
    i = 0
    for d in layout.partition_by:
        if isinstance(d, RecordTime):
            n = d.segments
            text = "/".join(segs[i:i + n])
            i += n
            if text == _render_format(d.tokens, None):
                out.append(None)
                continue
            rx = "".join(re.escape(t) if isinstance(t, str) else f"[0-9]{{{TIME_UNITS[t[0]]}}}" for t in d.tokens)
            if not re.fullmatch(rx, text):
                raise ValueError(f"{text!r} does not match path_format {d.path_format!r}")
            out.append(text)
            continue
        seg = segs[i]
        i += 1
        if d.hive:
            name = d.name if isinstance(d, KafkaPartition) else d.column
            if not seg.startswith(name + "="):
                raise ValueError(f"{seg!r}: expected {name}=<value>")
            seg = seg[len(name) + 1:]
        v = decode_value(seg)
        if isinstance(d, KafkaPartition):
            if not isinstance(v, str) or not v.isascii() or not v.isdigit() or str(int(v)) != v:
                raise ValueError(f"{seg!r} is not a Kafka partition number")
            v = int(v)
        out.append(v)
    if render_path(layout, out) != path:
        raise ValueError(f"{path!r} is not a path this layout writes")
    return out


# --- buckets and object keys ------------------------------------------------------------------------------------


def bucket_slots(layout: OutputLayout) -> tuple[str, ...]:
    """What the bucket string holds, in order: `partition_by[i]` for each dimension, then the template's
    record-level values (`key`, `timestamp:<unit>`)."""
    return (*(f"partition_by[{i}]" for i in range(len(layout.partition_by))), *layout.template_slots)


def split_bucket(layout: OutputLayout, bucket: str) -> list[str]:
    slots = bucket_slots(layout)
    parts = [] if bucket == NO_BUCKETS else bucket.split("/")
    if len(parts) != len(slots):
        raise ValueError(f"bucket {bucket!r} has {len(parts)} values; this layout's buckets have {len(slots)} "
                         f"({', '.join(slots) or 'none'})")
    for p in parts:
        decode_value(p)  # ValueError if not an encoded value
    return parts


def join_bucket(encoded: Sequence[str]) -> str:
    return "/".join(encoded) if encoded else NO_BUCKETS


def object_key(layout: OutputLayout, prefix: str, topic: str, window: OffsetWindow, bucket: str, part: int,
               suffix: str) -> str:
    """The final key of one part of one bucket of a window (the bucket string as buckets.bucket_column gives)."""
    parts = split_bucket(layout, bucket)
    n = len(layout.partition_by)
    values: dict[str, object] = {"topic": topic, "partition": window.partition, "start_offset": window.start,
                                 "end_offset": window.end, "part": part}
    if n:
        values["partition_by"] = _path_from_encoded(layout, parts[:n])
    for slot, enc in zip(layout.template_slots, parts[n:], strict=True):
        values[slot] = enc if slot == "key" else decode_value(enc)
    return prefix + kt.render_key(layout.key_template, values) + suffix


def parse_object_key(layout: OutputLayout, prefix: str, key: str, suffix: str) -> dict[str, object]:
    """The values an object key was rendered from: topic, partition, start_offset, end_offset and part (if the
    template has them) as int, `partition_by` as render_path's values, `key` decoded, `timestamp:<unit>` text."""
    if not key.startswith(prefix) or not key.endswith(suffix) or len(key) < len(prefix) + len(suffix):
        raise ValueError(f"{key!r} does not start with {prefix!r} and end with {suffix!r}")
    rel = key[len(prefix):len(key) - len(suffix) if suffix else None]
    values = kt.parse_key(layout.key_template, rel)
    if "partition_by" in values:
        values["partition_by"] = parse_path(layout, str(values["partition_by"]))
    if "key" in values:
        values["key"] = decode_value(str(values["key"]))
    return values


def window_scan_prefix(layout: OutputLayout, prefix: str, topic: str, window: OffsetWindow) -> str:
    """The longest key prefix shared by every object of this window: the template rendered up to its first
    value that is not fixed by the window (leading kafka_partition dimensions of {{partition_by}} are). List under
    it and keep keys whose parse_object_key gives this window to find stale objects of earlier attempts. With
    the default layout it is layout.window_object_stem."""
    values = {"topic": topic, "partition": window.partition, "start_offset": window.start, "end_offset": window.end}
    out = []
    for p in layout.key_template.parts:
        if isinstance(p, str):
            out.append(p)
        elif p.slot in values:
            out.append(kt.render_key(kt.KeyTemplate("", (p,), layout.key_template.padding), values))
        elif p.name == "partition_by":
            fixed = []
            for d in layout.partition_by:
                if not isinstance(d, KafkaPartition):
                    break
                fixed.append(f"kafka_partition={window.partition}" if d.hive else str(window.partition))
            if len(fixed) < len(layout.partition_by):
                out.append("".join(f + "/" for f in fixed))
                break
            out.append("/".join(fixed))
        else:
            break
    return prefix + "".join(out)


# --- Python reference of a record's bucket (what buckets.bucket_column computes in Spark) -----------------------


def json_field_text(raw: bytes | None, field: str) -> str | None:
    """Spark's get_json_object(value, '$.<field>') for UTF-8 JSON: strings unquoted, other values as compact JSON,
    null/missing/not JSON → None."""
    if raw is None:
        return None
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    for k in field.split("."):
        if not isinstance(doc, dict) or k not in doc:
            return None
        doc = doc[k]
    if doc is None or isinstance(doc, str):
        return doc
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


def last_header(headers: Sequence[tuple[str, bytes | None]] | None, name: str) -> tuple[bool, bytes | None]:
    for k, v in reversed(headers or []):
        if k == name:
            return True, v
    return False, None


def _epoch_ms(text: str | None) -> int | None:
    return int(text) if text is not None and _EPOCH_MS.fullmatch(text) else None


def format_time(d: RecordTime, tz: str, timestamp_us: int | None) -> str | None:
    if timestamp_us is None:
        return None
    s = wall_seconds(timestamp_us, tz)
    if d.duration_seconds:
        s -= s % d.duration_seconds
    return _render_format(d.tokens, wall_fields(s))


def record_bucket(layout: OutputLayout, record: Mapping[str, object]) -> str:
    """The bucket of one record: key/value bytes or None, headers [(name, bytes or None)] or None, partition int,
    timestamp_us int (Kafka timestamp, µs since the epoch)."""
    key, value = record.get("key"), record.get("value")
    headers = record.get("headers")
    enc: list[str] = []
    for d in layout.partition_by:
        if isinstance(d, KafkaPartition):
            enc.append(encode_value(str(record["partition"])))
        elif isinstance(d, RecordTime):
            if d.source == "kafka_timestamp":
                ts = record["timestamp_us"]
            elif d.source == "value":
                ts = _ms_to_us(_epoch_ms(json_field_text(value, d.field)))  # type: ignore[arg-type]
            else:
                raw = last_header(headers, d.field)[1]  # type: ignore[arg-type]
                ts = _ms_to_us(_epoch_ms(_utf8(raw)))
            enc.append(encode_value(format_time(d, layout.time_zone(d), ts)))  # type: ignore[arg-type]
        elif isinstance(d, ValueField):
            enc.append(encode_value(json_field_text(value, d.field)))  # type: ignore[arg-type]
        elif isinstance(d, KeyField):
            enc.append(encode_bytes(key) if d.field is None  # type: ignore[arg-type]
                       else encode_value(json_field_text(key, d.field)))  # type: ignore[arg-type]
        else:
            enc.append(encode_bytes(last_header(headers, d.header)[1]))  # type: ignore[arg-type]
    for slot in layout.template_slots:
        if slot == "key":
            enc.append(encode_bytes(key))  # type: ignore[arg-type]
        else:
            unit = slot.split(":", 1)[1]
            fields = wall_fields(wall_seconds(record["timestamp_us"], layout.timezone))  # type: ignore[arg-type]
            enc.append(encode_value(f"{fields[unit]:0{kt.UNITS[unit]}d}"))
    return join_bucket(enc)


def _ms_to_us(ms: int | None) -> int | None:
    return None if ms is None else ms * 1000


def _utf8(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


# --- Spark's partition directory names ---------------------------------------------------------------------------

# Characters Spark (ExternalCatalogUtils.escapePathName) writes as %XX in a partition directory name.
SPARK_ESCAPED = frozenset([chr(c) for c in range(0x01, 0x20)] + list("\"#%'*/:=?\\\x7f{[]^"))


def spark_escape_path_name(s: str) -> str:
    """What Spark's partitionBy makes of a value in `col=<value>` (for tests and docs; Spark does the writing)."""
    return "".join(f"%{ord(c):02X}" if c in SPARK_ESCAPED else c for c in s)


def spark_unescape_path_name(s: str) -> str:
    """The inverse of Spark's partition path escaping (ExternalCatalogUtils.unescapePathName)."""
    return re.sub(r"%([0-9a-fA-F]{2})", lambda m: chr(int(m.group(1), 16)), s)


def bucket_from_staging_dir(dir_name: str, column: str) -> str:
    """The bucket string from a staging directory name `<column>=<escaped bucket>`."""
    if not dir_name.startswith(column + "="):
        raise ValueError(f"{dir_name!r} is not a {column}=<bucket> directory")
    return spark_unescape_path_name(dir_name[len(column) + 1:])
