"""The least-privilege IAM policy for the configured archives. Pure: a function of the settings.

Objects: read, write, delete and multipart operations only under each archive's prefix (`bucket/prefix*`, which
covers the data, `_manifests/` and `_staging/`). Listing: only with an `s3:prefix` under an archive's prefix, or
exactly one of the directories above it (s3a probes them), unless an archive's prefix is empty; a whole-bucket
listing is refused. Bucket level: the multipart-upload
listing the s3a committer uses, GetBucketLocation, and the lifecycle configuration. Glue: the calls the catalog
assets make, on the catalog, the databases and the exact tables of the configured topics.

Archives with `retention_lock`: PutObjectRetention and GetObjectRetention on their objects (the commit locks each
object, and reads a lock another attempt set), GetBucketObjectLockConfiguration on their buckets (the store check).
Never s3:BypassGovernanceRetention, unless asked (`governance_bypass`: `s3-archive iam-policy --governance-bypass`),
and then only for archives in governance mode: it lets the holder shorten or remove their locks.

`erase` (only when asked: `erasure`, `s3-archive iam-policy --erasure`): GetBucketVersioning on the buckets, and on
a versioned bucket the versions of the replaced objects listed (ListBucketVersions, under the archives' prefixes)
and deleted (DeleteObjectVersion); archives locked in compliance mode get nothing (erasure is refused there).

A bucket is checked by a listing under the archive's prefix (an archive run's first listing of its manifests,
`io/s3.py::check_bucket` elsewhere), not with HeadBucket (which S3 authorizes as a whole-bucket `s3:ListBucket`
that this policy refuses).

"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from s3_archive.catalog.mappings import no_table_reason
from s3_archive.catalog.tables import options_for, table_name
from s3_archive.config.catalog import CatalogOptions
from s3_archive.config.settings import Settings

# s3:RestoreObject: a restore run asks S3 to bring GLACIER / DEEP_ARCHIVE objects back (s3_archive/restore/cold.py).
OBJECT_ACTIONS = ("s3:AbortMultipartUpload", "s3:DeleteObject", "s3:GetObject", "s3:ListMultipartUploadParts",
                  "s3:PutObject", "s3:RestoreObject")
BUCKET_ACTIONS = ("s3:GetBucketLocation", "s3:ListBucketMultipartUploads")
LIFECYCLE_ACTIONS = ("s3:GetLifecycleConfiguration", "s3:PutLifecycleConfiguration")  # Put covers DeleteBucketLifecycle
LOCK_OBJECT_ACTIONS = ("s3:GetObjectRetention", "s3:PutObjectRetention")
LOCK_BUCKET_ACTIONS = ("s3:GetBucketObjectLockConfiguration",)
BYPASS_ACTION = "s3:BypassGovernanceRetention"
ERASURE_BUCKET_ACTIONS = ("s3:GetBucketVersioning", "s3:ListBucketVersions")
ERASURE_OBJECT_ACTIONS = ("s3:DeleteObjectVersion",)
GLUE_ACTIONS = ("glue:BatchCreatePartition", "glue:CreateDatabase", "glue:CreateTable", "glue:GetDatabase",
                "glue:GetPartitions", "glue:GetTable", "glue:UpdateTable")


def ancestors(prefix: str) -> list[str]:
    """The directories above a prefix (`a/b/c/` -> `a/`, `a/b/`). s3a's mkdirs probes each with a one-page LIST
    (seen in the moto request log of the archive's Spark writes), so they are allowed exactly, without a wildcard."""
    parts = prefix.split("/")[:-2]
    return ["/".join(parts[:i + 1]) + "/" for i in range(len(parts))]


def _bucket_arn(bucket: str) -> str:
    return f"arn:aws:s3:::{bucket}"


def iam_policy(settings: Settings, *, region: str = "*", account_id: str = "*",
               catalog_options: Mapping[str, CatalogOptions] | None = None,
               include_lifecycle: bool = True, include_catalog: bool = True,
               governance_bypass: bool = False, erasure: bool = False) -> dict[str, Any]:
    """An IAM policy document (JSON-ready dict) granting exactly what the archive, restore, lifecycle and catalog
    assets call. `region`/`account_id` narrow the Glue ARNs; "*" matches any. `governance_bypass`: also
    s3:BypassGovernanceRetention on the objects of archives locked in governance mode. `erasure`: what `erase`
    needs beyond that."""
    prefixes: dict[str, set[str]] = {}
    for a in settings.archives:
        prefixes.setdefault(a.bucket, set()).add(a.prefix)
    buckets = sorted(prefixes)
    statements: list[dict[str, Any]] = [{
        "Sid": "ArchiveObjects",
        "Effect": "Allow",
        "Action": list(OBJECT_ACTIONS),
        "Resource": sorted(f"{_bucket_arn(b)}/{p}*" for b in buckets for p in prefixes[b]),
    }]
    for i, b in enumerate(buckets):
        listing: dict[str, Any] = {"Sid": f"ListArchivePrefixes{i}", "Effect": "Allow", "Action": ["s3:ListBucket"],
                                   "Resource": [_bucket_arn(b)]}
        if "" not in prefixes[b]:  # an archive at the bucket root lists the whole bucket anyway
            allowed = {f"{p}*" for p in prefixes[b]} | {a for p in prefixes[b] for a in ancestors(p)}
            listing["Condition"] = {"StringLike": {"s3:prefix": sorted(allowed)}}
        statements.append(listing)
    statements.append({"Sid": "ArchiveBuckets", "Effect": "Allow", "Action": list(BUCKET_ACTIONS),
                       "Resource": [_bucket_arn(b) for b in buckets]})
    statements += _lock_statements(settings, governance_bypass)
    if erasure:
        statements += _erasure_statements(settings)
    if include_lifecycle:
        statements.append({"Sid": "LifecycleRules", "Effect": "Allow", "Action": list(LIFECYCLE_ACTIONS),
                           "Resource": [_bucket_arn(b) for b in buckets]})
    glue = f"arn:aws:glue:{region}:{account_id}"
    databases: set[str] = set()
    tables: set[str] = set()
    if include_catalog:
        for a in settings.archives:
            if no_table_reason(a) is not None:
                continue
            opts = options_for(a, catalog_options)
            databases.add(opts.database)
            tables |= {f"{opts.database}/{table_name(t, opts)}" for t in a.topics}
    if include_catalog and databases:
        statements.append({
            "Sid": "GlueCatalog",
            "Effect": "Allow",
            "Action": list(GLUE_ACTIONS),
            "Resource": [f"{glue}:catalog", *sorted(f"{glue}:database/{d}" for d in databases),
                         *sorted(f"{glue}:table/{t}" for t in tables)],
        })
    return {"Version": "2012-10-17", "Statement": statements}


def _lock_statements(settings: Settings, governance_bypass: bool) -> list[dict[str, Any]]:
    """What `retention_lock` needs (and the bypass, when asked, for governance-mode archives only)."""
    locked = [a for a in settings.archives if a.retention_lock is not None]
    if not locked:
        return []
    out: list[dict[str, Any]] = [
        {"Sid": "ObjectLock", "Effect": "Allow", "Action": list(LOCK_OBJECT_ACTIONS),
         "Resource": sorted({f"{_bucket_arn(a.bucket)}/{a.prefix}*" for a in locked})},
        {"Sid": "ObjectLockBuckets", "Effect": "Allow", "Action": list(LOCK_BUCKET_ACTIONS),
         "Resource": sorted({_bucket_arn(a.bucket) for a in locked})}]
    governed = sorted({f"{_bucket_arn(a.bucket)}/{a.prefix}*" for a in locked
                       if a.retention_lock is not None and a.retention_lock.mode == "governance"})
    if governance_bypass and governed:
        out.append({"Sid": "GovernanceBypass", "Effect": "Allow", "Action": [BYPASS_ACTION], "Resource": governed})
    return out


def _erasure_statements(settings: Settings) -> list[dict[str, Any]]:
    """What `erase` needs beyond the archive's own grants, for the archives it may run on."""
    erasable = [a for a in settings.archives if a.retention_lock is None or a.retention_lock.mode == "governance"]
    if not erasable:
        return []
    buckets = sorted({a.bucket for a in erasable})
    return [
        {"Sid": "ErasureVersions", "Effect": "Allow", "Action": list(ERASURE_OBJECT_ACTIONS),
         "Resource": sorted({f"{_bucket_arn(a.bucket)}/{a.prefix}*" for a in erasable})},
        {"Sid": "ErasureBuckets", "Effect": "Allow", "Action": list(ERASURE_BUCKET_ACTIONS),
         "Resource": [_bucket_arn(b) for b in buckets]},
    ]
