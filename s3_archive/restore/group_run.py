"""One producer group's part of a restore run: its transactional producer, its share of the ledger as last
committed, and what is done but unrecorded (restore/run.py runs one or several side by side; restore/groups.py says
which source partitions each group owns). No Dagster here."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from confluent_kafka import KafkaException

from s3_archive.io.kafka import KafkaResource
from s3_archive.model.errors import RestoreFailed
from s3_archive.model.logger import Logger
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.batch import Headers, Records, WindowReads, WindowSource, select
from s3_archive.restore.ledger import RangeSet
from s3_archive.restore.offset_map_store import OffsetMapSink
from s3_archive.restore.producer import CoordinatorUnreachable, LedgerStore, Producer, TransactionalProducer
from s3_archive.restore.request import (
    PROVENANCE_OFFSET,
    PROVENANCE_PARTITION,
    PROVENANCE_TOPIC,
    TRANSACTION_SECONDS,
    PartitionCount,
    RestoreHooks,
    RestoreRequest,
    WindowReport,
    no_fault,
)

# Batches the reader may run ahead of the producer, across windows (0: read inline).
READ_AHEAD_BATCHES = 2


def open_producer(kafka: KafkaResource, request: RestoreRequest, transactional_id: str | None = None,
                  delivery_reports: bool = False) -> TransactionalProducer:
    """The producer `request.producer` names, initialised: producer.py's `Producer` (python) or native_producer.py's
    `NativeProducer` (native; a missing native module is one error naming the setting and `make setup`)."""
    if request.producer == "native":
        from s3_archive.restore.native_producer import NativeProducer

        return NativeProducer(kafka, request, transactional_id, delivery_reports)
    return Producer(kafka, request, transactional_id, delivery_reports)


def group_reads(request: RestoreRequest, srcs: list[WindowSource], materialize: bool | None = None) -> WindowReads:
    """A group's windows that the filters may match (`reads_window`), read ahead in a thread that starts now.
    `materialize`: every column read as a list in that thread (None: unless `producer: native` sends, which takes
    a batch's Arrow columns as they are; the python producer's calls take Python objects)."""
    if materialize is None:
        materialize = request.dry_run or request.producer != "native"
    return WindowReads([s for s in srcs if reads_window(request, s)], READ_AHEAD_BATCHES, materialize)


def reads_window(request: RestoreRequest, src: WindowSource) -> bool:
    """Whether any record of the window can match the filters (else its objects are not even read)."""
    filters = request.filters
    return filters.offset_scope(src.window) is not None and filters.time_may_match(src.min_timestamp_ms,
                                                                                    src.max_timestamp_ms)


def new_ledger_store(kafka: KafkaResource, request: RestoreRequest, num_target: int) -> LedgerStore:
    """A group's store of the ledger (its consumer starts connecting and finding the group's coordinator now)."""
    return LedgerStore(kafka, request, num_target)


class Stopped(Exception):  # noqa: N818 - not an error of its own: another group failed, this one stops
    """Another producer group of the run failed: this one stops at its next batch (its open transaction is then
    aborted with the others')."""


@dataclass
class Progress:
    """What the run's groups count together, for the tests' fault hook (`produced:<n>`, `committed:<n>` are the
    run's n-th record and transaction, whichever group makes them), and the flag that stops every group."""

    produced: int = 0
    committed: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, what: str, n: int = 1) -> int:
        with self.lock:
            v = getattr(self, what) + n
            setattr(self, what, v)
            return v


class RestoreRun:
    """State of one producer group of a restore run (the whole run when it has one group): the producer of
    `txn_id`, the ledger as last committed, and what is done but unrecorded. Its windows are those of the group's
    source partitions; the ledger entries it commits are those of its buckets, which no other group writes.

    A transaction spans consecutive windows, of one source partition or of several of the group's (a commit then
    writes the ledger entry of each bucket it touched): it is committed every `transaction_records` records, every
    TRANSACTION_SECONDS, and at the end of the run. A window's report is yielded once the transaction holding its
    last records is committed."""

    def __init__(self, kafka: KafkaResource, request: RestoreRequest, num_target: int, hooks: RestoreHooks,
                 txn_id: str | None = None, producer: TransactionalProducer | None = None,
                 progress: Progress | None = None, ledger_store: LedgerStore | None = None) -> None:
        """`producer`: this group's, already initialised (None: made here, unless a dry run); `ledger_store`: the
        ledger's (None: made here)."""
        self.request, self.fault = request, hooks.fault
        self.txn_id = txn_id or request.ledger_id
        self.progress = progress or Progress()
        self.route = request.mapping.compiled(num_target)
        self.producer = producer if producer is not None or request.dry_run else open_producer(kafka, request,
                                                                                               self.txn_id)
        # The offset map (restore/offset_map.py): the delivery offsets of each batch's first and last record; set by
        # restore/run.py's start_groups, whose producers then report every delivery.
        self.map_sink: OffsetMapSink | None = None
        self.ledger_store = ledger_store if ledger_store is not None else new_ledger_store(kafka, request, num_target)
        self.ledger: dict[int, RangeSet] = {}
        # Offsets handled but not yet in the ledger (a window's tail after its last commit): recorded with the
        # next commit, so the ledger's ranges stay merged.
        self.unrecorded: dict[int, RangeSet] = {}
        self.outages = 0  # times this group re-initialised its producer after the cluster was unreachable
        # The open transaction: per source partition the source offsets it covers so far (records produced, plus
        # skipped, filtered and absent offsets of windows done), its record count and start time.
        self.txn_ranges: dict[int, RangeSet] = {}
        self.txn_records = 0
        self.txn_t0 = 0.0
        self.waiting: list[WindowReport] = []  # windows done, whose last records are in the open transaction
        self.seg_start = 0  # the window's first source offset not yet in txn_ranges or committed
        self.reads = WindowReads([], 0)  # the windows' batches, read ahead (set by `restore`, or `read_from`)
        self.reading = False  # `restore`'s first pass takes `self.reads` as they are (`read_from`)

    def read_from(self, reads: WindowReads) -> RestoreRun:
        """`restore` takes `reads`, the windows it is then given, already being read (`group_reads`: restore/run.py
        starts them before the producer is ready), instead of starting to read them; this run closes them."""
        self.reads, self.reading = reads, True
        return self

    def restore(self, kafka: KafkaResource, srcs: list[WindowSource], log: Logger) -> Iterator[WindowReport]:
        """Restore `srcs` in order, riding out an unreachable cluster: when a transactional call does not return
        in time (or the producer's queue stays full), the windows not reported yet are restored again by a new
        producer from the ledger (`reopen`), for up to `broker_outage_seconds` after the cluster was found
        unreachable; past that the run fails with the error that stopped it."""
        reported: set[OffsetWindow] = set()
        first: CoordinatorUnreachable | None = None
        since = 0.0
        while True:
            if not self.reading:
                self.reads = group_reads(self.request, [s for s in srcs if s.window not in reported],
                                         not getattr(self.producer, "sends_batches", False))
            self.reading = False
            try:
                for src in srcs:
                    if self.progress.stop.is_set():
                        raise Stopped()
                    if src.window not in reported:
                        for rep in self.window(src):
                            reported.add(rep.window)
                            first = None  # progress: a later outage gets the whole bound again
                            yield rep
                for rep in self.finish():
                    reported.add(rep.window)
                    yield rep
                return
            except CoordinatorUnreachable as e:
                if first is None:
                    first, since = e, time.monotonic()
                self.reads.close()
                self.reopen(kafka, first, since, log)
            finally:
                self.reads.close()

    def reopen(self, kafka: KafkaResource, first: CoordinatorUnreachable, since: float, log: Logger) -> None:
        """A new producer of the same transactional.id, whose init_transactions aborts the open transaction (or
        completes one whose commit reached the coordinator) and fences the old producer (which a stuck call may
        still hold); then the ledger as committed. Tried until the cluster answers, for at most
        `broker_outage_seconds` after `since`; past that, `first` (the error that stopped the run) is raised."""
        bound = self.request.broker_outage_seconds
        last: Exception = first
        while (left := bound - (time.monotonic() - since)) > 0:
            if self.progress.stop.is_set():
                raise Stopped()
            log.warning(f"restore {self.txn_id}: the target cluster is unreachable ({last}); "
                        f"re-initialising the producer to resume from the ledger ({left:.0f}s of "
                        "broker_outage_seconds left)")
            try:
                self.producer = None  # dropped: a call stuck in it keeps it alive until the new one fences it
                self.producer = open_producer(kafka, self.request, self.txn_id, self.map_sink is not None)
                self.ledger = self.ledger_store.read()
            except RestoreFailed as e:  # still unreachable, or answering too slowly
                last = e
                time.sleep(min(1.0, left))
                continue
            self.txn_ranges, self.txn_records, self.waiting = {}, 0, []
            if self.map_sink is not None:
                self.map_sink.reset()
            self.outages += 1
            log.info(f"restore {self.txn_id}: the target cluster answers again; resuming from the "
                     f"ledger ({sum(rs.size() for rs in self.ledger.values())} source offsets restored)")
            return
        raise RestoreFailed(f"{first}; the target cluster stayed unreachable for {bound:g}s more "
                            "(broker_outage_seconds), so the run gave up") from None

    def close(self, log: Logger) -> None:
        """After a failure: abort the open transaction (if any), then `release`; a producer whose abort failed is
        dropped instead of closed (closing would abort it again, and wait)."""
        try:
            if self.producer is not None:
                try:
                    self.producer.abort()
                except Exception as e:  # the original error matters more
                    log.warning(f"aborting the restore transaction failed too: {e}")
                    self.producer = None
        finally:
            self.release()

    def release(self) -> None:
        """Close the producer (no transaction is open), the ledger's consumer and the reader, so none outlives the
        run in a frame an error's traceback keeps."""
        self.reads.close()
        try:
            if self.producer is not None:
                self.producer.close()
        finally:
            self.producer = None
            self.ledger_store.close()

    def _commit(self, rep: WindowReport) -> list[WindowReport]:
        """Commit the open transaction together with the ledger grown by its ranges (and by the ranges done
        outside a transaction since the last commit); returns the waiting reports it completes. `rep` is the
        window counted as committing it."""
        new = {p: rs.copy() for p, rs in self.ledger.items()}
        covers: dict[int, RangeSet] = {}
        for sp in sorted(self.txn_ranges.keys() | self.unrecorded.keys()):
            got = covers[sp] = RangeSet(self.txn_ranges.get(sp, RangeSet()).ranges()
                                        + self.unrecorded.pop(sp, RangeSet()).ranges())
            rs = new.setdefault(sp, RangeSet())
            for a, b in got.ranges():
                rs.add(a, b)
        if self.map_sink is not None:  # the transaction's map is in S3 before it commits
            self.producer.flush()
            for sp, got in covers.items():
                self.map_sink.commit(sp, got)
        self.producer.commit(self.ledger_store.entries(new, covers), self.ledger_store.group_metadata())
        self.ledger = new
        rep.transactions += 1
        self.txn_ranges, self.txn_records = {}, 0
        done, self.waiting = self.waiting, []
        committed = self.progress.count("committed")
        if self.fault is not no_fault:
            self.fault(f"committed:{committed}")
        return done

    def finish(self) -> list[WindowReport]:
        """Commit what is still open; the last reports."""
        if self.producer is not None and self.producer.in_txn:
            return self._commit(self.waiting[-1])
        done, self.waiting = self.waiting, []
        return done

    def window(self, src: WindowSource) -> list[WindowReport]:
        """Restore one window (its batches from `self.reads`); returns the reports now complete (this one, earlier
        ones its commits complete)."""
        t0 = time.monotonic()
        filters, producer, w = self.request.filters, self.producer, src.window
        rep = WindowReport(w, self.request.dry_run, archived=src.record_count or 0, objects=src.objects,
                           max_timestamp_ms=src.max_timestamp_ms, erased=src.erased)
        ready: list[WindowReport] = []
        scope = filters.offset_scope(w)
        if scope is None or not reads_window(self.request, src):
            rep.filtered = rep.archived  # nothing of this window can match: its objects are not even read
            rep.seconds = time.monotonic() - t0
            (self.waiting if self.waiting else ready).append(rep)
            return ready
        sp = w.partition
        last = self._records(src, scope, rep, ready)
        if producer is not None:
            # The rest of the scope (incl. offsets with no record) is done once the window's records are in; an
            # open-ended window only up to its last record (later records may still be written by the sink).
            seg_start, hi = self.seg_start, scope[1]
            end = min(hi, last + 1) if src.open_end else hi
            if producer.in_txn:  # records of this partition are uncommitted: this window waits for their commit
                self.txn_ranges.setdefault(sp, RangeSet()).add(seg_start, max(end, seg_start))
                rep.seconds = time.monotonic() - t0
                self.waiting.append(rep)
                return ready
            if end > seg_start:
                self.unrecorded.setdefault(sp, RangeSet()).add(seg_start, end)
        rep.seconds = time.monotonic() - t0
        ready.append(rep)
        return ready

    def _records(self, src: WindowSource, scope: tuple[int, int], rep: WindowReport,
                 ready: list[WindowReport]) -> int:
        """Read the window's records, select those in `scope` the ledger does not hold and the filters keep, count
        them into `rep` and hand them to the producer (the reports its commits complete go to `ready`). Returns the
        last source offset read (-1: none)."""
        request, filters, producer, sp = self.request, self.request.filters, self.producer, src.window.partition
        done = self.ledger.get(sp, RangeSet())
        lo, hi = scope
        check_done = done.overlaps(lo, hi)  # else no record of the window is in the ledger
        # `same` and `map` send a source partition to one target partition: counted once at the end
        per_record = request.mapping.mode == "murmur2"
        tp = self.route(sp, None)
        counts = rep.partitions
        provenance = [(PROVENANCE_TOPIC, request.source_topic.encode()), (PROVENANCE_PARTITION, str(sp).encode())] \
            if request.provenance_headers else None
        batches_in = getattr(producer, "sends_batches", False)
        # An open start is known at the first record (self.seg_start is where the ledger's next range begins).
        self.seg_start, last = (hi if src.open_start else lo), -1
        archived = restored = skipped = filtered = nbytes = replaced = 0
        # the reader runs a few batches ahead in a thread, into the next window (closed by `restore`)
        for batch in self.reads.of(src):
            if self.progress.stop.is_set():
                raise Stopped()
            n = len(batch)
            if not n:
                continue
            if src.open_start and not archived:
                self.seg_start = max(lo, min(hi, batch.offsets[0]))
            archived += n
            last = batch.offsets[-1]
            batch, skip, filt = select(batch, lo, hi, done if check_done else None, filters)
            skipped, filtered = skipped + skip, filtered + filt
            if not len(batch):
                continue
            restored += len(batch)
            nbytes += batch.total_bytes()
            # timestamp 0 means "now" to librdkafka: timestamps <= 0 cannot be kept
            replaced += batch.clamp_timestamps()
            tps: int | list[int] = tp
            if per_record:  # the key of each record, read as Python bytes, picks its partition
                tps = list(map(self.route, itertools.repeat(sp), batch.keys))
                for p, b in zip(tps, batch.sizes):
                    c = counts.get(p)
                    if c is None:
                        c = counts[p] = PartitionCount()
                    c.records += 1
                    c.bytes += b
            if producer is None:
                continue
            if provenance is not None and not batches_in:  # the native producer adds them itself
                batch.headers = [h + provenance + [(PROVENANCE_OFFSET, str(o).encode())]
                                 for h, o in zip(batch.headers, batch.offsets)]
            ready.extend(self._produce(batch, tps, sp, rep, provenance))
        if not per_record and restored:
            counts[tp] = PartitionCount(restored, nbytes)
        rep.filtered, rep.skipped, rep.restored, rep.bytes, rep.timestamps_replaced = \
            filtered, skipped, restored, nbytes, replaced
        if src.record_count is None:
            rep.archived = archived
        return last

    def _produce(self, batch: Records, tps: int | list[int], sp: int, rep: WindowReport,
                 provenance: Headers | None = None) -> list[WindowReport]:
        """Hand `batch` (restorable records of source partition `sp`) to the producer, target partition `tps`
        (one for all, or one per record); commits whenever the transaction is full (`transaction_records`) or
        older than TRANSACTION_SECONDS (checked once per batch). `provenance`: the provenance headers of `sp`, for
        a producer that adds them itself. Returns the reports its commits complete."""
        ready: list[WindowReport] = []
        producer, max_txn = self.producer, self.request.transaction_records
        n, i = len(batch), 0
        while i < n:
            if self.txn_records == 0:
                producer.begin()
                self.txn_t0 = time.monotonic()
            j = min(n, i + max_txn - self.txn_records)
            part = batch if i == 0 and j == n else batch.slice(i, j)
            self._send(part, tps if isinstance(tps, int) else tps[i:j], sp, provenance)
            self.txn_records += j - i
            # Bounded transactions: a crash loses little work, and none nears transaction.timeout.ms.
            if self.txn_records >= max_txn or time.monotonic() - self.txn_t0 > TRANSACTION_SECONDS:
                end = batch.offsets[j - 1] + 1
                self.txn_ranges.setdefault(sp, RangeSet()).add(self.seg_start, end)
                ready += self._commit(rep)
                self.seg_start = end
            i = j
        return ready

    def _send(self, batch: Records, tps: int | list[int], sp: int, provenance: Headers | None = None) -> None:
        """The producer's calls for records of source partition `sp`: the one loop per record (the client's own
        call, no Python around it), or with `producer: native` one call per batch (which adds the `provenance`
        headers itself)."""
        if getattr(self.producer, "sends_batches", False):
            self._send_batch(batch, tps, sp, provenance)
            return
        produce, slow, topic = self.producer.producer.produce, self.producer.produce, self.request.target_topic
        rows = zip(itertools.repeat(tps) if isinstance(tps, int) else tps, batch.keys, batch.values, batch.headers,
                   batch.timestamps)
        faulty = self.fault is not no_fault
        if self.map_sink is not None and isinstance(tps, int) and len(batch):
            rows = self.map_sink.tracked(self.producer, rows, tps, batch.offsets, sp)
        try:
            for tp, k, v, h, t in rows:
                try:
                    # Positional (topic, value, key, partition, on_delivery, callback, timestamp, headers): ~0.5 µs
                    # less per record than keywords, which the client matches by name on every call.
                    produce(topic, v, k, tp, None, None, t, h)
                except BufferError:  # the local queue is full: the slow path lets it drain
                    slow(tp, k, v, h, t)
                if faulty:  # tests: crash after the n-th record of the run
                    self.fault(f"produced:{self.progress.count('produced')}")
        except KafkaException as e:
            raise self.producer.failed("producing to", e) from None
        if not faulty:
            self.progress.count("produced", len(batch))

    def _send_batch(self, batch: Records, tps: int | list[int], sp: int, provenance: Headers | None) -> None:
        """`producer: native`: the batch in one call (a record per call while a test's fault hook counts records);
        with the offset map, the recorder's callbacks for its first and last record; `provenance`: the constant
        provenance headers, then the source offset's, added to every record by the producer."""
        sink, faulty = self.map_sink, self.fault is not no_fault
        n = len(batch)
        pieces = [(0, n)] if not faulty else [(i, i + 1) for i in range(n)]
        for i, j in pieces:
            part = batch if (i, j) == (0, n) else batch.slice(i, j)
            track = sink.recorder.track(tps, part.offsets, sp) if sink is not None and isinstance(tps, int) \
                else None
            self.producer.send(part, tps if isinstance(tps, int) else tps[i:j], track,
                               None if provenance is None else (provenance, PROVENANCE_OFFSET))
            if faulty:  # tests: crash after the n-th record of the run
                self.fault(f"produced:{self.progress.count('produced')}")
        if not faulty:
            self.progress.count("produced", n)
