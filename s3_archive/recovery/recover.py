"""A cluster's recovery from one archive or several: plan, create the missing topics with their captured shape,
restore every window (the restore's exactly-once run, keeping its offset map), then set each consumer group's
translated offsets. Idempotent: topics are created only when missing, the ledger skips what is restored, and a
group's offsets are set only when they differ; a run killed at any step and run again ends in the same state."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from s3_archive.config.archive import ArchiveConfig
from s3_archive.io.cluster_admin import TopicShape, cluster_id, create_topic, topic_shapes
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.s3 import S3Client, list_objects
from s3_archive.keys.recovery_keys import group_snapshot_prefix, topic_config_prefix
from s3_archive.model.errors import InvalidRestore
from s3_archive.model.logger import Logger
from s3_archive.recovery.recovery_plan import GroupPlan, PartitionMap, TopicPlan, plan_topic, translate_group
from s3_archive.recovery.snapshots import GroupSnapshot, TopicCapture, newest_at
from s3_archive.restore.offset_map import resolve, restored_end, uncovered_by_map
from s3_archive.restore.offset_map_store import OffsetMapStore
from s3_archive.restore.producer import LedgerStore
from s3_archive.restore.request import Filters, RestoreContext, RestoreRequest
from s3_archive.restore.routing import PartitionMapping
from s3_archive.restore.run import restore_windows
from s3_archive.restore.sources import ArchiveSource, archived_windows, splits_windows


@dataclass(frozen=True)
class RecoveryOptions:
    """`apply` False: plan only. `as_of_ms`: the newest group snapshot at or before it, and records before it.
    `partitions`: a partition count per topic other than the captured one (murmur2 remap)."""

    apply: bool = False
    topics: tuple[str, ...] | None = None
    as_of_ms: int | None = None
    allow_config_changes: bool = False
    partitions: dict[str, int] = field(default_factory=dict)
    skip_groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class RecoveryHooks:
    """Tests' lever: `fault(step)` after `topics_created`, `window:<n>` (the n-th window committed), `group:<n>`."""

    fault: Callable[[str], None] = lambda step: None


@dataclass
class RecoveryReport:
    topics: list[TopicPlan] = field(default_factory=list)
    groups: list[GroupPlan] = field(default_factory=list)
    snapshot_ms: int | None = None
    created: list[str] = field(default_factory=list)
    records_restored: int = 0
    windows: int = 0
    groups_set: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.created or self.records_restored or self.groups_set)

    def lines(self) -> list[str]:
        out = [t.line() for t in self.topics] + [g.line() for g in self.groups]
        out.append(f"group snapshot: {self.snapshot_ms}" if self.snapshot_ms is not None else "no group snapshot")
        out.append(f"created {len(self.created)} topics, restored {self.records_restored} records in {self.windows} "
                   f"windows, set {len(self.groups_set)} groups' offsets" if self.changed else "nothing changed")
        return out


def _captured(s3: S3Client, cfg: ArchiveConfig, topic: str, as_of_ms: int | None) -> TopicCapture | None:
    key = newest_at((o["Key"] for o in list_objects(s3, cfg.bucket, topic_config_prefix(cfg.prefix, topic))),
                    as_of_ms)
    if key is None:
        return None
    return TopicCapture.decode(s3.get_object(Bucket=cfg.bucket, Key=key)["Body"].read(), f"s3://{cfg.bucket}/{key}")


def _snapshot(s3: S3Client, cfg: ArchiveConfig, as_of_ms: int | None) -> GroupSnapshot | None:
    key = newest_at((o["Key"] for o in list_objects(s3, cfg.bucket, group_snapshot_prefix(cfg.prefix))), as_of_ms)
    if key is None:
        return None
    return GroupSnapshot.decode(s3.get_object(Bucket=cfg.bucket, Key=key)["Body"].read(), f"s3://{cfg.bucket}/{key}")


class Recovery:
    """One run over `archives` into the `target` cluster."""

    def __init__(self, archives: list[ArchiveConfig], target: KafkaResource, s3: S3Client, log: Logger,
                 options: RecoveryOptions, hooks: RecoveryHooks = RecoveryHooks()) -> None:
        self.target, self.s3, self.log, self.options, self.hooks = target, s3, log, options, hooks
        wanted = set(options.topics) if options.topics is not None else None
        self.topics = {t: cfg for cfg in archives for t in cfg.topics if wanted is None or t in wanted}
        if wanted is not None and wanted - set(self.topics):
            raise InvalidRestore(f"topics {sorted(wanted - set(self.topics))} are not archived topics; the archives "
                                 f"hold {sorted(t for cfg in archives for t in cfg.topics)}")
        self.report = RecoveryReport()
        self.cluster: str | None = None  # the target's id, read once (where its offset maps are kept)

    def run(self) -> RecoveryReport:
        rep = self.report
        captured = self._plan_topics()
        groups, members = self._groups()
        refused = [t.line() for t in rep.topics if t.action == "refused"] + \
                  [f"group {g!r} has members on the target (stop its consumers, or leave it out with skip_groups)"
                   for g in members]
        if not self.options.apply:
            rep.groups = [GroupPlan(g, source=c) for g, c in sorted(groups.items())] + \
                         [GroupPlan(g, refused="it has members on the target") for g in sorted(members)]
            self._translate(groups, plan_only=True)
            return rep
        if refused:
            raise InvalidRestore("the recovery is refused: " + "; ".join(refused) + ". Nothing was changed")
        for plan in rep.topics:
            if plan.action == "create" and create_topic(self.target, plan.topic,
                                                        TopicShape(plan.partitions, plan.configs)):
                rep.created.append(plan.topic)
        self.hooks.fault("topics_created")
        for plan in rep.topics:
            self._restore(plan, captured[plan.topic])
        self._translate(groups, plan_only=False)
        return rep

    def _plan_topics(self) -> dict[str, TopicCapture]:
        names = sorted(self.topics)
        existing = topic_shapes(self.target, names)
        out = {}
        for topic in names:
            cfg = self.topics[topic]
            cap = _captured(self.s3, cfg, topic, self.options.as_of_ms)
            if cap is None:  # archived before the capture existed: its windows say how many partitions it had
                parts = {w.partition for w in archived_windows(self.s3, cfg.bucket, cfg.prefix, topic)}
                cap = TopicCapture(topic, max(parts, default=0) + 1, {}, 0)
                self.log.warning(f"topic {topic!r} has no captured config: created with {cap.partitions} partitions "
                                 "and the target's defaults")
            out[topic] = cap
            self.report.topics.append(plan_topic(cap, existing.get(topic), self.options.allow_config_changes,
                                                 self.options.partitions.get(topic)))
        return out

    def _groups(self) -> tuple[dict[str, dict], list[str]]:
        """group -> topic -> partition -> committed source offset (recovered topics only), and the groups refused
        because they have members on the target."""
        snaps = [s for s in (_snapshot(self.s3, cfg, self.options.as_of_ms)
                             for cfg in {id(c): c for c in self.topics.values()}.values()) if s is not None]
        if snaps:
            self.report.snapshot_ms = min(s.taken_ms for s in snaps)
        out: dict[str, dict] = {}
        for snap in snaps:
            for group, topics in snap.groups.items():
                if group in self.options.skip_groups:
                    continue
                for topic, parts in topics.items():
                    if topic in self.topics:
                        out.setdefault(group, {})[topic] = parts
        members = [g for g in sorted(out) if self.target.group_members(g) > 0]
        for g in members:
            out.pop(g)
        return out, members

    def _restore(self, plan: TopicPlan, cap: TopicCapture) -> None:
        cfg = self.topics[plan.topic]
        windows = archived_windows(self.s3, cfg.bucket, cfg.prefix, plan.topic)
        if not windows:
            return
        ctx = RestoreContext(self.target, self.s3, self.log,
                             offset_map=None if plan.remapped else self._store(cfg))
        for rep in restore_windows(ctx, ArchiveSource(cfg.bucket, cfg.prefix, splits_windows(cfg)),
                                   self._request(plan), windows):
            self.report.records_restored += rep.restored
            self.report.windows += 1
            self.hooks.fault(f"window:{self.report.windows}")

    def _request(self, plan: TopicPlan) -> RestoreRequest:
        return RestoreRequest(plan.topic, plan.topic,
                              mapping=PartitionMapping("murmur2" if plan.remapped else "same"),
                              filters=Filters(to_timestamp_ms=self.options.as_of_ms), allow_source_topic=True)

    def _store(self, cfg: ArchiveConfig) -> OffsetMapStore:
        if self.cluster is None:
            self.cluster = cluster_id(self.target)
        return OffsetMapStore(self.s3, cfg.bucket, cfg.prefix, self.cluster)

    def _maps(self, plan: TopicPlan) -> dict[int, PartitionMap] | str:
        if plan.remapped:
            return "the topic was restored with the murmur2 remap: committed offsets cannot be translated"
        if plan.action == "refused":
            return plan.reason
        request = self._request(plan)
        try:
            parts = self.target.partitions(plan.topic)
        except Exception:  # noqa: BLE001 - not created yet (a plan): translated once restored
            return "not restored yet"
        ledger_store = LedgerStore(self.target, request, len(parts))
        try:
            ledger = ledger_store.read()
        finally:
            ledger_store.close()
        pieces = self._store(self.topics[plan.topic]).pieces(request.ledger_id)
        starts = self.target.offsets(plan.topic, "earliest", parts)
        out = {}
        for p in parts:
            mine = [x for x in pieces if x.source_partition == p and x.target_partition == p]
            done = ledger.get(p)
            if done is None:
                out[p] = PartitionMap(end=starts[p])
                continue
            gaps, inexact = uncovered_by_map(done, mine), [x for x in mine if not x.exact]
            problem = (f"source offsets {gaps} were restored without an offset map" if gaps else
                       "another producer wrote between the restored records" if inexact else "")
            runs = resolve(mine, done)
            out[p] = PartitionMap(tuple(runs), restored_end(runs, starts[p]), problem)
        return out

    def _translate(self, groups: dict[str, dict], plan_only: bool) -> None:
        maps = {t.topic: self._maps(t) for t in self.report.topics}
        plans = [translate_group(g, committed, maps) for g, committed in sorted(groups.items())]
        if plan_only:
            self.report.groups = plans + [g for g in self.report.groups if g.refused]
            return
        self.report.groups = plans
        for plan in plans:
            changed = False
            for topic, offsets in sorted(plan.offsets.items()):
                now = self.target.group_offsets(plan.group, topic, sorted(offsets))
                if now != offsets:
                    self.target.set_group_offsets(plan.group, topic, offsets, note="s3-archive recovery")
                    changed = True
            if changed:
                self.report.groups_set.append(plan.group)
                self.hooks.fault(f"group:{len(self.report.groups_set)}")
