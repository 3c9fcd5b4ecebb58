"""One `format: iceberg` archive run on another Spark (a Connect server, a standalone cluster) and what it must leave:
the table read by pyiceberg through moto's Glue, one snapshot whose summary lists the windows, a re-run that finds
them in the snapshot and appends nothing, and a restore byte-exact. Shared by test_connect.py and test_cluster.py."""

from __future__ import annotations

from typing import Any

from s3_archive.io.iceberg_catalog import TOPIC_PROPERTY, WINDOWS_PROPERTY, table_ident
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.request import RestoreContext, RestoreRequest
from s3_archive.restore.run import restore_windows
from s3_archive.restore.sources import ArchiveSource
from s3_archive_tests.credentials import TEST_AWS
from s3_archive_tests.integration.archive.test_iceberg import RECORDS, _rows, _table, _window_snapshots
from s3_archive_tests.integration.archive_helpers import archive_config, log, manifest
from s3_archive_tests.integration.restore.test_restore import body
from s3_archive_tests.integration.spark.runner import archive_job
from s3_archive_tests.kafka_helpers import consume_all, create_topic, produce

WINDOWS = [OffsetWindow(0, 0, 2), OffsetWindow(0, 2, 5), OffsetWindow(1, 0, 5)]


def archive_and_check_iceberg(services: Any, kafka: Any, s3: Any, spark: dict[str, Any], name: str,
                              **job: Any) -> dict[str, Any]:
    """Archive WINDOWS of a new topic `name` with `SparkResource(**spark)` as `format: iceberg` (through moto's
    Glue), delete the manifests (a crash after the Iceberg commit) and run again in the same process; assert the
    table, its snapshot, the re-run and a restore. The runner's output (`job`: more archive_job arguments)."""
    topic = create_topic(kafka, name, partitions=2)
    sent = produce(kafka, topic, [(p, k, v, h) for p in (0, 1) for k, v, h in RECORDS])
    cfg = archive_config(services.bucket, topic, f"{name}/", format="iceberg")
    out = archive_job(services, spark, cfg, topic, WINDOWS, rerun_without_manifests=True,
                      secrets=(TEST_AWS["AWS_SECRET_ACCESS_KEY"],), **job)
    assert out["success"], "\n".join(out["failures"] + out["errors"])
    assert {k: m["outcome"] for k, m in out["windows"].items()} == dict.fromkeys((w.key for w in WINDOWS),
                                                                                  "committed")
    # the S3 secret is on no process's command line while the run went on (the Spark JVMs' included)
    assert out["process_list"]["leaks"] == []

    # The table (after both runs), read by an independent reader: every record once; one snapshot lists the
    # run's windows in its summary, and it is still the current one (the re-run committed nothing after it)
    table = _table(services, cfg, topic)
    assert _rows(table) == sorted(sent, key=lambda r: (r.partition, r.offset))
    assert _window_snapshots(table) == [",".join(w.key for w in WINDOWS)]
    snapshot = table.current_snapshot()
    summary = snapshot.summary.additional_properties
    assert summary[WINDOWS_PROPERTY] == ",".join(w.key for w in WINDOWS) and summary[TOPIC_PROPERTY] == topic

    # The re-run lost the manifests: it found the windows in the snapshot's summary, appended nothing, and wrote
    # the manifests again from that snapshot
    rerun = out["rerun"]
    assert rerun["success"], "\n".join(rerun["failures"] + rerun["errors"])
    assert {k: (m["outcome"], m["records"]) for k, m in rerun["windows"].items()} == {
        w.key: ("already_committed", w.end - w.start) for w in WINDOWS}
    for w in WINDOWS:
        m = manifest(s3, cfg, topic, w)
        assert m.iceberg_table == table_ident(cfg, topic) and m.iceberg_snapshot_id == snapshot.snapshot_id
        assert m.record_count == w.end - w.start and m.objects

    # Restore reads the windows back from the table's data files, byte-exact and in order
    target = create_topic(kafka, f"{name}-restored", partitions=2)
    reports = list(restore_windows(RestoreContext(kafka, s3, log), ArchiveSource(cfg.bucket, cfg.prefix),
                                   RestoreRequest(topic, target), WINDOWS))
    assert sum(r.restored for r in reports) == len(sent)
    got = consume_all(kafka, target)
    for p in (0, 1):
        assert [g.body for g in got[p]] == [body(r) for r in sent if r.partition == p]
    return out
