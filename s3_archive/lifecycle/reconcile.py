"""Reconciliation of an archive's lifecycle rules with the bucket: read, plan (rules.py), write only on change,
read back; every rule that is not ours is written back unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from s3_archive.io.s3 import S3Client, error_code, error_message
from s3_archive.lifecycle.rules import LifecyclePlan, plan_lifecycle
from s3_archive.model.errors import AwsRequestFailed


def read_lifecycle(s3: S3Client, bucket: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The bucket's rules, and the extra PUT arguments that must be written back with them."""
    try:
        r = s3.get_bucket_lifecycle_configuration(Bucket=bucket)
    except ClientError as e:
        if error_code(e) == "NoSuchLifecycleConfiguration":
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


def reconcile_lifecycle(s3: S3Client, bucket: str, desired: Sequence[dict[str, Any]], owner: str,
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


def reconcile_bucket(s3: S3Client, bucket: str, desired: Sequence[dict[str, Any]], owner: str) -> LifecycleResult:
    """`reconcile_lifecycle`, an error S3 answered raised as AwsRequestFailed naming the request and the bucket."""
    try:
        return reconcile_lifecycle(s3, bucket, desired, owner)
    except ClientError as e:
        raise AwsRequestFailed(f"{e.operation_name} on bucket {bucket!r} failed: {error_code(e)}: "
                               f"{error_message(e)}") from None
