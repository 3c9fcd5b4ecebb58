"""A cluster's recovery planned: per topic what is created or what differs on the target (and what is refused),
per consumer group the target offsets its committed source offsets translate to. Pure: the run
(recovery/recover.py) reads the captures, the target and the offset maps and hands them here."""

from __future__ import annotations

from dataclasses import dataclass, field

from s3_archive.io.cluster_admin import TopicShape
from s3_archive.recovery.snapshots import TopicCapture
from s3_archive.restore.offset_map import Run, translate

# Settings of an existing target topic that change the restored records: compaction keeps only a key's last
# record, LogAppendTime replaces every archived timestamp. Defaults when a topic does not set them.
RECORD_CHANGING = {"cleanup.policy": "delete", "message.timestamp.type": "CreateTime"}


@dataclass
class TopicPlan:
    topic: str
    action: str  # "create", "exists" or "refused"
    partitions: int  # on the target (created with, or as it is)
    configs: dict[str, str]  # the captured non-default configs
    differs: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)  # name -> (captured, target)
    remapped: bool = False  # the target's partition count differs: murmur2 remap, groups not translated
    reason: str = ""

    def line(self) -> str:
        if self.action == "create":
            return (f"topic {self.topic!r}: create with {self.partitions} partitions"
                    + (f" and {self.configs}" if self.configs else "") + (" (murmur2 remap)" if self.remapped else ""))
        if self.action == "refused":
            return f"topic {self.topic!r}: REFUSED: {self.reason}"
        diff = "; ".join(f"{k}: captured {a!r}, target {b!r}" for k, a, b in
                         ((k, *v) for k, v in sorted(self.differs.items())))
        return (f"topic {self.topic!r}: exists with {self.partitions} partitions"
                + (f", differs ({diff}; left as it is)" if diff else ", as captured")
                + (" (murmur2 remap)" if self.remapped else ""))


def plan_topic(captured: TopicCapture, target: TopicShape | None, allow_changes: bool,
               partitions: int | None = None) -> TopicPlan:
    """`partitions`: a partition count other than the captured one, asked for (records are remapped with murmur2,
    and the groups' offsets of the topic cannot be translated)."""
    want = partitions or captured.partitions
    if target is None:
        return TopicPlan(captured.topic, "create", want, dict(captured.configs), remapped=want != captured.partitions)
    differs = {k: (captured.configs.get(k), target.configs.get(k))
               for k in sorted(set(captured.configs) | set(target.configs))
               if captured.configs.get(k) != target.configs.get(k)}
    plan = TopicPlan(captured.topic, "exists", target.partitions, dict(captured.configs), differs,
                     remapped=target.partitions != captured.partitions)
    changing = [f"{k}={target.configs.get(k, d)!r} (captured {captured.configs.get(k, d)!r})"
                for k, d in RECORD_CHANGING.items() if captured.configs.get(k, d) != target.configs.get(k, d)]
    if changing and not allow_changes:
        plan.action = "refused"
        plan.reason = (f"the existing target topic has {', '.join(changing)}, which changes the restored records; "
                       "delete the topic, or set allow_config_changes: true to restore into it anyway")
    elif plan.remapped and partitions != target.partitions:
        plan.action = "refused"
        plan.reason = (f"the existing target topic has {target.partitions} partitions, the captured one "
                       f"{captured.partitions}; set partitions {{{captured.topic}: {target.partitions}}} to restore "
                       "with the murmur2 remap (its consumer groups' offsets are then not translated)")
    return plan


@dataclass(frozen=True)
class PartitionMap:
    """One target partition's resolved runs (restore/offset_map.py::resolve), where its restored records end, or
    why its offsets cannot be translated."""

    runs: tuple[Run, ...] = ()
    end: int = 0
    problem: str = ""


@dataclass
class GroupPlan:
    group: str
    offsets: dict[str, dict[int, int]] = field(default_factory=dict)  # topic -> partition -> target offset
    source: dict[str, dict[int, int]] = field(default_factory=dict)  # what it committed on the lost cluster
    skipped: list[str] = field(default_factory=list)  # why a topic or partition is not set
    refused: str = ""

    def line(self) -> str:
        if self.refused:
            return f"group {self.group!r}: REFUSED: {self.refused}"
        parts = [f"{t}[{p}] {self.source.get(t, {}).get(p)} -> {o}" for t, ps in sorted(self.offsets.items())
                 for p, o in sorted(ps.items())]
        return (f"group {self.group!r}: " + (", ".join(parts) or "nothing to set")
                + ("".join(f"; {s}" for s in self.skipped)))


def translate_group(group: str, committed: dict[str, dict[int, int]],
                    maps: dict[str, dict[int, PartitionMap] | str]) -> GroupPlan:
    """The target offsets of `group`'s committed source offsets (topic -> partition -> offset); `maps[topic]` is
    each partition's map, or why the topic's offsets cannot be translated (not restored, remapped)."""
    plan = GroupPlan(group, source={t: dict(ps) for t, ps in committed.items()})
    for topic, parts in sorted(committed.items()):
        found = maps.get(topic, f"topic {topic!r} is not part of this recovery")
        if isinstance(found, str):
            plan.skipped.append(f"{topic}: {found}")
            continue
        for p, x in sorted(parts.items()):
            pm = found.get(p)
            if pm is None or pm.problem:
                plan.skipped.append(f"{topic}[{p}]: {pm.problem if pm else 'no such partition on the target'}")
                continue
            plan.offsets.setdefault(topic, {})[p] = translate(pm.runs, x, pm.end)
    return plan
