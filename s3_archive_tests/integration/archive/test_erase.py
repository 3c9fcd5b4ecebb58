"""Erasure on request against the real broker, moto server and Spark: a key erased across a dozen windows is gone
from every object under the archive's prefix (read decompressed), a restore gives every other record byte for byte
and in order with the erased count, `verify` accepts the new generations; an erasure interrupted after writing its
new objects and run again leaves each window in exactly one generation; a compliance lock refuses; on a versioned
bucket under a governance lock (bypass allowed) the replaced objects' versions are gone too."""

from __future__ import annotations

import io
import json
import os

import pyarrow.parquet as pq
import pytest
import yaml

from s3_archive.archive.driver.archive_run import ArchiveContext
from s3_archive.archive.driver.commit import window_objects
from s3_archive.archive.driver.coordinator import archive_windows
from s3_archive.archive.erase_run import EraseHooks, EraseStep, erase
from s3_archive.archive.erasure import EraseRequest, salted_hash
from s3_archive.archive.verify import verify_topic
from s3_archive.cli import main
from s3_archive.config.settings import Settings
from s3_archive.defs.archive.erase_job import build_erase_job
from s3_archive.keys.objects import erasure_salt_key, generation_of_key
from s3_archive.model.errors import ErasureRefused
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.request import RestoreContext, RestoreRequest
from s3_archive.restore.run import restore_windows
from s3_archive.restore.sources import ArchiveSource
from s3_archive_tests.integration.archive_helpers import archive_config, log, manifest, s3_resource
from s3_archive_tests.integration.restore.test_restore import consume_all
from s3_archive_tests.kafka_helpers import create_topic, produce
from s3_archive_tests.lineage_events import capture_lineage, read_events, stop_capturing, validate_event

VICTIM = b"customer-4711"
WINDOWS = [OffsetWindow(0, i * 10, i * 10 + 10) for i in range(12)]


def _archived(kafka, spark, s3, bucket: str, name: str, unique: str, windows=WINDOWS, **options):
    """Windows of 10 records; the victim's key at offsets 3 and 7 of each window, a secret value of its own."""
    topic = create_topic(kafka, f"{name}-{unique}")
    records = []
    for i in range(windows[-1].end):
        victim = i % 10 in (3, 7)
        key = VICTIM if victim else f"k{i}".encode()
        value = (b"SECRET-" + os.urandom(8).hex().encode()) if victim else os.urandom(48)
        records.append((0, key, value, [("h", f"{i}".encode())]))
    produced = produce(kafka, topic, records)
    cfg = archive_config(bucket, topic, f"{name}/{unique}/", **options)
    results = archive_windows(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, windows)
    assert all(not isinstance(r, BaseException) for r in results.values()), results
    return cfg, topic, produced


def _text(v: object) -> str:
    return v.decode("latin-1") if isinstance(v, bytes) else str(v)  # bytes kept as they are, one char per byte


def _every_value_under(s3, bucket: str, prefix: str) -> tuple[list[bytes], list[bytes]]:
    """Every cell of every Parquet object under `prefix` (decompressed, as bytes), and every other object's bytes."""
    cells, others = [], []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for o in page.get("Contents", []):
            body = s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
            if not o["Key"].endswith(".parquet"):
                others.append(body)
                continue
            for row in pq.read_table(io.BytesIO(body)).to_pylist():
                cells += [v if isinstance(v, bytes) else json.dumps(v, default=_text).encode() for v in row.values()]
    return cells, others


def _one_generation(s3, cfg, topic: str, w: OffsetWindow, generation: int) -> None:
    m = manifest(s3, cfg, topic, w)
    assert m.generation == generation, (w.key, m.generation)
    where = cfg.location(topic, w)
    there = window_objects(s3, where, dead_letters=True)
    assert sorted(there) == sorted(o.key for o in m.all_objects), w.key  # no orphan, nothing of another generation
    assert {generation_of_key(k, where.suffix) for k in there} == {generation}


def test_a_key_erased_across_windows_is_gone_and_every_other_record_restores(kafka, s3, services, spark, unique,
                                                                             tmp_path, monkeypatch, capsys):
    cfg, topic, produced = _archived(kafka, spark, s3, services.bucket, "erase", unique)
    secrets = [r.value for r in produced if r.key == VICTIM]
    assert len(secrets) == 24

    config = tmp_path / "archives.yaml"
    config.write_text(yaml.safe_dump({"archives": [cfg.model_dump(mode="json", exclude_defaults=True)]}))
    for k, v in services.env().items():
        monkeypatch.setenv(k, v)
    assert main(["erase", "--config", str(config), "--topic", topic, "--key", VICTIM.decode(), "--dry-run"]) == 0
    assert f"{topic}: 24 record(s) would be erased in 12 of 12 window(s)" in capsys.readouterr().out
    assert all(manifest(s3, cfg, topic, w).generation == 1 for w in WINDOWS)  # a dry run writes nothing

    job = build_erase_job(Settings(archives=[cfg]))
    lineage = capture_lineage(monkeypatch, tmp_path / "lineage.jsonl")
    result = job.execute_in_process(run_config={"ops": {"erase_records": {"config": {"topic": topic,
                                                                                     "key": VICTIM.decode()}}}},
                                    resources={"s3": s3_resource(services)})
    assert result.success
    [observed] = [e.event_specific_data.asset_observation for e in result.all_events
                  if e.event_type_value == "ASSET_OBSERVATION"]
    assert observed.metadata["records_erased"].value == 24 and observed.metadata["windows_erased"].value == 12
    # Its lineage: the S3 location in and out, the windows rewritten and the records erased; never the key.
    start, complete = read_events(lineage)
    stop_capturing(monkeypatch)
    for e in (start, complete):
        validate_event(e)
        assert e["run"]["runId"] == result.run_id and e["job"]["name"] == f"erase.{cfg.name}.{topic}"
        assert [(d["namespace"], d["name"]) for d in e["inputs"] + e["outputs"]] == [
            (f"s3://{cfg.bucket}", f"{cfg.prefix}{topic}")] * 2
        assert VICTIM.decode() not in json.dumps(e) and not any(s.decode() in json.dumps(e) for s in secrets)
    assert (start["eventType"], complete["eventType"]) == ("START", "COMPLETE")
    erasure = complete["outputs"][0]["outputFacets"]["s3archive_erasure"]
    assert erasure == {**erasure, "records": 24, "windows": [{"key": w.key, "generation": 2, "records": 2}
                                                             for w in sorted(WINDOWS)]}

    cells, others = _every_value_under(s3, cfg.bucket, cfg.prefix)
    assert cells and not any(s in c for s in secrets for c in cells)
    assert VICTIM not in cells and not any(VICTIM in body or any(s in body for s in secrets) for body in others)
    for w in WINDOWS:
        _one_generation(s3, cfg, topic, w, 2)
        assert manifest(s3, cfg, topic, w).erased_offsets == [[w.start + 3, w.start + 4], [w.start + 7, w.start + 8]]
    [audit_key] = [o["Key"] for o in s3.list_objects_v2(Bucket=cfg.bucket, Prefix=f"{cfg.prefix}_erasure/{topic}/")
                   ["Contents"]]
    audit = json.loads(s3.get_object(Bucket=cfg.bucket, Key=audit_key)["Body"].read())
    salt = s3.get_object(Bucket=cfg.bucket, Key=erasure_salt_key(cfg.prefix))["Body"].read()
    assert (audit["records"], len(audit["windows"]), audit["subject_sha256"]) == (24, 12, [salted_hash(salt, VICTIM)])

    clean = verify_topic(s3, cfg, topic, full=True)
    assert (clean.failures, len(clean.read)) == ([], 12)

    target = create_topic(kafka, f"erased-restored-{unique}")
    reports = list(restore_windows(RestoreContext(kafka, s3, log), ArchiveSource(cfg.bucket, cfg.prefix),
                                   RestoreRequest(topic, target), WINDOWS))
    assert sum(r.erased for r in reports) == 24 and sum(r.restored for r in reports) == 96
    assert reports[0].metadata()["records_erased"] == 2
    got = [(g.key, g.value, g.headers, g.timestamp_ms) for g in consume_all(kafka, target)[0]]
    assert got == [(r.key, r.value, tuple(r.headers), r.timestamp_ms) for r in produced if r.key != VICTIM]

    # Nothing left to erase: a second request changes nothing and leaves no audit record
    again = erase(s3, cfg, EraseRequest(topic, (VICTIM,)))
    assert (again.records, again.audit_key) == (0, None) and manifest(s3, cfg, topic, WINDOWS[0]).generation == 2


class Crash(Exception):
    pass


def test_an_interrupted_erasure_run_again_leaves_each_window_in_one_generation(kafka, s3, services, spark, unique):
    windows = WINDOWS[:4]
    cfg, topic, _ = _archived(kafka, spark, s3, services.bucket, "erase-crash", unique, windows,
                              erasure={"mode": "null"})

    def fault(step: EraseStep, w: OffsetWindow) -> None:
        # windows 0 and 1 die with their new objects written; window 2 right after its manifest
        if (step, w) in {(EraseStep.WRITTEN, windows[0]), (EraseStep.WRITTEN, windows[1]),
                         (EraseStep.COMMITTED, windows[2])}:
            raise Crash(f"{step} {w.key}")

    with pytest.raises(Crash):
        erase(s3, cfg, EraseRequest(topic, (VICTIM,)), hooks=EraseHooks(fault))
    for w in windows[:2]:  # the old generation stands, beside the orphans of the lost attempt
        where = cfg.location(topic, w)
        there = window_objects(s3, where, dead_letters=True)
        assert manifest(s3, cfg, topic, w).generation == 1
        assert {generation_of_key(k, where.suffix) for k in there} == {1, 2}
    assert manifest(s3, cfg, topic, windows[2]).generation == 2

    report = erase(s3, cfg, EraseRequest(topic, (VICTIM,)))
    # window 2 was done (its nulled records no longer match); 3 may or may not have run before the crash
    assert {w.window for w in report.erased} >= {windows[0].key, windows[1].key}
    for w in windows:
        _one_generation(s3, cfg, topic, w, 2)
        m = manifest(s3, cfg, topic, w)
        assert m.erased_count == 2 and m.record_count == 8
        rows = pq.read_table(io.BytesIO(s3.get_object(Bucket=cfg.bucket, Key=m.objects[0].key)["Body"].read()))
        nulled = [r for r in rows.to_pylist() if r["offset"] in (w.start + 3, w.start + 7)]
        assert [(r["key"], r["value"], r["headers"]) for r in nulled] == [(None, None, None)] * 2  # mode null
    assert verify_topic(s3, cfg, topic, full=True).failures == []
    target = create_topic(kafka, f"erased-null-{unique}")
    reports = list(restore_windows(RestoreContext(kafka, s3, log), ArchiveSource(cfg.bucket, cfg.prefix),
                                   RestoreRequest(topic, target), windows))
    assert (sum(r.erased for r in reports), sum(r.restored for r in reports)) == (8, 32)


def test_a_compliance_lock_refuses_and_a_governance_lock_with_the_bypass_removes_every_version(kafka, spark,
                                                                                             moto_locked_store,
                                                                                             unique):
    s3 = moto_locked_store.client()
    cfg, topic, _ = _archived(kafka, spark, s3, moto_locked_store.bucket, "erase-locked", unique, WINDOWS[:1],
                              **moto_locked_store.archive_options)
    before = manifest(s3, cfg, topic, WINDOWS[0])
    with pytest.raises(ErasureRefused, match="retention_lock mode compliance"):
        erase(s3, cfg, EraseRequest(topic, (VICTIM,)))
    assert manifest(s3, cfg, topic, WINDOWS[0]) == before

    governed = {"retention_lock": {"mode": "governance", "days": 1}}
    cfg, topic, _ = _archived(kafka, spark, s3, moto_locked_store.bucket, "erase-gov", unique, WINDOWS[:1], **governed)
    with pytest.raises(ErasureRefused, match="erasure.allow_governance_bypass: true"):
        erase(s3, cfg, EraseRequest(topic, (VICTIM,)))
    old = manifest(s3, cfg, topic, WINDOWS[0])
    cfg = cfg.model_copy(update={"erasure": cfg.erasure.model_copy(update={"allow_governance_bypass": True})})
    assert erase(s3, cfg, EraseRequest(topic, (VICTIM,))).records == 2
    _one_generation(s3, cfg, topic, WINDOWS[0], 2)
    for o in old.objects:  # every version of the replaced object is gone, not hidden behind a delete marker
        versions = s3.list_object_versions(Bucket=cfg.bucket, Prefix=o.key)
        assert not [v for v in [*versions.get("Versions", []), *versions.get("DeleteMarkers", [])]
                    if v["Key"] == o.key]
    new = manifest(s3, cfg, topic, WINDOWS[0])
    head = s3.head_object(Bucket=cfg.bucket, Key=new.objects[0].key)
    assert head["ObjectLockMode"] == "GOVERNANCE" and new.retention == old.retention
