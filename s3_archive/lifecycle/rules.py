"""S3 lifecycle rules of an archive, their reconciliation with the bucket's lifecycle configuration, and the checks
of the config they follow (no archive's rule covers another archive's objects; a table format takes no expiry).

Rules are per topic, never one rule over the whole archive prefix:

    s3-archive:<archive>:data:<topic>       Filter Prefix <prefix><topic>/             transitions, expiration,
                                                                                        abort incomplete uploads
    s3-archive:<archive>:manifests:<topic>  Filter Prefix <prefix>_manifests/<topic>/  expiration only
    s3-archive:<archive>:staging            Filter Prefix <prefix>_staging/            expiration, abort uploads

Why: the archive prefix also holds the manifests, which must stay readable with a plain GET (the commit protocol's
step 1 and the asset checks read them), so they never transition to an archive class; and with `prefix: ""` a
whole-prefix rule would be a whole-bucket rule, touching objects that are not ours. A manifest expires with its
window's data (it is written after the data, so it never outlives it by more than a day).

Reconciliation owns exactly the rules whose ID starts with `s3-archive:<archive>:`. Every other rule of the bucket
(another archive's, another team's) is written back unchanged, in its order. Nothing is written when our rules are
already as declared. Validation follows the constraints S3 documents for transitions (see `LifecyclePolicy`).

"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.lifecycle import LifecyclePolicy
from s3_archive.config.settings import KeyPaths, Settings, config_error
from s3_archive.keys.objects import STAGING, manifest_prefix
from s3_archive.model.formats import FORMATS

MAX_RULES = 1000  # per bucket, S3's limit
MAX_ID = 255
ID_PREFIX = "s3-archive"
NONCURRENT_DAYS = 1  # locked archives: an unlocked noncurrent version (a losing attempt's) is removed after a day


def policy_for(cfg: ArchiveConfig, policies: Mapping[str, LifecyclePolicy] | None = None) -> LifecyclePolicy:
    """Explicit mapping first, then the archive's own (`ArchiveConfig.lifecycle_policy`)."""
    return (policies or {}).get(cfg.name) or cfg.lifecycle_policy


# --- rules (pure) ----------------------------------------------------------------------------------------------


def owner_prefix(archive: str) -> str:
    """Every rule ID of this archive starts with this (names are [a-z0-9_], so ':' cannot occur inside one)."""
    return f"{ID_PREFIX}:{archive}:"


def rule_id(archive: str, kind: str, topic: str | None = None) -> str:
    rid = owner_prefix(archive) + kind + ("" if topic is None else f":{topic}")
    if len(rid) <= MAX_ID:
        return rid
    # Long topic names: keep the ID unique and stable, and still under our owner prefix.
    digest = hashlib.sha256(rid.encode()).hexdigest()[:12]
    return rid[:MAX_ID - len(digest) - 1] + "~" + digest


def _rule(rid: str, prefix: str, **actions: Any) -> dict[str, Any]:
    return {"ID": rid, "Status": "Enabled", "Filter": {"Prefix": prefix},
            **{k: v for k, v in actions.items() if v is not None}}


def build_rules(archive: str, prefix: str, topics: Sequence[str], policy: LifecyclePolicy,
                locked: bool = False) -> list[dict[str, Any]]:
    """The archive's desired rules, as `put_bucket_lifecycle_configuration` takes them, sorted by ID. `locked`
    (`retention_lock`, a versioned bucket): the data rule also removes noncurrent versions a day after they became
    noncurrent: what a losing attempt left (unlocked: the tasks write unlocked, the commit locks). S3 never lets a
    lifecycle rule remove a version before its RetainUntilDate, so a committed window's locked version stays."""
    abort = (None if policy.abort_incomplete_multipart_days is None
             else {"DaysAfterInitiation": policy.abort_incomplete_multipart_days})
    expire = None if policy.expiration_days is None else {"Days": policy.expiration_days}
    transitions = [{"Days": t.days, "StorageClass": t.storage_class} for t in policy.ordered_transitions()] or None
    noncurrent = {"NoncurrentDays": NONCURRENT_DAYS} if locked else None
    rules = []
    for topic in topics:
        if transitions or expire or abort or noncurrent:
            rules.append(_rule(rule_id(archive, "data", topic), f"{prefix}{topic}/", Transitions=transitions,
                               Expiration=expire, AbortIncompleteMultipartUpload=abort,
                               NoncurrentVersionExpiration=noncurrent))
        if expire:
            rules.append(_rule(rule_id(archive, "manifests", topic), manifest_prefix(prefix, topic),
                               Expiration=expire))
    if policy.staging_expiration_days is not None:
        days = policy.staging_expiration_days
        # s3a writes staging parts with multipart uploads: an upload open longer than staging lives is abandoned.
        abort_days = min(days, policy.abort_incomplete_multipart_days or days)
        rules.append(_rule(rule_id(archive, "staging"), f"{prefix}{STAGING}/", Expiration={"Days": days},
                           AbortIncompleteMultipartUpload={"DaysAfterInitiation": abort_days}))
    return sorted(rules, key=lambda r: r["ID"])


def _canonical(value: Any) -> Any:
    """A rule as comparable data: empty fields dropped, transitions in day order, datetimes as text."""
    if isinstance(value, dict):
        out = {k: _canonical(v) for k, v in value.items()}
        out = {k: v for k, v in out.items() if v not in (None, {}, [])}
        if isinstance(out.get("Transitions"), list):
            out["Transitions"] = sorted(out["Transitions"], key=lambda t: json.dumps(t, sort_keys=True))
        return out
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


@dataclass(frozen=True)
class LifecyclePlan:
    """What reconciling would do: the bucket's next rule list (None: nothing to write) and the rule IDs touched."""

    rules: list[dict[str, Any]] | None
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)

    @property
    def needs_write(self) -> bool:
        return bool(self.added or self.changed or self.removed)


def plan_lifecycle(current: Sequence[dict[str, Any]], desired: Sequence[dict[str, Any]], owner: str) -> LifecyclePlan:
    """Pure diff of the bucket's rules against ours. Foreign rules (ID not under `owner`) are kept as they are."""
    bad = [r.get("ID") for r in desired if not str(r.get("ID", "")).startswith(owner)]
    if bad:
        raise ValueError(f"desired rules must have IDs starting with {owner!r}, got {bad}")
    foreign = [r for r in current if not str(r.get("ID", "")).startswith(owner)]
    ours = {r["ID"]: r for r in current if str(r.get("ID", "")).startswith(owner)}
    want = {r["ID"]: r for r in desired}
    added = sorted(set(want) - set(ours))
    removed = sorted(set(ours) - set(want))
    changed = sorted(i for i in set(want) & set(ours) if _canonical(want[i]) != _canonical(ours[i]))
    unchanged = sorted(set(want) & set(ours) - set(changed))
    foreign_ids = [str(r.get("ID", "")) for r in foreign]
    if not (added or removed or changed):
        return LifecyclePlan(None, unchanged=unchanged, foreign=foreign_ids)
    rules = [*foreign, *sorted(desired, key=lambda r: r["ID"])]
    if len(rules) > MAX_RULES:
        raise ValueError(f"the bucket would have {len(rules)} lifecycle rules ({len(foreign)} not ours + "
                         f"{len(desired)} of this archive); S3 allows at most {MAX_RULES}")
    return LifecyclePlan(rules, added, changed, removed, unchanged, foreign_ids)


@dataclass(frozen=True)
class _Scope:
    """One lifecycle rule an archive can have: the prefix it acts on, and on what, in words."""

    archive: ArchiveConfig
    prefix: str
    what: str
    staging: bool


def _scopes(a: ArchiveConfig) -> list[_Scope]:
    # Every rule the archive can have (an expiration gives each kind), per topic so each says whose objects it covers.
    every = LifecyclePolicy(expiration_days=1)
    out = {r["ID"]: _Scope(a, r["Filter"]["Prefix"], "the staging objects", True)
           for r in build_rules(a.name, a.prefix, [], every)}
    for t in a.topics:
        for r in build_rules(a.name, a.prefix, [t], every):
            kind = "manifests" if r["ID"].startswith(owner_prefix(a.name) + "manifests") else "data"
            out.setdefault(r["ID"], _Scope(a, r["Filter"]["Prefix"], f"the {kind} of topic {t!r}", False))
    return list(out.values())


def check_disjoint(settings: Settings, paths: KeyPaths | None = None) -> None:
    """A rule of one archive must not cover another archive's objects (same bucket, one prefix inside the other):
    InvalidConfig naming both archives' key paths (`paths`: of the config as loaded; default: of `settings`)."""
    paths = paths or KeyPaths.of(settings)
    scopes = [s for a in settings.archives for s in _scopes(a)]
    for s in scopes:
        for o in scopes:
            a, b = s.archive, o.archive
            # Archives with one prefix share its staging directory: both rules only expire crashed attempts.
            if a.bucket != b.bucket or a.name == b.name or not o.prefix.startswith(s.prefix) or (
                    s.staging and o.staging and s.prefix == o.prefix):
                continue
            raise config_error(
                f"{paths.archives[b.name]}.prefix: {b.prefix!r} (archive {b.name!r}) overlaps "
                f"{paths.archives[a.name]}.prefix {a.prefix!r} (archive {a.name!r}) in bucket {a.bucket}: the "
                f"lifecycle rule of {a.name!r} over s3://{a.bucket}/{s.prefix} ({s.what}) would act on "
                f"s3://{b.bucket}/{o.prefix} ({o.what} of {b.name!r}); give the archives prefixes that do not "
                "contain each other")


def check_table_policy(cfg: ArchiveConfig, policy: LifecyclePolicy) -> None:
    """An archive of a table format (Iceberg) takes no expiration and no transitions: ValueError naming it."""
    if FORMATS[cfg.format].table and (policy.expiration_days is not None or policy.transitions):
        raise ValueError(f"lifecycle policy of archive {cfg.name!r} (format {cfg.format!r}): expiration_days and "
                         "transitions do not apply; S3 must not expire or archive files under an Iceberg "
                         "table (the Iceberg maintenance asset expires snapshots)")
