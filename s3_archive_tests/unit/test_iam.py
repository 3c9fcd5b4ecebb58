"""The least-privilege IAM policy: its shape, resources and conditions (pure)."""

import json
import re

from s3_archive.catalog.mappings import NO_TABLE
from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.catalog import CatalogOptions
from s3_archive.config.settings import Settings
from s3_archive.iam import ancestors, iam_policy
from s3_archive.model.formats import FORMATS

SETTINGS = Settings(archives=[
    ArchiveConfig(name="orders", topics=["orders", "payments.v1"], bucket="bkt-one", prefix="kafka/"),
    ArchiveConfig(name="clicks", topics=["clicks"], bucket="bkt-one", prefix="web/raw/"),
    ArchiveConfig(name="audit", topics=["audit"], bucket="bkt-two"),
])


def statements(policy: dict) -> dict[str, dict]:
    return {s["Sid"]: s for s in policy["Statement"]}


def test_policy_document_shape():
    policy = iam_policy(SETTINGS)
    assert policy["Version"] == "2012-10-17"
    sids = [s["Sid"] for s in policy["Statement"]]
    assert len(sids) == len(set(sids)) and all(re.fullmatch(r"[A-Za-z0-9]+", s) for s in sids)
    for s in policy["Statement"]:
        assert s["Effect"] == "Allow" and s["Resource"] and s["Action"]
        assert not any("*" in a for a in s["Action"]), "no wildcard actions"
    json.dumps(policy)  # JSON-ready


def test_objects_only_under_each_archive_prefix():
    s = statements(iam_policy(SETTINGS))["ArchiveObjects"]
    assert sorted(s["Action"]) == ["s3:AbortMultipartUpload", "s3:DeleteObject", "s3:GetObject",
                                   "s3:ListMultipartUploadParts", "s3:PutObject", "s3:RestoreObject"]
    assert s["Resource"] == ["arn:aws:s3:::bkt-one/kafka/*", "arn:aws:s3:::bkt-one/web/raw/*", "arn:aws:s3:::bkt-two/*"]


def test_listing_is_limited_to_the_prefixes_unless_an_archive_is_at_the_bucket_root():
    st = statements(iam_policy(SETTINGS))
    assert st["ListArchivePrefixes0"] == {
        "Sid": "ListArchivePrefixes0", "Effect": "Allow", "Action": ["s3:ListBucket"],
        "Resource": ["arn:aws:s3:::bkt-one"],
        # web/ exactly: s3a lists each parent directory of what it writes (no wildcard: siblings stay unlisted)
        "Condition": {"StringLike": {"s3:prefix": ["kafka/*", "web/", "web/raw/*"]}}}
    assert st["ListArchivePrefixes1"]["Resource"] == ["arn:aws:s3:::bkt-two"]
    assert "Condition" not in st["ListArchivePrefixes1"]


def test_ancestors_of_a_prefix():
    assert ancestors("a/b/c/") == ["a/", "a/b/"]
    assert ancestors("a/") == [] and ancestors("") == []


def test_bucket_level_actions():
    st = statements(iam_policy(SETTINGS))
    buckets = ["arn:aws:s3:::bkt-one", "arn:aws:s3:::bkt-two"]
    assert st["ArchiveBuckets"]["Action"] == ["s3:GetBucketLocation", "s3:ListBucketMultipartUploads"]
    assert st["ArchiveBuckets"]["Resource"] == buckets
    assert st["LifecycleRules"]["Action"] == ["s3:GetLifecycleConfiguration", "s3:PutLifecycleConfiguration"]
    assert st["LifecycleRules"]["Resource"] == buckets


def test_glue_actions_on_the_catalog_databases_and_exact_tables():
    policy = iam_policy(SETTINGS, region="eu-west-1", account_id="123456789012",
                        catalog_options={"audit": CatalogOptions(database="audit_db", table_prefix="raw_")})
    s = statements(policy)["GlueCatalog"]
    assert s["Action"] == ["glue:BatchCreatePartition", "glue:CreateDatabase", "glue:CreateTable",
                           "glue:GetDatabase", "glue:GetPartitions", "glue:GetTable", "glue:UpdateTable"]
    arn = "arn:aws:glue:eu-west-1:123456789012"
    assert s["Resource"] == [
        f"{arn}:catalog", f"{arn}:database/audit_db", f"{arn}:database/s3_archive",
        f"{arn}:table/audit_db/raw_audit", f"{arn}:table/s3_archive/clicks", f"{arn}:table/s3_archive/orders",
        f"{arn}:table/s3_archive/payments_v1"]


def test_wildcard_region_and_account_by_default():
    s = statements(iam_policy(SETTINGS))["GlueCatalog"]
    assert s["Resource"][0] == "arn:aws:glue:*:*:catalog"


def test_sections_can_be_left_out():
    st = statements(iam_policy(SETTINGS, include_lifecycle=False, include_catalog=False))
    assert "LifecycleRules" not in st and "GlueCatalog" not in st and "ArchiveObjects" in st


def test_every_catalogued_format_gets_its_table_in_the_glue_statement():
    per_format = Settings(archives=[ArchiveConfig(name=f, topics=[f"t_{f}"], bucket="bkt-one", prefix=f"{f}/",
                                                  format=f) for f in FORMATS])
    s = statements(iam_policy(per_format))["GlueCatalog"]
    assert {r for r in s["Resource"] if ":table/" in r} == {f"arn:aws:glue:*:*:table/s3_archive/t_{f}"
                                                            for f in FORMATS if f not in NO_TABLE}


def test_retention_lock_grants_and_the_bypass_only_when_asked():
    locked = Settings(archives=[
        ArchiveConfig(name="gov", topics=["g"], bucket="bkt-one", prefix="gov/",
                      retention_lock={"mode": "governance", "days": 30}),
        ArchiveConfig(name="comp", topics=["c"], bucket="bkt-two", prefix="comp/",
                      retention_lock={"mode": "compliance", "days": 30}),
        ArchiveConfig(name="plain", topics=["p"], bucket="bkt-three"),
    ])
    s = statements(iam_policy(locked))
    assert s["ObjectLock"]["Action"] == ["s3:GetObjectRetention", "s3:PutObjectRetention"]
    assert s["ObjectLock"]["Resource"] == ["arn:aws:s3:::bkt-one/gov/*", "arn:aws:s3:::bkt-two/comp/*"]
    assert s["ObjectLockBuckets"]["Resource"] == ["arn:aws:s3:::bkt-one", "arn:aws:s3:::bkt-two"]
    assert "s3:BypassGovernanceRetention" not in json.dumps(iam_policy(locked))
    bypass = statements(iam_policy(locked, governance_bypass=True))["GovernanceBypass"]
    assert bypass["Action"] == ["s3:BypassGovernanceRetention"]
    assert bypass["Resource"] == ["arn:aws:s3:::bkt-one/gov/*"]  # compliance locks cannot be bypassed anyway
    assert "ObjectLock" not in statements(iam_policy(SETTINGS))


def test_erasure_grants_only_when_asked_and_never_under_a_compliance_lock():
    settings = Settings(archives=[
        ArchiveConfig(name="gov", topics=["g"], bucket="bkt-one", prefix="gov/",
                      retention_lock={"mode": "governance", "days": 30}),
        ArchiveConfig(name="comp", topics=["c"], bucket="bkt-two", prefix="comp/",
                      retention_lock={"mode": "compliance", "days": 30}),
        ArchiveConfig(name="plain", topics=["p"], bucket="bkt-three", prefix="plain/"),
    ])
    assert "s3:DeleteObjectVersion" not in json.dumps(iam_policy(settings))
    s = statements(iam_policy(settings, erasure=True))
    assert s["ErasureVersions"] == {"Sid": "ErasureVersions", "Effect": "Allow", "Action": ["s3:DeleteObjectVersion"],
                                    "Resource": ["arn:aws:s3:::bkt-one/gov/*", "arn:aws:s3:::bkt-three/plain/*"]}
    assert s["ErasureBuckets"]["Action"] == ["s3:GetBucketVersioning", "s3:ListBucketVersions"]
    assert s["ErasureBuckets"]["Resource"] == ["arn:aws:s3:::bkt-one", "arn:aws:s3:::bkt-three"]
