"""The `lifecycle:` of an archive, validated against the constraints S3 documents for transitions (S3 API
reference, Transition and LifecycleRule): the order of storage classes, minimum days, minimum storage durations.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import Field, field_validator, model_validator

from s3_archive.keys.objects import STAGING
from s3_archive.model.base import StrictModel

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


class Transition(StrictModel):
    days: int = Field(ge=0, description="days after the object was written")
    storage_class: str

    @field_validator("storage_class")
    @classmethod
    def _class(cls, v: str) -> str:
        if v not in STORAGE_CLASSES:
            raise ValueError(f"unknown storage class {v!r}; allowed: {', '.join(STORAGE_CLASSES)}")
        return v


class LifecyclePolicy(StrictModel):
    """Lifecycle rules of one archive. The default only cleans up: staging after 2 days, stale uploads after 7."""

    transitions: list[Transition] = Field(default_factory=list, description="data objects move to cheaper classes")
    expiration_days: int | None = Field(default=None, ge=1, description="delete data and manifests this old")
    abort_incomplete_multipart_days: int | None = Field(default=7, ge=1, description="abort uploads left open")
    staging_expiration_days: int | None = Field(default=2, ge=1, description=f"delete <prefix>{STAGING}/ "
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
