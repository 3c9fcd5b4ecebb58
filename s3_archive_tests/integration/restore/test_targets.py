"""Restore targets declared in the config, launched with no run config, against the real broker and moto: the
dry-run plan (windows, objects, records per target partition, what the ledger holds) and then real runs,
exactly once. Windows are committed by hand (jsonl, no Spark)."""

from __future__ import annotations

import time

import dagster as dg

from s3_archive.config.settings import parse_settings
from s3_archive.defs.archive.partitions import window_partitions
from s3_archive.defs.metadata import PLOT_KEYS
from s3_archive.defs.restore.targets import build_target_asset
from s3_archive.io.s3_resource import S3Resource
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.credentials import TEST_AWS
from s3_archive_tests.kafka_helpers import consume_all, create_topic
from s3_archive_tests.manifests import put_jsonl_window

KIND = {int: dg.IntMetadataValue, float: dg.FloatMetadataValue}


def run(asset, windows: list[OffsetWindow], res: dict, instance: dg.DagsterInstance, config: dict | None = None):
    keys = sorted(w.key for w in windows)
    run_config = {"ops": {asset.op.name: {"config": config}}} if config else None
    return dg.materialize([asset], instance=instance, resources=res, run_config=run_config,
                          tags={"dagster/asset_partition_range_start": keys[0],
                                "dagster/asset_partition_range_end": keys[-1]})


def observations(result) -> tuple[dict[str, dict], dict]:
    """Per-window observations (by partition) and the plan (the observation without a partition)."""
    obs = [e.event_specific_data.asset_observation for e in result.all_events
           if e.event_type_value == "ASSET_OBSERVATION"]
    plans = [o.metadata for o in obs if o.partition is None]
    assert len(plans) == 1, plans
    return {o.partition: o.metadata for o in obs if o.partition is not None}, plans[0]


def test_declared_target_plans_then_restores_exactly_once_with_no_run_config(kafka, s3, services, unique):
    topic, prefix = f"rtarget-{unique}", f"rtarget/{unique}/"
    target = create_topic(kafka, f"{topic}.dr", partitions=2)
    windows = [OffsetWindow(p, s, s + 20) for p in (0, 1) for s in (0, 20)]
    ts = int(time.time() * 1000) - 3_600_000
    records = {w: put_jsonl_window(s3, services.bucket, prefix, topic, w, ts) for w in windows}
    cfg = parse_settings({"archives": [{
        "name": "targets", "topics": [topic], "bucket": services.bucket, "prefix": prefix, "format": "jsonl",
        "restore_targets": [{"name": "dr", "target_topic": "{topic}.dr"},
                            {"name": "preview", "target_topic": "{topic}.dr", "dry_run": True}]}]}).archives[0]
    dr, preview = (build_target_asset(cfg, topic, t) for t in cfg.restore_targets)
    res = {"kafka": kafka, "s3": S3Resource(endpoint_url=services.s3_endpoint_url, region_name=TEST_AWS["AWS_REGION"],
                                            aws_access_key_id=TEST_AWS["AWS_ACCESS_KEY_ID"],
                                            aws_secret_access_key=TEST_AWS["AWS_SECRET_ACCESS_KEY"])}
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(window_partitions(topic).name, sorted(w.key for w in windows))

    # A preview target: every run plans, nothing is produced.
    planned = run(preview, windows, res, instance)
    assert kafka.offsets(target, "latest") == {0: 0, 1: 0} and planned.get_asset_materialization_events() == []
    per_window, plan = observations(planned)
    assert sorted(per_window) == sorted(w.key for w in windows)
    assert {k: v.value for k, v in plan.items() if k != "plan"} == {
        "target_topic": target, "dry_run": True, "ledger_id": f"s3-archive-restore.{topic}.{target}", "windows": 4,
        "objects": 4, "records_archived": 80, "records_to_restore": 80, "records_skipped_already_present": 0,
        "records_filtered": 0, "records_erased": 0, "bytes": plan["bytes"].value, "ledger_ranges": {},
        "per_target_partition": {"0": {"records": 40, "bytes": plan["bytes"].value // 2},
                                 "1": {"records": 40, "bytes": plan["bytes"].value // 2}}}
    assert "| 0 | 40 |" in plan["plan"].value

    # The real target over partition 0's windows, then a dry run (run config) that sees the ledger.
    done = run(dr, windows[:2], res, instance)
    mats = [e.materialization.metadata for e in done.get_asset_materialization_events()]
    assert len(mats) == 2 and all(m["records"].value == 20 for m in mats)
    assert {type(v) for m in mats for v in m.values()} == {type(v) for m in per_window.values() for v in m.values()}
    assert all({k: type(m[k]) for k in PLOT_KEYS} == {k: KIND[t] for k, t in PLOT_KEYS.items()} for m in mats)
    assert all(set(m) == set(o) for m in mats for o in per_window.values())
    _, plan = observations(run(dr, windows, res, instance, {"dry_run": True}))
    assert (plan["records_to_restore"].value, plan["records_skipped_already_present"].value) == (40, 40)
    assert plan["ledger_ranges"].value == {"0": [[0, 40]]}
    assert kafka.offsets(target, "latest")[1] == 0

    # All windows: only partition 1's are produced; every record once.
    run(dr, windows, res, instance)
    got = consume_all(kafka, target)
    for p in (0, 1):
        assert [(g.key, g.value, g.timestamp_ms) for g in got[p]] == [
            r for w in windows if w.partition == p for r in records[w]]
