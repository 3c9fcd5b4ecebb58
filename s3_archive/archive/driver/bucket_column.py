"""Each record's bucket as one Spark string column, with DataFrame functions only (no Python UDFs: this also runs on
Spark Connect). It equals keys.buckets.record_bucket for the same record (tested side by side).

The write job adds `bucket_column(layout)` to the frame its tasks receive (sorted by bucket, then offset), and a
task names each bucket's objects with `WindowLocation.object_key` (keys/objects.py).
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from s3_archive.keys.buckets import BUCKET_COLUMN, EPOCH_MS_REGEX, decoded_placeholder
from s3_archive.keys.layout import Dimension, KafkaPartition, KeyField, OutputLayout, RecordTime, ValueField
from s3_archive.keys.template import UNITS
from s3_archive.keys.values import EMPTY, HEX, NO_BUCKETS, NULL, TIME_UNITS

__all__ = ["BUCKET_COLUMN", "bucket_column"]


def encode_value(s: Column) -> Column:
    """keys.values.encode_value for a string column."""
    # url_encode is Java's URLEncoder: keeps A-Za-z0-9 . - * _, space → '+', the rest → %XX of the UTF-8 bytes.
    enc = F.replace(F.replace(F.url_encode(s), F.lit("+"), F.lit("%20")), F.lit("*"), F.lit("%2A"))
    enc = F.regexp_replace(F.regexp_replace(enc, r"^\.", "%2E"), r"^_", "%5F")
    return F.when(s.isNull(), F.lit(NULL)).when(s == "", F.lit(EMPTY)).otherwise(enc)


def encode_bytes(b: Column) -> Column:
    """keys.values.encode_bytes for a binary column: its text if it is UTF-8, else (hex)<HEX>."""
    s = b.cast("string")
    return (F.when(b.isNull(), F.lit(NULL))
            .when(F.is_valid_utf8(s), encode_value(s))
            .otherwise(F.concat(F.lit(HEX), F.hex(b))))


def _utf8(b: Column) -> Column:
    s = b.cast("string")
    return F.when(F.is_valid_utf8(s), s)


def json_field_text(b: Column, field: str) -> Column:
    return F.get_json_object(_utf8(b), "$." + field)


def last_header_value(name: str) -> Column:
    matching = F.filter(F.col("headers"), lambda h: h["key"] == F.lit(name))
    return F.try_element_at(matching, F.lit(-1))["value"]


def _epoch_ms_to_timestamp(text: Column) -> Column:
    return F.when(text.rlike(EPOCH_MS_REGEX), F.timestamp_millis(text.cast("long")))


def wall_seconds(ts: Column, tz: str) -> Column:
    """keys.values.wall_seconds: from_utc_timestamp shifts the instant by tz's offset at that instant."""
    return F.unix_seconds(F.from_utc_timestamp(ts, tz))


def _fields(seconds: Column) -> dict[str, Column]:
    # Integer arithmetic and a DATE: nothing here depends on the session time zone.
    day = F.date_from_unix_date(((seconds - F.pmod(seconds, F.lit(86_400))) / 86_400).cast("int"))
    sod = F.pmod(seconds, F.lit(86_400))
    hour = ((sod - F.pmod(sod, F.lit(3_600))) / 3_600).cast("int")
    minute = ((F.pmod(sod, F.lit(3_600)) - F.pmod(sod, F.lit(60))) / 60).cast("int")
    return {"yyyy": F.year(day), "MM": F.month(day), "dd": F.dayofmonth(day), "HH": hour, "mm": minute}


def _format(tokens: tuple[str | tuple[str], ...], seconds: Column) -> Column:
    fields = _fields(seconds)
    return F.concat(*[F.lit(t) if isinstance(t, str)
                      else F.lpad(fields[t[0]].cast("string"), TIME_UNITS[t[0]], "0") for t in tokens])


def time_text(d: RecordTime, tz: str) -> Column:
    """keys.buckets.format_time for the record's time (null when the field or header gives no epoch ms)."""
    if d.source == "kafka_timestamp":
        ts = F.col("timestamp")
    elif d.source == "value":
        ts = _epoch_ms_to_timestamp(json_field_text(F.col("value"), d.field))  # type: ignore[arg-type]
    else:
        ts = _epoch_ms_to_timestamp(_utf8(last_header_value(d.field)))  # type: ignore[arg-type]
    s = wall_seconds(ts, tz)
    if d.duration_seconds:
        s = s - F.pmod(s, F.lit(d.duration_seconds))
    return _format(d.tokens, s)


def dimension_value(layout: OutputLayout, d: Dimension) -> Column:
    """One dimension's encoded value."""
    if isinstance(d, KafkaPartition):
        return encode_value(F.col("partition").cast("string"))
    if isinstance(d, RecordTime):
        return encode_value(time_text(d, layout.time_zone(d)))
    if isinstance(d, ValueField):
        return encode_value(json_field_text(F.col("value"), d.field))
    if isinstance(d, KeyField):
        return encode_bytes(F.col("key")) if d.field is None else encode_value(json_field_text(F.col("key"), d.field))
    return encode_bytes(last_header_value(d.header))


def decoded_field(d: Dimension, decoded: frozenset[str]) -> tuple[str, str] | None:
    """(part, field path) when dimension `d` is a field of a part the write tasks decode."""
    if isinstance(d, ValueField) and "value" in decoded:
        return "value", d.field
    if isinstance(d, KeyField) and d.field is not None and "key" in decoded:
        return "key", d.field
    return None


def bucket_column(layout: OutputLayout, decoded: frozenset[str] = frozenset()) -> Column:
    """The record's bucket (keys.buckets.record_bucket), from the envelope columns key, value, headers,
    partition and timestamp. `decoded`: the parts ("value", "key") the write tasks decode from Schema Registry
    payloads; a field dimension of such a part is a placeholder here (`decoded_placeholder`)."""
    values = [F.lit(decoded_placeholder(i)) if decoded_field(d, decoded) is not None else dimension_value(layout, d)
              for i, d in enumerate(layout.partition_by)]
    for slot in layout.template_slots:
        if slot == "key":
            values.append(encode_bytes(F.col("key")))
        else:
            unit = slot.split(":", 1)[1]
            field = _fields(wall_seconds(F.col("timestamp"), layout.timezone))[unit]
            values.append(encode_value(F.lpad(field.cast("string"), UNITS[unit], "0")))
    if not values:
        return F.lit(NO_BUCKETS).alias(BUCKET_COLUMN)
    return F.concat_ws("/", *values).alias(BUCKET_COLUMN)
