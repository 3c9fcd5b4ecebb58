"""Erasure on request against the real broker, moto server and Spark: a key erased across a dozen windows is gone
from every object under the archive's prefix (read decompressed), a restore gives every other record byte for byte
and in order with the erased count, `verify` accepts the new generations; every erasable format's objects, as the
archive run wrote them, are rewritten to the same bytes when nothing is erased, and erased in every format (dead
letters too); an erasure interrupted after writing its new objects and run again, and the CLI killed with SIGKILL
mid-run and run again, leave each window in exactly one generation, and the killed run's audit record completed; an
archive run of a window racing its erasure loses nothing and keeps the erasure; a compliance lock refuses; on a
versioned bucket under a governance lock (bypass allowed) the replaced objects' versions are gone too."""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
import threading

import pyarrow.parquet as pq
import pytest
import yaml

from s3_archive.archive.driver.archive_run import ArchiveContext, ArchiveHooks
from s3_archive.archive.driver.commit import window_objects
from s3_archive.archive.driver.coordinator import archive_window, archive_windows
from s3_archive.archive.verify import verify_topic
from s3_archive.cli import main
from s3_archive.config.settings import Settings
from s3_archive.defs.archive.erase_job import build_erase_job
from s3_archive.erasure.erase_run import EraseHooks, EraseStep, erase
from s3_archive.erasure.erasure import EraseRequest, salted_hash
from s3_archive.erasure.rewrite import ObjectFormat, decode, matching, rewritten
from s3_archive.keys.objects import erasure_salt_key, generation_of_key
from s3_archive.model.errors import ErasureRefused
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.request import RestoreContext, RestoreRequest
from s3_archive.restore.run import restore_windows
from s3_archive.restore.sources import ArchiveSource
from s3_archive_tests.integration.archive_helpers import archive_config, log, manifest, s3_resource
from s3_archive_tests.kafka_helpers import consume_all, create_topic, produce
from s3_archive_tests.lineage_events import capture_lineage, read_events, stop_capturing, validate_event

VICTIM = b"customer-4711"
WINDOWS = [OffsetWindow(0, i * 10, i * 10 + 10) for i in range(12)]


def _random_value(i: int, victim: bool) -> bytes:
    return (b"SECRET-" + os.urandom(8).hex().encode()) if victim else os.urandom(48)


def _archived(kafka, spark, s3, bucket: str, name: str, unique: str, windows=WINDOWS, value=_random_value,
              **options):
    """Windows of 10 records; the victim's key at offsets 3 and 7 of each window, a secret value of its own."""
    topic = create_topic(kafka, f"{name}-{unique}")
    records = []
    for i in range(windows[-1].end):
        victim = i % 10 in (3, 7)
        key = VICTIM if victim else f"k{i}".encode()
        records.append((0, key, value(i, victim), [("h", f"{i}".encode())]))
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


def _one_generation(s3, cfg, topic: str, w: OffsetWindow, generation: int, all_rewritten: bool = True) -> None:
    m = manifest(s3, cfg, topic, w)
    assert m.generation == generation, (w.key, m.generation)
    where = cfg.location(topic, w)
    there = window_objects(s3, where, dead_letters=True)
    assert sorted(there) == sorted(o.key for o in m.all_objects), w.key  # no orphan, nothing of another generation
    if all_rewritten:  # else objects without a match keep their first name
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


def _stored(s3, cfg, key: str) -> bytes:
    return s3.get_object(Bucket=cfg.bucket, Key=key)["Body"].read()


def _decoded(s3, cfg, m, request: EraseRequest):
    dead = {o.key for o in m.dead_letter_objects}
    return [(o, decode(_stored(s3, cfg, o.key), o.key, ObjectFormat.of(cfg, dead_letter=o.key in dead), request))
            for o in m.all_objects]


def _json_value(i: int, victim: bool) -> bytes:
    return (b'{"user": "victim", "secret": "S%d"}' % i) if victim else (b'{"user": "u%d", "n": %d}' % (i, i))


FORMAT_CASES = {
    "parquet": {},
    "avro": {"format": "avro"},
    "jsonl-gzip": {"format": "jsonl", "compression": "gzip"},
    "json-zstd": {"format": "json", "compression": "zstd"},
    "csv-header": {"format": "csv", "compression": "gzip", "sink_output": {"csv_header": True}},
    "parquet-dead-letters": {"value_decoding": {"type": "json", "json_schema": "user STRING, n BIGINT",
                                                "on_error": "dead_letter"}},
}


@pytest.mark.parametrize("case", FORMAT_CASES)
def test_each_format_is_rewritten_as_the_archive_writes_it_and_erased(kafka, s3, services, spark, unique, case):
    windows = WINDOWS[:3]
    options = FORMAT_CASES[case]
    dead_letters = case == "parquet-dead-letters"
    # with dead letters: the victim's values are not JSON (dead letters), every other value is
    value = (lambda i, victim: b"SECRET-%d not json" % i if victim else _json_value(i, False)) if dead_letters \
        else _random_value
    cfg, topic, produced = _archived(kafka, spark, s3, services.bucket, f"erase-{case}", unique, windows, value,
                                     **options)
    request = EraseRequest(topic, (VICTIM,))
    secrets = [r.value for r in produced if r.key == VICTIM]
    for w in windows:  # the objects as the archive run wrote them, rewritten with nothing erased: the same bytes
        m = manifest(s3, cfg, topic, w)
        assert bool(m.dead_letter_objects) == dead_letters
        for o, d in _decoded(s3, cfg, m, request):
            assert rewritten(d, [], cfg.erasure.mode) == _stored(s3, cfg, o.key), o.key

    report = erase(s3, cfg, request)
    assert (report.records, len(report.erased)) == (6, 3)
    for w in windows:
        _one_generation(s3, cfg, topic, w, 2, all_rewritten=not dead_letters)  # the data objects hold no victim
        m = manifest(s3, cfg, topic, w)
        assert not m.dead_letter_objects  # they held only the victim's records: emptied, not written again
        assert m.erased_offsets == [[w.start + 3, w.start + 4], [w.start + 7, w.start + 8]]
        for o, d in _decoded(s3, cfg, m, request):  # read back in its format: no victim's key nor value is left
            assert matching(d, request) == [] and len(d) == 8
            text = d.rows.to_pylist() if hasattr(d.rows, "to_pylist") else d.rows
            assert not any(s in repr(text).encode() or base64.b64encode(s) in repr(text).encode() for s in secrets)
    assert verify_topic(s3, cfg, topic, full=True).failures == []
    if cfg.format == "csv":  # not restorable (not lossless): the objects were checked above
        return
    target = create_topic(kafka, f"erased-{case}-{unique}")
    reports = list(restore_windows(RestoreContext(kafka, s3, log), ArchiveSource(cfg.bucket, cfg.prefix),
                                   RestoreRequest(topic, target), windows))
    assert (sum(r.erased for r in reports), sum(r.restored for r in reports)) == (6, 24)
    got = [(g.key, g.value, g.headers, g.timestamp_ms) for g in consume_all(kafka, target)[0]]
    assert got == [(r.key, r.value, tuple(r.headers), r.timestamp_ms) for r in produced if r.key != VICTIM]


_KILLED_ERASE = """
import json, os, signal, sys, threading
from s3_archive.erasure import erase_run
from s3_archive.erasure.erase_run import EraseHooks, EraseStep

a = json.loads(sys.argv[1])
committed, lock = [], threading.Lock()

def fault(step, window):
    if step == EraseStep.COMMITTED:
        with lock:
            committed.append(window.key)
            if len(committed) == a["kill_after"]:
                os.kill(os.getpid(), signal.SIGKILL)  # no clean-up at all: other windows are mid-way

erase_run.DEFAULT_HOOKS = EraseHooks(fault)
from s3_archive.cli import main
main(a["argv"])
raise SystemExit("the erasure was not killed")
"""


def _audit_records(s3, cfg, topic: str) -> list[dict]:
    listed = s3.list_objects_v2(Bucket=cfg.bucket, Prefix=f"{cfg.prefix}_erasure/{topic}/").get("Contents", [])
    return [json.loads(_stored(s3, cfg, o["Key"])) for o in listed]


def test_the_cli_killed_mid_erasure_and_run_again_leaves_each_window_in_one_generation(kafka, s3, services, spark,
                                                                                       unique, tmp_path):
    cfg, topic, produced = _archived(kafka, spark, s3, services.bucket, "erase-kill", unique)
    config = tmp_path / "archives.yaml"
    config.write_text(yaml.safe_dump({"archives": [cfg.model_dump(mode="json", exclude_defaults=True)]}))
    argv = ["erase", "--config", str(config), "--topic", topic, "--key", VICTIM.decode()]
    env = {**os.environ, **services.env(), "PYTHONPATH": os.getcwd()}
    proc = subprocess.run([sys.executable, "-c", _KILLED_ERASE, json.dumps({"argv": argv, "kill_after": 5})],
                          capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == -9, f"rc {proc.returncode}: {proc.stderr[-3000:]}"

    gens = {w.key: manifest(s3, cfg, topic, w).generation for w in WINDOWS}
    assert 5 <= sum(g == 2 for g in gens.values()) < 12, gens  # killed mid-way: some windows done, not all
    [intent] = _audit_records(s3, cfg, topic)
    assert intent["state"] == "open" and "windows" not in intent  # the intent was written before any rewrite
    killed = intent["erasure_id"]
    by_killed = {w.key for w in WINDOWS if manifest(s3, cfg, topic, w).attempt == killed}
    assert by_killed == {k for k, g in gens.items() if g == 2}

    again = subprocess.run([sys.executable, "-m", "s3_archive.cli", *argv], capture_output=True, text=True,
                           timeout=180, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "completed the audit record of an interrupted erasure" in again.stdout
    for w in WINDOWS:
        _one_generation(s3, cfg, topic, w, 2)
        assert manifest(s3, cfg, topic, w).erased_offsets == [[w.start + 3, w.start + 4], [w.start + 7, w.start + 8]]
    assert verify_topic(s3, cfg, topic, full=True).failures == []
    records = {r["erasure_id"]: r for r in _audit_records(s3, cfg, topic)}
    assert {r["state"] for r in records.values()} == {"complete"}
    completed = records.pop(killed)
    [rerun] = records.values()
    assert completed["completed_by"] == rerun["erasure_id"]
    assert {w["window"] for w in completed["windows"]} == by_killed
    assert {w["window"] for w in rerun["windows"]} == {w.key for w in WINDOWS} - by_killed
    assert completed["records"] + rerun["records"] == 24 and all(w["records"] == 2 for w in completed["windows"])
    assert rerun["subject_sha256"] == completed["subject_sha256"]
    cells, others = _every_value_under(s3, cfg.bucket, cfg.prefix)
    secrets = [r.value for r in produced if r.key == VICTIM]
    assert not any(s in c for s in secrets for c in cells) and VICTIM not in cells


def test_an_archive_run_racing_the_erasure_of_its_window_loses_nothing_and_keeps_the_erasure(kafka, s3, services,
                                                                                            spark, unique):
    """Attempt A archives a window with Spark and stops before its commit; attempt B archives and commits the same
    window; the window is erased; then A commits: it adopts the erased generation, deletes what it wrote, and the
    window restores every record but the erased ones."""
    window = WINDOWS[0]
    cfg, topic, produced = _archived(kafka, spark, s3, services.bucket, "erase-race", unique, [window])
    cfg = cfg.model_copy(update={"prefix": f"{cfg.prefix}race/"})  # a prefix the helper's own run has not written
    written, erased, results, errors = threading.Event(), threading.Event(), [], []

    def attempt_a() -> None:
        def fault(at: str) -> None:
            if at == "written":
                written.set()
                assert erased.wait(300)
        try:
            results.append(archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, window,
                                          ArchiveHooks(fault=fault)))
        except Exception as e:  # pragma: no cover - reported by the assertion below
            errors.append(e)

    a = threading.Thread(target=attempt_a)
    a.start()
    assert written.wait(300), errors
    b = archive_window(ArchiveContext.of_client(spark, kafka, s3, log), cfg, topic, window)
    assert b.outcome == "committed"
    assert erase(s3, cfg, EraseRequest(topic, (VICTIM,))).records == 2
    erased.set()
    a.join(300)

    assert errors == [] and [r.outcome for r in results] == ["committed_by_concurrent_attempt"]
    _one_generation(s3, cfg, topic, window, 2)
    assert verify_topic(s3, cfg, topic, full=True).failures == []
    target = create_topic(kafka, f"erase-race-restored-{unique}")
    reports = list(restore_windows(RestoreContext(kafka, s3, log), ArchiveSource(cfg.bucket, cfg.prefix),
                                   RestoreRequest(topic, target), [window]))
    assert (sum(r.erased for r in reports), sum(r.restored for r in reports)) == (2, 8)
    got = [(g.key, g.value, g.headers, g.timestamp_ms) for g in consume_all(kafka, target)[0]]
    assert got == [(r.key, r.value, tuple(r.headers), r.timestamp_ms) for r in produced if r.key != VICTIM]
