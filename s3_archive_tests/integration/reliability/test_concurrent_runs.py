"""Two runs of the same windows launched at once (two backfills of one range), each in its own process as a
deployment runs them: each process starts its own Spark session (its own driver JVM), both wait at a barrier, then
both materialize the archive asset over the same windows at the same moment, so their Spark jobs overlap. Exactly
once lives in S3 (the manifest PUT with If-None-Match: *, docs/commit-protocol.md), not in Dagster's instance: each
run has an ephemeral one. Against moto and against versitygw (`store`)."""

from __future__ import annotations

import time

from s3_archive.io.s3 import list_objects
from s3_archive.keys.objects import MANIFESTS, manifest_key
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.credentials import TEST_AWS
from s3_archive_tests.integration.archive_helpers import (
    archive_config,
    archived_records,
    final_objects,
    manifest,
    staging_objects,
)
from s3_archive_tests.integration.spark.runner import RunningJob, archive_spec, job_result, start_job
from s3_archive_tests.kafka_helpers import NASTY, create_topic, produce

WINDOWS = [OffsetWindow(0, 0, 8), OffsetWindow(1, 0, 5), OffsetWindow(1, 5, 8)]
# What the attempt that does not commit a window reports (docs/commit-protocol.md): it found the manifest at its
# step 1, or got 412 on its manifest PUT (or on an object PUT, with the manifest there) and adopted the winner's.
ADOPTED = {"committed_by_concurrent_attempt", "already_committed"}


def _all_ready(runs: list[RunningJob], ready: list, timeout: float = 240.0) -> None:
    """Wait until every run has started its Spark session (touched its `ready` file); a run that exits before
    that fails the test with its output."""
    deadline = time.monotonic() + timeout
    while not all(r.exists() for r in ready):
        for run in runs:
            if run.proc.poll() is not None:
                job_result(run)  # raises with the run's output
        assert time.monotonic() < deadline, f"the runs did not start their Spark sessions within {timeout:.0f}s"
        time.sleep(0.05)


def test_two_runs_of_the_same_windows_at_once_commit_each_window_exactly_once(kafka, store, unique, tmp_path):
    s3 = store.client()
    topic = create_topic(kafka, f"race-{unique}", partitions=2)
    produced = produce(kafka, topic, [(i % 2, k, v, h) for i, (k, v, h) in enumerate(NASTY * 2)])
    # Several objects per window: more keys the two runs race for.
    cfg = archive_config(store.bucket, topic, f"race/{unique}/", max_records_per_object=3, **store.archive_options)
    spark = {"master": "local[2]", "driver_memory": "1g", "s3_endpoint_url": store.s3_endpoint_url,
             "s3_path_style": True, "s3_access_key_id": TEST_AWS["AWS_ACCESS_KEY_ID"],
             "s3_secret_access_key": TEST_AWS["AWS_SECRET_ACCESS_KEY"]}
    go, ready = tmp_path / "go", [tmp_path / "ready-a", tmp_path / "ready-b"]
    runs = [start_job(archive_spec(store, spark, cfg, topic, WINDOWS, barrier={"ready": str(r), "go": str(go)}))
            for r in ready]
    try:
        _all_ready(runs, ready)
        go.touch()
        outs = [job_result(run) for run in runs]
    finally:
        for run in runs:
            if run.proc.poll() is None:
                run.proc.kill()
                run.proc.wait()

    for out in outs:
        assert out["success"], "\n".join(out["failures"] + out["errors"])
        assert set(out["windows"]) == {w.key for w in WINDOWS}
    # The two runs went on at the same time.
    assert max(o["run_started_at"] for o in outs) < min(o["run_ended_at"] for o in outs)

    # Exactly one manifest per window, and nothing else under the manifests' prefix.
    manifests = [o["Key"] for o in list_objects(s3, cfg.bucket, f"{cfg.prefix}{MANIFESTS}/{topic}/")]
    assert sorted(manifests) == sorted(manifest_key(cfg.prefix, topic, w) for w in WINDOWS)
    committed = {w.key: manifest(s3, cfg, topic, w) for w in WINDOWS}
    for w in WINDOWS:
        m, metas = committed[w.key], [o["windows"][w.key] for o in outs]
        outcomes = [x["outcome"] for x in metas]
        # One run committed the window; the other adopted that commit. Both name the winner's attempt.
        assert outcomes.count("committed") == 1 and set(outcomes) - {"committed"} <= ADOPTED, (w.key, outcomes)
        assert [x["attempt"] for x in metas] == [m.attempt, m.attempt], (w.key, metas)
        assert [x["records"] for x in metas] == [w.end - w.start] * 2 and m.record_count == w.end - w.start
    # A run is one attempt: the windows a run committed carry one attempt id, and not the other run's.
    won = [{x["attempt"] for x in o["windows"].values() if x["outcome"] == "committed"} for o in outs]
    assert all(len(a) <= 1 for a in won) and not won[0] & won[1], won
    # The race happened for real: at least one window was committed by the other run while this one was writing it
    # (after its step-1 check found no manifest).
    assert "committed_by_concurrent_attempt" in {x["outcome"] for o in outs for x in o["windows"].values()}, outs

    # Every record once, byte-exact (keys, values, headers, offsets, timestamps), in the committed objects only.
    assert archived_records(s3, cfg, topic) == produced
    assert sorted(final_objects(s3, cfg, topic)) == sorted(o.key for m in committed.values() for o in m.objects)
    assert staging_objects(s3, cfg, topic) == []
    assert not s3.list_multipart_uploads(Bucket=cfg.bucket, Prefix=cfg.prefix).get("Uploads")
