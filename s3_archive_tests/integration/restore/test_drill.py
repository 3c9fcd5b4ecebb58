"""The restore drill against the real broker, moto server and Spark: a drill of a healthy archive, run by the daily
checks job, restores its sample into a scratch topic it then deletes, finds every record byte for byte and records
the restore's seconds per GB as a float; an object with a byte flipped (it still decodes) and an object gone each
fail the drill, naming the window and the object."""

from __future__ import annotations

import json
import time

import dagster as dg

from s3_archive.archive.driver.archive_run import ArchiveContext
from s3_archive.archive.driver.coordinator import archive_windows
from s3_archive.config.compliance import DrillOptions
from s3_archive.defs.archive.assets import build_archive_assets
from s3_archive.defs.archive.checks import DRILL, build_archive_checks
from s3_archive.defs.archive.schedules import build_checks_schedule, checks_job_name
from s3_archive.keys.objects import drill_state_key
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.drill import drill_topic
from s3_archive.restore.drill_plan import SCRATCH_PREFIX
from s3_archive_tests.integration.archive_helpers import archive_config, log, manifest, resources
from s3_archive_tests.kafka_helpers import NASTY, create_topic, produce

WINDOWS = [OffsetWindow(p, s, s + 10) for p in (0, 1) for s in (0, 10)]
# Every odd record of NASTY (binary, null and empty keys, values and headers, repeated header names), but the 1 MiB
# one, and plain ones with distinct values; 20 a partition.
_ODD = [r for r in NASTY if r[0] != b"big"]
RECORDS = [(p, *_ODD[i % len(_ODD)]) if i % 3 == 0 else (p, f"k{i}".encode(), f"value-{p}-{i:04d}".encode(),
                                                          [("n", str(i).encode())])
           for p in (0, 1) for i in range(20)]


def _archived(kafka, spark, s3, bucket: str, unique: str, name: str, **options):
    # timestamps from 2023: kept by retention.ms -1 (the session broker checks retention every second)
    topic = create_topic(kafka, f"drill-{name}-{unique}", partitions=2, config={"retention.ms": "-1"})
    produce(kafka, topic, RECORDS, timestamps=[1_700_000_000_000 + i for i in range(len(RECORDS))])
    cfg = archive_config(bucket, topic, f"drill/{unique}/", drill=DrillOptions(bytes_per_run=1 << 30), **options)
    results = archive_windows(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, WINDOWS)
    assert all(not isinstance(r, BaseException) for r in results.values()), results
    return cfg, topic


def _scratch_topics(kafka, topic: str) -> list[str]:
    """The drill topics of `topic` still on the cluster (a deletion shows in the metadata within moments)."""
    deadline = time.monotonic() + 15
    while True:
        left = [t for t in kafka.topics() if t.startswith(f"{SCRATCH_PREFIX}{topic}-")]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def test_a_drill_of_a_healthy_archive_passes_in_the_daily_checks_job_and_records_rto(
        kafka, s3, services, spark, spark_resource, unique):
    cfg, topic = _archived(kafka, spark, s3, services.bucket, unique, "healthy")
    defs = dg.Definitions(assets=build_archive_assets([cfg]), asset_checks=build_archive_checks(cfg, topic),
                          jobs=[build_checks_schedule(cfg)[0]], resources=resources(services, kafka, spark_resource))
    result = defs.resolve_job_def(checks_job_name(cfg)).execute_in_process(instance=dg.DagsterInstance.ephemeral())

    drill = {e.check_name: e for e in result.get_asset_check_evaluations()}[DRILL]
    assert drill.passed, drill.description
    meta = drill.metadata
    assert isinstance(meta["restore_seconds_per_gb"], dg.FloatMetadataValue)  # plotted by Dagster
    assert meta["restore_seconds_per_gb"].value > 0 and meta["restore_seconds"].value > 0
    assert (meta["windows_drilled"].value, meta["records"].value, meta["records_compared"].value) == (4, 40, 40)
    assert meta["object_bytes"].value == sum(o.size for w in WINDOWS for o in manifest(s3, cfg, topic, w).objects)
    scratch = meta["scratch_topic"].value
    assert scratch.startswith(f"{SCRATCH_PREFIX}{topic}-") and _scratch_topics(kafka, topic) == []
    ledger = f"s3-archive-restore.{topic}.{scratch}"
    groups = kafka.admin().list_consumer_groups(request_timeout=10).result(timeout=15).valid
    assert ledger not in {g.group_id for g in groups}  # the restore's ledger went with the topic

    state = json.loads(s3.get_object(Bucket=cfg.bucket, Key=drill_state_key(cfg.prefix, topic))["Body"].read())
    assert (state["cursor"], state["last_passed"]) == (WINDOWS[-1].key, True)
    # The next day no drill is due: the check passes saying when the next one is, and restores nothing.
    again = drill_topic(kafka, s3, cfg, topic, log)
    assert not again.ran and again.problems == [] and again.last_drill == state["last_drill"]
    assert "the next is due at" in again.ok and again.metadata()["drilled"] is False
    # A topic with no committed window yet: nothing to drill, the check passes and records no drill.
    empty = archive_config(cfg.bucket, f"none-{unique}", cfg.prefix, drill=DrillOptions())
    nothing = drill_topic(kafka, s3, empty, f"none-{unique}", log)
    assert nothing.ran and nothing.problems == [] and nothing.drilled == [] and "to drill yet" in nothing.ok
    assert s3.list_objects_v2(Bucket=cfg.bucket, Prefix=drill_state_key(cfg.prefix, f"none-{unique}"))["KeyCount"] == 0


def test_a_drill_fails_naming_a_changed_object_and_an_unreadable_one(kafka, s3, services, spark, unique):
    cfg, topic = _archived(kafka, spark, s3, services.bucket, unique, "corrupt", compression="none")
    bucket = cfg.bucket
    # A byte of one record's value flipped in its uncompressed Parquet page: the object still decodes.
    changed = manifest(s3, cfg, topic, WINDOWS[1]).objects[0].key
    original = s3.get_object(Bucket=bucket, Key=changed)["Body"].read()
    at = original.index(b"value-0-0014")
    s3.put_object(Bucket=bucket, Key=changed, Body=original[:at] + b"valuE" + original[at + 5:])

    report = drill_topic(kafka, s3, cfg, topic, log)
    assert report.ran and report.drilled == [w.key for w in WINDOWS]
    assert len(report.problems) == 1, report.problems
    assert report.problems[0].startswith(f"window {WINDOWS[1].key}: changed s3://{bucket}/{changed}: its bytes hash "
                                         "to ")
    assert _scratch_topics(kafka, topic) == []

    # Put back, and another window's object gone: the restore fails, and the drill names the object.
    s3.put_object(Bucket=bucket, Key=changed, Body=original)
    gone = manifest(s3, cfg, topic, WINDOWS[2]).objects[0].key
    s3.delete_object(Bucket=bucket, Key=gone)
    report = drill_topic(kafka, s3, cfg, topic, log)  # due again at once: the last drill failed
    assert report.ran and len(report.problems) == 2, report.problems
    assert report.problems[0].startswith("the restore of window(s) ")
    assert report.problems[1].startswith(f"window {WINDOWS[2].key}: s3://{bucket}/{gone} could not be read: ")
    assert _scratch_topics(kafka, topic) == []
