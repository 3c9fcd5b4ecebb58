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

Parallel. A run has up to `producers` transactional producers side by side (restore/groups.py), each owning the
source partitions of whole ledger entries, each a `RestoreRun` (restore/group_run.py) in a thread of its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor

from s3_archive.io.kafka import KafkaResource
from s3_archive.model.logger import Logger
from s3_archive.model.manifest import Manifest
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.batch import Records, WindowReads, WindowSource
from s3_archive.restore.cold import COLD_CLASSES, ColdOptions, head_storage_classes, prepare_cold
from s3_archive.restore.group_run import (
    Progress,
    RestoreRun,
    Stopped,
    group_reads,
    new_ledger_store,
    open_producer,
)
from s3_archive.restore.groups import plan_groups, transactional_ids
from s3_archive.restore.ledger import RangeSet
from s3_archive.restore.offset_map_store import OffsetMapStore
from s3_archive.restore.producer import Producer
from s3_archive.restore.request import (
    NO_HOOKS,
    RestoreContext,
    RestoreHooks,
    RestoreRequest,
    WindowReport,
)
from s3_archive.restore.sources import (
    ArchiveSource,
    Prefetch,
    check_restorable,
    read_manifests,
    window_batches,
    window_objects,
)
from s3_archive.restore.target_topic import retention_warning, target_checks, target_partition_count

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

    prefetch = Prefetch(s3, bucket, [(m.partition, o) for m in to_read for o in window_objects(m)])

    schemas = ctx.schemas
    ids = {w: schemas.id_map(s3, bucket, w, manifests[w], request.target_topic)
           for w in ws} if schemas is not None and not request.dry_run else {}

    def source(w: OffsetWindow, m: Manifest) -> WindowSource:
        def batches() -> Iterator[Records]:
            read = window_batches(s3, bucket, w, m, archive.interleaved, prefetch)
            return schemas.rewritten(w, read, ids[w], request.target_topic) if schemas is not None and w in ids \
                else read

        objs = window_objects(m)
        return WindowSource(w, batches, m.record_count, m.min_timestamp_ms, m.max_timestamp_ms, objects=len(objs),
                            erased=m.erased_count, prefetch=(lambda: prefetch.ahead(objs[0])) if objs else None)

    try:
        yield from restore_sources(ctx, request, [source(w, manifests[w]) for w in ws], on_ledger, hooks)
    finally:
        prefetch.close()


def restore_sources(ctx: RestoreContext, request: RestoreRequest, sources: Iterable[WindowSource],
                    on_ledger: LedgerSeen | None = None, hooks: RestoreHooks = NO_HOOKS) -> Iterator[WindowReport]:
    """The restore itself, for windows from any archive: the ledger, and up to `request.producers` transactional
    producers side by side, each producing the windows of its source partitions in (partition, start) order
    (restore/groups.py)."""
    kafka, log = ctx.kafka, ctx.log
    srcs = sorted(sources, key=lambda s: s.window)
    num_target = target_partition_count(kafka, request.target_topic)
    request.mapping.check({s.window.partition for s in srcs}, num_target, request.target_topic)
    target, parts = request.target_topic, list(range(num_target))
    plan = plan_groups({s.window.partition for s in srcs}, num_target, request.producers) or {0: []}
    with ThreadPoolExecutor(3, thread_name_prefix="s3-archive-restore-setup") as pool:
        # Admin round trips that need not wait for each other run beside the producers' init_transactions and
        # the ledger's read (which must follow them); the target's offsets are only used when there is no ledger.
        checks = pool.submit(target_checks, kafka, target, [{"min_timestamp_ms": s.min_timestamp_ms} for s in srcs])
        earliest = pool.submit(kafka.offsets, target, "earliest", parts)
        latest = pool.submit(kafka.offsets, target, "latest", parts)
        srcs = watch_retention(srcs, target, lambda: checks.result()[1], log)
        by_group = {g: [s for s in srcs if s.window.partition in plan[g]] for g in plan}
        # Each group's reader starts now: its first objects are downloaded and decoded while the producers
        # initialise and the ledger is read (which records are restored is decided batch by batch, from the ledger).
        reads = {g: group_reads(request, by_group[g]) for g in plan}
        store = None if request.dry_run else ctx.offset_map
        try:
            runs = start_groups(kafka, request, num_target, hooks, reads, store)
        except BaseException:
            for r in reads.values():
                r.close()
            raise
        try:
            first = next(iter(runs.values()))
            ledger = first.ledger_store.read()  # after init_transactions: no transaction of ours is pending now
            for run in runs.values():
                run.ledger = {p: rs.copy() for p, rs in ledger.items()}
            if on_ledger is not None:
                on_ledger({p: rs.copy() for p, rs in ledger.items()})
            warnings, _ = checks.result()
            for warning in warnings:
                log.warning(warning)
            if not ledger:
                ends, starts = latest.result(), earliest.result()
                present = sum(ends[p] - starts.get(p, 0) for p in ends)
                if present > 0:
                    log.warning(f"target topic {target!r} already holds up to {present} records, but no ledger of "
                                f"this restore exists (consumer group {request.ledger_id!r}). If they came from an "
                                "earlier run of this restore whose ledger expired (offsets.retention.minutes), this "
                                "run restores them again")
        except BaseException:
            close_all(runs, log)
            raise
    try:
        log.info(f"restore {request.ledger_id}: {len(srcs)} windows into {request.target_topic!r} ({num_target} "
                 f"partitions, mapping {request.mapping.mode}, {len(runs)} producer(s)); the ledger already covers "
                 f"{sum(rs.size() for rs in ledger.values())} source offsets"
                 + (" [dry run]" if request.dry_run else ""))
        with older_objects_frozen():
            if len(runs) == 1:
                yield from first.restore(kafka, by_group[next(iter(runs))], log)
            else:
                yield from run_groups(kafka, runs, {g: by_group[g] for g in runs}, log)
    except BaseException:
        # A failure or an interruption (Dagster's run termination) aborts at once, so read_committed consumers of the
        # target are not held back until the transaction times out. (A killed process cannot: the next run's
        # init_transactions aborts its transaction.)
        close_all(runs, log)
        raise
    for run in runs.values():
        run.release()


def start_groups(kafka: KafkaResource, request: RestoreRequest, num_target: int, hooks: RestoreHooks,
                 reads: dict[int, WindowReads], map_store: OffsetMapStore | None = None) -> dict[int, RestoreRun]:
    """One `RestoreRun` per group of `reads` (each group's windows, already being read; a run owns its reader
    from here on, the caller closes those of groups that got none). Unless a dry run, every transactional id of
    the restore is initialised first, in parallel (`init_transactions` aborts what a crashed run left open under it
    and fences any other run); the ids of groups this run does not have are closed right after. With `map_store`,
    each group records its offset map (restore/offset_map.py) with its own recorder: the groups own disjoint source
    partitions."""
    progress = Progress()
    groups = list(reads)
    if request.dry_run:
        return {g: RestoreRun(kafka, request, num_target, hooks, progress=progress).read_from(reads[g])
                for g in groups}
    ids = transactional_ids(request.ledger_id, num_target)
    # the groups' ledger consumers connect (and find the group's coordinator) while the producers initialise
    stores = {g: new_ledger_store(kafka, request, num_target) for g in groups}
    with ThreadPoolExecutor(len(ids), thread_name_prefix="s3-archive-restore-init") as pool:
        futures = [pool.submit(open_producer, kafka, request, t, map_store is not None) for t in ids]
        producers: list[Producer | None] = []
        error: BaseException | None = None
        for fut in futures:
            try:
                producers.append(fut.result())
            except BaseException as e:  # noqa: BLE001 - raised below, once every producer is closed
                producers.append(None)
                error = error or e
    runs: dict[int, RestoreRun] = {}
    for g, (t, producer) in enumerate(zip(ids, producers)):
        if producer is None:
            continue
        if g in groups and error is None:
            runs[g] = RestoreRun(kafka, request, num_target, hooks, t, producer, progress, stores.pop(g)).read_from(
                reads[g])
            if map_store is not None:
                runs[g].map_sink = map_store.recorder(request.source_topic, request.ledger_id)
        else:
            producer.close()
    for store in stores.values():  # the groups that have no run (an error)
        store.close()
    if error is not None:
        close_all(runs, None)
        raise error
    return runs


def run_groups(kafka: KafkaResource, runs: dict[int, RestoreRun], srcs: dict[int, list[WindowSource]],
               log: Logger) -> Iterator[WindowReport]:
    """The groups side by side, one thread each (the client's calls and Arrow's decoding release the GIL); their
    reports as they come. The first group to fail stops the others at their next batch; its error is raised once
    every group has stopped (the caller then aborts their open transactions)."""
    out: queue.Queue = queue.Queue()
    progress = next(iter(runs.values())).progress

    def work(g: int) -> None:
        try:
            for rep in runs[g].restore(kafka, srcs[g], log):
                out.put(rep)
        except BaseException as e:  # noqa: BLE001 - raised in the caller's thread
            progress.stop.set()
            out.put(e)
            return
        out.put(None)

    threads = [threading.Thread(target=work, args=(g,), name=f"s3-archive-restore-group-{g}", daemon=True)
               for g in runs]
    for t in threads:
        t.start()
    left, error = len(threads), None
    try:
        while left:
            item = out.get()
            if isinstance(item, WindowReport):
                yield item
                continue
            left -= 1
            if isinstance(item, BaseException) and (error is None or isinstance(error, Stopped)):
                error = item
        if error is not None:
            raise error
    finally:
        progress.stop.set()
        for t in threads:
            t.join()


def close_all(runs: dict[int, RestoreRun], log: Logger | None) -> None:
    """After a failure: every group's open transaction aborted, its producer and ledger consumer closed."""
    for run in runs.values():
        if log is None:
            run.release()
        else:
            run.close(log)


def watch_retention(srcs: list[WindowSource], target: str, retention_ms: int | Callable[[], int],
                    log: Logger) -> list[WindowSource]:
    """Sources whose oldest record is only known once read (a sink's objects) are watched as they are read: the
    first batch older than the target's retention gets the warning our archives get before the run (once).
    `retention_ms`: the target's, or how to get it (asked at the first batch watched: the readers start before the
    target's config is read)."""
    if all(s.min_timestamp_ms is not None for s in srcs) or (isinstance(retention_ms, int) and retention_ms < 0):
        return srcs
    said: list[bool] = []

    def watched(src: WindowSource) -> Iterator[Records]:
        batches = src.batches()
        try:
            for batch in batches:
                if not said and len(batch):
                    retention = retention_ms if isinstance(retention_ms, int) else retention_ms()
                    # timestamps <= 0 are replaced with "now" by librdkafka: not at risk
                    oldest = min((t for t in batch.timestamps if t > 0), default=None)
                    if retention >= 0 and oldest is not None and oldest < time.time() * 1000 - retention:
                        said.append(True)
                        log.warning(retention_warning(target, retention, oldest,
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
