"""Restore targets declared in the archive config: one asset per (target, topic), the archive's window partitions,
a run config with a default for every key (the UI's dialog needs none), and clear errors for bad declarations."""

from __future__ import annotations

import dagster as dg
import pytest

from s3_archive.config.settings import parse_settings
from s3_archive.defs.archive.partitions import window_partitions
from s3_archive.defs.restore.assets import build_restore_defs
from s3_archive.defs.restore.targets import target_asset_key, target_request
from s3_archive.model.errors import InvalidConfig


def settings(**target):
    archive = {"name": "shop", "topics": ["orders", "users"], "bucket": "bkt",
               "restore_targets": [{"name": "dr", "target_topic": "{topic}.restored", **target}]}
    return parse_settings({"archives": [archive]})


def test_each_target_and_topic_is_an_asset_over_the_archives_windows_launchable_with_no_config():
    defs = build_restore_defs(settings(topics=["orders"], partition_mapping="map", partition_map={"0": 1}))
    asset = defs.get_assets_def(target_asset_key("dr", "orders"))
    assert target_asset_key("dr", "orders").path == ["kafka_restore_target", "dr", "orders"]
    assert asset.partitions_def == window_partitions("orders")
    assert asset.group_names_by_key[asset.key] == "restore_shop"
    # Every run-config key has a default: Materialize / Backfill launch it as it is.
    assert not asset.op.config_schema.as_field().is_required
    assert [a.key for a in defs.assets if a.key.path[0] == "kafka_restore_target"] == [asset.key]  # topics: orders
    # Its first line as the asset list shows it: plain text (the list does not render markdown).
    first = asset.descriptions_by_key[asset.key].splitlines()[0]
    assert "restored into orders.restored (restore target" in first and "`" not in first


def test_the_request_is_the_declaration_and_dry_run_is_the_targets_or_the_launchs():
    t = settings(provenance_headers=True, from_offset=10, transaction_records=7).archives[0].restore_targets[0]
    r = target_request(t, "users")
    assert (r.source_topic, r.target_topic, r.provenance_headers, r.filters.from_offset, r.transaction_records) == \
        ("users", "users.restored", True, 10, 7)
    assert not r.dry_run and target_request(t, "users", dry_run=True).dry_run
    preview = settings(dry_run=True).archives[0].restore_targets[0]
    assert target_request(preview, "users", dry_run=False).dry_run  # a preview target never produces
    assert r.ledger_id == "s3-archive-restore.users.users.restored"  # shared with an ad-hoc restore to that topic


@pytest.mark.parametrize("target,message", [
    ({"target_topic": "{topic}"}, "restore_targets[0].target_topic: '{topic}' is the archived topic itself"),
    ({"target_topic": "bad topic"}, "not a valid Kafka topic name"),
    ({"target_topic": "{other}"}, "not a valid Kafka topic name"),
    ({"name": "DR"}, "restore_targets[0].name: must match"),
    ({"topics": ["nope"]}, "restore_targets[0].topics: ['nope'] are not topics of this archive"),
    ({"partition_mapping": "map"}, "partition_mapping 'map' needs partition_map"),
    ({"partition_mapping": "hash"}, "partition_mapping"),
    ({"from_offset": 5, "to_offset": 5}, "from_offset (5) must be < to_offset (5)"),
    ({"cold_restore_tier": "Fast"}, "cold_restore_tier"),
    ({"mode": "follow", "dry_run": True}, "mode 'follow' restores what the archive commits; a dry_run target only"),
    ({"mode": "mirror"}, "restore_targets[0].mode"),
    ({"broker_outage_seconds": -1}, "restore_targets[0].broker_outage_seconds"),
    ({"producers": 17}, "restore_targets[0].producers: Input should be less than or equal to 16"),
    ({"producers": 0}, "restore_targets[0].producers: Input should be greater than or equal to 1"),
])
def test_bad_targets_are_refused_at_load_naming_the_key(target, message):
    with pytest.raises(InvalidConfig) as e:
        settings(**target)
    assert message in str(e.value)


def test_targets_need_a_restorable_archive_and_unique_names():
    with pytest.raises(InvalidConfig, match="archive 'c' is not restorable"):
        parse_settings({"archives": [{"name": "c", "topics": ["t"], "bucket": "bkt", "format": "csv",
                                      "restore_targets": [{"name": "x", "target_topic": "y"}]}]})
    with pytest.raises(InvalidConfig, match=r"restore_targets\[1\].name: 'x' is used twice"):
        parse_settings({"archives": [{"name": "c", "topics": ["t"], "bucket": "bkt", "restore_targets": [
            {"name": "x", "target_topic": "y"}, {"name": "x", "target_topic": "z"}]}]})


def test_the_source_topic_as_target_needs_allow_source_topic():
    s = settings(target_topic="{topic}", allow_source_topic=True)
    assert s.archives[0].restore_targets[0].target_for("orders") == "orders"
    assert isinstance(build_restore_defs(s), dg.Definitions)
