"""Our archives as restore sources: each window's manifest (checked: archived, restorable), its objects downloaded to
temporary files one ahead of the reader, and its records in offset order (objects that interleave are merged).
"""

from __future__ import annotations

import heapq
import itertools
import operator
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from s3_archive.config.archive import ArchiveConfig
from s3_archive.io.s3 import S3Client, list_objects, list_prefixes, read_manifest
from s3_archive.keys.objects import manifest_key, manifest_prefix
from s3_archive.model.errors import ArchiveIntegrityError, InvalidRestore, WindowNotArchived
from s3_archive.model.formats import ENVELOPE_COLUMNS, FORMATS
from s3_archive.model.manifest import Manifest, ManifestObject
from s3_archive.model.windows import InvalidWindow, OffsetWindow
from s3_archive.restore.batch import Records, batches_of, increasing
from s3_archive.restore.readers import (
    PARQUET_BATCH,
    avro_records,
    json_array_records,
    jsonl_records,
    parquet_batches,
    text_stream,
)
from s3_archive.restore.request import ArchivedRecord

# Formats whose objects keep key, value, headers and coordinates byte for byte (FormatSpec.lossless).
RESTORABLE_FORMATS = tuple(name for name, spec in FORMATS.items() if spec.lossless)


_OFFSET = operator.itemgetter(1)  # a record's offset

# Objects up to this size are downloaded with one GET (larger ones in ranged parts, in threads).
ONE_GET_BYTES = 256 << 20


@dataclass(frozen=True)
class ArchiveSource:
    """Where a restore reads one of our archives: its bucket and prefix, and whether its layout splits a window
    into buckets whose objects interleave (`window_batches`)."""

    bucket: str
    prefix: str
    interleaved: bool = False


def read_manifests(s3: S3Client, bucket: str, prefix: str, topic: str,
                   windows: list[OffsetWindow]) -> dict[OffsetWindow, Manifest]:
    """Every window's manifest, or one error naming every window that is not archived yet. A manifest that does
    not parse raises InvalidManifest."""
    out, missing = {}, []
    keys = [manifest_key(prefix, topic, w) for w in windows]
    for w, key, m in zip(windows, keys, parallel_map(lambda k: read_manifest(s3, bucket, k), keys)):
        if m is None:
            missing.append(f"window {w.key} of topic {topic!r} is not archived yet (no manifest at "
                           f"s3://{bucket}/{key})")
            continue
        if m.topic != topic or m.window_key != w.key:
            raise ArchiveIntegrityError(f"manifest s3://{bucket}/{key} is for topic {m.topic!r} window "
                                        f"{m.window_key!r}, not {topic!r} {w.key}")
        out[w] = m
    if missing:
        raise WindowNotArchived("; ".join(missing) + ". Materialize the archive asset for these windows first")
    return out


def splits_windows(cfg: ArchiveConfig) -> bool:
    """Whether the archive's layout splits a window's records into buckets (objects whose offsets interleave)."""
    return cfg.layout is not None and bool(cfg.layout.partition_by or cfg.layout.template_slots)


def archived_windows(s3: S3Client, bucket: str, prefix: str, topic: str, first_only: bool = False,
                     ) -> list[OffsetWindow]:
    """The topic's windows that have a manifest (committed), in (partition, start) order: all of them (one listing
    of the manifests), or `first_only` each Kafka partition's first (one LIST per partition)."""
    base = manifest_prefix(prefix, topic)
    if first_only:
        keys = [o["Key"] for sub in list_prefixes(s3, bucket, base)
                for o in s3.list_objects_v2(Bucket=bucket, Prefix=sub, MaxKeys=1).get("Contents", [])]
    else:
        keys = [o["Key"] for o in list_objects(s3, bucket, base)]
    out = []
    for key in keys:
        try:
            out.append(OffsetWindow.parse(key.rsplit("/", 1)[-1].removesuffix(".json")))
        except InvalidWindow:  # not a manifest of ours
            continue
    return sorted(out)


def parallel_map(fn: Callable[[Any], Any], items: list[Any], threads: int = 8) -> list[Any]:
    """`fn` over `items` in a few threads (S3 requests: each waits on the network, not on Python), in order;
    the first error is raised."""
    if len(items) < 2:
        return [fn(i) for i in items]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(threads, len(items)), thread_name_prefix="s3-archive-restore-s3") as pool:
        return list(pool.map(fn, items))


def _transfer_config() -> Any:
    from boto3.s3.transfer import TransferConfig  # boto3 is imported where a run uses it (docs/architecture.md)

    return TransferConfig(multipart_threshold=ONE_GET_BYTES)


def spool(s3: S3Client, bucket: str, obj: ManifestObject) -> Any:
    """The object downloaded to a temporary file (not memory), its size checked against the manifest's; the
    caller closes it."""
    key = obj.key
    f = tempfile.TemporaryFile(prefix="s3-archive-restore-")
    try:
        # One GET up to ONE_GET_BYTES: a restore reads ~50 MB/s, which one connection carries, and the next object
        # downloads meanwhile (Prefetch); ranged parts cost more requests and CPU on both ends (moto even reads the
        # whole object for each part). Through the transfer manager either way: it retries a body cut off midway.
        s3.download_fileobj(bucket, key, f, Config=_transfer_config())
        # Not f.tell(): a ranged download (objects over ONE_GET_BYTES) writes its parts out of order, so the position
        # after the last write need not be the end.
        size = f.seek(0, 2)
        if size != obj.size:
            raise ArchiveIntegrityError(f"s3://{bucket}/{key} is {size} bytes, its manifest says {obj.size}; "
                                        "the archive was changed after it was committed")
        f.seek(0)
        return f
    except BaseException:
        f.close()
        raise


Opener = Callable[[ManifestObject], Any]  # manifest object -> spooled file (see spool, Prefetch)


class Prefetch:
    """Downloads the next object of each lane while the current one is read (one object ahead, in a thread): the
    restore reads a source partition's objects in a known order (its windows in order, each window's objects, then
    its dead letters), and S3 then no longer waits for Kafka or the other way round. A lane is a source partition:
    a run's producer groups read their partitions side by side, each in order. When a lane's last object is taken,
    the first object of the next lane not started yet is downloaded ahead (a group's next partition, or another
    group's). An object asked for out of that order is downloaded on the spot. Thread-safe."""

    def __init__(self, s3: S3Client, bucket: str, objects: list[tuple[int, ManifestObject]],
                 threads: int = 4) -> None:
        """`objects`: (lane, object) in the order the run reads them when it reads one lane after another."""
        from collections import deque
        from concurrent.futures import ThreadPoolExecutor

        self.s3, self.bucket = s3, bucket
        self.lanes: dict[int, deque[ManifestObject]] = {}
        for lane, obj in objects:
            self.lanes.setdefault(lane, deque()).append(obj)
        self.lane_of = {obj.key: lane for lane, obj in objects}
        self.unstarted = list(self.lanes)  # in the run's order
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="s3-archive-restore-prefetch")
        self.pending: dict[str, Any] = {}
        with self.lock:
            self._start_next_lane()

    def _submit(self, lane: int) -> None:
        if self.lanes.get(lane):
            obj = self.lanes[lane].popleft()
            self.pending[obj.key] = self.pool.submit(spool, self.s3, self.bucket, obj)
        else:
            self._start_next_lane()

    def _start_next_lane(self) -> None:
        while self.unstarted:
            lane = self.unstarted.pop(0)
            if self.lanes.get(lane):
                self._submit(lane)
                return

    def ahead(self, obj: ManifestObject) -> None:
        """Download `obj` ahead now, if it is the next of its lane and that lane has nothing downloading: a group's
        reader says so of its next window's first object once the current window's object is in (restore/batch.py
        `WindowReads`), so each group's next lane is ready when it gets there, whichever lane another group
        finished first."""
        with self.lock:
            lane = self.lane_of.get(obj.key)
            queued = self.lanes.get(lane) if lane is not None else None
            if not queued or queued[0].key != obj.key or any(self.lane_of.get(k) == lane for k in self.pending):
                return
            if lane in self.unstarted:
                self.unstarted.remove(lane)
            self._submit(lane)

    def __call__(self, obj: ManifestObject) -> Any:
        with self.lock:
            fut = self.pending.pop(obj.key, None)
            lane = self.lane_of.get(obj.key)
            if lane is not None:
                if lane in self.unstarted:
                    self.unstarted.remove(lane)
                queued = self.lanes.get(lane)
                if fut is None and queued and queued[0].key == obj.key:
                    queued.popleft()  # taken on the spot: the lane's next one goes ahead
                if fut is not None or not any(k for k in self.pending if self.lane_of.get(k) == lane):
                    self._submit(lane)
        return fut.result() if fut is not None else spool(self.s3, self.bucket, obj)

    def close(self) -> None:
        with self.lock:
            pending, self.pending = list(self.pending.values()), {}
            self.lanes.clear()
            self.unstarted.clear()
        for fut in pending:
            fut.cancel()
            if not fut.cancelled():
                try:
                    fut.result().close()
                except Exception:  # noqa: BLE001 - an object nobody reads any more
                    pass
        self.pool.shutdown(wait=True)


def object_batches(s3: S3Client, bucket: str, obj: ManifestObject, fmt: str, codec: str | None = None,
                   opener: Opener | None = None) -> Iterator[Records]:
    """One archived object's records in file order, a batch at a time. The object is spooled to a temporary file
    (not memory; `opener`, default `spool`), then read a batch at a time."""
    key = obj.key
    if fmt not in FORMATS:
        raise ArchiveIntegrityError(f"s3://{bucket}/{key}: unknown archive format {fmt!r}")
    if fmt not in RESTORABLE_FORMATS:
        raise InvalidRestore(f"s3://{bucket}/{key}: format {fmt!r} does not keep key, value and headers byte for "
                             f"byte, so it cannot be restored; restorable formats: {', '.join(RESTORABLE_FORMATS)}")
    with (opener(obj) if opener is not None else spool(s3, bucket, obj)) as f:
        if fmt in ("parquet", "iceberg"):  # an Iceberg window's objects are its table's Parquet data files
            yield from parquet_batches(f)
        elif fmt == "avro":
            yield from batches_of(avro_records(f), PARQUET_BATCH)
        else:
            with text_stream(f, key, codec) as stream:
                if fmt == "jsonl":
                    yield from batches_of(jsonl_records(stream), PARQUET_BATCH)
                else:
                    yield from batches_of(json_array_records(stream, f"s3://{bucket}/{key}"), PARQUET_BATCH)


def object_records(s3: S3Client, bucket: str, obj: ManifestObject, fmt: str, codec: str | None = None,
                   ) -> Iterator[ArchivedRecord]:
    """One archived object's records, in file order."""
    for batch in object_batches(s3, bucket, obj, fmt, codec):
        yield from batch.records()


def _batches(s3: S3Client, bucket: str, objects: list[ManifestObject], fmt: str, codec: str | None,
             opener: Opener | None) -> Iterator[Records]:
    for obj in objects:
        yield from object_batches(s3, bucket, obj, fmt, codec, opener)


def window_objects(manifest: Manifest) -> list[ManifestObject]:
    """A window's objects in the order `window_batches` opens them: its objects, then its dead letters."""
    return manifest.all_objects


def window_batches(s3: S3Client, bucket: str, window: OffsetWindow, manifest: Manifest,
                   interleaved: bool = False, opener: Opener | None = None) -> Iterator[Records]:
    """A committed window's records in offset order, a batch at a time; checks (a batch at a time) that they
    belong to the window.

    A window's objects follow each other in offset order (rotation parts), unless `interleaved`: a layout whose
    `partition_by` or record-level template values split the window into buckets, each bucket's objects in
    offset order. Dead letters (records whose value did not decode, kept apart as raw-envelope Parquet) are
    such a bucket too. Everything that does not simply follow is merged by offset (a k-way merge: every merged
    object is open at once, one batch of each in memory)."""
    fmt, codec = manifest.format, manifest.compression
    main = manifest.objects
    streams = ([_batches(s3, bucket, [o], fmt, codec, opener) for o in main] if interleaved
               else [_batches(s3, bucket, main, fmt, codec, opener)])
    streams += [_batches(s3, bucket, [o], "parquet", None, opener)
                for o in manifest.dead_letter_objects]
    if len(streams) == 1:
        batches: Iterator[Records] = streams[0]
    else:
        rows = [itertools.chain.from_iterable(b.rows() for b in s) for s in streams]
        batches = batches_of(heapq.merge(*rows, key=_OFFSET), PARQUET_BATCH)
    last, p, start, end = -1, window.partition, window.start, window.end
    erased = manifest.is_erased if manifest.erased_offsets else None
    for batch in batches:
        offs = batch.offsets
        if not offs:
            continue
        if not (offs[0] > last and offs[0] >= start and offs[-1] < end and batch.partitions.count(p) == len(offs)
                and increasing(offs)):
            _refuse(batch, last, window, bucket, main, interleaved)
        last = offs[-1]
        if erased is not None:  # erasure mode `null`: the records are there, nulled; never restored
            batch = batch.take([i for i, o in enumerate(offs) if not erased(o)])
        yield batch


def _refuse(batch: Records, last: int, window: OffsetWindow, bucket: str, main: list[ManifestObject],
            interleaved: bool) -> None:
    """Raise for the first record of `batch` that does not follow `last` inside the window."""
    for part, offset in zip(batch.partitions, batch.offsets):
        if part != window.partition or offset <= last or not window.start <= offset < window.end:
            hint = ("; or its objects interleave (a layout whose partition_by splits windows), which a "
                    "restore called without interleaved objects cannot tell") \
                if not interleaved and len(main) > 1 else ""
            raise ArchiveIntegrityError(
                f"window {window.key} (s3://{bucket}/, objects {[o.key for o in main][:3]}…): record at "
                f"partition {part} offset {offset} does not follow offset {last} inside the window; the archive "
                f"is corrupt{hint}")
        last = offset


_ENVELOPE = [c for c, _ in ENVELOPE_COLUMNS]


def unrestorable_reason(manifest: Manifest) -> str | None:
    """Why a committed window cannot be restored byte for byte; None when it can. Manifests from before
    `restorable` existed are judged by their format (they always kept the whole envelope as bytes)."""
    fmt = manifest.format
    reasons = []
    if fmt not in RESTORABLE_FORMATS:
        reasons.append(f"format {fmt!r} does not keep key, value and headers byte for byte (restorable formats: "
                       f"{', '.join(RESTORABLE_FORMATS)})")
    env = manifest.envelope
    missing = [c for c in _ENVELOPE if c not in env] if env is not None else []
    if missing and fmt in RESTORABLE_FORMATS:
        reasons.append(f"its envelope lacks {', '.join(missing)} (a restore needs every part: key, value, headers, "
                       "metadata)")
    if manifest.value_decoding == "utf8":
        reasons.append("its values were stored as UTF-8 text (value_decoding utf8), not as their bytes")
    if not reasons and manifest.restorable is False:
        reasons.append("its manifest says restorable: false")
    return "; ".join(reasons) or None


def check_restorable(topic: str, manifests: dict[OffsetWindow, Manifest]) -> None:
    """Refuse, before anything is produced, windows whose archive cannot be replayed (naming each, and why)."""
    bad = [(w, why) for w, m in sorted(manifests.items()) if (why := unrestorable_reason(m)) is not None]
    if bad:
        shown = "; ".join(f"window {w.key}: {why}" for w, why in bad[:5])
        more = f" (and {len(bad) - 5} more)" if len(bad) > 5 else ""
        raise InvalidRestore(f"{len(bad)} of {len(manifests)} selected windows of topic {topic!r} are not "
                             f"restorable: {shown}{more}. Nothing was produced")
