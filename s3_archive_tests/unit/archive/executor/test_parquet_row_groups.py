"""The Parquet encoder's bytes depend on the rows only: the same rows handed in other batches (a layout's buckets
interleaved, another reader's batch size) make the same row groups, pages and bytes."""

from __future__ import annotations

import io
import os

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from s3_archive.archive.executor.encoders import ParquetEncoder, row_bytes
from s3_archive.archive.executor.kafka_read import ENVELOPE_SCHEMA
from s3_archive.archive.protocol import FormatPlan

N = 3000
TABLE = pa.table({
    "key": pa.array([os.urandom(i % 17) if i % 5 else None for i in range(N)], pa.binary()),
    "value": pa.array([os.urandom(50 + i % 300) for i in range(N)], pa.binary()),
    "headers": pa.array([None if i % 3 else [{"key": "h", "value": os.urandom(i % 7)}] for i in range(N)],
                        ENVELOPE_SCHEMA.field("headers").type),
    "offset": pa.array(range(N), pa.int64()),
})


def _written(cuts: list[int], row_group_bytes: int) -> bytes:
    sink = io.BytesIO()
    enc = ParquetEncoder(FormatPlan("parquet", "snappy", ".parquet", row_group_bytes=row_group_bytes), sink)
    bounds = [0, *sorted(set(cuts)), N]
    for a, z in zip(bounds[:-1], bounds[1:], strict=True):
        enc.write(TABLE.slice(a, z - a))
    enc.close()
    return sink.getvalue()


@given(st.lists(st.integers(1, N - 1), max_size=12), st.sampled_from([20_000, 150_000, 1 << 30]))
@settings(max_examples=25, deadline=None)
def test_the_same_rows_in_other_batches_make_the_same_bytes(cuts, row_group_bytes):
    one = _written([], row_group_bytes)
    assert _written(cuts, row_group_bytes) == one
    f = pq.ParquetFile(io.BytesIO(one))
    assert f.read().to_pylist() == TABLE.to_pylist()
    sizes = sum(row_bytes(c) for c in TABLE.columns)
    expected, rows, filled = [], 0, 0  # a group ends at the first row that fills it to row_group_bytes
    for size in sizes.tolist():
        rows, filled = rows + 1, filled + size
        if filled >= row_group_bytes:
            expected, rows, filled = [*expected, rows], 0, 0
    expected += [rows] if rows else []
    assert [f.metadata.row_group(i).num_rows for i in range(f.metadata.num_row_groups)] == expected


def test_row_bytes_count_values_offsets_and_children():
    headers = pa.array([[{"key": "ab", "value": b"xyz"}], None, []], ENVELOPE_SCHEMA.field("headers").type)
    assert row_bytes(headers).tolist() == [(2 + 4) + (3 + 4) + 4, 4, 4]
    assert row_bytes(headers.slice(1)).tolist() == [4, 4]
    assert row_bytes(pa.array([b"a", None, b""])).tolist() == [5, 4, 4]
    assert row_bytes(pa.array([1, 2], pa.int32())).tolist() == [4, 4]
