"""A record's bucket: the part of an object key that depends on the record (partition_by values, `{{key}}`,
`{{timestamp:unit=…}}`). Pure.

A window's records are split into buckets. A bucket is one string, `/`-joined encoded values: one per
partition_by dimension, then one per record-level template placeholder. archive/driver/bucket_column.py computes it
in Spark; `record_bucket` here is the Python reference (tested to agree). Spark writes a bucket as the staging directory
`_bucket=<escaped>`; `bucket_from_staging_dir` reads it back.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal

from s3_archive.keys.layout import KafkaPartition, KeyField, OutputLayout, RecordTime, ValueField
from s3_archive.keys.template import UNITS
from s3_archive.keys.values import (
    NO_BUCKETS,
    TIME_UNITS,
    decode_value,
    encode_bytes,
    encode_value,
    render_format,
    wall_fields,
    wall_seconds,
)

BUCKET_COLUMN = "_bucket"  # the staging directory column holding a record's bucket (buckets.bucket_column)


_EPOCH_MS = re.compile(r"-?[0-9]{1,18}")  # also used as a Spark regex in archive/driver/bucket_column.py
EPOCH_MS_REGEX = "^" + _EPOCH_MS.pattern + "$"


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
    return path_from_encoded(layout, enc)


def path_from_encoded(layout: OutputLayout, enc: Sequence[str]) -> str:
    segs = []
    for d, e in zip(layout.partition_by, enc, strict=True):
        if isinstance(d, RecordTime):
            text = decode_value(e)
            segs.append(render_format(d.tokens, None) if text is None else str(text))
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
            if text == render_format(d.tokens, None):
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


def decoded_placeholder(index: int) -> str:
    """The bucket's segment of dimension `index` while it waits for a field the write task decodes (a Schema
    Registry payload): archive/executor/registry_decode.py puts the field's encoded value in its place."""
    return f"\x00{index}\x00"


def join_bucket(encoded: Sequence[str]) -> str:
    return "/".join(encoded) if encoded else NO_BUCKETS


# --- Python reference of a record's bucket (what buckets.bucket_column computes in Spark) -----------------------


def _first_wins(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in pairs:
        out.setdefault(k, v)  # Spark's path takes a key's first occurrence
    return out


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


_JSON = json.JSONDecoder(object_pairs_hook=_first_wins, parse_constant=_no_constant)
_JACKSON_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def java_double(x: float) -> str:
    """A double as Java's Double.toString writes it (what Jackson writes for a JSON float): the shortest digits,
    plain between 1e-3 and 1e7, else d.dddE<exp>; always a digit after the point."""
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    sign, digits, exp = Decimal(repr(x)).as_tuple()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    point = len(digits) + int(exp)  # the decimal point's place after the first digit of `digits`
    if 1e-3 <= abs(x) < 1e7:
        whole, frac = (text[:point] or "0", text[point:]) if point > 0 else ("0", "0" * -point + text)
        out = f"{whole.ljust(point, '0') if point > 0 else whole}.{frac or '0'}"
    else:
        out = f"{text[0]}.{text[1:] or '0'}E{point - 1}"
    return ("-" if sign else "") + out


def jackson_json(v: object) -> str:
    """Compact JSON as Jackson writes a parsed value back (get_json_object's non-string results): Java's doubles,
    only quotes, backslashes and control characters escaped (those in upper-case hex)."""
    if v is None:
        return "null"
    if v is True or v is False:
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return java_double(v)
    if isinstance(v, str):
        return '"' + "".join(_JACKSON_ESCAPES.get(c, f"\\u{ord(c):04X}" if ord(c) < 0x20 else c) for c in v) + '"'
    if isinstance(v, list):
        return "[" + ",".join(jackson_json(x) for x in v) + "]"
    return "{" + ",".join(f"{jackson_json(k)}:{jackson_json(x)}" for k, x in v.items()) + "}"  # type: ignore


def json_field_text(raw: bytes | None, field: str) -> str | None:
    """Spark's get_json_object(value, '$.<field>') for UTF-8 JSON: strings unquoted, other values as compact JSON
    (`jackson_json`), null/missing/not JSON → None. As Spark's parser: the first value of the text (what follows it
    is not read), a key's first occurrence, no NaN or Infinity."""
    if raw is None:
        return None
    try:
        text = raw.decode("utf-8")
        doc, _ = _JSON.raw_decode(text, len(text) - len(text.lstrip(" \t\n\r")))
    except (UnicodeDecodeError, ValueError):
        return None
    for k in field.split("."):
        if not isinstance(doc, dict) or k not in doc:
            return None
        doc = doc[k]
    if doc is None or isinstance(doc, str):
        return doc
    return jackson_json(doc)


def last_header(headers: Sequence[tuple[str, bytes | None]] | None, name: str) -> tuple[bool, bytes | None]:
    for k, v in reversed(headers or []):
        if k == name:
            return True, v
    return False, None


def epoch_ms(text: str | None) -> int | None:
    return int(text) if text is not None and _EPOCH_MS.fullmatch(text) else None


def format_time(d: RecordTime, tz: str, timestamp_us: int | None) -> str | None:
    if timestamp_us is None:
        return None
    s = wall_seconds(timestamp_us, tz)
    if d.duration_seconds:
        s -= s % d.duration_seconds
    return render_format(d.tokens, wall_fields(s))


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
                ts = _ms_to_us(epoch_ms(json_field_text(value, d.field)))  # type: ignore[arg-type]
            else:
                raw = last_header(headers, d.field)[1]  # type: ignore[arg-type]
                ts = _ms_to_us(epoch_ms(utf8_text(raw)))
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
            enc.append(encode_value(f"{fields[unit]:0{UNITS[unit]}d}"))
    return join_bucket(enc)


def _ms_to_us(ms: int | None) -> int | None:
    return None if ms is None else ms * 1000


def utf8_text(raw: bytes | None) -> str | None:
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
