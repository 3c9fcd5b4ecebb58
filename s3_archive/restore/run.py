"""The restore run: windows of any source (ours: `restore_windows`; a sink's: restore/foreign_sources.py) produced into
a Kafka topic in (partition, offset) order, exactly once. No Dagster here: the assets only map config and
partition keys to these functions.

Exactly once. Every transaction carries, besides its records, the restore *ledger*: per source partition the
offset ranges already restored, written with `send_offsets_to_transaction` as committed-offset metadata of a
consumer group named after the restore (`ledger_id`). Kafka commits the records and the ledger atomically, so
after a crash the ledger says exactly which source records are in the target. A re-run calls
`init_transactions` first (which aborts the dead run's open transaction and fences it), then reads the ledger
and skips what it lists. Why a ledger and not "the last restored record per target partition" (provenance
headers): with murmur2 or many-to-one maps a target partition takes records from several source partitions,
and restoring windows in several runs (or out of order) makes the last record say nothing about the others.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import itertools
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor

from confluent_kafka import KafkaException

from s3_archive.io.kafka import KafkaResource
from s3_archive.model.errors import RestoreFailed
from s3_archive.model.logger import Logger
from s3_archive.model.manifest import Manifest
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.batch import Records, WindowSource, read_ahead, select
from s3_archive.restore.cold import COLD_CLASSES, ColdOptions, head_storage_classes, prepare_cold
from s3_archive.restore.ledger import RangeSet
from s3_archive.restore.producer import CoordinatorUnreachable, LedgerStore, Producer
from s3_archive.restore.request import (
    NO_HOOKS,
    PROVENANCE_OFFSET,
    PROVENANCE_PARTITION,
    PROVENANCE_TOPIC,
    TRANSACTION_SECONDS,
    PartitionCount,
    RestoreContext,
    RestoreHooks,
    RestoreRequest,
    WindowReport,
    no_fault,
)
from s3_archive.restore.schema_ids import rewritten
from s3_archive.restore.sources import (
    ArchiveSource,
    Prefetch,
    check_restorable,
    read_manifests,
    window_batches,
    window_objects,
)
from s3_archive.restore.target_topic import retention_warning, target_checks, target_partition_count

# Batches the reader may run ahead of the producer (0: read inline).
READ_AHEAD_BATCHES = 2

LedgerSeen = Callable[[dict[int, RangeSet]], None]


def restore_windows(ctx: RestoreContext, archive: ArchiveSource, request: RestoreRequest,
                    windows: Iterable[OffsetWindow], cold: ColdOptions | None = ColdOptions(),
                    on_ledger: LedgerSeen | None = None, hooks: RestoreHooks = NO_HOOKS) -> Iterator[WindowReport]:
    """Restore `windows` of `request.source_topic` from `archive` into `request.target_topic`; yield each window's
    report once its records are committed (dry run: once counted). Windows run in (partition, start) order so that
    records of a source partition reach the target in offset order.

    Before producing: every window must be archived and restorable, and the objects to read must be readable
    (`cold`: objects in GLACIER / DEEP_ARCHIVE get a RestoreObject request, then the run fails with their count
    or waits; None skips the check). `on_ledger(ranges)`: called once with the ledger as the run found it (the dry
    run's plan). `ctx.schemas`: register the windows' Schema Registry schemas in the restore's registry and rewrite
    each record's schema id (restore/schema_ids.py); None: byte-exact."""
    s3, bucket, prefix = ctx.s3, archive.bucket, archive.prefix
    ws = sorted(set(windows))
    topic = request.source_topic
    manifests = read_manifests(s3, bucket, prefix, topic, ws)
    check_restorable(topic, manifests)
    f = request.filters
    to_read = [manifests[w] for w in ws if f.offset_scope(w) is not None
               and f.time_may_match(manifests[w].min_timestamp_ms, manifests[w].max_timestamp_ms)]
    if cold is not None:
        objects = head_storage_classes(s3, bucket, [o for m in to_read for o in window_objects(m)])
        if any(o.storage_class in COLD_CLASSES for o in objects):
            target_partition_count(ctx.kafka, request.target_topic)  # a wrong target fails before any RestoreObject
            prepare_cold(s3, bucket, objects, cold, f"topic {topic!r} in s3://{bucket}/{prefix}", ctx.log)

    prefetch = Prefetch(s3, bucket, [o for m in to_read for o in window_objects(m)])

    schemas = ctx.schemas
    ids = {w: schemas.id_map(s3, bucket, manifests[w], request.target_topic)
           for w in ws} if schemas is not None and not request.dry_run else {}

    def source(w: OffsetWindow, m: Manifest) -> WindowSource:
        def batches() -> Iterator[Records]:
            read = window_batches(s3, bucket, w, m, archive.interleaved, prefetch)
            return rewritten(read, ids[w]) if w in ids else read

        return WindowSource(w, batches, m.record_count, m.min_timestamp_ms, m.max_timestamp_ms,
                            objects=len(window_objects(m)), erased=m.erased_count)

    try:
        yield from restore_sources(ctx, request, [source(w, manifests[w]) for w in ws], on_ledger, hooks)
    finally:
        prefetch.close()


def restore_sources(ctx: RestoreContext, request: RestoreRequest, sources: Iterable[WindowSource],
                    on_ledger: LedgerSeen | None = None, hooks: RestoreHooks = NO_HOOKS) -> Iterator[WindowReport]:
    """The restore itself, for windows from any archive: one transactional producer, the ledger, windows in
    (partition, start) order."""
    kafka, log = ctx.kafka, ctx.log
    srcs = sorted(sources, key=lambda s: s.window)
    num_target = target_partition_count(kafka, request.target_topic)
    request.mapping.check({s.window.partition for s in srcs}, num_target, request.target_topic)
    target, parts = request.target_topic, list(range(num_target))
    with ThreadPoolExecutor(3, thread_name_prefix="s3-archive-restore-setup") as pool:
        # Admin round trips that need not wait for each other run beside the producer's init_transactions and
        # the ledger's read (which must follow it); the target's offsets are only used when there is no ledger.
        checks = pool.submit(target_checks, kafka, target, [{"min_timestamp_ms": s.min_timestamp_ms} for s in srcs])
        earliest = pool.submit(kafka.offsets, target, "earliest", parts)
        latest = pool.submit(kafka.offsets, target, "latest", parts)
        run = RestoreRun(kafka, request, num_target, hooks)
        try:
            run.ledger = run.ledger_store.read()  # after init_transactions: no transaction of ours is pending now
            if on_ledger is not None:
                on_ledger({p: rs.copy() for p, rs in run.ledger.items()})
            warnings, retention_ms = checks.result()
            for warning in warnings:
                log.warning(warning)
            srcs = watch_retention(srcs, target, retention_ms, log)
            if not run.ledger:
                ends, starts = latest.result(), earliest.result()
                present = sum(ends[p] - starts.get(p, 0) for p in ends)
                if present > 0:
                    log.warning(f"target topic {target!r} already holds up to {present} records, but no ledger of "
                                f"this restore exists (consumer group {request.ledger_id!r}). If they came from an "
                                "earlier run of this restore whose ledger expired (offsets.retention.minutes), this "
                                "run restores them again")
        except BaseException:
            run.close(log)
            raise
    try:
        log.info(f"restore {request.ledger_id}: {len(srcs)} windows into {request.target_topic!r} ({num_target} "
                 f"partitions, mapping {request.mapping.mode}); the ledger already covers "
                 f"{sum(rs.size() for rs in run.ledger.values())} source offsets"
                 + (" [dry run]" if request.dry_run else ""))
        with older_objects_frozen():
            yield from run.restore(kafka, srcs, log)
    except BaseException:
        # A failure or an interruption (Dagster's run termination) aborts at once, so read_committed consumers of the
        # target are not held back until the transaction times out. (A killed process cannot: the next run's
        # init_transactions aborts its transaction.)
        run.close(log)
        raise
    run.release()


def watch_retention(srcs: list[WindowSource], target: str, retention_ms: int, log: Logger) -> list[WindowSource]:
    """Sources whose oldest record is only known once read (a sink's objects) are watched as they are read: the
    first batch older than the target's retention gets the warning our archives get before the run (once)."""
    if retention_ms < 0 or all(s.min_timestamp_ms is not None for s in srcs):
        return srcs
    said: list[bool] = []

    def watched(src: WindowSource) -> Iterator[Records]:
        batches = src.batches()
        try:
            for batch in batches:
                if not said and len(batch):
                    # timestamps <= 0 are replaced with "now" by librdkafka: not at risk
                    oldest = min((t for t in batch.timestamps if t > 0), default=None)
                    if oldest is not None and oldest < time.time() * 1000 - retention_ms:
                        said.append(True)
                        log.warning(retention_warning(target, retention_ms, oldest,
                                                      f"a record of window {src.window.key} being restored"))
                yield batch
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()

    return [s if s.min_timestamp_ms is not None else dataclasses.replace(s, batches=lambda s=s: watched(s))
            for s in srcs]


@contextlib.contextmanager
def older_objects_frozen() -> Iterator[None]:
    """While records flow, the cyclic garbage collector leaves the objects that existed before alone
    (`gc.freeze`; `gc.unfreeze` after). A restore makes a list and tuples per record (the headers, which the
    client's `produce` takes as a list); every collection of the oldest generation then also walked the whole heap
    of the process (Dagster, boto3, pyarrow): half of the reader's time in a profile. Objects of the restore
    itself are collected as before. A process that froze objects itself (a forking server) is left as it is:
    `unfreeze` would undo its freeze."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


class RestoreRun:
    """State of one restore run: the producer, the ledger as last committed, and what is done but unrecorded.

    A transaction may span consecutive windows of one source partition (their records follow each other in the
    target anyway): it is committed every `transaction_records` records, every TRANSACTION_SECONDS, when the next
    window is of another source partition, and at the end of the run. A window's report is yielded once the
    transaction holding its last records is committed."""

    def __init__(self, kafka: KafkaResource, request: RestoreRequest, num_target: int, hooks: RestoreHooks) -> None:
        self.request, self.fault = request, hooks.fault
        self.route = request.mapping.compiled(num_target)
        self.producer = None if request.dry_run else Producer(kafka, request)
        self.ledger_store = LedgerStore(kafka, request, num_target)
        self.ledger: dict[int, RangeSet] = {}
        # Offsets handled but not yet in the ledger (a window's tail after its last commit): recorded with the
        # next commit of the same source partition, so the ledger's ranges stay merged.
        self.unrecorded: dict[int, RangeSet] = {}
        self.committed = 0  # transactions committed by this run
        self.outages = 0  # times this run re-initialised its producer after the cluster was unreachable
        self.produced = 0  # records produced by this run
        # The open transaction: its source partition, the source offsets it covers so far (records produced,
        # plus skipped, filtered and absent offsets of windows done), its record count and start time.
        self.txn_sp: int | None = None
        self.txn_ranges = RangeSet()
        self.txn_records = 0
        self.txn_t0 = 0.0
        self.waiting: list[WindowReport] = []  # windows done, whose last records are in the open transaction
        self.seg_start = 0  # the window's first source offset not yet in txn_ranges or committed

    def restore(self, kafka: KafkaResource, srcs: list[WindowSource], log: Logger) -> Iterator[WindowReport]:
        """Restore `srcs` in order, riding out an unreachable cluster: when a transactional call does not return
        in time (or the producer's queue stays full), the windows not reported yet are restored again by a new
        producer from the ledger (`reopen`), for up to `broker_outage_seconds` after the cluster was found
        unreachable; past that the run fails with the error that stopped it."""
        reported: set[OffsetWindow] = set()
        first: CoordinatorUnreachable | None = None
        since = 0.0
        while True:
            try:
                for src in srcs:
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
                self.reopen(kafka, first, since, log)

    def reopen(self, kafka: KafkaResource, first: CoordinatorUnreachable, since: float, log: Logger) -> None:
        """A new producer of the same transactional.id, whose init_transactions aborts the open transaction (or
        completes one whose commit reached the coordinator) and fences the old producer (which a stuck call may
        still hold); then the ledger as committed. Tried until the cluster answers, for at most
        `broker_outage_seconds` after `since`; past that, `first` (the error that stopped the run) is raised."""
        bound = self.request.broker_outage_seconds
        last: Exception = first
        while (left := bound - (time.monotonic() - since)) > 0:
            log.warning(f"restore {self.request.ledger_id}: the target cluster is unreachable ({last}); "
                        f"re-initialising the producer to resume from the ledger ({left:.0f}s of "
                        "broker_outage_seconds left)")
            try:
                self.producer = None  # dropped: a call stuck in it keeps it alive until the new one fences it
                self.producer = Producer(kafka, self.request)
                self.ledger = self.ledger_store.read()
            except RestoreFailed as e:  # still unreachable, or answering too slowly
                last = e
                time.sleep(min(1.0, left))
                continue
            self.txn_sp, self.txn_ranges, self.txn_records, self.waiting = None, RangeSet(), 0, []
            self.outages += 1
            log.info(f"restore {self.request.ledger_id}: the target cluster answers again; resuming from the "
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
        """Close the producer (no transaction is open) and the ledger's consumer, so neither outlives the run in a
        frame an error's traceback keeps."""
        try:
            if self.producer is not None:
                self.producer.close()
        finally:
            self.producer = None
            self.ledger_store.close()

    def _commit(self, rep: WindowReport) -> list[WindowReport]:
        """Commit the open transaction together with the ledger grown by its ranges; returns the waiting reports
        it completes. `rep` is the window counted as committing it."""
        sp = self.txn_sp
        assert sp is not None
        new = {p: rs.copy() for p, rs in self.ledger.items()}
        rs = new.setdefault(sp, RangeSet())
        for a, b in self.txn_ranges.ranges() + self.unrecorded.pop(sp, RangeSet()).ranges():
            rs.add(a, b)
        self.producer.commit(self.ledger_store.entries(new, sp), self.ledger_store.group_metadata())
        self.ledger = new
        self.committed += 1
        rep.transactions += 1
        self.txn_sp, self.txn_ranges, self.txn_records = None, RangeSet(), 0
        done, self.waiting = self.waiting, []
        self.fault(f"committed:{self.committed}")
        return done

    def finish(self) -> list[WindowReport]:
        """Commit what is still open; the last reports."""
        if self.producer is not None and self.producer.in_txn:
            return self._commit(self.waiting[-1])
        done, self.waiting = self.waiting, []
        return done

    def window(self, src: WindowSource) -> list[WindowReport]:
        """Restore one window; returns the reports now complete (this one, earlier ones its commits complete)."""
        t0 = time.monotonic()
        filters, producer, w = self.request.filters, self.producer, src.window
        rep = WindowReport(w, self.request.dry_run, archived=src.record_count or 0, objects=src.objects,
                           max_timestamp_ms=src.max_timestamp_ms, erased=src.erased)
        ready: list[WindowReport] = []
        scope = filters.offset_scope(w)
        if scope is None or not filters.time_may_match(src.min_timestamp_ms, src.max_timestamp_ms):
            rep.filtered = rep.archived  # nothing of this window can match: its objects are not even read
            rep.seconds = time.monotonic() - t0
            (self.waiting if self.waiting else ready).append(rep)
            return ready
        sp = w.partition
        if producer is not None and producer.in_txn and self.txn_sp != sp:
            ready += self._commit(self.waiting[-1])  # a transaction's ledger entry is one source partition's
        last = self._records(src, scope, rep, ready)
        if producer is not None:
            # The rest of the scope (incl. offsets with no record) is done once the window's records are in; an
            # open-ended window only up to its last record (later records may still be written by the sink).
            seg_start, hi = self.seg_start, scope[1]
            end = min(hi, last + 1) if src.open_end else hi
            if producer.in_txn:  # records of this partition are uncommitted: this window waits for their commit
                self.txn_ranges.add(seg_start, max(end, seg_start))
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
        provenance = [(PROVENANCE_TOPIC, request.source_topic.encode()), (PROVENANCE_PARTITION, str(sp).encode())]
        # An open start is known at the first record (self.seg_start is where the ledger's next range begins).
        self.seg_start, last = (hi if src.open_start else lo), -1
        archived = restored = skipped = filtered = nbytes = replaced = 0
        # the reader runs a few batches ahead in a thread (closed with the window, even on an error)
        with contextlib.closing(read_ahead(src.batches(), READ_AHEAD_BATCHES)) as batches:
            for batch in batches:
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
                size = sum(batch.sizes)
                nbytes += size
                if min(batch.timestamps) <= 0:
                    # timestamp 0 means "now" to librdkafka: timestamps <= 0 cannot be kept
                    replaced += sum(1 for t in batch.timestamps if t <= 0)
                    batch.timestamps = [t if t > 0 else 0 for t in batch.timestamps]
                tps: int | list[int] = tp
                if per_record:
                    tps = list(map(self.route, itertools.repeat(sp), batch.keys))
                    for p, b in zip(tps, batch.sizes):
                        c = counts.get(p)
                        if c is None:
                            c = counts[p] = PartitionCount()
                        c.records += 1
                        c.bytes += b
                if producer is None:
                    continue
                if request.provenance_headers:
                    batch.headers = [h + provenance + [(PROVENANCE_OFFSET, str(o).encode())]
                                     for h, o in zip(batch.headers, batch.offsets)]
                ready.extend(self._produce(batch, tps, sp, rep))
        if not per_record and restored:
            counts[tp] = PartitionCount(restored, nbytes)
        rep.filtered, rep.skipped, rep.restored, rep.bytes, rep.timestamps_replaced = \
            filtered, skipped, restored, nbytes, replaced
        if src.record_count is None:
            rep.archived = archived
        return last

    def _produce(self, batch: Records, tps: int | list[int], sp: int, rep: WindowReport) -> list[WindowReport]:
        """Hand `batch` (restorable records of source partition `sp`) to the producer, target partition `tps`
        (one for all, or one per record); commits whenever the transaction is full (`transaction_records`) or
        older than TRANSACTION_SECONDS (checked once per batch). Returns the reports its commits complete."""
        ready: list[WindowReport] = []
        producer, max_txn = self.producer, self.request.transaction_records
        n, i = len(batch), 0
        while i < n:
            if self.txn_records == 0:
                producer.begin()
                self.txn_sp, self.txn_t0 = sp, time.monotonic()
            j = min(n, i + max_txn - self.txn_records)
            part = batch if i == 0 and j == n else batch.slice(i, j)
            self._send(part, tps if isinstance(tps, int) else tps[i:j])
            self.txn_records += j - i
            # Bounded transactions: a crash loses little work, and none nears transaction.timeout.ms.
            if self.txn_records >= max_txn or time.monotonic() - self.txn_t0 > TRANSACTION_SECONDS:
                end = batch.offsets[j - 1] + 1
                self.txn_ranges.add(self.seg_start, end)
                ready += self._commit(rep)
                self.seg_start = end
            i = j
        return ready

    def _send(self, batch: Records, tps: int | list[int]) -> None:
        """The producer's calls: the one loop per record (the client's own call, no Python around it)."""
        produce, slow, topic = self.producer.producer.produce, self.producer.produce, self.request.target_topic
        rows = zip(itertools.repeat(tps) if isinstance(tps, int) else tps, batch.keys, batch.values, batch.headers,
                   batch.timestamps)
        faulty = self.fault is not no_fault
        try:
            for tp, k, v, h, t in rows:
                try:
                    # Positional (topic, value, key, partition, on_delivery, callback, timestamp, headers): ~0.5 µs
                    # less per record than keywords, which the client matches by name on every call.
                    produce(topic, v, k, tp, None, None, t, h)
                except BufferError:  # the local queue is full: the slow path lets it drain
                    slow(tp, k, v, h, t)
                if faulty:  # tests: crash after the n-th record of the run
                    self.produced += 1
                    self.fault(f"produced:{self.produced}")
        except KafkaException as e:
            raise self.producer.failed("producing to", e) from None
        if not faulty:
            self.produced += len(batch)
