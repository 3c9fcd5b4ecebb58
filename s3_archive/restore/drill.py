"""The restore drill (docs/compliance.md): a rotating sample of committed windows restored into a scratch topic by the
restore's own path (restore/run.py: the transactional producer and its ledger), read back (read_committed) and
compared record by record with the archive, read again and decoded here with each object's SHA-256 checked against
its manifest. The restore's seconds per GB are the RTO evidence. The choices (which windows, when, what differs)
are restore/drill_plan.py's.

A created scratch topic and the restore's ledger (a consumer group) are deleted after every drill, passed or not.
Where the rotation is, when the last drill ran and whether it passed are kept in the bucket,
`<prefix>_drill/<topic>.json`, written with a conditional PUT (two drills at once: the second one's state is not
saved).
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic

from s3_archive.config.archive import ArchiveConfig
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.s3 import S3Client, put_state, read_manifest, read_state
from s3_archive.keys.objects import drill_state_key, manifest_key
from s3_archive.model.errors import KafkaUnavailable
from s3_archive.model.logger import Logger
from s3_archive.model.manifest import Manifest, ManifestObject
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.drill_plan import (
    Archived,
    DrillReport,
    DrillState,
    Restored,
    first_mismatch,
    sample,
    scratch_topic_name,
    stale_scratch_topics,
)
from s3_archive.restore.request import Filters, RestoreContext, RestoreRequest, ledger_id
from s3_archive.restore.run import restore_windows
from s3_archive.restore.sources import ArchiveSource, archived_windows, splits_windows, spool, window_batches

READ_BACK_SECONDS = 120.0  # reading a partition back stops when no record came for this long


class _Drill:
    """One drill's run: its sample, scratch topic and findings."""

    def __init__(self, kafka: KafkaResource, s3: S3Client, cfg: ArchiveConfig, topic: str, log: Logger) -> None:
        self.kafka, self.s3, self.cfg, self.topic, self.log = kafka, s3, cfg, topic, log
        self.manifests: dict[OffsetWindow, Manifest] = {}

    def size(self, w: OffsetWindow) -> int:
        """The window's object bytes, from its manifest (read once; a window with none counts 0 and fails later)."""
        if w not in self.manifests:
            m = read_manifest(self.s3, self.cfg.bucket, manifest_key(self.cfg.prefix, self.topic, w))
            if m is None:
                return 0
            self.manifests[w] = m
        m = self.manifests[w]
        return sum(o.size for o in m.all_objects)

    def scratch(self, rep: DrillReport, partitions: int) -> bool:
        """Create the scratch topic (unless one is configured); True when this drill created it."""
        configured = self.cfg.drill.scratch_topic if self.cfg.drill else None
        if configured is not None:
            rep.scratch_topic = configured
            return False
        now = datetime.now(UTC)
        rep.scratch_topic = scratch_topic_name(self.topic, now)
        admin = self.kafka.admin()
        for stale in stale_scratch_topics(self.kafka.topics(), self.topic, now):
            self.log.warning(f"drill: deleting {stale!r}, the scratch topic of a drill that did not finish")
            self.clean_up(stale, True, ledger_id(self.topic, stale, Filters()))
        try:
            # Replication: the cluster's default (-1). No retention: restored records keep their old timestamps, which
            # a time-based retention would delete at once; the topic goes with the drill.
            admin.create_topics([NewTopic(rep.scratch_topic, partitions, -1, config={"retention.ms": "-1"})])[
                rep.scratch_topic].result(
                timeout=self.kafka.timeout_s + 15)
        except KafkaException as e:
            raise self.kafka.unavailable(e, admin, f"creating the drill's scratch topic {rep.scratch_topic!r}") from e
        self._wait_for_leaders(rep.scratch_topic, partitions)
        return True

    def _wait_for_leaders(self, topic: str, partitions: int) -> None:
        deadline = time.monotonic() + self.kafka.timeout_s
        while time.monotonic() < deadline:
            md = self.kafka.admin().list_topics(topic=topic, timeout=self.kafka.timeout_s).topics.get(topic)
            if md is not None and md.error is None and len(md.partitions) == partitions \
                    and all(p.leader >= 0 for p in md.partitions.values()):
                return
            time.sleep(0.1)

    def clean_up(self, topic: str | None, created: bool, ledger: str) -> None:
        """Delete the restore's ledger (a consumer group) and a created scratch topic; a failure is logged, not
        raised (the drill's verdict stands; the next drill deletes a scratch topic left over)."""
        admin, wait = self.kafka.admin(), self.kafka.timeout_s
        try:
            admin.delete_consumer_groups([ledger], request_timeout=wait)[ledger].result(timeout=wait + 5)
        except KafkaException as e:
            err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
            if err is None or err.code() != KafkaError.GROUP_ID_NOT_FOUND:
                self.log.warning(f"drill: the restore ledger {ledger!r} (a consumer group) was not deleted: {e}")
        if created and topic is not None:
            try:
                admin.delete_topics([topic], request_timeout=wait)[topic].result(timeout=wait + 5)
            except KafkaException as e:
                self.log.warning(f"drill: the scratch topic {topic!r} was not deleted: {e}; the next drill deletes "
                                 "it a day after it was made")

    def archived(self, w: OffsetWindow, problems: list[str]) -> Iterator[Archived]:
        """The window's records as archived, read here again: each object's bytes hashed against its manifest's
        SHA-256 (a changed object is a problem, naming it), an object that cannot be read or decoded raises
        `Unreadable` naming it."""
        m, bucket = self.manifests[w], self.cfg.bucket
        opened: list[str] = []

        def opener(obj: ManifestObject) -> Any:
            opened.append(obj.key)
            f = spool(self.s3, bucket, obj)
            if obj.sha256:
                h = hashlib.sha256()
                while chunk := f.read(1 << 20):
                    h.update(chunk)
                f.seek(0)
                if h.hexdigest() != obj.sha256:
                    problems.append(f"window {w.key}: changed s3://{bucket}/{obj.key}: its bytes hash to "
                                    f"{h.hexdigest()}, the manifest recorded {obj.sha256}")
            return f

        try:
            for batch in window_batches(self.s3, bucket, w, m, splits_windows(self.cfg), opener):
                for r in batch.records():
                    yield Archived(w, r.offset, r.key, r.value, [(k, v) for k, v in r.headers], r.timestamp_ms)
        except (KafkaUnavailable, KafkaException):
            raise
        except Exception as e:  # noqa: BLE001 - any reader's error: the object is not restorable as it is
            where = f"s3://{bucket}/{opened[-1]}" if opened else f"the objects of window {w.key}"
            raise Unreadable(f"window {w.key}: {where} could not be read: {type(e).__name__}: {e}") from e

    def read_back(self, scratch: str, partition: int, start: int, end: int) -> Iterator[Restored]:
        """The scratch partition's committed records at offsets [start, end)."""
        if end <= start:
            return
        from confluent_kafka import Consumer

        consumer = Consumer(self.kafka.client_config(**{
            "group.id": f"s3-archive-drill-{uuid.uuid4().hex}", "enable.auto.commit": False,
            "isolation.level": "read_committed", "auto.offset.reset": "earliest", "enable.partition.eof": True}))
        try:
            consumer.assign([TopicPartition(scratch, partition, start)])
            quiet_since = time.monotonic()
            while time.monotonic() - quiet_since < READ_BACK_SECONDS:
                for msg in consumer.consume(10_000, timeout=1.0):
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            # read_committed: the end is the last stable offset, which reaches `end` once the
                            # restore's commit markers are written
                            if consumer.position([TopicPartition(scratch, partition)])[0].offset >= end:
                                return
                            continue
                        raise KafkaUnavailable(f"reading the scratch topic {scratch!r} back: {err.str()}")
                    if msg.offset() >= end:
                        return
                    quiet_since = time.monotonic()
                    yield Restored(msg.offset(), msg.key(), msg.value(), list(msg.headers() or []),
                                   msg.timestamp()[1])
            raise KafkaUnavailable(f"reading the scratch topic {scratch!r} partition {partition} back: no record "
                                   f"for {READ_BACK_SECONDS:.0f} s before offset {end}")
        finally:
            consumer.close()


class Unreadable(Exception):
    """An archived object the drill could not read or decode."""


def drill_topic(kafka: KafkaResource, s3: S3Client, cfg: ArchiveConfig, topic: str, log: Logger,
                now: datetime | None = None, force: bool = False) -> DrillReport:
    """The topic's drill, when one is due (`force`: now anyway): the next windows of the rotation within
    `drill.bytes_per_run` restored into the scratch topic, read back and compared with the archive. Its state is
    saved after a drill that ran."""
    assert cfg.drill is not None, "drill_topic needs the archive's drill settings"
    now = now or datetime.now(UTC)
    key = drill_state_key(cfg.prefix, topic)
    body, etag = read_state(s3, cfg.bucket, key)
    state = DrillState.parse(body)
    rep = DrillReport(topic, cfg.bucket, 0, state_key=key, last_drill=state.last_drill)
    if not force and not state.due(now, cfg.drill.every_days):
        rep.next_due = state.next_due(cfg.drill.every_days)
        return rep
    windows = archived_windows(s3, cfg.bucket, cfg.prefix, topic)
    rep.windows = len(windows)
    if not windows:
        return rep  # nothing committed yet: nothing to drill, and no drill is recorded
    drill = _Drill(kafka, s3, cfg, topic, log)
    picked, state.cursor = sample(windows, state.cursor, drill.size, cfg.drill.bytes_per_run)
    _run(drill, rep, [w for w in picked if w in drill.manifests])
    gone = [w.key for w in picked if w not in drill.manifests]
    rep.problems += [f"window {k}: its manifest was listed, but gone when read" for k in gone]
    state.last_drill, state.last_passed = now.isoformat(), not rep.problems
    put_state(s3, cfg.bucket, key, state.dumps(), etag)
    return rep


def _run(drill: _Drill, rep: DrillReport, picked: list[OffsetWindow]) -> None:
    """Restore `picked`, read it back, compare; the findings go to `rep.problems`."""
    if not picked:
        return
    kafka, cfg, topic = drill.kafka, drill.cfg, drill.topic
    rep.drilled = [w.key for w in picked]
    rep.object_bytes = sum(drill.size(w) for w in picked)
    parts = sorted({w.partition for w in picked})
    created = False
    try:
        created = drill.scratch(rep, parts[-1] + 1)
        scratch = rep.scratch_topic
        assert scratch is not None
        request = RestoreRequest(source_topic=topic, target_topic=scratch)
        if not created:
            drill.clean_up(None, False, request.ledger_id)  # a configured topic's ledger of an earlier drill
        starts = kafka.offsets(scratch, "latest", parts)
        t0 = time.monotonic()
        restore_error = None
        try:
            for r in restore_windows(RestoreContext(kafka, drill.s3, drill.log),
                                     ArchiveSource(cfg.bucket, cfg.prefix, splits_windows(cfg)), request, picked):
                rep.records += r.restored
                rep.record_bytes += r.bytes
        except (KafkaUnavailable, KafkaException):
            raise
        except Exception as e:  # noqa: BLE001 - the drill's finding: the restore of these windows fails
            restore_error = f"the restore of window(s) {', '.join(rep.drilled[:5])} failed: {type(e).__name__}: {e}"
        rep.restore_seconds = time.monotonic() - t0
        if restore_error is not None:
            rep.problems.append(restore_error)
        # The high watermarks: every record the restore produced is below them. Its last commit markers may still be
        # on their way (a commit returns before they are written), so reading back waits for them (read_back).
        ends = kafka.offsets(scratch, "latest", parts)
        for p in parts:
            _compare(drill, rep, [w for w in picked if w.partition == p], scratch, starts[p], ends[p],
                     restore_error is None)
    finally:
        if rep.scratch_topic is not None:
            drill.clean_up(rep.scratch_topic, created, ledger_id(topic, rep.scratch_topic, Filters()))


def _compare(drill: _Drill, rep: DrillReport, windows: list[OffsetWindow], scratch: str, start: int, end: int,
             restored_ok: bool) -> None:
    """One source partition: its windows' records as archived against the scratch partition's. After a failed
    restore the archive is still read (to name an object that cannot be read), and nothing is compared."""

    def archived() -> Iterator[Archived]:
        for w in windows:
            yield from drill.archived(w, rep.problems)

    try:
        if not restored_ok:
            for _ in archived():
                pass
            return
        back = drill.read_back(scratch, windows[0].partition, start, end)
        mismatch, n = first_mismatch(archived(), back)
        rep.compared += n
        if mismatch is not None:
            rep.problems.append(mismatch.text())
    except Unreadable as e:
        rep.problems.append(str(e))

