"""What the Dagster UI shows of a `Definitions`, as plain JSON: every asset (partitions, group, kinds, code version,
deps, automation, metadata), every check, sensor, schedule and job. Compared against a committed snapshot, it shows
a refactor's effect on the UI; compared before and after a reload, it shows that nothing moved."""

from __future__ import annotations

import json
from typing import Any

import dagster as dg


def _plain(value: Any) -> Any:
    value = getattr(value, "value", value)  # MetadataValue -> its value
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)


def _partitions(spec: dg.AssetSpec) -> str | None:
    p = spec.partitions_def
    if p is None:
        return None
    return p.name if isinstance(p, dg.DynamicPartitionsDefinition) else type(p).__name__


def describe_definitions(defs: dg.Definitions) -> dict[str, Any]:
    graph = defs.resolve_asset_graph()
    repo = defs.get_repository_def()
    assets = {}
    for spec in sorted(defs.resolve_all_asset_specs(), key=lambda s: s.key.to_user_string()):
        assets[spec.key.to_user_string()] = {
            "partitions": _partitions(spec),
            "group": spec.group_name,
            "kinds": sorted(spec.kinds),
            "code_version": spec.code_version,
            "deps": sorted(d.asset_key.to_user_string() for d in spec.deps),
            "automation": spec.automation_condition.get_label() if spec.automation_condition else None,
            "metadata": {k: _plain(v) for k, v in sorted(spec.metadata.items())},
        }
    checks = sorted(f"{k.asset_key.to_user_string()}:{k.name}" for k in graph.asset_check_keys)
    sensors = {}
    for s in sorted(repo.sensor_defs, key=lambda s: s.name):
        targets = sorted(k.to_user_string() for k in s.asset_selection.resolve(graph)) if s.asset_selection else []
        sensors[s.name] = {"default_status": s.default_status.value, "minimum_interval_seconds":
                           s.minimum_interval_seconds, "targets": targets,
                           "jobs": sorted(j.name for j in s.jobs) if s.has_jobs else []}
    schedules = {s.name: {"cron": s.cron_schedule, "timezone": s.execution_timezone,
                          "default_status": s.default_status.value, "job": s.job_name}
                 for s in sorted(repo.schedule_defs, key=lambda s: s.name)}
    jobs = sorted(n for n in repo.job_names if not n.startswith("__"))  # not Dagster's implicit asset job
    return {"assets": assets, "checks": checks, "sensors": sensors, "schedules": schedules, "jobs": jobs,
            "resources": sorted(defs.resources or {})}
