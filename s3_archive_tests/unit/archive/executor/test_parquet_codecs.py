"""The Parquet encoder's codecs: the plan's for every column, or per top-level column where `column_codecs` gives one
another codec (every leaf of it, nested or not), the others keeping the plan's codec and level."""

from __future__ import annotations

import io
import os

import pyarrow as pa
import pyarrow.parquet as pq

from s3_archive.archive.executor.encoders import ParquetEncoder, leaf_paths
from s3_archive.archive.executor.kafka_read import ENVELOPE_SCHEMA
from s3_archive.archive.protocol import PARQUET_DICTIONARY, FormatPlan

N = 500
NESTED = pa.struct([("at", pa.int64()), ("tags", pa.list_(pa.string())), ("m", pa.map_(pa.string(), pa.float64()))])
TABLE = pa.table({
    "key": pa.array([os.urandom(8) for _ in range(N)], pa.binary()),
    "value": pa.array([os.urandom(50 + i % 100) if i % 9 else None for i in range(N)], pa.binary()),
    "headers": pa.array([[{"key": "h", "value": os.urandom(i % 7)}] if i % 3 else None for i in range(N)],
                        ENVELOPE_SCHEMA.field("headers").type),
    "topic": pa.array(["t"] * N),
    "offset": pa.array(range(N), pa.int64()),
    "user": pa.array([f"user-{i % 17}" for i in range(N)]),
    "nested": pa.array([{"at": i, "tags": ["a", str(i)], "m": [("x", i / 2)]} if i % 4 else None
                        for i in range(N)], NESTED),
})


def _written(plan: FormatPlan) -> bytes:
    sink = io.BytesIO()
    enc = ParquetEncoder(plan, sink)
    enc.write(TABLE)
    enc.close()
    return sink.getvalue()


def _codecs(data: bytes) -> dict[str, str]:
    group = pq.ParquetFile(io.BytesIO(data)).metadata.row_group(0)
    return {group.column(i).path_in_schema: group.column(i).compression for i in range(group.num_columns)}


def test_leaf_paths_are_the_columns_pyarrow_writes():
    sink = io.BytesIO()
    pq.write_table(TABLE.schema.empty_table(), sink)
    schema = pq.ParquetFile(io.BytesIO(sink.getvalue())).schema
    assert [p for f in TABLE.schema for p in leaf_paths(f)] == [schema.column(i).path for i in range(len(schema))]
    assert leaf_paths(TABLE.schema.field("nested")) == ["nested.at", "nested.tags.list.element",
                                                        "nested.m.key_value.key", "nested.m.key_value.value"]


def test_without_column_codecs_every_column_has_the_plan_codec():
    codecs = _codecs(_written(FormatPlan("parquet", "snappy", ".parquet", dictionary=PARQUET_DICTIONARY)))
    assert codecs == {p: "SNAPPY" for f in TABLE.schema for p in leaf_paths(f)}


def test_a_column_of_its_own_codec_and_the_others_at_the_plan_codec_and_level():
    plain = FormatPlan("parquet", "zstd", ".parquet", dictionary=PARQUET_DICTIONARY, level=9)
    for plan, own in ((FormatPlan("parquet", "snappy", ".parquet", dictionary=PARQUET_DICTIONARY,
                                  column_codecs=(("value", "zstd"), ("absent", "gzip"))), {"value": "ZSTD"}),
                      (FormatPlan("parquet", "zstd", ".parquet", dictionary=PARQUET_DICTIONARY, level=9,
                                  column_codecs=(("nested", "gzip"), ("value", "none"))),
                       {"value": "UNCOMPRESSED", **dict.fromkeys(leaf_paths(TABLE.schema.field("nested")), "GZIP")})):
        data = _written(plan)
        base = {"snappy": "SNAPPY", "zstd": "ZSTD"}[plan.codec]
        assert _codecs(data) == {p: own.get(p, base) for f in TABLE.schema for p in leaf_paths(f)}
        assert pq.read_table(io.BytesIO(data)).equals(TABLE)
    # the other columns at the plan's level: their chunks are the bytes a plan without column_codecs writes
    one = pq.ParquetFile(io.BytesIO(_written(plain))).metadata.row_group(0)
    other = pq.ParquetFile(io.BytesIO(_written(plan))).metadata.row_group(0)
    sizes = [(one.column(i).path_in_schema, one.column(i).total_compressed_size) for i in range(one.num_columns)]
    assert [(other.column(i).path_in_schema, other.column(i).total_compressed_size) for i in range(other.num_columns)
            if other.column(i).compression == "ZSTD"] == [s for s in sizes if not s[0].startswith(("value", "nested"))]
