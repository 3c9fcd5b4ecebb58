"""Lifecycle rules: validation as S3 documents it, rule building, and the reconcile plan (pure)."""

import datetime

import dagster as dg
import pytest
from pydantic import ValidationError

from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.lifecycle import LifecyclePolicy, Transition, expiry_due
from s3_archive.config.settings import Settings
from s3_archive.defs.lifecycle.assets import build_lifecycle_defs, lifecycle_asset_key
from s3_archive.io.s3_resource import S3Resource
from s3_archive.lifecycle.rules import build_rules, check_disjoint, owner_prefix, plan_lifecycle, policy_for, rule_id
from s3_archive.model.errors import InvalidConfig


def T(days: int, cls: str) -> dict:
    return {"days": days, "storage_class": cls}


def policy(**kw) -> LifecyclePolicy:
    return LifecyclePolicy.model_validate(kw)


def error_of(**kw) -> str:
    with pytest.raises(ValidationError) as e:
        policy(**kw)
    return str(e.value)


# --- validation --------------------------------------------------------------------------------------------------


def test_a_full_policy_along_the_waterfall_is_accepted():
    p = policy(transitions=[T(365, "DEEP_ARCHIVE"), T(30, "STANDARD_IA"), T(60, "GLACIER_IR"), T(180, "GLACIER")],
               expiration_days=3650)
    assert [t.storage_class for t in p.ordered_transitions()] == ["STANDARD_IA", "GLACIER_IR", "GLACIER",
                                                                  "DEEP_ARCHIVE"]


@pytest.mark.parametrize("cls", ["STANDARD_IA", "ONEZONE_IA"])
def test_infrequent_access_before_30_days_is_rejected_naming_the_value(cls):
    msg = error_of(transitions=[T(29, cls)])
    assert f"transitions[0].days: {cls} needs at least 30 days (S3 minimum), got 29" in msg


@pytest.mark.parametrize("cls", ["INTELLIGENT_TIERING", "GLACIER_IR", "GLACIER", "DEEP_ARCHIVE"])
def test_classes_s3_accepts_from_day_zero(cls):
    # S3's Transition API: "If the specified storage class is INTELLIGENT_TIERING, GLACIER_IR, GLACIER, or
    # DEEP_ARCHIVE, valid values are 0 or positive integers."
    assert policy(transitions=[T(0, cls)]).transitions[0].days == 0


def test_an_unknown_storage_class_is_rejected_listing_the_allowed_ones():
    msg = error_of(transitions=[T(40, "GLACIER_DEEP")])
    assert "unknown storage class 'GLACIER_DEEP'" in msg
    assert "STANDARD_IA, INTELLIGENT_TIERING, ONEZONE_IA, GLACIER_IR, GLACIER, DEEP_ARCHIVE" in msg


def test_days_must_increase_along_the_storage_class_order():
    msg = error_of(transitions=[T(90, "GLACIER_IR"), T(60, "GLACIER")])
    assert "GLACIER at 60 days must come after GLACIER_IR at 90 days" in msg
    assert "GLACIER at 90 days must come after GLACIER_IR at 90 days" in error_of(
        transitions=[T(90, "GLACIER_IR"), T(90, "GLACIER")])


def test_a_transition_after_infrequent_access_waits_30_days():
    msg = error_of(transitions=[T(30, "STANDARD_IA"), T(45, "GLACIER")])
    assert "GLACIER at 45 days is only 15 days after STANDARD_IA at 30; S3 requires at least 30" in msg
    policy(transitions=[T(30, "STANDARD_IA"), T(60, "GLACIER")])


@pytest.mark.parametrize("expiration", [90, 10])
def test_expiration_must_come_after_the_last_transition(expiration):
    msg = error_of(transitions=[T(90, "GLACIER_IR")], expiration_days=expiration)
    assert f"expiration_days: {expiration} must be after the last transition (GLACIER_IR at 90 days)" in msg


def test_a_storage_class_listed_twice_is_rejected():
    assert "storage class GLACIER is already in transitions[0]" in error_of(transitions=[T(10, "GLACIER"),
                                                                                         T(20, "GLACIER")])


@pytest.mark.parametrize("kw,needle", [
    ({"expiration_days": 0}, "expiration_days"),
    ({"staging_expiration_days": 0}, "staging_expiration_days"),
    ({"abort_incomplete_multipart_days": 0}, "abort_incomplete_multipart_days"),
    ({"transitions": [T(-1, "GLACIER")]}, "transitions.0.days"),
    ({"transitions": [{"days": "30", "storage_class": "GLACIER"}]}, "transitions.0.days"),  # strict: not a string
    ({"expire": 3}, "expire"),  # a typo is an error
])
def test_bad_values_are_named(kw, needle):
    assert needle in error_of(**kw)


def test_billed_minimum_storage_durations_are_warnings_not_errors():
    p = policy(transitions=[T(0, "GLACIER_IR"), T(30, "DEEP_ARCHIVE")], expiration_days=100)
    assert p.warnings() == [
        "DEEP_ARCHIVE objects are not readable until restored (RestoreObject): windows older than 30 days are "
        "unreadable to queries, and a restore run first requests them back (hours) and fails or waits (launch "
        "config wait_for_cold_seconds)",
        "GLACIER_IR from day 0 is left at day 30, before its 90-day minimum storage duration: S3 bills the "
        "remaining 60 days",
        "DEEP_ARCHIVE from day 30 is left at day 100, before its 180-day minimum storage duration: S3 bills the "
        "remaining 110 days",
    ]
    assert policy(transitions=[T(30, "STANDARD_IA")]).warnings() == []


# --- rules -------------------------------------------------------------------------------------------------------


def test_the_default_policy_only_cleans_up():
    rules = build_rules("orders", "kafka/", ["a", "b.c"], LifecyclePolicy())
    assert rules == [
        {"ID": "s3-archive:orders:data:a", "Status": "Enabled", "Filter": {"Prefix": "kafka/a/"},
         "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 7}},
        {"ID": "s3-archive:orders:data:b.c", "Status": "Enabled", "Filter": {"Prefix": "kafka/b.c/"},
         "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 7}},
        {"ID": "s3-archive:orders:staging", "Status": "Enabled", "Filter": {"Prefix": "kafka/_staging/"},
         "Expiration": {"Days": 2}, "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 2}},
    ]


def test_data_transitions_but_manifests_only_expire():
    p = policy(transitions=[T(90, "GLACIER"), T(30, "STANDARD_IA")], expiration_days=400,
               abort_incomplete_multipart_days=3, staging_expiration_days=5)
    rules = {r["ID"]: r for r in build_rules("o", "", ["t"], p)}
    assert rules["s3-archive:o:data:t"] == {
        "ID": "s3-archive:o:data:t", "Status": "Enabled", "Filter": {"Prefix": "t/"},
        "Transitions": [{"Days": 30, "StorageClass": "STANDARD_IA"}, {"Days": 90, "StorageClass": "GLACIER"}],
        "Expiration": {"Days": 400}, "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 3}}
    # Manifests are read with GET by the commit protocol and the checks: never moved to an archive class.
    assert rules["s3-archive:o:manifests:t"] == {"ID": "s3-archive:o:manifests:t", "Status": "Enabled",
                                                 "Filter": {"Prefix": "_manifests/t/"}, "Expiration": {"Days": 400}}
    assert rules["s3-archive:o:staging"]["Filter"] == {"Prefix": "_staging/"}
    assert rules["s3-archive:o:staging"]["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 3}


def test_a_policy_without_any_rule_builds_none():
    assert build_rules("o", "p/", ["t"], policy(abort_incomplete_multipart_days=None,
                                                staging_expiration_days=None)) == []


def test_rule_ids_fit_s3_and_stay_under_the_owner_prefix():
    topic = "t" * 249
    rid = rule_id("a" * 63, "manifests", topic)
    assert len(rid) == 255 and rid.startswith(owner_prefix("a" * 63))
    assert rid == rule_id("a" * 63, "manifests", topic) != rule_id("a" * 63, "manifests", topic[:-1] + "u")


# --- plan --------------------------------------------------------------------------------------------------------

OWNER = owner_prefix("orders")
FOREIGN = [
    {"ID": "logs-expiry", "Status": "Enabled", "Filter": {"Prefix": "logs/"}, "Expiration": {"Days": 7}},
    {"ID": "s3-archive:orders_v2:staging", "Status": "Enabled", "Filter": {"Prefix": "v2/_staging/"},
     "Expiration": {"Days": 2}},  # another archive whose name starts like ours
    {"ID": "tagged", "Status": "Disabled", "Filter": {"And": {"Prefix": "x/", "Tags": [{"Key": "k", "Value": "v"}]}},
     "Expiration": {"Date": datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)}},
]


def desired(**kw) -> list[dict]:
    return build_rules("orders", "kafka/", ["a", "b"], policy(**kw))


def test_first_plan_adds_our_rules_after_the_foreign_ones_unchanged():
    plan = plan_lifecycle(FOREIGN, desired(), OWNER)
    assert plan.needs_write and plan.rules == [*FOREIGN, *desired()]
    assert plan.added == sorted(r["ID"] for r in desired()) and not plan.changed and not plan.removed
    assert plan.foreign == ["logs-expiry", "s3-archive:orders_v2:staging", "tagged"]


def test_rules_already_in_place_plan_no_write_even_as_s3_returns_them():
    # S3 returns rules with its own field order, transitions in any order, and empty fields.
    stored = [{**r, "Transitions": list(reversed(r.get("Transitions", []))), "NoncurrentVersionTransitions": []}
              for r in desired(transitions=[T(30, "STANDARD_IA"), T(90, "GLACIER")])]
    plan = plan_lifecycle([*FOREIGN, *reversed(stored)], desired(transitions=[T(30, "STANDARD_IA"),
                                                                              T(90, "GLACIER")]), OWNER)
    assert not plan.needs_write and plan.rules is None
    assert plan.unchanged == sorted(r["ID"] for r in stored)


def test_changed_and_removed_rules_are_reported_and_foreign_rules_kept():
    before = desired()
    after = build_rules("orders", "kafka/", ["a"], policy(expiration_days=30))  # topic b dropped, expiration added
    plan = plan_lifecycle([FOREIGN[0], *before, FOREIGN[2]], after, OWNER)
    assert plan.added == ["s3-archive:orders:manifests:a"]
    assert plan.changed == ["s3-archive:orders:data:a"]
    assert plan.removed == ["s3-archive:orders:data:b"]
    assert plan.unchanged == ["s3-archive:orders:staging"]
    assert plan.rules == [FOREIGN[0], FOREIGN[2], *after]


def test_removing_every_rule_of_ours_leaves_an_empty_list_to_delete():
    plan = plan_lifecycle(desired(), [], OWNER)
    assert plan.needs_write and plan.rules == [] and len(plan.removed) == 3


def test_too_many_rules_for_one_bucket_is_an_error():
    foreign = [{"ID": f"f{i}", "Status": "Enabled", "Filter": {"Prefix": f"{i}/"}, "Expiration": {"Days": 1}}
               for i in range(999)]
    with pytest.raises(ValueError, match="would have 1002 lifecycle rules .* at most 1000"):
        plan_lifecycle(foreign, desired(), OWNER)


def test_desired_rules_must_be_ours():
    with pytest.raises(ValueError, match="IDs starting with 's3-archive:orders:'"):
        plan_lifecycle([], FOREIGN[:1], OWNER)


# --- definitions -------------------------------------------------------------------------------------------------


def archive(name: str, prefix: str, topics: list[str], bucket: str = "bkt-one") -> ArchiveConfig:
    return ArchiveConfig(name=name, topics=topics, bucket=bucket, prefix=prefix)


def test_archives_whose_rules_cover_each_other_are_rejected_naming_both_key_paths():
    with pytest.raises(InvalidConfig) as e:
        check_disjoint(Settings(archives=[archive("outer", "", ["x"]), archive("inner", "x/", ["t"])]))
    assert str(e.value) == (
        "invalid s3-archive config:\n  archives[1].prefix: 'x/' (archive 'inner') overlaps archives[0].prefix '' "
        "(archive 'outer') in bucket bkt-one: the lifecycle rule of 'outer' over s3://bkt-one/x/ (the data of "
        "topic 'x') would act on s3://bkt-one/x/_staging/ (the staging objects of 'inner'); give the archives "
        "prefixes that do not contain each other")
    # Same prefix, different topics: only the staging directory is shared, and that is fine.
    check_disjoint(Settings(archives=[archive("a", "k/", ["t1"]), archive("b", "k/", ["t2"])]))
    check_disjoint(Settings(archives=[archive("a", "", ["x"]), archive("b", "x/", ["t"], bucket="bkt-two")]))


# Dagster's own evaluate_automation_conditions passes the beta `include_sources` to AssetSelection.all: not ours.
@pytest.mark.filterwarnings("ignore:Parameter `include_sources`:dagster.BetaWarning")
def test_lifecycle_defs_one_unpartitioned_asset_per_archive_requested_once_when_deployed():
    settings = Settings(archives=[archive("a", "k/", ["t1"]), archive("b", "j/", ["t2"])])
    defs = build_lifecycle_defs(settings, {"b": policy(expiration_days=10)})
    assets = {a.key: a for a in defs.assets}
    assert set(assets) == {lifecycle_asset_key("a"), lifecycle_asset_key("b")}
    assert all(a.partitions_def is None for a in assets.values())
    assert assets[lifecycle_asset_key("b")].metadata_by_key[lifecycle_asset_key("b")]["rule_count"] == 3
    # Resources are only bound, never used: evaluating conditions runs nothing.
    unused = dg.Definitions(assets=list(assets.values()), resources={"s3": S3Resource()})
    instance = dg.DagsterInstance.ephemeral()
    ticks = []
    cursor = None
    for _ in range(3):
        result = dg.evaluate_automation_conditions(defs=unused, instance=instance, cursor=cursor)
        ticks.append(result.total_requested)
        cursor = result.cursor
    # Dagster skips a condition's very first evaluation; the next tick requests both, once.
    assert ticks == [0, 2, 0]


def test_policies_for_unknown_archives_are_an_error():
    with pytest.raises(ValueError, match=r"lifecycle policies for unknown archives \['nope'\]"):
        build_lifecycle_defs(Settings(archives=[archive("a", "k/", ["t1"])]), {"nope": LifecyclePolicy()})


def test_policy_precedence():
    cfg = archive("a", "k/", ["t"])
    mine = policy(expiration_days=5)
    assert policy_for(cfg, {"a": mine}) is mine
    assert policy_for(cfg, None) == LifecyclePolicy()
    assert Transition(days=1, storage_class="GLACIER").days == 1


# --- expiry as the objects check sees it -----------------------------------------------------------------------

T0 = datetime.datetime(2026, 3, 1, 23, 59, tzinfo=datetime.UTC)


@pytest.mark.parametrize("age,days,due", [
    (datetime.timedelta(days=28, hours=23), 30, False),  # more than a day before expiry: still must be there
    (datetime.timedelta(days=29), 30, True),  # the day of slack before expiry starts
    (datetime.timedelta(days=400), 30, True),
    (datetime.timedelta(days=400), None, False),  # nothing expires without expiration_days
    (datetime.timedelta(0), 1, True),  # 1-day expiry: due from the start (slack is a whole day)
])
def test_expiry_due(age, days, due):
    assert expiry_due(T0, days, T0 + age) is due


def test_expiry_of_an_unknown_time_is_never_due():
    assert expiry_due(None, 1, T0) is False


def test_manifests_expire_with_their_data():
    rules = {r["ID"]: r for r in build_rules("a", "k/", ["t"], LifecyclePolicy(expiration_days=30))}
    assert rules["s3-archive:a:manifests:t"]["Expiration"] == rules["s3-archive:a:data:t"]["Expiration"] == {
        "Days": 30}
    assert rules["s3-archive:a:manifests:t"]["Filter"] == {"Prefix": "k/_manifests/t/"}


def test_a_locked_archive_removes_noncurrent_versions_and_never_expires_a_window_while_locked():
    rules = {r["ID"]: r for r in build_rules("o", "", ["t"], policy(), locked=True)}
    # the losing attempts' versions (written unlocked); S3 keeps a locked version whatever a rule says
    assert rules["s3-archive:o:data:t"]["NoncurrentVersionExpiration"] == {"NoncurrentDays": 1}
    assert "NoncurrentVersionExpiration" not in {k for r in build_rules("o", "", ["t"], policy()) for k in r}
    with pytest.raises(ValueError, match="lifecycle.expiration_days 30 must be more than retention_lock.days 30: "
                                         "an expiration would hide windows that are still locked"):
        ArchiveConfig(name="o", topics=["t"], bucket="bkt", lifecycle={"expiration_days": 30},
                      retention_lock={"mode": "compliance", "days": 30})
    ArchiveConfig(name="o", topics=["t"], bucket="bkt", lifecycle={"expiration_days": 31},
                  retention_lock={"mode": "compliance", "days": 30})
