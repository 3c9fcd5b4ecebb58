"""The restore run: windows of any source (ours: `restore_windows`; a sink's: restore/foreign.py) produced into
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

import time
from collections.abc import Iterable, Iterator
from typing import Any

from confluent_kafka import KafkaException

from s3_archive.io.kafka import KafkaResource
from s3_archive.model.manifest import Manifest
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.cold import COLD_CLASSES, ColdOptions, head_storage_classes, prepare_cold
from s3_archive.restore.kafka import LedgerStore, Producer, target_partition_count, target_warnings
from s3_archive.restore.ledger import RangeSet
from s3_archive.restore.request import (
    PROVENANCE_OFFSET,
    PROVENANCE_PARTITION,
    PROVENANCE_TOPIC,
    TRANSACTION_SECONDS,
    Fault,
    PartitionCount,
    RestoreRequest,
    WindowReport,
    WindowSource,
    no_fault,
    record_bytes,
)
from s3_archive.restore.sources import Prefetch, check_restorable, read_manifests, window_objects, window_records


def restore_windows(kafka: KafkaResource, s3: Any, bucket: str, prefix: str, request: RestoreRequest,
                    windows: Iterable[OffsetWindow], log: Any, fault: Fault = no_fault,
                    cold: ColdOptions | None = ColdOptions(), interleaved: bool = False) -> Iterator[WindowReport]:
    """Restore `windows` of `request.source_topic` into `request.target_topic`; yield each window's report once
    its records are committed (dry run: once counted). Windows run in (partition, start) order so that records
    of a source partition reach the target in offset order. `fault(step)` lets tests crash after
    `produced:<n>` (n-th record of the run handed to the producer) or `committed:<n>` (n-th transaction).

    Before producing: every window must be archived and restorable, and the objects to read must be readable
    (`cold`: objects in GLACIER / DEEP_ARCHIVE get a RestoreObject request, then the run fails with their count
    or waits; None skips the check). `interleaved`: the archive's layout splits windows into buckets (see
    `window_records`)."""
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
            target_partition_count(kafka, request.target_topic)  # a wrong target fails before any RestoreObject
            prepare_cold(s3, bucket, objects, cold, f"topic {topic!r} in s3://{bucket}/{prefix}", log)

    prefetch = Prefetch(s3, bucket, [o for m in to_read for o in window_objects(m)])

    def source(w: OffsetWindow, m: Manifest) -> WindowSource:
        return WindowSource(w, lambda: window_records(s3, bucket, w, m, interleaved, prefetch), m.record_count,
                            m.min_timestamp_ms, m.max_timestamp_ms)

    try:
        yield from restore_sources(kafka, request, [source(w, manifests[w]) for w in ws], log, fault)
    finally:
        prefetch.close()


def restore_sources(kafka: KafkaResource, request: RestoreRequest, sources: Iterable[WindowSource], log: Any,
                    fault: Fault = no_fault) -> Iterator[WindowReport]:
    """The restore itself, for windows from any archive: one transactional producer, the ledger, windows in
    (partition, start) order."""
    srcs = sorted(sources, key=lambda s: s.window)
    num_target = target_partition_count(kafka, request.target_topic)
    request.mapping.check({s.window.partition for s in srcs}, num_target, request.target_topic)
    for warning in target_warnings(kafka, request.target_topic,
                                   [{"min_timestamp_ms": s.min_timestamp_ms} for s in srcs]):
        log.warning(warning)
    run = RestoreRun(kafka, request, num_target, fault)
    try:
        run.ledger = run.ledger_store.read()  # after init_transactions: no transaction of ours is pending now
        if not run.ledger:
            earliest, latest = kafka.offsets(request.target_topic, "earliest"), kafka.offsets(request.target_topic,
                                                                                           "latest")
            present = sum(latest[p] - earliest.get(p, 0) for p in latest)
            if present > 0:
                log.warning(f"target topic {request.target_topic!r} already holds up to {present} records, but no "
                            f"ledger of this restore exists (consumer group {request.ledger_id!r}). If they came "
                            "from an earlier run of this restore whose ledger expired (offsets.retention.minutes), "
                            "this run restores them again")
        log.info(f"restore {request.ledger_id}: {len(srcs)} windows into {request.target_topic!r} ({num_target} "
                 f"partitions, mapping {request.mapping.mode}); the ledger already covers "
                 f"{sum(rs.size() for rs in run.ledger.values())} source offsets"
                 + (" [dry run]" if request.dry_run else ""))
        for src in srcs:
            yield from run.window(src)
        yield from run.finish()
    except BaseException:
        # A failure or an interruption (Dagster's run termination) aborts at once, so read_committed consumers of the
        # target are not held back until the transaction times out. (A killed process cannot: the next run's
        # init_transactions aborts its transaction.)
        if run.producer is not None:
            try:
                run.producer.abort()
            except Exception as e:  # the original error matters more
                log.warning(f"aborting the restore transaction failed too: {e}")
        raise
    finally:
        run.ledger_store.close()


class RestoreRun:
    """State of one restore run: the producer, the ledger as last committed, and what is done but unrecorded.

    A transaction may span consecutive windows of one source partition (their records follow each other in the
    target anyway): it is committed every `transaction_records` records, every TRANSACTION_SECONDS, when the next
    window is of another source partition, and at the end of the run. A window's report is yielded once the
    transaction holding its last records is committed."""

    def __init__(self, kafka: KafkaResource, request: RestoreRequest, num_target: int, fault: Fault) -> None:
        self.request, self.fault = request, fault
        self.route = request.mapping.compiled(num_target)
        self.producer = None if request.dry_run else Producer(kafka, request)
        self.ledger_store = LedgerStore(kafka, request, num_target)
        self.ledger: dict[int, RangeSet] = {}
        # Offsets handled but not yet in the ledger (a window's tail after its last commit): recorded with the
        # next commit of the same source partition, so the ledger's ranges stay merged.
        self.unrecorded: dict[int, RangeSet] = {}
        self.committed = 0  # transactions committed by this run
        self.produced = 0  # records produced by this run
        # The open transaction: its source partition, the source offsets it covers so far (records produced,
        # plus skipped, filtered and absent offsets of windows done), its record count and start time.
        self.txn_sp: int | None = None
        self.txn_ranges = RangeSet()
        self.txn_records = 0
        self.txn_t0 = 0.0
        self.waiting: list[WindowReport] = []  # windows done, whose last records are in the open transaction

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
        request, filters, producer, w = self.request, self.request.filters, self.producer, src.window
        rep = WindowReport(w, request.dry_run, archived=src.record_count or 0)
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
        done = self.ledger.get(sp, RangeSet())
        check_done = any(a < scope[1] and scope[0] < b for a, b in done.ranges())  # else no record is in it
        has_time = filters.has_time
        # `same` routes everything to sp: counted once at the end instead of per record
        route = None if request.mapping.mode == "same" else self.route
        counts = rep.partitions
        topic, max_txn, provenance_headers = request.target_topic, request.transaction_records, \
            request.provenance_headers
        lo, hi = scope
        seg_start, last, tp = lo, -1, sp
        archived = restored = skipped = filtered = nbytes = replaced = 0
        provenance = [(PROVENANCE_TOPIC, request.source_topic.encode()), (PROVENANCE_PARTITION, str(sp).encode())]
        kproduce = producer.producer.produce if producer is not None else None
        faulty = self.fault is not no_fault
        n_txn = self.txn_records  # records in the open transaction (kept in a local: this loop is per record)
        for _p, offset, key, value, headers, ts, size in src.records():
            last = offset
            archived += 1
            if not lo <= offset < hi:
                filtered += 1  # also records past a foreign window's end: the next object holds them too
                continue
            if check_done and offset in done:
                skipped += 1
                continue
            if has_time and not filters.time_ok(ts):
                filtered += 1
                continue
            if size is None:
                size = record_bytes(key, value, headers)
            if route is not None:
                tp = route(sp, key)
                c = counts.get(tp)
                if c is None:
                    c = counts[tp] = PartitionCount()
                c.records += 1
                c.bytes += size
            restored += 1
            nbytes += size
            if ts <= 0:
                replaced += 1
            if kproduce is None:
                continue
            if provenance_headers:
                headers = headers + provenance + [(PROVENANCE_OFFSET, str(offset).encode())]
            if n_txn == 0:
                producer.begin()
                self.txn_sp, self.txn_t0 = sp, time.monotonic()
            try:
                # timestamp 0 means "now" to librdkafka: timestamps <= 0 cannot be kept (counted above)
                kproduce(topic, value, key, partition=tp, headers=headers or None, timestamp=ts if ts > 0 else 0)
            except BufferError:  # the local queue is full: the slow path lets it drain
                producer.produce(tp, key, value, headers, ts)
            except KafkaException as e:
                raise producer.failed("producing to", e) from None
            n_txn += 1
            if faulty:  # skip building the step name per record in real runs
                self.produced += 1
                self.fault(f"produced:{self.produced}")
            # Bounded transactions: a crash loses little work, and none nears transaction.timeout.ms (the clock
            # is read every 256 records).
            if n_txn >= max_txn or ((n_txn & 255) == 0 and time.monotonic() - self.txn_t0 > TRANSACTION_SECONDS):
                self.txn_ranges.add(seg_start, offset + 1)
                self.txn_records = n_txn
                ready += self._commit(rep)
                seg_start, n_txn = offset + 1, 0
        self.txn_records = n_txn
        if not faulty:
            self.produced += restored if kproduce is not None else 0
        if route is None and restored:
            counts[sp] = PartitionCount(restored, nbytes)
        rep.filtered, rep.skipped, rep.restored, rep.bytes, rep.timestamps_replaced = \
            filtered, skipped, restored, nbytes, replaced
        if src.record_count is None:
            rep.archived = archived
        if producer is not None:
            # The rest of the scope (incl. offsets with no record) is done once the window's records are in; an
            # open-ended window only up to its last record (later records may still be written by the sink).
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
