"""Each record's bucket made in the task from the envelope (`read_path: librdkafka`): the string
driver/bucket_column.py computes in Spark, from keys/buckets.py's Python reference (tested to agree with Spark's).

The reference runs once per distinct input, not once per record: per distinct second of the timestamp for a time
dimension or `{{timestamp:unit=…}}` (the wall-clock fields depend on nothing finer), per distinct key for the key,
per distinct value of the last header of that name, and per distinct value for a value or key field (a JSON path:
Arrow has no JSON kernel, so a field of a value parsed per distinct value is the one place this costs a Python
object per record when the values are all distinct). The segments are joined with Arrow compute.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from s3_archive.keys.buckets import epoch_ms, format_time, json_field_text, utf8_text
from s3_archive.keys.layout import Dimension, KafkaPartition, KeyField, OutputLayout, RecordTime, ValueField
from s3_archive.keys.template import UNITS
from s3_archive.keys.values import NO_BUCKETS, encode_bytes, encode_value, wall_fields, wall_seconds


def per_distinct(values: pa.Array, fn: Callable[[Any], str]) -> pa.Array:
    """fn of each value as a string array, fn called once per distinct value (and once for null, if any)."""
    encoded = pc.dictionary_encode(values, null_encoding="encode")
    texts = pa.array([fn(v) for v in encoded.dictionary.to_pylist()], pa.string())
    return texts.take(encoded.indices)


def last_header_values(headers: pa.ListArray, name: str) -> pa.Array:
    """Each record's last header named `name`: its value, null when the record has none (or it is null)."""
    n = len(headers)
    flat = pc.list_flatten(headers)
    if len(flat) == 0:
        return pa.nulls(n, pa.binary())
    parents = pc.list_parent_indices(headers).to_numpy()
    match = pc.fill_null(pc.equal(flat.field("key"), name), False).to_numpy(zero_copy_only=False)
    hits = np.flatnonzero(match)
    which = np.full(n, -1, dtype=np.int64)
    which[parents[hits]] = hits  # ascending: the last match of each record stays
    found = which >= 0
    picked = flat.field("value").take(pa.array(np.where(found, which, 0)))
    return pc.if_else(pa.array(found), picked, pa.nulls(n, pa.binary()))


def _constant(text: str, n: int) -> pa.Array:
    return pa.array([text], pa.string()).take(pa.array(np.zeros(n, np.int32)))


def _seconds(env: pa.RecordBatch) -> pa.Array:
    micros = env.column("timestamp").cast(pa.int64()).to_numpy(zero_copy_only=False)
    return pa.array(np.floor_divide(micros, 1_000_000))


def _time(layout: OutputLayout, d: RecordTime, env: pa.RecordBatch) -> pa.Array:
    tz = layout.time_zone(d)
    if d.source == "kafka_timestamp":
        return per_distinct(_seconds(env), lambda s: encode_value(format_time(d, tz, s * 1_000_000)))

    def of_ms(text: str | None) -> str:
        ms = epoch_ms(text)
        return encode_value(format_time(d, tz, None if ms is None else ms * 1000))

    if d.source == "value":
        return per_distinct(env.column("value"), lambda v: of_ms(json_field_text(v, d.field)))  # type: ignore[arg-type]
    return per_distinct(last_header_values(env.column("headers"), d.field),  # type: ignore[arg-type]
                        lambda v: of_ms(utf8_text(v)))


def dimension_values(layout: OutputLayout, d: Dimension, env: pa.RecordBatch) -> pa.Array:
    """One dimension's encoded value of each record (bucket_column.py::dimension_value)."""
    if isinstance(d, KafkaPartition):
        return per_distinct(env.column("partition"), lambda p: encode_value(str(p)))
    if isinstance(d, RecordTime):
        return _time(layout, d, env)
    if isinstance(d, ValueField):
        return per_distinct(env.column("value"), lambda v: encode_value(json_field_text(v, d.field)))
    if isinstance(d, KeyField):
        if d.field is None:
            return per_distinct(env.column("key"), encode_bytes)
        return per_distinct(env.column("key"), lambda k: encode_value(json_field_text(k, d.field)))  # type: ignore
    return per_distinct(last_header_values(env.column("headers"), d.header), encode_bytes)  # type: ignore


def bucket_values(layout: OutputLayout, env: pa.RecordBatch, placeholders: dict[int, str]) -> pa.Array:
    """Each record's bucket (bucket_column.py::bucket_column). `placeholders`: the dimensions whose value the
    write task decodes (a Schema Registry field), by index, with the placeholder standing in for it."""
    n = env.num_rows
    parts: list[pa.Array] = []
    for i, d in enumerate(layout.partition_by):
        if i in placeholders:
            parts.append(_constant(placeholders[i], n))
        else:
            parts.append(dimension_values(layout, d, env))
    for slot in layout.template_slots:
        if slot == "key":
            parts.append(per_distinct(env.column("key"), encode_bytes))
        else:
            unit = slot.split(":", 1)[1]
            parts.append(per_distinct(_seconds(env), lambda s, u=unit: encode_value(
                f"{wall_fields(wall_seconds(s * 1_000_000, layout.timezone))[u]:0{UNITS[u]}d}")))
    if not parts:
        return _constant(NO_BUCKETS, n)
    return pc.binary_join_element_wise(*parts, pa.scalar("/", pa.string()))
