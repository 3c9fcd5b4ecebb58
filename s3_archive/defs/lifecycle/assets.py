"""The lifecycle asset: one per archive; reconciles the archive's S3 lifecycle rules with its bucket.

Not partitioned. Runs when first deployed, when the declared rules change (code version), daily at 05:00 UTC, and
on demand. Rules of other owners in the bucket are never changed (s3_archive/lifecycle/).
"""

# No `from __future__ import annotations`: Dagster reads the context and resource annotations at definition time.

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import dagster as dg

from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.lifecycle import LifecyclePolicy
from s3_archive.config.settings import KeyPaths, Settings
from s3_archive.defs.lifecycle.maintenance import build_iceberg_maintenance_assets
from s3_archive.io.s3_resource import S3Resource
from s3_archive.lifecycle.reconcile import reconcile_bucket
from s3_archive.lifecycle.rules import build_rules, check_disjoint, check_table_policy, owner_prefix, policy_for
from s3_archive.model.errors import AwsRequestFailed

LIFECYCLE_PREFIX = "s3_lifecycle"
LIFECYCLE_CRON = "0 5 * * *"  # daily: puts back rules someone removed by hand

# `missing()` (not `newly_missing()`): an asset that is missing when first deployed must run too. A failed run is
# not retried every tick: the condition is handled by the request, and the next trigger is the daily tick.
LIFECYCLE_AUTOMATION = (
    (dg.AutomationCondition.missing() | dg.AutomationCondition.code_version_changed()
     | dg.AutomationCondition.cron_tick_passed(LIFECYCLE_CRON, "UTC")).since_last_handled()
    & ~dg.AutomationCondition.in_progress()
).with_label("on deploy, on change, daily")


def lifecycle_asset_key(archive: str) -> dg.AssetKey:
    return dg.AssetKey([LIFECYCLE_PREFIX, archive])


def desired_rules(cfg: ArchiveConfig, policy: LifecyclePolicy) -> list[dict[str, Any]]:
    return build_rules(cfg.name, cfg.prefix, cfg.topics, policy, locked=cfg.retention_lock is not None)


def build_lifecycle_asset(cfg: ArchiveConfig, policy: LifecyclePolicy) -> dg.AssetsDefinition:
    rules = desired_rules(cfg, policy)
    owner = owner_prefix(cfg.name)
    warnings = policy.warnings()

    @dg.asset(
        key=lifecycle_asset_key(cfg.name),
        automation_condition=LIFECYCLE_AUTOMATION,
        code_version=hashlib.sha256(json.dumps(rules, sort_keys=True).encode()).hexdigest()[:16],
        group_name=f"archive_{cfg.name}",
        kinds={"s3"},
        # Lifecycle writes replace the bucket's whole configuration: archives sharing a bucket should not write at
        # once. Give this pool a limit of 1 in the instance's concurrency settings (the write also re-checks).
        pool=f"s3_lifecycle__{cfg.bucket}",
        metadata={"bucket": cfg.bucket, "rule_id_prefix": owner, "rule_count": len(rules)},
        description=f"S3 lifecycle rules {owner}* of archive {cfg.name!r} in bucket {cfg.bucket}: "
                    f"{len(rules)} rules. Rules of other owners in the bucket are left unchanged.",
    )
    def _lifecycle(context: dg.AssetExecutionContext, s3: S3Resource) -> dg.MaterializeResult:
        for w in warnings:
            context.log.warning(f"archive {cfg.name!r} lifecycle: {w}")
        try:
            result = reconcile_bucket(s3.get_client(), cfg.bucket, rules, owner)
        except AwsRequestFailed as e:
            raise dg.Failure(str(e)) from None
        plan = result.plan
        context.log.info(f"bucket {cfg.bucket}: " + ("wrote lifecycle configuration" if result.written
                                                     else "lifecycle rules already as declared")
                         + f"; added {plan.added}, changed {plan.changed}, removed {plan.removed}")
        return dg.MaterializeResult(metadata={
            "written": result.written,
            "added": dg.MetadataValue.json(plan.added),
            "changed": dg.MetadataValue.json(plan.changed),
            "removed": dg.MetadataValue.json(plan.removed),
            "unchanged": len(plan.unchanged),
            "foreign_rules": len(plan.foreign),
            "rules": dg.MetadataValue.json(rules),
            "warnings": dg.MetadataValue.json(warnings),
        })

    return _lifecycle


def build_lifecycle_assets(settings: Settings, policies: Mapping[str, LifecyclePolicy] | None = None,
                           paths: KeyPaths | None = None) -> list[dg.AssetsDefinition]:
    unknown = sorted(set(policies or {}) - {a.name for a in settings.archives})
    if unknown:
        raise ValueError(f"lifecycle policies for unknown archives {unknown}; archives: "
                         f"{[a.name for a in settings.archives]}")
    check_disjoint(settings, paths)
    for a in settings.archives:
        check_table_policy(a, policy_for(a, policies))
    return [build_lifecycle_asset(a, policy_for(a, policies)) for a in settings.archives]


def build_lifecycle_defs(settings: Settings, policies: Mapping[str, LifecyclePolicy] | None = None,
                         paths: KeyPaths | None = None) -> dg.Definitions:
    """Lifecycle assets of every archive (need the `s3` resource).

    `policies`: archive name -> LifecyclePolicy; an archive not in it uses its `lifecycle` setting or the defaults
    (expire staging after 2 days, abort incomplete uploads after 7; no transitions, no expiration). `paths`: where
    each archive is in the config as loaded (default: in `settings`), for the errors.
    """
    return dg.Definitions(assets=[*build_lifecycle_assets(settings, policies, paths),
                                  *build_iceberg_maintenance_assets(settings.archives)])
