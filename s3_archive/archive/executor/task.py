"""A write task, on an executor: the Arrow batches of one slice of a window (in offset order; by bucket, then
offset, when the layout splits a window by record content) become the window's objects at their final keys, and
the slice's statistics (protocol.RecordStats). `write_task` is what `DataFrame.mapInArrow` runs
(driver/spark_job.py). It imports nothing of Spark or Dagster: it runs in the executors' Python workers.

Columns of each batch: `_partition`, `_offset`, `_ts` (epoch ms; not sent when `timestamp` is stored),
`_rec_bytes` (key + value + header bytes), `_good` (the value decodes; with value decoding), `_bucket` (with a
layout), `_raw` (the raw envelope of an undecodable record, with dead letters), `_tomb` (the value is null; with
sink_output.skip_tombstones: counted, not written), and the stored columns
(`WriteJob.payload`: the envelope and decoded fields, or `_line` for the text formats, or `value` for bytes) but
the ones the task makes itself (`WriteJob.derived`: topic, partition, offset in parquet and avro). With Schema
Registry decoding (`WriteJob.decode`) the batches carry the raw `key` and `value` (with dead letters, every envelope
column) instead of `_good` and `_raw`, and `registry_decode.decode` adds the decoded columns, `_good`, `_reason` and
`_raw` to each batch first.

Rotation is computed here, per record and in offset order within a bucket: record i goes to byte part
floor(bytes before i / max_bytes), then within it to record part floor(n / max_records); parts are numbered
0.. per bucket as they start. So every attempt cuts a window into the same objects.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from s3_archive.archive.executor.encoders import ParquetEncoder, open_encoder
from s3_archive.archive.executor.registry_decode import REASON, decode, schema_id_column
from s3_archive.archive.executor.upload import ObjectUpload, WindowAlreadyCommitted, Written
from s3_archive.archive.protocol import (
    MAX_GAP_RANGES,
    RESULT_SCHEMA,
    TOPIC,
    FormatPlan,
    JobTemplate,
    ObjectRow,
    RecordStats,
    Slice,
    TaskFault,
    WriteJob,
)
from s3_archive.keys.values import NULL

_RESULT_FIELDS = [f.split(" ")[0] for f in RESULT_SCHEMA.split(", ")]


class InjectedFault(RuntimeError):
    """Tests: a write task stopped on purpose (WriteJob.fault)."""


@dataclass
class _OpenObject:
    upload: ObjectUpload
    encoder: Any
    records: int = 0


@dataclass
class _Bucket:
    """Rotation state of one bucket of a slice."""

    part: int = -1  # number of the open part (-1: none yet)
    part_id: tuple[int, int] = (-1, -1)  # (byte part, record part) of the open part
    bytes_before: int = 0
    records_in_bpart: int = 0
    open: _OpenObject | None = None


@dataclass
class _SliceWriter:
    job: WriteJob
    slice: Slice
    results: list[dict[str, Any]]
    stats: RecordStats = field(default_factory=RecordStats)
    failed: bool = False  # an undecodable record without dead letters: write nothing more
    prev_offset: int = -1
    gaps: list[list[int]] = field(default_factory=list)  # absent ranges found so far (input in offset order)
    seen: Any = None  # bitmap of read offsets when the input is not in offset order (bucketed layouts)
    buckets: dict[str | None, _Bucket] = field(default_factory=dict)
    dead: _OpenObject | None = None
    objects: int = 0

    def __post_init__(self) -> None:
        self.prev_offset = self.slice.start - 1
        self.where = self.job.location(self.slice.window)
        if self.job.bucketed:
            self.seen = np.zeros(self.slice.end - self.slice.start, dtype=bool)

    @property
    def window(self) -> Any:
        return self.slice.window

    @property
    def committed(self) -> bool:
        """The window is committed by another attempt: write nothing more."""
        return self.stats.committed_elsewhere

    # --- statistics --------------------------------------------------------------------------------------------
    def _count(self, b: pa.RecordBatch) -> np.ndarray:
        offsets = b.column("_offset").to_numpy()
        st = self.stats
        st.records += len(offsets)
        st.bytes_read += int(pc.sum(b.column("_rec_bytes")).as_py() or 0)
        lo, hi = int(offsets.min()), int(offsets.max())
        st.first_offset = lo if st.first_offset is None else min(st.first_offset, lo)
        st.last_offset = hi if st.last_offset is None else max(st.last_offset, hi)
        if self.job.ts_stored:  # epoch microseconds of Kafka's milliseconds: exact, as Spark's unix_millis
            ts = pc.min_max(b.column(_batch_names(self.job)["timestamp"]).cast(pa.int64()))
            tmin, tmax = (None if v is None else v // 1000 for v in (ts["min"].as_py(), ts["max"].as_py()))
        else:
            ts = pc.min_max(b.column("_ts"))
            tmin, tmax = ts["min"].as_py(), ts["max"].as_py()
        if tmin is not None:
            st.min_timestamp_ms = tmin if st.min_timestamp_ms is None else min(st.min_timestamp_ms, tmin)
            st.max_timestamp_ms = tmax if st.max_timestamp_ms is None else max(st.max_timestamp_ms, tmax)
        if self.seen is not None:
            self.seen[offsets - self.slice.start] = True
        else:  # offset order: a gap is a jump between neighbours
            prev = np.concatenate(([self.prev_offset], offsets[:-1]))
            for i in np.nonzero(offsets - prev > 1)[0][: MAX_GAP_RANGES + 1 - len(self.gaps)]:
                self.gaps.append([int(prev[i]) + 1, int(offsets[i])])
            self.prev_offset = int(offsets[-1])
        return offsets

    def _absent(self) -> tuple[list[list[int]], bool]:
        if self.seen is not None:
            missing = np.flatnonzero(~self.seen)
            if len(missing) == 0:
                return [], False
            breaks = np.flatnonzero(np.diff(missing) > 1)
            starts = np.concatenate(([missing[0]], missing[breaks + 1])) + self.slice.start
            ends = np.concatenate((missing[breaks], [missing[-1]])) + self.slice.start + 1
            ranges = [[int(a), int(b)] for a, b in zip(starts, ends, strict=True)]
        else:
            ranges = list(self.gaps)
            if self.prev_offset < self.slice.end - 1:
                ranges.append([self.prev_offset + 1, self.slice.end])
        return ranges[:MAX_GAP_RANGES], len(ranges) > MAX_GAP_RANGES

    # --- objects -----------------------------------------------------------------------------------------------
    def _open(self, key: str) -> _OpenObject:
        job = self.job
        upload = ObjectUpload(job.conn, job.bucket, key, self.where.manifest_key, job.multipart_threshold,
                              job.part_size, fault=TaskFault.MID_UPLOAD if job.fault == TaskFault.MID_UPLOAD else None)
        return _OpenObject(upload, open_encoder(job.fmt, upload, key, ended=job.lines is not None))

    def _close(self, obj: _OpenObject, kind: str) -> None:
        obj.encoder.close()
        written: Written = obj.upload.finish()
        self.results.append(ObjectRow(kind, self.window.key, self.slice.index, written.key, written.size,
                                      written.etag, obj.records, sha256=written.sha256).row())
        self.objects += 1
        if self.job.fault == TaskFault.after_objects(self.objects):
            raise InjectedFault(f"write task stopped after {self.objects} object(s) (test fault)")

    def _write_bucket(self, bucket: str | None, b: pa.RecordBatch) -> None:
        job = self.job
        st = self.buckets.setdefault(bucket, _Bucket())
        n = b.num_rows
        if job.max_bytes or job.max_records:
            rec = b.column("_rec_bytes").to_numpy(zero_copy_only=False).astype(np.int64)
            before = st.bytes_before + np.cumsum(rec) - rec
            bpart = before // job.max_bytes if job.max_bytes else np.zeros(n, dtype=np.int64)
            st.bytes_before += int(rec.sum())
            # records before each one within its byte part
            new_bpart = np.concatenate(([bpart[0] != st.part_id[0]], bpart[1:] != bpart[:-1]))
            seg_start = np.maximum.accumulate(np.where(new_bpart, np.arange(n), 0))
            idx = np.arange(n) - seg_start + np.where(bpart[seg_start] == st.part_id[0],
                                                      st.records_in_bpart, 0)
            rpart = idx // job.max_records if job.max_records else np.zeros(n, dtype=np.int64)
            st.records_in_bpart = int(idx[-1]) + 1
            changes = np.flatnonzero((bpart[1:] != bpart[:-1]) | (rpart[1:] != rpart[:-1])) + 1
            cuts = [0, *changes.tolist(), n]
            runs = [((int(bpart[a]), int(rpart[a])), a, z) for a, z in zip(cuts[:-1], cuts[1:], strict=True)]
        else:
            part = self.slice.index if self.slice.count > 1 else 0
            runs = [((part, 0), 0, n)]
        table = _stored_table(job, b)
        for part_id, a, z in runs:
            if st.open is None or part_id != st.part_id:
                if st.open is not None:
                    self._close(st.open, "object")
                st.part = self.slice.index if self.slice.count > 1 else st.part + 1
                st.part_id = part_id
                st.open = self._open(self.where.object_key(st.part, bucket))
            st.open.encoder.write(table.slice(a, z - a))
            st.open.records += z - a

    def _write_records(self, b: pa.RecordBatch, offsets: np.ndarray, pool: ThreadPoolExecutor) -> None:
        """The bytes format: one object per record, holding its value (a tombstone: empty)."""
        job = self.job
        values = b.column("value").to_pylist()

        def put(i: int) -> dict[str, Any]:
            upload = ObjectUpload(job.conn, job.bucket, self.where.record_object_key(int(offsets[i])),
                                  self.where.manifest_key)
            upload.write(values[i] or b"")
            w = upload.finish()
            return ObjectRow("object", self.window.key, self.slice.index, w.key, w.size, w.etag, 1,
                             record_offset=int(offsets[i]), sha256=w.sha256).row()

        self.results += pool.map(put, range(len(values)))

    def add(self, b: pa.RecordBatch, pool: ThreadPoolExecutor) -> None:
        offsets = self._count(b)
        if self.job.decode is not None:
            self._count_schemas(b)
        bad = self._count_bad(b, offsets)
        unplaced = self._unplaceable(b, offsets)
        if self.failed or self.committed:
            return
        good = b
        if bad or unplaced is not None:
            keep = np.ones(b.num_rows, dtype=bool)
            dead = np.zeros(b.num_rows, dtype=bool)
            if bad:
                undecodable = ~b.column("_good").to_numpy(zero_copy_only=False)
                if self.job.dead_letter:
                    dead |= undecodable
                elif self.job.skip_bad:
                    self.stats.skipped += bad
                else:
                    self._fail()
                    return
                keep &= ~undecodable
            if unplaced is not None:
                if self.job.on_missing == "fail":
                    self._fail()
                    return
                if self.job.on_missing == "skip":
                    self.stats.skipped += int(unplaced.sum())
                else:
                    dead |= unplaced
                keep &= ~unplaced
            if dead.any():
                self._dead_letters(b.filter(pa.array(dead)))
            good = b.filter(pa.array(keep))
            offsets = good.column("_offset").to_numpy()
            if good.num_rows == 0:
                return
        if self.job.skip_tombstones:
            # After the offsets are counted: a skipped tombstone is a record read, not an absent offset.
            tomb = good.column("_tomb")
            skipped = int(pc.sum(tomb).as_py() or 0)
            if skipped:
                self.stats.tombstones_skipped += skipped
                good = good.filter(pc.invert(tomb))
                offsets = good.column("_offset").to_numpy()
                if good.num_rows == 0:
                    return
        try:
            if self.job.fmt.name == "bytes":
                self._write_records(good, offsets, pool)
            elif self.job.layout is not None and self.job.bucketed:
                buckets = good.column("_bucket")
                values = buckets.to_numpy(zero_copy_only=False)
                cuts = [0] + (np.flatnonzero(values[1:] != values[:-1]) + 1).tolist() + [len(values)]
                for a, z in zip(cuts[:-1], cuts[1:], strict=True):
                    self._write_bucket(str(values[a]), good.slice(a, z - a))
            else:
                bucket = good.column("_bucket")[0].as_py() if self.job.layout is not None else None
                self._write_bucket(bucket, good)
        except WindowAlreadyCommitted:
            self.stats.committed_elsewhere = True
            self.abort()

    def _fail(self) -> None:
        """A record the policy fails the window for: write nothing more (the driver raises, naming it)."""
        self.failed = True
        self.abort()

    def _unplaceable(self, b: pa.RecordBatch, offsets: np.ndarray) -> np.ndarray | None:
        """With layout.on_missing other than bucket: which records that decode the layout cannot place (a value of
        theirs in `_bucket` reads `(null)`), counted with the first one's offset; None when there are none."""
        if self.job.on_missing == "bucket" or not self.job.missing_segments:
            return None
        values = pc.split_pattern(b.column("_bucket"), "/")
        missing = np.zeros(b.num_rows, dtype=bool)
        for i in self.job.missing_segments:
            missing |= pc.fill_null(pc.equal(pc.list_element(values, i), NULL), False).to_numpy(zero_copy_only=False)
        if self.job.decoding:
            missing &= b.column("_good").to_numpy(zero_copy_only=False)
        if self.job.skip_tombstones:  # a tombstone skipped lacks every value field: not the layout's to place
            missing &= ~b.column("_tomb").to_numpy(zero_copy_only=False)
        n = int(missing.sum())
        if not n:
            return None
        st = self.stats
        st.unplaceable += n
        first = int(offsets[missing].min())
        st.first_unplaceable_offset = first if st.first_unplaceable_offset is None else \
            min(st.first_unplaceable_offset, first)
        return missing

    def _count_bad(self, b: pa.RecordBatch, offsets: np.ndarray) -> int:
        """Undecodable records of the batch (counted, with the first one's offset)."""
        if not self.job.decoding:
            return 0
        bad = ~b.column("_good").to_numpy(zero_copy_only=False)
        n = int(bad.sum())
        if n:
            st = self.stats
            st.undecodable += n
            first = int(offsets[bad].min())
            earlier = st.first_undecodable_offset is None or first < st.first_undecodable_offset
            if REASON in b.schema.names and earlier:
                st.first_undecodable_reason = b.column(REASON)[int(np.flatnonzero(offsets == first)[0])].as_py()
            st.first_undecodable_offset = first if st.first_undecodable_offset is None else \
                min(st.first_undecodable_offset, first)
        return n

    def _count_schemas(self, b: pa.RecordBatch) -> None:
        """The writer schema ids of the batch's decoded parts (the manifest lists the schemas a window used)."""
        for part in self.job.decode.parts:  # type: ignore[union-attr]
            ids = pc.unique(b.column(schema_id_column(part.part)).drop_null()).to_pylist()
            if ids:
                self.stats.schema_ids[part.part] = sorted(set(self.stats.schema_ids.get(part.part, [])) | set(ids))

    def _dead_letters(self, bad: pa.RecordBatch) -> None:
        raw = pa.RecordBatch.from_struct_array(bad.column("_raw"))
        if self.dead is None:
            upload = ObjectUpload(self.job.conn, self.job.bucket, self.where.dead_letter_key(self.slice.index),
                                  self.where.manifest_key)
            plan = FormatPlan("parquet", "snappy", ".parquet", spark_schema=self.job.dead_letter_schema)
            self.dead = _OpenObject(upload, ParquetEncoder(plan, upload))
        self.dead.encoder.write(pa.Table.from_batches([raw]))
        self.dead.records += raw.num_rows

    def abort(self) -> None:
        for st in self.buckets.values():
            if st.open is not None:
                st.open.upload.abort()
                st.open = None
        if self.dead is not None:
            self.dead.upload.abort()
            self.dead = None

    def finish(self) -> None:
        if not (self.failed or self.committed):
            try:
                for st in self.buckets.values():
                    if st.open is not None:
                        self._close(st.open, "object")
                        st.open = None
                if self.dead is not None:
                    self._close(self.dead, "dead")
                    self.dead = None
            except WindowAlreadyCommitted:
                self.stats.committed_elsewhere = True
                self.abort()
        self.stats.absent, self.stats.absent_truncated = self._absent()
        self.results.append(self.stats.row(self.window, self.slice.index))


def _batch_names(job: WriteJob) -> dict[str, str]:
    """Each sent stored column's name in the batches (driver/spark_job.py: `_p<i>` when its own is not plain)."""
    derived = dict(job.derived)
    sent = [n for n in job.payload if n not in derived]
    return dict(zip(sent, job.payload_columns or sent, strict=True))


@functools.cache
def _nullable(spark_schema: str, name: str) -> bool:
    return next(bool(f["nullable"]) for f in json.loads(spark_schema)["fields"] if f["name"] == name)


def _stored_table(job: WriteJob, b: pa.RecordBatch) -> pa.Table:
    """The stored columns of a batch, in `job.payload` order: the sent ones named back, the derived ones made
    here (job.DERIVED) with the type and nullability Spark gives them, so the objects' bytes are the same."""
    if not job.derived:
        table = pa.Table.from_batches([b]).select(list(job.payload_columns or job.payload))
        return table.rename_columns(list(job.payload)) if job.payload_columns else table
    derived, names = dict(job.derived), _batch_names(job)
    fields, arrays = [], []
    for name in job.payload:
        src = derived.get(name)
        if src == TOPIC:
            field = pa.field(name, pa.string(), _nullable(job.fmt.spark_schema, name))
            arrays.append(pa.DictionaryArray.from_arrays(np.zeros(b.num_rows, np.int32),
                                                         pa.array([job.topic])).dictionary_decode())
        else:
            field = b.schema.field(names[name] if src is None else src).with_name(name)
            arrays.append(b.column(names[name] if src is None else src))
        fields.append(field)
    return pa.Table.from_batches([pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))])


def _result_batch(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    types = {"string": pa.string(), "int": pa.int32(), "long": pa.int64(), "boolean": pa.bool_()}
    fields = [pa.field(f.split(" ")[0], types[f.split(" ")[1]]) for f in RESULT_SCHEMA.split(", ")]
    return pa.RecordBatch.from_pylist([{k: r.get(k) for k in _RESULT_FIELDS} for r in rows],
                                      schema=pa.schema(fields))


def write_task(job: WriteJob, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow's function over the batches Spark made of the job's slices (driver/spark_job.py)."""
    yield from write_batches(job, batches)


def _envelopes(job: JobTemplate, slice_ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Each slice's records read with librdkafka, in offset order, as envelope batches: by the native reader
    (native_read.py) or, `task_reader: python`, by confluent-kafka's consumer (kafka_read.py)."""
    if job.task_reader == "native":
        from s3_archive.archive.executor.native_read import read_range
    else:
        from s3_archive.archive.executor.kafka_read import read_range

    assert job.kafka is not None
    for ids in slice_ids:
        for i in ids.column(0).to_pylist():
            s = job.slices[i]
            yield from read_range(job.kafka, job.topic, s.window.partition, s.start, s.end, job.read_stall_s)


def read_task(job: WriteJob, slice_ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow's function over slice indexes into `job.slices` (driver/task_read_job.py, read_path
    librdkafka): each slice read here, made into task batches here (task_columns.py) and written."""
    from s3_archive.archive.executor.task_columns import task_batch

    yield from write_batches(job, (task_batch(job, env) for env in _envelopes(job, slice_ids)))


def envelope_task(job: JobTemplate, slice_ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow's function giving the envelope of each slice (read_path librdkafka, for the outputs whose
    columns Spark computes: driver/task_read_job.py::envelope_frame)."""
    yield from _envelopes(job, slice_ids)


def write_batches(job: WriteJob, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Write every slice the task batches hold (the columns in the module docstring), then yield one row per
    object and one per slice. On an error the open objects are given up (their multipart uploads aborted) and it
    propagates."""
    results: list[dict[str, Any]] = []
    writers: dict[tuple[int, int], _SliceWriter] = {}
    with ThreadPoolExecutor(16 if job.fmt.name == "bytes" else 1) as pool:
        try:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                if job.decode is not None:
                    batch = decode(job.decode, batch)
                    if job.undecodable_only:
                        batch = batch.filter(pc.invert(batch.column("_good")))
                        if batch.num_rows == 0:
                            continue
                parts = batch.column("_partition").to_numpy()
                offsets = batch.column("_offset").to_numpy()
                # A task reads one slice (driver/spark_job.py); split the batch anyway wherever the slice changes.
                p, lo, hi = int(parts[0]), int(offsets.min()), int(offsets.max())
                if (parts == p).all() and job.slice_at(p, lo) == job.slice_at(p, hi):
                    pieces = [(job.slice_at(p, lo), batch)]
                else:
                    owner = [job.slice_at(int(p), int(o)) for p, o in zip(parts, offsets, strict=True)]
                    cuts = [0] + [i for i in range(1, len(owner)) if owner[i] != owner[i - 1]] + [len(owner)]
                    pieces = [(owner[a], batch.slice(a, z - a)) for a, z in zip(cuts[:-1], cuts[1:], strict=True)]
                for s, piece in pieces:
                    key = (s.window.partition, s.start)
                    if key not in writers:
                        writers[key] = _SliceWriter(job, s, results)
                    writers[key].add(piece, pool)
            for w in writers.values():
                w.finish()
        except BaseException:
            for w in writers.values():
                w.abort()
            raise
    if results:
        yield _result_batch(results)
