"""format iceberg on the real stack: windows committed as Iceberg snapshots through moto's Glue by the session's
Spark, read back by an independent reader (pyiceberg through the same Glue), exactly once across re-runs, a lost
manifest and a concurrent commit of the same window."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from s3_archive.archive.driver.archive_run import ArchiveContext, ArchiveHooks
from s3_archive.archive.driver.commit import no_fault
from s3_archive.archive.driver.coordinator import archive_windows
from s3_archive.archive.failures import permanent
from s3_archive.archive.protocol import S3Connection
from s3_archive.archive.verify import verify_topic
from s3_archive.config.iceberg import IcebergOptions
from s3_archive.io.iceberg_catalog import WINDOWS_PROPERTY, S3Endpoint, table_ident
from s3_archive.io.s3 import verify_manifest
from s3_archive.keys.objects import manifest_key
from s3_archive.lifecycle.iceberg_maintenance import maintain_table
from s3_archive.model.errors import ArchiveIntegrityError, UndecodableValue
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.request import RestoreContext, RestoreRequest
from s3_archive.restore.run import restore_windows
from s3_archive.restore.sources import ArchiveSource
from s3_archive_tests.conftest import BUCKET
from s3_archive_tests.credentials import TEST_AWS
from s3_archive_tests.integration.archive_helpers import archive_config, log, manifest
from s3_archive_tests.integration.restore.test_restore import body
from s3_archive_tests.kafka_helpers import Rec, consume_all, create_topic, parquet_records, produce

RECORDS = [
    (b"\x00\xffk", b"\x00\x01v", [("dup", b"1"), ("dup", b"2"), ("nul", None)]),
    (None, b"null key", []),
    (b"tomb", None, [("h", b"")]),
    (b"e", b"", []),
    ("ключ".encode(), "значение".encode(), [("ü", "ö".encode())]),
]


@pytest.fixture(scope="module")
def endpoint(services) -> S3Endpoint:
    return S3Endpoint(TEST_AWS["AWS_REGION"], services.s3_endpoint_url, services.s3_endpoint_url, True)


def _run(spark, kafka, s3, cfg, topic, windows, log, endpoint, fault=no_fault) -> dict:
    """archive_windows, raising the first window's error (so a failure shows Spark's or Iceberg's message)."""
    ctx = ArchiveContext(spark, kafka, s3, S3Connection.of_client(s3), endpoint, log)
    out = archive_windows(ctx, cfg, topic, windows, ArchiveHooks(fault=fault))
    for r in out.values():
        if isinstance(r, BaseException):
            raise r
    return out


def _reader(services):
    from pyiceberg.catalog import load_catalog

    url, key, secret = services.s3_endpoint_url, TEST_AWS["AWS_ACCESS_KEY_ID"], TEST_AWS["AWS_SECRET_ACCESS_KEY"]
    return load_catalog("reader", **{
        "type": "glue", "glue.endpoint": url, "glue.region": TEST_AWS["AWS_REGION"], "glue.access-key-id": key,
        "glue.secret-access-key": secret, "s3.endpoint": url, "s3.region": TEST_AWS["AWS_REGION"],
        "s3.access-key-id": key, "s3.secret-access-key": secret, "s3.force-virtual-addressing": "false"})


def _table(services, cfg, topic):
    return _reader(services).load_table(table_ident(cfg, topic).split(".", 1)[1])


def _rows(table) -> list[Rec]:
    out = [Rec(r["partition"], r["offset"], r["key"], r["value"],
               tuple((h["key"], h["value"]) for h in r["headers"] or []),
               round(r["timestamp"].timestamp() * 1000)) for r in table.scan().to_arrow().to_pylist()]
    return sorted(out, key=lambda r: (r.partition, r.offset))


def _window_snapshots(table) -> list[str]:
    return [s.summary.additional_properties.get(WINDOWS_PROPERTY) for s in table.snapshots()
            if s.summary and WINDOWS_PROPERTY in s.summary.additional_properties]


def test_iceberg_windows_read_back_byte_exact_and_exactly_once(spark, kafka, s3, services, endpoint, unique, read_path):
    topic = create_topic(kafka, f"ice-{unique}", partitions=2)
    sent = produce(kafka, topic, [(p, k, v, h) for p in (0, 1) for k, v, h in RECORDS])
    cfg = archive_config(BUCKET, topic, f"ice-{unique}/", format="iceberg", read_path=read_path)
    windows = [OffsetWindow(0, 0, 2), OffsetWindow(0, 2, 5), OffsetWindow(1, 0, 5)]

    first = _run(spark, kafka, s3, cfg, topic, windows, log, endpoint=endpoint)
    assert {w: r.outcome for w, r in first.items()} == dict.fromkeys(windows, "committed")
    table = _table(services, cfg, topic)
    assert _rows(table) == sorted(sent, key=lambda r: (r.partition, r.offset))
    assert _window_snapshots(table) == [",".join(w.key for w in windows)]
    m = manifest(s3, cfg, topic, windows[0])
    assert m.iceberg_table == table_ident(cfg, topic) and m.record_count == 2
    assert m.iceberg_snapshot_id == table.current_snapshot().snapshot_id
    # the manifest lists the window's data files: the table's own, under its location
    table_files = {t.file.file_path for t in table.scan().plan_files()}
    assert m.objects and {f"s3://{BUCKET}/{o.key}" for o in m.objects} <= table_files
    verified = verify_topic(s3, cfg, topic, full=True)  # the table's data files: unhashed, by size and ETag
    assert verified.failures == [] and verified.unhashed_windows == sorted(w.key for w in windows)

    # Restore reads the windows back from the table's data files, byte-exact and in order
    target = create_topic(kafka, f"ice-target-{unique}", partitions=2)
    reports = list(restore_windows(RestoreContext(kafka, s3, log), ArchiveSource(BUCKET, cfg.prefix),
                                   RestoreRequest(topic, target), windows))
    assert sum(r.restored for r in reports) == len(sent)
    got = consume_all(kafka, target)
    for p in (0, 1):
        assert [g.body for g in got[p]] == [body(r) for r in sent if r.partition == p]

    # A re-run finds the manifests; a run that lost a manifest (a crash after the snapshot) finds the snapshot.
    again = _run(spark, kafka, s3, cfg, topic, windows, log, endpoint=endpoint)
    assert {r.outcome for r in again.values()} == {"already_committed"}
    s3.delete_object(Bucket=BUCKET, Key=manifest_key(cfg.prefix, topic, windows[1]))
    found = _run(spark, kafka, s3, cfg, topic, [windows[1]], log, endpoint=endpoint)[windows[1]]
    assert found.outcome == "already_committed" and found.manifest.record_count == 3
    table = _table(services, cfg, topic)
    assert len(_window_snapshots(table)) == 1 and len(_rows(table)) == len(sent)

    # Maintenance through Iceberg's procedures: snapshots past retention expire (keeping the last), files only
    # they referenced go; a young file no snapshot has (an attempt still writing) stays; the windows' data files,
    # rows and manifests stay.
    stray = f"{table.location().split('/', 3)[3]}/data/partition=0/in-flight-attempt.parquet"
    s3.put_object(Bucket=BUCKET, Key=stray, Body=b"PAR1")
    keep_one = cfg.model_copy(update={"iceberg": IcebergOptions(retain_last=1)})
    done = maintain_table(spark, keep_one, topic, endpoint, now=datetime.now(UTC) + timedelta(days=30))
    assert done["expired_data_files"] == 0 and done["orphan_files_removed"] == 0, done
    assert s3.list_objects_v2(Bucket=BUCKET, Prefix=stray)["KeyCount"] == 1
    table = _table(services, cfg, topic)
    assert len(list(table.snapshots())) == 1 and len(_rows(table)) == len(sent)
    assert verify_manifest(s3, BUCKET, found.manifest) == []


def test_concurrent_commits_of_one_window_leave_it_once(spark, kafka, s3, services, endpoint, unique, read_path):
    """Attempt A checks the table, then attempt B commits the same window before A writes: A's overwrite is refused
    by Iceberg's serializable validation, A looks again and finds B's snapshot. The window's rows are there once."""
    topic = create_topic(kafka, f"ice-race-{unique}")
    sent = produce(kafka, topic, [(0, k, v, h) for k, v, h in RECORDS])
    cfg = archive_config(BUCKET, topic, f"ice-race-{unique}/", format="iceberg", read_path=read_path)
    window = OffsetWindow(0, 0, 5)
    steps: list[str] = []
    other: dict = {}

    def race(step: str) -> None:
        steps.append(step)
        if step == "iceberg_checked" and not other:
            other.update(_run(spark, kafka, s3, cfg, topic, [window], log, endpoint=endpoint))

    a = _run(spark, kafka, s3, cfg, topic, [window], log, fault=race, endpoint=endpoint)[window]
    assert other[window].outcome == "committed"
    assert a.outcome == "committed_by_concurrent_attempt"
    # A checked twice (before and after the refused commit) and never committed
    assert steps == ["iceberg_checked"]
    table = _table(services, cfg, topic)
    assert _rows(table) == sent and _window_snapshots(table) == [window.key]


def test_jdbc_catalog_and_partition_transforms(spark, kafka, s3, endpoint, unique, tmp_path, read_path):
    topic = create_topic(kafka, f"ice-jdbc-{unique}")
    sent = produce(kafka, topic, [(0, k, v, h) for k, v, h in RECORDS])
    cfg = archive_config(BUCKET, topic, f"ice-jdbc-{unique}/", format="iceberg",
                         iceberg={"catalog": "jdbc", "jdbc_uri": f"jdbc:sqlite:{tmp_path / 'iceberg.db'}",
                                  "partition_by": ["partition", "days(timestamp)", "bucket(4, key)"]}, read_path=read_path)
    cfg = cfg.model_copy(update={"name": f"jdbc_{unique}"})  # its own Spark catalog
    windows = [OffsetWindow(0, 0, 3), OffsetWindow(0, 3, 5)]
    first = _run(spark, kafka, s3, cfg, topic, windows, log, endpoint=endpoint)
    assert [r.outcome for r in first.values()] == ["committed", "committed"]
    assert {r.outcome for r in _run(spark, kafka, s3, cfg, topic, windows, log,
                                    endpoint=endpoint).values()} == {"already_committed"}
    rows = spark.table(table_ident(cfg, topic)).orderBy("offset").collect()
    assert [(r["offset"], r["key"], r["value"]) for r in rows] == [(r.offset, r.key, r.value) for r in sent]
    # partition_by became the table's Iceberg partition transforms
    spec = spark.table(f"{table_ident(cfg, topic)}.partitions").schema["partition"].dataType.fieldNames()
    assert spec == ["partition", "timestamp_day", "key_bucket"]
    assert sum(m.record_count for m in (r.manifest for r in first.values())) == len(sent)


def test_an_undecodable_value_fails_the_window_before_the_commit(spark, kafka, s3, endpoint, unique, read_path):
    topic = create_topic(kafka, f"ice-bad-{unique}")
    produce(kafka, topic, [(0, None, b'{"id": 1}', []), (0, None, b"\xff not json", [])])
    cfg = archive_config(BUCKET, topic, f"ice-bad-{unique}/", format="iceberg",
                         value_decoding={"type": "json", "json_schema": "id BIGINT"}, read_path=read_path)
    window = OffsetWindow(0, 0, 2)
    ctx = ArchiveContext(spark, kafka, s3, S3Connection.of_client(s3), endpoint, log)
    r = archive_windows(ctx, cfg, topic, [window])[window]
    assert isinstance(r, UndecodableValue), r
    assert f"topic {topic!r} partition 0 offset 1: the value is not a UTF-8 JSON object" in str(r)
    assert manifest(s3, cfg, topic, window) is None
    assert spark.table(table_ident(cfg, topic)).count() == 0


def test_dead_letters_go_beside_the_table_and_restore_merges_them_in(spark, kafka, s3, services, endpoint, unique, read_path):
    """on_error dead_letter: the rows that decode go to the table, the others to `<prefix>_dead_letter/` like the
    other formats', in the same window commit (the manifest lists both); a re-run after a lost manifest writes
    neither again; restore gives every record back in offset order. Payload fields that differ only in case are
    two columns (`ID` stored as `id_2`)."""
    topic = create_topic(kafka, f"ice-dlq-{unique}")
    values = [b'{"id": 1, "ID": "one"}', b"\xff not json", b'{"id": 2}', b"[1, 2]", b'{"ID": "three", "id": 3}']
    sent = produce(kafka, topic, [(0, f"k{i}".encode(), v, [("h", b"1")]) for i, v in enumerate(values)])
    cfg = archive_config(BUCKET, topic, f"ice-dlq-{unique}/", format="iceberg",
                         value_decoding={"type": "json", "on_error": "dead_letter"}, read_path=read_path)
    windows = [OffsetWindow(0, 0, 3), OffsetWindow(0, 3, 5)]
    first = _run(spark, kafka, s3, cfg, topic, windows, log, endpoint=endpoint)
    assert [r.outcome for r in first.values()] == ["committed", "committed"]
    table = _table(services, cfg, topic)
    good = [r for r in sent if r.offset in (0, 2, 4)]
    assert _rows(table) == good
    rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["offset"])
    assert [(r["id"], r["id_2"]) for r in rows] == [(1, "one"), (2, None), (3, "three")]
    dead_keys = []
    for w, bad in zip(windows, ([1], [3]), strict=True):
        m = manifest(s3, cfg, topic, w)
        assert m.undecodable_records == 1 and m.record_count == w.end - w.start and m.absent_offset_count == 0
        assert (m.first_offset, m.last_offset) == (w.start, w.end - 1)
        [dead] = m.dead_letter_objects
        assert dead.key.startswith(f"{cfg.prefix}_dead_letter/{topic}/kafka_partition=0/")
        assert parquet_records(s3.get_object(Bucket=BUCKET, Key=dead.key)["Body"].read()) == [sent[i] for i in bad]
        assert verify_manifest(s3, BUCKET, m) == []
        dead_keys.append(dead.key)

    # a crash after the snapshot, before the manifest: the re-run finds the snapshot, writes the same dead letters
    s3.delete_object(Bucket=BUCKET, Key=manifest_key(cfg.prefix, topic, windows[0]))
    again = _run(spark, kafka, s3, cfg, topic, windows, log, endpoint=endpoint)
    assert [r.outcome for r in again.values()] == ["already_committed", "already_committed"]
    assert [o.key for o in again[windows[0]].manifest.dead_letter_objects] == dead_keys[:1]
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{cfg.prefix}_dead_letter/")["Contents"]
    assert sorted(o["Key"] for o in listed) == sorted(dead_keys)
    table = _table(services, cfg, topic)
    assert _rows(table) == good and len(_window_snapshots(table)) == 1

    target = create_topic(kafka, f"ice-dlq-target-{unique}")
    reports = list(restore_windows(RestoreContext(kafka, s3, log), ArchiveSource(BUCKET, cfg.prefix),
                                   RestoreRequest(topic, target), windows))
    assert sum(r.restored for r in reports) == len(sent)
    assert [g.body for g in consume_all(kafka, target)[0]] == [body(r) for r in sent]


def test_a_table_whose_metadata_file_was_deleted_fails_the_window_once_naming_it(spark, kafka, s3, endpoint, unique):
    """The catalog still names the table, but its metadata file was deleted under it (a prefix emptied): the next
    window fails with one error that names the table, the missing file and what to do, which no retry repeats;
    so does the maintenance of the table."""
    topic = create_topic(kafka, f"ice-gone-{unique}")
    produce(kafka, topic, [(0, k, v, h) for k, v, h in RECORDS])
    cfg = archive_config(BUCKET, topic, f"ice-gone-{unique}/", format="iceberg")
    first, second = OffsetWindow(0, 0, 2), OffsetWindow(0, 2, 5)
    _run(spark, kafka, s3, cfg, topic, [first], log, endpoint=endpoint)
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{cfg.prefix}_iceberg/")["Contents"]
    gone = [o["Key"] for o in listed if o["Key"].endswith(".metadata.json")]
    assert gone
    for key in gone:
        s3.delete_object(Bucket=BUCKET, Key=key)

    ctx = ArchiveContext(spark, kafka, s3, S3Connection.of_client(s3), endpoint, log)
    e = archive_windows(ctx, cfg, topic, [second])[second]
    assert isinstance(e, ArchiveIntegrityError) and permanent(e), e
    ident = table_ident(cfg, topic)
    assert str(e).startswith(f"Iceberg table {ident}: its glue catalog names the metadata file s3://{BUCKET}/"
                             f"{cfg.prefix}_iceberg/"), e
    assert f"{max(gone)}, which does not exist" in str(e) and "aws glue delete-table" in str(e)
    assert "Py4J" not in str(e) and "\tat " not in str(e)
    assert manifest(s3, cfg, topic, second) is None
    with pytest.raises(ArchiveIntegrityError, match=f"Iceberg table {ident}: its glue catalog names"):
        maintain_table(spark, cfg, topic, endpoint)
