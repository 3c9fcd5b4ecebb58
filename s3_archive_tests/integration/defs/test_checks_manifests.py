"""The objects check meets manifests that do not parse (moto, windows written by hand): each is a problem naming
its key; the check still runs over every other window."""

from __future__ import annotations

import json

import dagster as dg

from s3_archive.defs.archive.checks import objects_result
from s3_archive.defs.archive.partitions import archive_asset_key, window_partitions
from s3_archive.keys.objects import manifest_key, object_key
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.integration.archive_helpers import archive_config
from s3_archive_tests.manifests import hand_manifest


def test_a_manifest_that_does_not_parse_is_a_problem_naming_its_key(s3, services, unique):
    topic = f"badman-{unique}"
    cfg = archive_config(services.bucket, topic, f"badman/{unique}/")
    good, broken, future = (OffsetWindow(0, i * 10, i * 10 + 10) for i in range(3))
    key = object_key(cfg.prefix, topic, good, 0, ".parquet")
    s3.put_object(Bucket=cfg.bucket, Key=key, Body=b"12345")
    bodies = {good: hand_manifest(topic, good, [{"key": key, "size": 5, "etag": "x"}]).dumps(),
              broken: b'{"manifest_version": 1, "topic": ',
              future: json.dumps({**json.loads(hand_manifest(topic, future).dumps()), "manifest_version": 4})}
    for w, body in bodies.items():
        s3.put_object(Bucket=cfg.bucket, Key=manifest_key(cfg.prefix, topic, w), Body=body)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(window_partitions(topic).name, [w.key for w in bodies])
    for w in bodies:
        instance.report_runless_asset_event(dg.AssetMaterialization(archive_asset_key(topic), partition=w.key))

    r = objects_result(instance, s3, cfg, topic)

    assert not r.passed and r.metadata["problems"].value == 2
    assert (r.metadata["manifests"].value, r.metadata["objects"].value) == (1, 1)  # the good one is still checked
    assert f"manifest s3://{cfg.bucket}/{manifest_key(cfg.prefix, topic, broken)} is not JSON" in r.description
    assert (f"manifest s3://{cfg.bucket}/{manifest_key(cfg.prefix, topic, future)} has manifest_version 4"
            in r.description) and "upgrade" in r.description
    assert "has no manifest" not in r.description  # an unreadable manifest is not a missing one
