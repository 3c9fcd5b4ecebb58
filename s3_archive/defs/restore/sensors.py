"""The follow sensors: a restore target with `mode: follow` (docs/restore.md, "Following the archive") restores each
window as soon as the archive commits it, with the target's own run (the same ledger, exactly once); a foreign source
with `follow_target_topic` (docs/restore-foreign.md) restores the objects its sink adds, with the source's own run.

Per topic and tick: the windows in creation order, which the archive committed (its materializations) and which
the target restored (its own), and the next range to restore (restore/follow.py). One follow run per topic at a time
(runs of one restore fence each other); a failed one is requested again after RETRY_AFTER_SECONDS. How far the target
is behind is an observation of the target asset, written when it changes.
"""

# No `from __future__ import annotations`: Dagster reads the context annotation at definition time.

import hashlib
import json
import time

import dagster as dg

from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.foreign import ForeignSource
from s3_archive.config.restore import RestoreTarget
from s3_archive.defs.archive.instance import materialization_times, materialized_windows, read_windows
from s3_archive.defs.archive.partitions import RANGE_END, RANGE_START, window_partitions
from s3_archive.defs.restore.foreign_assets import foreign_asset_key
from s3_archive.defs.restore.targets import target_asset_key
from s3_archive.io.s3_resource import S3Resource
from s3_archive.restore.follow import plan_follow

FOREIGN_INTERVAL_SECONDS = 30  # a foreign source's follow sensor (an archive's follows its sensor_interval_seconds)
RETRY_AFTER_SECONDS = 300
FOLLOW_TAG = "s3_archive/follow"  # <target>/<topic> on every follow run
_IN_FLIGHT = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
              dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]


def follow_sensor_name(cfg: ArchiveConfig, t: RestoreTarget) -> str:
    return f"restore_{cfg.name}_{t.name}_follow"


def _restored(instance: dg.DagsterInstance, key: dg.AssetKey, topic: str, keys: list[str]) -> set[str]:
    status = instance.get_status_by_partition(key, keys, window_partitions(topic)) or {}
    return {k for k, s in status.items() if s == dg.AssetPartitionStatus.MATERIALIZED}


def _last_failed(instance: dg.DagsterInstance, tag: str) -> float | None:
    """When the newest follow run ended, if it failed."""
    last = instance.get_run_records(filters=dg.RunsFilter(tags={FOLLOW_TAG: tag}), limit=1)
    if last and last[0].dagster_run.status == dg.DagsterRunStatus.FAILURE:
        return last[0].end_time or 0.0
    return None


def _busy(instance: dg.DagsterInstance, tag: str, now: float) -> str | None:
    """Why no follow run may start now (one is in flight, or the last one failed recently); None: it may."""
    if instance.get_runs(filters=dg.RunsFilter(tags={FOLLOW_TAG: tag}, statuses=_IN_FLIGHT), limit=1):
        return "a follow run is in flight"
    failed = _last_failed(instance, tag)
    if failed is not None and now - failed < RETRY_AFTER_SECONDS:
        return f"the last follow run failed; requested again {RETRY_AFTER_SECONDS}s after it ended"
    return None


def evaluate_follow(context: dg.SensorEvaluationContext, cfg: ArchiveConfig, t: RestoreTarget) -> dg.SensorResult:
    instance, now = context.instance, time.time()
    state: dict[str, dict] = json.loads(context.cursor) if context.cursor else {}
    requests: list[dg.RunRequest] = []
    events: list[dg.AssetObservation] = []
    skipped: list[str] = []
    for topic in (topic for topic in cfg.topics if t.applies_to(topic)):
        key, tag = target_asset_key(t.name, topic), f"{t.name}/{topic}"
        seen = state.setdefault(topic, {"runs": 0, "behind": 0})
        keys = [w.key for w in read_windows(instance, topic)[0]]
        archived = materialized_windows(instance, topic, keys) if keys else set()
        plan = plan_follow(keys, archived, _restored(instance, key, topic, keys))
        if plan.behind != seen["behind"]:
            waiting = [k for k in keys if k in archived and k not in plan.keys]
            oldest = plan.keys[:1] or waiting[:1]
            since = materialization_times(instance, topic, oldest) if oldest else {}
            events.append(dg.AssetObservation(asset_key=key, metadata={
                "follow_windows_behind": plan.behind,
                "follow_lag_seconds": round(max(now - since[oldest[0]].timestamp(), 0.0), 3) if since else 0.0,
                "follow_blocked_by": plan.blocked_by or ""}))
            seen["behind"] = plan.behind
        if not plan.keys:
            continue
        if (why := _busy(instance, tag, now)) is not None:
            skipped.append(f"{topic}: {why}")
            continue
        seen["runs"] += 1
        tags = {FOLLOW_TAG: tag}
        if len(plan.keys) > 1:
            tags |= {RANGE_START: plan.keys[0], RANGE_END: plan.keys[-1]}
        requests.append(dg.RunRequest(run_key=f"{tag}#{seen['runs']}", asset_selection=[key], tags=tags,
                                      partition_key=plan.keys[0] if len(plan.keys) == 1 else None))
        context.log.info(f"{topic}: restoring {len(plan.keys)} window(s) {plan.keys[0]} .. {plan.keys[-1]} into "
                         f"{t.target_for(topic)!r} ({plan.behind} behind)")
    return dg.SensorResult(run_requests=requests, asset_events=events, cursor=json.dumps(state, sort_keys=True),
                           skip_reason=None if requests or events else ("; ".join(skipped) or "caught up"))


def build_follow_sensor(cfg: ArchiveConfig, t: RestoreTarget) -> dg.SensorDefinition:
    topics = [topic for topic in cfg.topics if t.applies_to(topic)]

    @dg.sensor(
        name=follow_sensor_name(cfg, t),
        asset_selection=[target_asset_key(t.name, topic) for topic in topics],
        minimum_interval_seconds=cfg.sensor_interval_seconds,  # as often as the archive's offsets sensor cuts
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Restore target `{t.name}` of archive `{cfg.name}` (mode: follow): restores each window of "
                    f"{', '.join(topics)} into {t.target_topic!r} once the archive commits it, in creation order, "
                    "one run per topic at a time.",
    )
    def _follow(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        return evaluate_follow(context, cfg, t)

    return _follow


def build_follow_sensors(archives: list[ArchiveConfig]) -> list[dg.SensorDefinition]:
    return [build_follow_sensor(a, t) for a in archives for t in a.restore_targets
            if t.mode == "follow" and any(t.applies_to(topic) for topic in a.topics)]


def evaluate_foreign_follow(context: dg.SensorEvaluationContext, source: ForeignSource,
                            s3: S3Resource) -> dg.SensorResult:
    """One listing of the source's prefix: when the objects the restore would read changed since the last run was
    requested (or that run failed RETRY_AFTER_SECONDS ago), request the source's run into `follow_target_topic`;
    the ledger makes it restore only what is new."""
    from s3_archive.restore.foreign_sources import planned_objects

    instance, now, tag = context.instance, time.time(), f"foreign/{source.name}"
    state = json.loads(context.cursor) if context.cursor else {"seen": "", "until": 0.0, "runs": 0, "new": -1}
    listed = planned_objects(s3.get_client(), source)
    modified = {k: t for k, _, t in listed}
    objects = [(k, size) for k, size, _ in listed]
    seen = hashlib.sha256(json.dumps(objects).encode()).hexdigest()
    new = [modified[k] for k, _ in objects if modified[k] > state["until"]]
    events = []
    if len(new) != state["new"]:
        events.append(dg.AssetObservation(asset_key=foreign_asset_key(source.name), metadata={
            "follow_objects": len(objects), "follow_new_objects": len(new),
            "follow_lag_seconds": round(max(now - min(new), 0.0), 3) if new else 0.0}))
        state["new"] = len(new)
    failed = _last_failed(instance, tag)
    retry = failed is not None and now - failed >= RETRY_AFTER_SECONDS
    if not objects or (seen == state["seen"] and not retry):
        return dg.SensorResult(asset_events=events, cursor=json.dumps(state), skip_reason=None if events else
                               "no new object")
    if (why := _busy(instance, tag, now)) is not None:
        return dg.SensorResult(asset_events=events, cursor=json.dumps(state), skip_reason=None if events else why)
    state |= {"seen": seen, "until": max(modified[k] for k, _ in objects), "runs": state["runs"] + 1}
    op = "__".join(foreign_asset_key(source.name).path)
    context.log.info(f"{source.name}: {len(new)} new object(s); restoring into {source.follow_target_topic!r}")
    config = {"ops": {op: {"config": {"target_topic": source.follow_target_topic}}}}
    request = dg.RunRequest(run_key=f"{tag}#{state['runs']}", asset_selection=[foreign_asset_key(source.name)],
                            tags={FOLLOW_TAG: tag}, run_config=config)
    return dg.SensorResult(run_requests=[request], asset_events=events, cursor=json.dumps(state))


def build_foreign_follow_sensor(source: ForeignSource) -> dg.SensorDefinition:
    @dg.sensor(
        name=f"restore_foreign_{source.name}_follow",
        asset_selection=[foreign_asset_key(source.name)],
        minimum_interval_seconds=FOREIGN_INTERVAL_SECONDS,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Foreign source `{source.name}` (follow_target_topic {source.follow_target_topic!r}): lists "
                    f"s3://{source.bucket}/{source.key_prefix} and restores the objects the sink adds, one run at a "
                    "time.",
    )
    def _follow(context: dg.SensorEvaluationContext, s3: S3Resource) -> dg.SensorResult:
        return evaluate_foreign_follow(context, source, s3)

    return _follow


def build_foreign_follow_sensors(sources: list[ForeignSource]) -> list[dg.SensorDefinition]:
    return [build_foreign_follow_sensor(s) for s in sources if s.follow_target_topic is not None]
