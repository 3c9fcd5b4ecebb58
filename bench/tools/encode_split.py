"""The write task's encode, hash, spool and PUT of one object, taken apart (`bench.tools.task_read_profile --split`,
which hands over one partition's stored tables as the task makes them). Not a command of its own.

- the encoder (archive/executor/encoders.py::ParquetEncoder) as the archive writes, its own Python steps apart
  (`row_bytes`, `aligned`), the rest being pyarrow's writer;
- the same tables with one writer setting changed at a time (statistics, dictionary, compression, page size, page
  index): each setting's CPU is the difference to the first line;
- each column alone, as the archive writes it;
- the object's SHA-256 and its spool (upload.py's SpooledTemporaryFile), in the writer's own write sizes;
- the object through upload.py's ObjectUpload into moto: the writes (hash, spool) and `finish()` (the PUT: botocore's
  signing and checksums, the HTTP request), this thread's CPU, the wall, and moto's CPU over the PUT.

CPU is this thread's (`time.thread_time`), the minimum of `REPEATS` runs, so the split holds whatever else runs.
"""

from __future__ import annotations

import hashlib
import io
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench.tools.procstat import parse_stat

REPEATS = 3
_LARGE = ("key", "value", "headers.list.element.key", "headers.list.element.value")


class Kept:
    """A write-only sink (the file protocol an encoder writes to, as ObjectUpload is) that keeps what it is given,
    as given: the pieces, their sizes, the bytes joined."""

    closed = False

    def __init__(self) -> None:
        self.pieces: list[Any] = []
        self.size = 0

    def write(self, data: Any) -> int:
        self.pieces.append(data)
        self.size += len(data)
        return len(data)

    @property
    def sizes(self) -> list[int]:
        return [len(p) for p in self.pieces]

    def getvalue(self) -> bytes:
        return b"".join(self.pieces)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        return None

    def close(self) -> None:
        return None

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readable(self) -> bool:
        return False


@contextmanager
def _patched(overrides: dict[str, Any], steps: dict[str, float]) -> Iterator[None]:
    """pyarrow's ParquetWriter with `overrides` merged into the encoder's arguments; the encoder's Python steps
    timed into `steps`."""
    from s3_archive.archive.executor import encoders

    real_writer, real_rows, real_aligned = pq.ParquetWriter, encoders.row_bytes, encoders.aligned

    def writer(*a: Any, **kw: Any) -> Any:
        return real_writer(*a, **(kw | overrides))

    depth = [0]

    def timed(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
        def run(*a: Any) -> Any:  # row_bytes calls itself: only the outermost call counts
            depth[0] += 1
            t = time.thread_time()
            try:
                return fn(*a)
            finally:
                depth[0] -= 1
                if not depth[0]:
                    steps[name] = steps.get(name, 0.0) + time.thread_time() - t
        return run

    pq.ParquetWriter = writer  # type: ignore[misc]
    encoders.row_bytes, encoders.aligned = timed(real_rows, "row_bytes"), timed(real_aligned, "aligned")
    try:
        yield
    finally:
        pq.ParquetWriter = real_writer  # type: ignore[misc]
        encoders.row_bytes, encoders.aligned = real_rows, real_aligned


def encode(fmt: Any, tables: list[pa.Table], overrides: dict[str, Any] | None = None,
           ) -> tuple[float, dict[str, float], Kept]:
    """The least CPU of REPEATS encodes of `tables` into one object, its Python steps, and the last sink."""
    from s3_archive.archive.executor.encoders import ParquetEncoder

    best: tuple[float, dict[str, float], Kept] | None = None
    for _ in range(REPEATS):
        steps: dict[str, float] = {}
        sink = Kept()
        with _patched(overrides or {}, steps):
            t = time.thread_time()
            enc = ParquetEncoder(fmt, sink)
            for table in tables:
                enc.write(table)
            enc.close()
            cpu = time.thread_time() - t
        if best is None or cpu < best[0]:
            best = (cpu, steps, sink)
    assert best is not None
    return best


def _least(fn: Callable[[], Any]) -> float:
    out = []
    for _ in range(REPEATS):
        t = time.thread_time()
        fn()
        out.append(time.thread_time() - t)
    return min(out)


def _proc_cpu(pid: int) -> float:
    if not pid:
        return 0.0
    s = parse_stat(Path(f"/proc/{pid}/stat").read_text())
    return s.own + s.reaped


def report(fmt: Any, tables: list[pa.Table], s3: Any, bucket: str, moto_pid: int) -> None:
    from s3_archive.archive.executor.encoders import leaf_paths
    from s3_archive.archive.executor.upload import ObjectUpload
    from s3_archive.archive.protocol import S3Connection

    records = sum(t.num_rows for t in tables)
    schema = tables[0].schema
    leaves = [p for f in schema for p in leaf_paths(f)]
    base_cpu, steps, sink = encode(fmt, tables)
    data = sink.getvalue()
    us = 1e6 / records
    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    print(f"\nencode split: {records:,} records, {sum(t.nbytes for t in tables) / 1e6:.1f} MB of Arrow -> "
          f"{len(data) / 1e6:.1f} MB of Parquet in {meta.num_row_groups} row group(s), {len(sink.sizes)} writes "
          f"to the sink; CPU-s the least of {REPEATS}")
    print(f"  as written: {base_cpu:.3f} CPU-s ({base_cpu * us:.2f} µs/record); of it "
          + ", ".join(f"{k} {v:.3f}" for k, v in steps.items())
          + f", pyarrow's writer and the rest {base_cpu - sum(steps.values()):.3f}")
    rg = meta.row_group(0)
    for i in range(rg.num_columns):
        c = rg.column(i)
        print(f"    {c.path_in_schema}: {c.compression}, encodings {c.encodings}, statistics "
              f"{'yes' if c.is_stats_set else 'no'}, {c.total_uncompressed_size / 1e6:.1f} -> "
              f"{c.total_compressed_size / 1e6:.1f} MB")
    variants: dict[str, dict[str, Any]] = {
        "no statistics at all": {"write_statistics": False},
        "statistics but on key, value and the headers": {"write_statistics": [p for p in leaves if p not in _LARGE]},
        "statistics but on value and the headers": {"write_statistics": [p for p in leaves if p not in _LARGE[1:]]},
        "no dictionary": {"use_dictionary": False},
        "header names dictionary-encoded too": {"use_dictionary": [c for c in fmt.dictionary if c in schema.names]
                                                + [p for p in leaves if p == "headers.list.element.key"]},
        "no compression": {"compression": "none"},
        "value uncompressed": {"compression": {p: "none" if p == "value" else fmt.codec for p in leaves}},
        "data pages of 8 MiB": {"data_page_size": 8 << 20},
        "page index written": {"write_page_index": True},
    }
    for name, over in variants.items():
        cpu, _, s = encode(fmt, tables, over)
        print(f"  {name}: {cpu:.3f} CPU-s ({cpu - base_cpu:+.3f}), {s.tell() / 1e6:.1f} MB")
    for col in schema.names:
        cpu, _, s = encode(fmt, [t.select([col]) for t in tables])
        print(f"  {col} alone: {cpu:.3f} CPU-s ({cpu * us:.2f} µs/record), {s.tell() / 1e6:.1f} MB")

    chunks = [memoryview(data)[a:a + n] for a, n in zip(_starts(sink.sizes), sink.sizes, strict=True)]
    sha = _least(lambda: _hashed(chunks))
    spool = _least(lambda: _spooled(chunks))
    print(f"  SHA-256 of the object: {sha:.3f} CPU-s ({len(data) / max(sha, 1e-9) / 1e6:.0f} MB/s); "
          f"its spool's writes (upload.py's SpooledTemporaryFile): {spool:.3f} CPU-s")
    conn = S3Connection.of_client(s3)
    conn.client()  # the client made before the timing, as a task's is after its first object
    for i in range(REPEATS):
        key = f"encode-split/{i}.parquet"
        up = ObjectUpload(conn, bucket, key, "encode-split/_manifest.json")
        t = time.thread_time()
        for c in chunks:
            up.write(c)
        writes = time.thread_time() - t
        m0, w0, t = _proc_cpu(moto_pid), time.monotonic(), time.thread_time()
        up.finish()
        put, wall, moto = time.thread_time() - t, time.monotonic() - w0, _proc_cpu(moto_pid) - m0
        print(f"  ObjectUpload {i + 1}: writes (hash, spool) {writes:.3f} CPU-s; finish (PUT) {put:.3f} CPU-s of "
              f"this thread, {wall:.3f} s wall, moto {moto:.3f} CPU-s")
        s3.delete_object(Bucket=bucket, Key=key)


def _starts(sizes: list[int]) -> list[int]:
    out, pos = [], 0
    for n in sizes:
        out.append(pos)
        pos += n
    return out


def _hashed(chunks: list[memoryview]) -> str:
    h = hashlib.sha256()
    for c in chunks:
        h.update(c)
    return h.hexdigest()


def _spooled(chunks: list[memoryview]) -> None:
    from s3_archive.archive.executor.upload import ObjectUpload

    spool = ObjectUpload._new_spool()
    for c in chunks:
        spool.write(c)
    spool.close()
