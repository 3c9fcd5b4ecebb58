"""S3 lifecycle rules of an archive, and their reconciliation with the bucket's lifecycle configuration.

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
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from s3_archive import layout

if TYPE_CHECKING:  # settings.py imports this module for its config fields: no import cycle at run time
    from s3_archive.settings import ArchiveConfig

# S3's transition "waterfall": an object only moves down this list. The order is AWS's.
STORAGE_CLASSES: tuple[str, ...] = (
    "STANDARD_IA", "INTELLIGENT_TIERING", "ONEZONE_IA", "GLACIER_IR", "GLACIER", "DEEP_ARCHIVE",
)
# S3 rejects a transition to an infrequent-access class earlier than 30 days after creation; every other class
# accepts day 0 (S3 API reference, Transition.Days). Adding a class here makes it wait too.
MIN_TRANSITION_DAYS = {"STANDARD_IA": 30, "ONEZONE_IA": 30}
# S3 also rejects a later transition less than 30 days after one to an infrequent-access class.
INFREQUENT_ACCESS = frozenset({"STANDARD_IA", "ONEZONE_IA"})
IA_MIN_DAYS = 30
# Minimum storage durations S3 bills for (not rejected; an early move or delete is charged as if kept this long).
MIN_STORAGE_DAYS = {"STANDARD_IA": 30, "ONEZONE_IA": 30, "GLACIER_IR": 90, "GLACIER": 90, "DEEP_ARCHIVE": 180}
MAX_RULES = 1000  # per bucket, S3's limit
MAX_ID = 255
ID_PREFIX = "s3-archive"


class _Strict(BaseModel):
    # Same conventions as settings.py: unknown keys and stringly numbers are mistakes worth naming.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Transition(_Strict):
    days: int = Field(ge=0, description="days after the object was written")
    storage_class: str

    @field_validator("storage_class")
    @classmethod
    def _class(cls, v: str) -> str:
        if v not in STORAGE_CLASSES:
            raise ValueError(f"unknown storage class {v!r}; allowed: {', '.join(STORAGE_CLASSES)}")
        return v


class LifecyclePolicy(_Strict):
    """Lifecycle rules of one archive. The default only cleans up: staging after 2 days, stale uploads after 7."""

    transitions: list[Transition] = Field(default_factory=list, description="data objects move to cheaper classes")
    expiration_days: int | None = Field(default=None, ge=1, description="delete data and manifests this old")
    abort_incomplete_multipart_days: int | None = Field(default=7, ge=1, description="abort uploads left open")
    staging_expiration_days: int | None = Field(default=2, ge=1, description=f"delete <prefix>{layout.STAGING}/ "
                                                                             "objects this old (crashed attempts)")

    @model_validator(mode="after")
    def _aws_rules(self) -> LifecyclePolicy:
        seen: dict[str, int] = {}
        for i, t in enumerate(self.transitions):
            if t.storage_class in seen:
                raise ValueError(f"transitions[{i}]: storage class {t.storage_class} is already in "
                                 f"transitions[{seen[t.storage_class]}]; each class may appear once")
            seen[t.storage_class] = i
            minimum = MIN_TRANSITION_DAYS.get(t.storage_class, 0)
            if t.days < minimum:
                raise ValueError(f"transitions[{i}].days: {t.storage_class} needs at least {minimum} days "
                                 f"(S3 minimum), got {t.days}")
        ordered = self.ordered_transitions()
        for prev, cur in zip(ordered, ordered[1:]):
            if cur.days <= prev.days:
                raise ValueError(f"transitions: {cur.storage_class} at {cur.days} days must come after "
                                 f"{prev.storage_class} at {prev.days} days (days must increase along "
                                 f"{' -> '.join(STORAGE_CLASSES)})")
            if prev.storage_class in INFREQUENT_ACCESS and cur.days - prev.days < IA_MIN_DAYS:
                raise ValueError(f"transitions: {cur.storage_class} at {cur.days} days is only "
                                 f"{cur.days - prev.days} days after {prev.storage_class} at {prev.days}; S3 "
                                 f"requires at least {IA_MIN_DAYS}")
        if self.expiration_days is not None and ordered and self.expiration_days <= ordered[-1].days:
            raise ValueError(f"expiration_days: {self.expiration_days} must be after the last transition "
                             f"({ordered[-1].storage_class} at {ordered[-1].days} days)")
        return self

    def ordered_transitions(self) -> list[Transition]:
        return sorted(self.transitions, key=lambda t: STORAGE_CLASSES.index(t.storage_class))

    def warnings(self) -> list[str]:
        """Valid but costly: a class left (or deleted) before its minimum storage duration is billed anyway, and
        GLACIER / DEEP_ARCHIVE objects need a RestoreObject before a restore run, Spark or Athena can read them."""
        out = [f"{t.storage_class} objects are not readable until restored (RestoreObject): windows older than "
               f"{t.days} days are unreadable to queries, and a restore run first requests them back (hours) and "
               "fails or waits (launch config wait_for_cold_seconds)" for t in self.ordered_transitions()
               if t.storage_class in ("GLACIER", "DEEP_ARCHIVE")]
        steps = [(t.storage_class, t.days) for t in self.ordered_transitions()]
        ends = [d for _, d in steps[1:]] + [self.expiration_days]
        for (cls, start), end in zip(steps, ends):
            minimum = MIN_STORAGE_DAYS.get(cls)
            if minimum is not None and end is not None and end - start < minimum:
                out.append(f"{cls} from day {start} is left at day {end}, before its {minimum}-day minimum "
                           f"storage duration: S3 bills the remaining {minimum - (end - start)} days")
        return out


def policy_for(cfg: ArchiveConfig, policies: Mapping[str, LifecyclePolicy] | None = None) -> LifecyclePolicy:
    """Explicit mapping first, then `ArchiveConfig.lifecycle` once settings.py has it, then the defaults."""
    return (policies or {}).get(cfg.name) or getattr(cfg, "lifecycle", None) or LifecyclePolicy()


# S3 deletes an expired object asynchronously, some time after `created + Days` rounded up to the next midnight UTC,
# and a window's objects are copied into place just before its manifest records `committed_at`. A window is treated
# as expiring one day early, so neither the copy's lead nor S3's timing can turn an expiry into a "missing" alarm.
EXPIRY_SLACK = timedelta(days=1)


def expiry_due(created: datetime | None, expiration_days: int | None, now: datetime) -> bool:
    """May S3 already have expired an object written at `created` (UTC) under `expiration_days`? False when
    nothing expires or the time is unknown: a missing object is then a problem, never an expiry."""
    if expiration_days is None or created is None:
        return False
    return now >= created + timedelta(days=expiration_days) - EXPIRY_SLACK


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


def build_rules(archive: str, prefix: str, topics: Sequence[str], policy: LifecyclePolicy) -> list[dict[str, Any]]:
    """The archive's desired rules, as `put_bucket_lifecycle_configuration` takes them, sorted by ID."""
    abort = (None if policy.abort_incomplete_multipart_days is None
             else {"DaysAfterInitiation": policy.abort_incomplete_multipart_days})
    expire = None if policy.expiration_days is None else {"Days": policy.expiration_days}
    transitions = [{"Days": t.days, "StorageClass": t.storage_class} for t in policy.ordered_transitions()] or None
    rules = []
    for topic in topics:
        if transitions or expire or abort:
            rules.append(_rule(rule_id(archive, "data", topic), f"{prefix}{topic}/", Transitions=transitions,
                               Expiration=expire, AbortIncompleteMultipartUpload=abort))
        if expire:
            rules.append(_rule(rule_id(archive, "manifests", topic), layout.manifest_prefix(prefix, topic),
                               Expiration=expire))
    if policy.staging_expiration_days is not None:
        days = policy.staging_expiration_days
        # s3a writes staging parts with multipart uploads: an upload open longer than staging lives is abandoned.
        abort_days = min(days, policy.abort_incomplete_multipart_days or days)
        rules.append(_rule(rule_id(archive, "staging"), f"{prefix}{layout.STAGING}/", Expiration={"Days": days},
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


# --- reconciliation (I/O on an S3 client) -----------------------------------------------------------------------


def read_lifecycle(s3: Any, bucket: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The bucket's rules, and the extra PUT arguments that must be written back with them."""
    try:
        r = s3.get_bucket_lifecycle_configuration(Bucket=bucket)
    except ClientError as e:
        if str(e.response.get("Error", {}).get("Code", "")) == "NoSuchLifecycleConfiguration":
            return [], {}
        raise
    # A bucket-wide setting another tool may have chosen: writing without it would reset it to S3's default.
    extra = ({"TransitionDefaultMinimumObjectSize": r["TransitionDefaultMinimumObjectSize"]}
             if r.get("TransitionDefaultMinimumObjectSize") else {})
    return list(r.get("Rules", [])), extra


@dataclass(frozen=True)
class LifecycleResult:
    plan: LifecyclePlan
    written: bool
    attempts: int


def reconcile_lifecycle(s3: Any, bucket: str, desired: Sequence[dict[str, Any]], owner: str,
                        attempts: int = 3) -> LifecycleResult:
    """Make the bucket's rules under `owner` exactly `desired`, leaving every other rule alone; write only on change.

    S3 has no conditional write for lifecycle configurations: a writer racing us (another archive of the bucket)
    could replace our rules, or we theirs. After writing we read back and re-plan; a clobbered result is redone.
    """
    first: LifecyclePlan | None = None
    written = False
    for attempt in range(1, attempts + 1):
        current, extra = read_lifecycle(s3, bucket)
        plan = plan_lifecycle(current, desired, owner)
        first = first or plan
        if not plan.needs_write:
            return LifecycleResult(first, written, attempt)
        if plan.rules:
            s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": plan.rules},
                                                  **extra)
        else:
            # S3 refuses an empty rule list: no rule left (ours removed, none foreign) means no configuration.
            s3.delete_bucket_lifecycle(Bucket=bucket)
        written = True
    current, _ = read_lifecycle(s3, bucket)
    if plan_lifecycle(current, desired, owner).needs_write:
        raise RuntimeError(f"the lifecycle rules of bucket {bucket!r} under {owner!r} changed again after each of "
                           f"{attempts} writes; another writer keeps replacing the configuration")
    assert first is not None
    return LifecycleResult(first, written, attempts)
