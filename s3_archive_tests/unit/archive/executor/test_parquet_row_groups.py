"""The Parquet encoder's bytes depend on the rows only: the same rows handed in other batches (a layout's buckets
interleaved, another reader's batch size) make the same row groups, pages and bytes."""

from __future__ import annotations

import io
import os
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from s3_archive.archive.executor.encoders import WRITE_BATCH_ROWS, ParquetEncoder, aligned, row_bytes
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


def _large_table(n: int) -> pa.Table:
    """Columns of several pages each (pages are cut at ~1 MB), so a page cut that moved would show in the bytes."""
    rng = random.Random(5)
    return pa.table({
        "value": pa.array([rng.randbytes(rng.randrange(900)) for _ in range(n)], pa.binary()),
        "name": pa.array([f"n{rng.randrange(50_000)}" if i % 7 else None for i in range(n)], pa.string()),
        "headers": pa.array([None if i % 3 == 0 else [{"key": f"h{j}", "value": rng.randbytes(rng.randrange(30))}
                                                       for j in range(rng.randrange(20))] for i in range(n)],
                            ENVELOPE_SCHEMA.field("headers").type),
        "offset": pa.array(range(n), pa.int64()),
    })


LARGE = _large_table(24_000)


@given(st.lists(st.integers(1, LARGE.num_rows - 1), min_size=1, max_size=30))
@settings(max_examples=5, deadline=None)
def test_row_groups_of_many_pages_from_many_batches_are_the_bytes_of_one_contiguous_table(cuts):
    def written(bounds: list[int]) -> bytes:
        sink = io.BytesIO()
        plan = FormatPlan("parquet", "snappy", ".parquet", row_group_bytes=6 << 20, dictionary=("name", "headers"))
        enc = ParquetEncoder(plan, sink)
        for a, z in zip(bounds[:-1], bounds[1:], strict=True):
            enc.write(LARGE.slice(a, z - a).combine_chunks())  # each batch its own buffers, as the reader's
        enc.close()
        return sink.getvalue()

    one = written([0, LARGE.num_rows])  # each row group one chunk: written as it is
    assert pq.ParquetFile(io.BytesIO(one)).metadata.num_row_groups > 1
    assert written([0, *sorted(set(cuts)), LARGE.num_rows]) == one


def test_aligned_chunks_start_at_the_writers_steps_and_copy_only_where_a_step_straddles_batches():
    parts = [pa.array(range(a, z), pa.int64()) for a, z in [(0, 1500), (1500, 1600), (1600, 5000), (5000, 5100)]]
    out = aligned(pa.chunked_array(parts))
    starts = np.cumsum([0] + [len(c) for c in out.chunks])[:-1]
    assert out.to_pylist() == list(range(5100))
    assert all(s % WRITE_BATCH_ROWS == 0 for s in starts)
    # rows 2048..4095 lie within the third batch: a slice of its buffer, not a copy
    inner = next(c for c, s in zip(out.chunks, starts, strict=True) if s == 2048)
    assert len(inner) == 2048 and inner.offset == 2048 - 1600
    assert inner.buffers()[1].address == parts[2].buffers()[1].address
    nested = pa.chunked_array([pa.array([[1], [2, 3]]), pa.array([[4]])])
    assert aligned(nested).num_chunks == 1 and aligned(nested).to_pylist() == [[1], [2, 3], [4]]


_KEPT_POOLS: list[pa.MemoryPool] = []


def test_a_row_group_is_written_from_the_batches_buffers_not_from_a_copy_of_it():
    """The encoder's own Arrow allocations stay well under a row group (the batches are the reader's)."""
    rng = random.Random(7)
    batches = [pa.table({"value": pa.array([rng.randbytes(500) for _ in range(5000)], pa.binary()),
                         "offset": pa.array(range(i * 5000, (i + 1) * 5000), pa.int64())}) for i in range(12)]
    row_group_bytes = 8 << 20
    default = pa.default_memory_pool()
    pool = pa.proxy_memory_pool(default)
    _KEPT_POOLS.append(pool)  # never freed before a buffer it allocated (freeing one through a dead proxy crashes)
    pa.set_memory_pool(pool)
    try:
        sink = io.BytesIO()
        enc = ParquetEncoder(FormatPlan("parquet", "snappy", ".parquet", row_group_bytes=row_group_bytes), sink)
        for b in batches:
            enc.write(b)
        enc.close()
        del enc
    finally:
        pa.set_memory_pool(default)
    assert pq.ParquetFile(io.BytesIO(sink.getvalue())).metadata.num_row_groups == 4
    assert pool.max_memory() < row_group_bytes // 2, pool.max_memory()
