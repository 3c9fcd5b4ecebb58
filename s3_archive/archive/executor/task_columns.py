"""The task batches of `read_path: librdkafka`, made in the task from the envelope batches it read
(kafka_read.py): the same columns, types and values as driver/spark_job.py::write_frame computes in Spark, for the
outputs the task computes itself (`driver/task_read_job.py::computed_in_task`): parquet, avro, text and bytes, with
value decoding bytes or utf8, and the default layout or one split by Kafka partition only. Pure Arrow and numpy:
no Python object per record.

Each column's Spark equivalent: `_partition`, `_offset` the envelope's; `_ts` unix_millis(timestamp) (floor);
`_rec_bytes` spark_job.py::record_bytes; `_good` the value is null or valid UTF-8 (Spark's is_valid_utf8, the
Unicode standard's rule, as Arrow's and Python's); `_bucket` the slice's one bucket (keys/buckets.py::record_bucket
of its partition); `_raw` the envelope of an undecodable record; `_tomb` the value is null; the stored columns the
envelope's (the value as a string with utf8), `_line` the value or empty bytes (text).
"""

from __future__ import annotations

import functools
import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from s3_archive.archive.protocol import WriteJob
from s3_archive.keys.buckets import record_bucket

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


def task_batch(job: WriteJob, env: pa.RecordBatch) -> pa.RecordBatch:
    """The task batch of one envelope batch (one slice's records, in offset order), in `job.task_schema`."""
    schema = arrow_schema(job.task_schema)
    n = env.num_rows
    value = env.column("value")
    good, text = utf8_values(value) if job.decoding else (None, None)
    cols: dict[str, Any] = {"_partition": env.column("partition"), "_offset": env.column("offset"),
                            "_rec_bytes": pa.array(record_bytes(env)), "_good": good}
    if "_ts" in schema.names:
        micros = env.column("timestamp").cast(pa.int64()).to_numpy()
        cols["_ts"] = pa.array(np.floor_divide(micros, 1000))
    if "_bucket" in schema.names:
        bucket = record_bucket(job.layout, {"partition": env.column("partition")[0].as_py()})  # type: ignore[arg-type]
        cols["_bucket"] = pa.DictionaryArray.from_arrays(np.zeros(n, np.int32), pa.array([bucket])).dictionary_decode()
    if "_raw" in schema.names:
        raw_type = schema.field("_raw").type
        cols["_raw"] = pa.StructArray.from_arrays(env.columns, fields=list(raw_type), mask=good)
    if "_tomb" in schema.names:  # sink_output.skip_tombstones
        cols["_tomb"] = pc.is_null(value)
    if "_line" in schema.names:
        cols["_line"] = pc.fill_null(value, b"")
    for name in env.schema.names:
        if name in schema.names and name not in cols:
            cols[name] = text if name == "value" and schema.field(name).type == pa.string() else env.column(name)
    return pa.RecordBatch.from_arrays([cols[f.name] for f in schema], schema=schema)
