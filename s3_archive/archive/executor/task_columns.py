"""The task batches of `read_path: librdkafka`, made in the task from the envelope batches it read
(kafka_read.py): the same columns, types and values as driver/spark_job.py::write_frame computes in Spark, for the
outputs the task computes itself (`driver/task_read_job.py::computed_in_task`: every format, layout and Schema
Registry decoding, but not a value parsed as JSON). Arrow compute and numpy: no Python object per record, but once
per distinct value of a layout's field, key or header (task_buckets.py).

Each column's Spark equivalent: `_partition`, `_offset` the envelope's; `_ts` unix_millis(timestamp) (floor);
`_rec_bytes` spark_job.py::record_bytes; `_good` the value is null or valid UTF-8 (Spark's is_valid_utf8, the
Unicode standard's rule, as Arrow's and Python's); `_bucket` bucket_column.py::bucket_column (task_buckets.py, with
a Schema Registry field's placeholder); `_raw` the envelope of an undecodable record or one the layout cannot place
(layout.on_missing dead_letter); `_tomb` the value is null; the stored columns the envelope's (the value as a
string with utf8); `_line` the value or empty bytes (text), the csv or JSON line followed by its line end
(task_lines.py; Spark's line has none, the encoder joins it: `WriteJob.lines` tells them apart); with Schema
Registry decoding the raw parts it decodes. A layout that splits a window by record content sorts each batch by
bucket, then offset, as write_frame sorts the slice.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from s3_archive.archive.executor.encoders import line_end
from s3_archive.archive.executor.task_buckets import bucket_values
from s3_archive.archive.executor.task_lines import csv_lines, json_lines
from s3_archive.archive.protocol import WriteJob
from s3_archive.keys.buckets import decoded_placeholder
from s3_archive.keys.values import NULL

_SIMPLE = {"binary": pa.binary(), "string": pa.string(), "integer": pa.int32(), "long": pa.int64(),
           "boolean": pa.bool_(), "timestamp": pa.timestamp("us", tz="UTC"), "short": pa.int16(),
           "byte": pa.int8(), "float": pa.float32(), "double": pa.float64(), "date": pa.date32()}


def _arrow_type(t: Any) -> pa.DataType:
    """A Spark type (its JSON) as the Arrow type Spark hands a Python task (session time zone UTC)."""
    if isinstance(t, str):
        return _SIMPLE[t]
    if t["type"] == "array":
        return pa.list_(pa.field("element", _arrow_type(t["elementType"]), t["containsNull"]))
    if t["type"] == "struct":
        return pa.struct([_arrow_field(f) for f in t["fields"]])
    raise ValueError(f"no Arrow type for Spark type {t!r} in a task batch")


def _arrow_field(f: dict[str, Any]) -> pa.Field:
    return pa.field(f["name"], _arrow_type(f["type"]), f["nullable"])


@functools.cache
def arrow_schema(spark_schema: str) -> pa.Schema:
    """The Arrow schema of a task batch from its Spark schema (JSON)."""
    return pa.schema([_arrow_field(f) for f in json.loads(spark_schema)["fields"]])


def _lengths(a: pa.Array) -> np.ndarray:
    return pc.fill_null(pc.binary_length(a), 0).to_numpy().astype(np.int64)


def record_bytes(env: pa.RecordBatch) -> np.ndarray:
    """key + value + header name and value bytes of each record (spark_job.py::record_bytes)."""
    out = _lengths(env.column("key")) + _lengths(env.column("value"))
    headers = env.column("headers")
    pairs = headers.values
    if len(pairs):
        sizes = _lengths(pairs.field("key")) + _lengths(pairs.field("value"))
        summed = np.concatenate(([0], np.cumsum(sizes)))
        offsets = headers.offsets.to_numpy()
        out += summed[offsets[1:]] - summed[offsets[:-1]]
    return out


def _valid_utf8(value: bytes | None) -> bool:
    if value is None:
        return True
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def utf8_values(values: pa.Array) -> tuple[pa.Array, pa.Array]:
    """(which values are null or valid UTF-8, the values as strings, null where not valid)."""
    try:
        return pa.array(np.ones(len(values), dtype=bool)), values.cast(pa.string())
    except pa.ArrowInvalid:  # some value is not UTF-8: find which, record by record
        good = pa.array([_valid_utf8(v) for v in values.to_pylist()], pa.bool_())
        return good, pc.if_else(good, values, pa.nulls(len(values), pa.binary())).cast(pa.string())


def _unplaced(job: WriteJob, buckets: pa.Array, value: pa.Array) -> np.ndarray | None:
    """With layout.on_missing dead_letter: which records the layout cannot place (spark_job.py::write_frame's
    `unplaced`: a missing segment of the bucket reads `(null)`; a skipped tombstone is not one)."""
    if job.on_missing != "dead_letter" or not job.missing_segments:
        return None
    segments = pc.split_pattern(buckets, "/")
    out = np.zeros(len(buckets), dtype=bool)
    for i in job.missing_segments:
        out |= pc.fill_null(pc.equal(pc.list_element(segments, i), NULL), False).to_numpy(zero_copy_only=False)
    if job.skip_tombstones:
        out &= pc.is_valid(value).to_numpy(zero_copy_only=False)
    return out


def _raw(env: pa.RecordBatch, raw_type: pa.DataType, good: pa.Array | None, unplaced: np.ndarray | None,
         ) -> pa.Array:
    """The envelope of each record that becomes a dead letter (undecodable, or unplaced), null for the others."""
    keep = np.ones(env.num_rows, dtype=bool) if good is None else good.to_numpy(zero_copy_only=False).copy()
    if unplaced is not None:
        keep &= ~unplaced
    return pa.StructArray.from_arrays(env.columns, fields=list(raw_type), mask=pa.array(keep))


def _placeholders(job: WriteJob) -> dict[int, str]:
    """The layout's dimensions a Schema Registry decoding fills in (registry_decode.py), with their placeholder."""
    return {} if job.decode is None else {i: decoded_placeholder(i) for i, _, _ in job.decode.bucket_fields}


def _line(job: WriteJob, env: pa.RecordBatch, text: pa.Array | None) -> pa.Array:
    """text: the value as it is; csv and JSON lines: rendered with their line end (the encoder writes them as they
    lie: encoders.py::LinesEncoder, `ended`)."""
    if job.lines is None:  # text
        return pc.fill_null(env.column("value"), b"")
    end = line_end(job.fmt.name).decode()
    if job.lines.kind == "csv":
        return csv_lines(env, job.lines, end)
    return json_lines(env, job.lines, text, end).cast(pa.binary())


def task_batch(job: WriteJob, env: pa.RecordBatch) -> pa.RecordBatch:
    """The task batch of one envelope batch (one slice's records, in offset order), in `job.task_schema`; with a
    layout that splits the window by record content, in bucket then offset order (as write_frame sorts them)."""
    schema = arrow_schema(job.task_schema)
    value = env.column("value")
    good, text = utf8_values(value) if "_good" in schema.names else (None, None)
    cols: dict[str, Any] = {"_partition": env.column("partition"), "_offset": env.column("offset"),
                            "_rec_bytes": pa.array(record_bytes(env)), "_good": good}
    if "_ts" in schema.names:
        micros = env.column("timestamp").cast(pa.int64()).to_numpy()
        cols["_ts"] = pa.array(np.floor_divide(micros, 1000))
    unplaced = None
    if "_bucket" in schema.names:
        cols["_bucket"] = bucket_values(job.layout, env, _placeholders(job))  # type: ignore[arg-type]
        unplaced = _unplaced(job, cols["_bucket"], value)
    if "_raw" in schema.names:
        cols["_raw"] = _raw(env, schema.field("_raw").type, good, unplaced)
    if "_tomb" in schema.names:  # sink_output.skip_tombstones
        cols["_tomb"] = pc.is_null(value)
    if "_line" in schema.names:
        cols["_line"] = _line(job, env, text)
    for name in env.schema.names:
        if name in schema.names and name not in cols:
            cols[name] = text if name == "value" and schema.field(name).type == pa.string() else env.column(name)
    batch = pa.RecordBatch.from_arrays([cols[f.name] for f in schema], schema=schema)
    if job.bucketed:
        batch = batch.take(pc.sort_indices(batch, [("_bucket", "ascending"), ("_offset", "ascending")]))
    return batch
