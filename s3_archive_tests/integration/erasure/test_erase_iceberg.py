"""Erasure from an archive of format iceberg against the real broker, moto server (S3 and Glue) and Spark: a key erased
across several windows by the `erase` job is gone from every version of every file under the table's location
(Parquet data files decoded, Iceberg's Avro manifests decoded, the rest as bytes) once its snapshots are expired;
Spark reading the table sees every other record; a restore gives every other record byte for byte and in order
with the erased count; `verify` accepts the new generations. An erasure interrupted after its table commits and run
again, and the CLI killed with SIGKILL mid-run and run again, leave each window in exactly one generation listing
the table's data files; an archive run of other windows of the topic racing the erasure loses neither change."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading

import fastavro
import pyarrow.parquet as pq
import pytest
import yaml

from s3_archive.archive.driver.archive_run import ArchiveContext, ArchiveHooks
from s3_archive.archive.driver.coordinator import archive_windows
from s3_archive.archive.verify import verify_topic
from s3_archive.config.settings import Settings
from s3_archive.defs.archive.erase_job import build_erase_job
from s3_archive.erasure.erase_run import EraseHooks, EraseStep, erase
from s3_archive.erasure.erasure import EraseRequest
from s3_archive.erasure.iceberg_erase import TableSession
from s3_archive.io.iceberg_catalog import S3Endpoint, table_ident
from s3_archive.io.s3_resource import S3Resource
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.request import RestoreContext, RestoreRequest
from s3_archive.restore.run import restore_windows
from s3_archive.restore.sources import ArchiveSource
from s3_archive_tests.credentials import TEST_AWS
from s3_archive_tests.integration.archive_helpers import log, manifest
from s3_archive_tests.integration.erasure.test_erase import (
    _KILLED_ERASE,
    VICTIM,
    WINDOWS,
    Crash,
    _archived,
    _audit_records,
    _random_value,
)
from s3_archive_tests.kafka_helpers import consume_all, create_topic, produce

ICEBERG = {"format": "iceberg"}


def _table(spark, s3) -> TableSession:
    return TableSession(spark, S3Endpoint.of_client(s3))


def _files(spark, cfg, topic: str, w: OffsetWindow) -> list[str]:
    """The keys of the table's current data files that hold window `w`'s rows."""
    rows = spark.sql(f"SELECT file_path, readable_metrics.`partition`.lower_bound AS p, "
                     f"readable_metrics.`offset`.lower_bound AS lo FROM {table_ident(cfg, topic)}.files").collect()
    prefix = f"s3://{cfg.bucket}/"
    return sorted(r["file_path"][len(prefix):] for r in rows if r["p"] == w.partition and w.start <= r["lo"] < w.end)


def _one_generation(spark, s3, cfg, topic: str, w: OffsetWindow, generation: int) -> None:
    """The window's manifest is of `generation` and lists exactly the table's data files of the window."""
    m = manifest(s3, cfg, topic, w)
    assert m.generation == generation, (w.key, m.generation)
    assert sorted(o.key for o in m.objects) == _files(spark, cfg, topic, w), w.key
    assert m.erased_offsets == [[w.start + 3, w.start + 4], [w.start + 7, w.start + 8]], w.key
    assert m.record_count == 8 and m.iceberg_table == table_ident(cfg, topic)


def _table_rows(spark, cfg, topic: str) -> list[tuple]:
    rows = spark.table(table_ident(cfg, topic)).orderBy("partition", "offset").collect()
    return [(r["offset"], _bytes(r["key"]), _bytes(r["value"]), tuple((h["key"], _bytes(h["value"]))
                                                                       for h in r["headers"] or [])) for r in rows]


def _read_back(spark, kafka, s3, cfg, topic: str, windows: list[OffsetWindow], kept: list, target: str) -> None:
    """Spark reads exactly `kept` from the table, the archive verifies clean, and a restore of `windows` into a new
    topic `target` gives `kept` byte for byte and in order, every other record of the windows counted as erased."""
    assert _table_rows(spark, cfg, topic) == [(r.offset, r.key, r.value, tuple(r.headers)) for r in kept]
    assert verify_topic(s3, cfg, topic, full=True).failures == []
    create_topic(kafka, target)
    reports = list(restore_windows(RestoreContext(kafka, s3, log), ArchiveSource(cfg.bucket, cfg.prefix),
                                   RestoreRequest(topic, target), windows))
    total = sum(w.end - w.start for w in windows)
    assert (sum(r.erased for r in reports), sum(r.restored for r in reports)) == (total - len(kept), len(kept))
    got = [(g.key, g.value, g.headers, g.timestamp_ms) for g in consume_all(kafka, target)[0]]
    assert got == [(r.key, r.value, tuple(r.headers), r.timestamp_ms) for r in kept]


def _bytes(v):
    return None if v is None else bytes(v)


def _leaks(s3, bucket: str, prefix: str, needles: list[bytes]) -> list[str]:
    """Every version of every object under `prefix` that holds one of `needles`: Parquet files decoded cell by cell,
    Avro files (Iceberg's manifests and manifest lists, deflated) decoded record by record, the others as bytes."""
    found = []
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
        for v in page.get("Versions", []):
            body = s3.get_object(Bucket=bucket, Key=v["Key"], VersionId=v["VersionId"])["Body"].read()
            if v["Key"].endswith(".parquet"):
                text = repr(pq.read_table(io.BytesIO(body)).to_pylist()).encode()
            elif v["Key"].endswith(".avro"):
                text = repr(list(fastavro.reader(io.BytesIO(body)))).encode()
            else:
                text = body
            found += [f"{v['Key']}@{v['VersionId']}" for n in needles if n in text or repr(n)[2:-1].encode() in text]
    return found


def test_a_key_erased_from_an_iceberg_archive_is_gone_from_the_table_and_every_other_record_restores(
        kafka, s3, services, spark, spark_resource, unique, tmp_path):
    bucket = f"erase-ice-{unique}"
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    windows = WINDOWS[:6]
    cfg, topic, produced = _archived(kafka, spark, s3, bucket, "erase-ice", unique, windows, **ICEBERG)
    secrets = [r.value for r in produced if r.key == VICTIM]
    needles = [VICTIM, *(s[:16] for s in secrets)]  # Iceberg's column bounds keep 16 bytes of a value
    table_prefix = f"{cfg.prefix}_iceberg/"
    assert _leaks(s3, bucket, table_prefix, needles)  # the check finds them before the erasure

    dry = erase(s3, cfg, EraseRequest(topic, (VICTIM,)), dry_run=True)  # no Spark session needed
    assert (dry.records, len(dry.erased)) == (12, 6)
    s3r = S3Resource(endpoint_url=services.s3_endpoint_url, region_name=TEST_AWS["AWS_REGION"], path_style=True,
                     aws_access_key_id=TEST_AWS["AWS_ACCESS_KEY_ID"],
                     aws_secret_access_key=TEST_AWS["AWS_SECRET_ACCESS_KEY"])
    result = build_erase_job(Settings(archives=[cfg])).execute_in_process(
        run_config={"ops": {"erase_records": {"config": {"topic": topic, "key": VICTIM.decode()}}}},
        resources={"s3": s3r, "spark": spark_resource})
    assert result.success
    [observed] = [e.event_specific_data.asset_observation for e in result.all_events
                  if e.event_type_value == "ASSET_OBSERVATION"]
    meta = {k: v.value for k, v in observed.metadata.items()}
    assert (meta["records_erased"], meta["windows_erased"]) == (12, 6)
    assert meta["iceberg_expired_data_files"] >= 6 and meta["iceberg_versions_deleted"] > 0

    ident = table_ident(cfg, topic)
    [current] = [r["snapshot_id"] for r in spark.sql(f"SELECT snapshot_id FROM {ident}.snapshots").collect()]
    for w in windows:
        _one_generation(spark, s3, cfg, topic, w, 2)
        assert manifest(s3, cfg, topic, w).iceberg_snapshot_id is not None
    # every version of every file under the table's location: none holds the key or a secret (nor a prefix of one)
    assert _leaks(s3, bucket, table_prefix, needles) == []
    deleted = [d["Key"] for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket,
                                                                                       Prefix=table_prefix)
               for d in page.get("DeleteMarkers", [])]
    assert deleted == []  # what Iceberg deleted is gone with every version, not hidden behind a delete marker
    assert current == spark.sql(f"SELECT snapshot_id FROM {ident}.history WHERE is_current_ancestor "
                                "ORDER BY made_current_at DESC LIMIT 1").collect()[0]["snapshot_id"]

    # Spark reading the table sees every other record
    _read_back(spark, kafka, s3, cfg, topic, windows, [r for r in produced if r.key != VICTIM],
               f"erased-ice-restored-{unique}")

    again = erase(s3, cfg, EraseRequest(topic, (VICTIM,)), table=_table(spark, s3))
    assert (again.records, again.audit_key) == (0, None) and manifest(s3, cfg, topic, windows[0]).generation == 2


def test_an_interrupted_iceberg_erasure_run_again_leaves_each_window_in_one_generation(kafka, s3, services, spark,
                                                                                     unique):
    windows = WINDOWS[:4]
    cfg, topic, produced = _archived(kafka, spark, s3, services.bucket, "erase-ice-crash", unique, windows,
                                     erasure={"mode": "null"}, **ICEBERG)
    old = {w: manifest(s3, cfg, topic, w) for w in windows}

    def fault(step: EraseStep, w: OffsetWindow) -> None:
        # windows 0 and 1 die with their rows committed to the table; window 2 right after its manifest
        if (step, w) in {(EraseStep.WRITTEN, windows[0]), (EraseStep.WRITTEN, windows[1]),
                         (EraseStep.COMMITTED, windows[2])}:
            raise Crash(f"{step} {w.key}")

    with pytest.raises(Crash):
        erase(s3, cfg, EraseRequest(topic, (VICTIM,)), hooks=EraseHooks(fault), table=_table(spark, s3))
    for w in windows[:2]:  # the old generation stands, its data files too (nothing expired after a failure)
        m = manifest(s3, cfg, topic, w)
        assert m.generation == 1 and m.objects == old[w].objects
        assert all(s3.head_object(Bucket=cfg.bucket, Key=o.key) for o in m.objects)
        assert _files(spark, cfg, topic, w) != [o.key for o in m.objects]  # the table holds the erasure's files
    assert manifest(s3, cfg, topic, windows[2]).generation == 2

    report = erase(s3, cfg, EraseRequest(topic, (VICTIM,)), table=_table(spark, s3))
    assert {w.window for w in report.erased} >= {windows[0].key, windows[1].key}
    assert all(w.records == 2 for w in report.erased)
    for w in windows:
        _one_generation(spark, s3, cfg, topic, w, 2)
    rows = _table_rows(spark, cfg, topic)
    nulled = [r for r in rows if r[0] % 10 in (3, 7)]
    assert [r[1:] for r in nulled] == [(None, None, ())] * 8  # mode null: the position stays, the rest is null
    assert [r for r in rows if r[0] % 10 not in (3, 7)] == [(r.offset, r.key, r.value, tuple(r.headers))
                                                             for r in produced if r.key != VICTIM]
    for w in windows[:2]:  # the replaced files are gone now
        assert all(s3.list_objects_v2(Bucket=cfg.bucket, Prefix=o.key).get("KeyCount", 0) == 0
                   for o in old[w].objects)
    assert verify_topic(s3, cfg, topic, full=True).failures == []
    target = create_topic(kafka, f"erased-ice-null-{unique}")
    reports = list(restore_windows(RestoreContext(kafka, s3, log), ArchiveSource(cfg.bucket, cfg.prefix),
                                   RestoreRequest(topic, target), windows))
    assert (sum(r.erased for r in reports), sum(r.restored for r in reports)) == (8, 32)


def test_the_cli_killed_mid_iceberg_erasure_and_run_again_leaves_each_window_in_one_generation(
        kafka, s3, services, spark, unique, tmp_path):
    windows = WINDOWS[:6]
    cfg, topic, produced = _archived(kafka, spark, s3, services.bucket, "erase-ice-kill", unique, windows,
                                     **ICEBERG)
    config = tmp_path / "archives.yaml"
    config.write_text(yaml.safe_dump({"archives": [cfg.model_dump(mode="json", exclude_defaults=True)]}))
    argv = ["erase", "--config", str(config), "--topic", topic, "--key", VICTIM.decode()]
    env = {**os.environ, **services.env(), "PYTHONPATH": os.getcwd(), "S3_ARCHIVE_SPARK_MASTER": "local[2]"}
    proc = subprocess.run([sys.executable, "-c", _KILLED_ERASE, json.dumps({"argv": argv, "kill_after": 3})],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == -9, f"rc {proc.returncode}: {proc.stderr[-3000:]}"
    gens = {w.key: manifest(s3, cfg, topic, w).generation for w in windows}
    assert 3 <= sum(g == 2 for g in gens.values()) < 6, gens
    [intent] = _audit_records(s3, cfg, topic)
    assert intent["state"] == "open"

    again = subprocess.run([sys.executable, "-m", "s3_archive.cli", *argv], capture_output=True, text=True,
                           timeout=600, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "completed the audit record of an interrupted erasure" in again.stdout
    for w in windows:
        _one_generation(spark, s3, cfg, topic, w, 2)
    assert verify_topic(s3, cfg, topic, full=True).failures == []
    records = {r["erasure_id"]: r for r in _audit_records(s3, cfg, topic)}
    assert {r["state"] for r in records.values()} == {"complete"}
    assert sum(r["records"] for r in records.values()) == 12
    secrets = [r.value for r in produced if r.key == VICTIM]
    assert _leaks(s3, cfg.bucket, f"{cfg.prefix}_iceberg/", [VICTIM, *(s[:16] for s in secrets)]) == []
    assert _table_rows(spark, cfg, topic) == [(r.offset, r.key, r.value, tuple(r.headers)) for r in produced
                                              if r.key != VICTIM]


def test_an_archive_run_of_the_topic_racing_an_iceberg_erasure_loses_neither_change(kafka, s3, services, spark,
                                                                                    unique):
    """The archive run of windows 3-5 reads the table's snapshot, then waits until the erasure of windows 0-2 has
    committed and expired every older snapshot (the one it read among them); its commit is then refused, it looks
    again and commits, and the erasure's windows keep their erased rows."""
    windows = WINDOWS[:6]
    cfg, topic, produced = _archived(kafka, spark, s3, services.bucket, "erase-ice-race", unique, windows[:3],
                                     **ICEBERG)
    produced += produce(kafka, topic, [(0, VICTIM if i % 10 in (3, 7) else f"k{i}".encode(),
                                        _random_value(i, i % 10 in (3, 7)), [("h", f"{i}".encode())])
                                       for i in range(windows[3].start, windows[-1].end)])
    checked, erased, results, errors, steps = threading.Event(), threading.Event(), [], [], []

    def archive_rest() -> None:
        def fault(step: str) -> None:
            steps.append(str(step))
            if step == "iceberg_checked" and not erased.is_set():
                checked.set()
                assert erased.wait(300)
        try:
            ctx = ArchiveContext.of_client(spark, kafka, s3, log)
            results.append(archive_windows(ctx, cfg, topic, windows[3:], ArchiveHooks(fault=fault)))
        except Exception as e:  # pragma: no cover - reported by the assertion below
            errors.append(e)

    t = threading.Thread(target=archive_rest)
    t.start()
    try:  # the erasure's windows commit once the archive run has read the snapshot it validates from
        report = erase(s3, cfg, EraseRequest(topic, (VICTIM,)), table=_table(spark, s3),
                       hooks=EraseHooks(lambda step, w: checked.wait(300)))
    finally:
        erased.set()
    t.join(600)
    assert report.records == 6 and report.expired["expired_data_files"] >= 3
    assert errors == [] and [r.outcome for r in results[0].values()] == ["committed"] * 3, results
    # its first commit was refused (the snapshot it read is expired: Iceberg cannot validate from it), and it looked
    # again and committed
    assert steps.count("iceberg_checked") == 2, steps
    for w in windows[:3]:
        _one_generation(spark, s3, cfg, topic, w, 2)
    for w in windows[3:]:
        m = manifest(s3, cfg, topic, w)
        assert m.generation == 1 and sorted(o.key for o in m.objects) == _files(spark, cfg, topic, w)
    _read_back(spark, kafka, s3, cfg, topic, windows,
               [r for r in produced if r.key != VICTIM or r.offset >= windows[3].start], f"erased-ice-race-{unique}")
