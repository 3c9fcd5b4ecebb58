"""Two backfills of the same window range launched at once (reliability tier): two Dagster runs of the archive
asset over the same partitions, in one instance, against the real broker, moto and Spark. Each window ends with
one manifest and each record once; per window exactly one run reports `committed`, and both runs name the attempt
whose manifest is the commit."""

from __future__ import annotations

import os
import threading
from collections import Counter

import dagster as dg
import pytest

from s3_archive.io.s3 import list_objects
from s3_archive.keys.objects import manifest_key
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.integration.archive_helpers import (
    archive_config,
    archived_records,
    manifest,
    materialize,
    resources,
    staging_objects,
    window_metadata,
)
from s3_archive_tests.kafka_helpers import create_topic, produce

pytestmark = [pytest.mark.integration, pytest.mark.reliability]


def test_two_backfills_of_the_same_windows_at_once_stay_exactly_once(kafka, s3, services, spark_resource, unique):
    topic = create_topic(kafka, f"twin-{unique}", partitions=2)
    produced = produce(kafka, topic, [(i % 2, f"{i}".encode(), os.urandom(200), []) for i in range(1200)])
    cfg = archive_config(services.bucket, topic, f"twin/{unique}/", max_records_per_object=100)
    windows = [OffsetWindow(p, s, s + 200) for p in (0, 1) for s in (0, 200, 400)]
    res = resources(services, kafka, spark_resource)
    results: list[dg.ExecuteInJobResult] = []
    errors: list[BaseException] = []
    go = threading.Barrier(2)

    with dg.instance_for_test() as instance:
        def backfill() -> None:
            try:
                go.wait(30)
                results.append(materialize(cfg, topic, windows, res, instance))
            except BaseException as e:  # pragma: no cover - reported by the assertion below
                errors.append(e)

        threads = [threading.Thread(target=backfill) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)

    assert errors == [] and len(results) == 2 and all(r.success for r in results)
    runs = [window_metadata(r) for r in results]
    summary = Counter(m["outcome"] for run in runs for m in run.values())
    print(f"\ntwo concurrent backfills of {len(windows)} windows: {dict(summary)}")
    for w in windows:
        committed = manifest(s3, cfg, topic, w)
        both = [run[w.key] for run in runs]
        # exactly one run committed the window; the other found it committed (before or while it got there)
        assert sorted(m["outcome"] for m in both)[0] == "committed", both
        assert [m["outcome"] for m in both].count("committed") == 1, both
        assert {m["outcome"] for m in both} <= {"committed", "committed_by_concurrent_attempt", "already_committed"}
        assert [m["attempt"] for m in both] == [committed.attempt] * 2  # both name the committing attempt
        assert all(m["records"] == 200 for m in both)
        # one manifest per window
        key = manifest_key(cfg.prefix, topic, w)
        assert [o["Key"] for o in list_objects(s3, cfg.bucket, key)] == [key]
    # a run's own attempt is one id: the windows it committed carry it, the windows it adopted carry another
    for run in runs:
        mine = {m["attempt"] for m in run.values() if m["outcome"] == "committed"}
        assert len(mine) <= 1
        assert not mine & {m["attempt"] for m in run.values() if m["outcome"] != "committed"}
    records = archived_records(s3, cfg, topic)
    assert records == produced and max(Counter((r.partition, r.offset) for r in records).values()) == 1
    assert staging_objects(s3, cfg, topic) == []
