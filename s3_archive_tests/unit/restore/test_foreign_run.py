"""A foreign source's run summed up (restore/foreign_run.py) on plain values: the totals of the sink's objects and
the archive's windows are one `RunSummary`'s, the sink's objects past the archive's start are the archive's, and
the metadata keeps its keys."""

from s3_archive.config.foreign import ForeignSource
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.cold import ColdReport, ListedObject
from s3_archive.restore.foreign_run import ForeignRun, first_starts
from s3_archive.restore.foreign_sources import plan
from s3_archive.restore.request import PartitionCount, RestoreRequest, WindowReport
from s3_archive.restore.summary import RunSummary


def source() -> ForeignSource:
    return ForeignSource(name="s", layout="aiven", bucket="b", topic="orders", prefix="sink/", compression="gzip")


def report(w: OffsetWindow, restored: int, **kw) -> WindowReport:
    return WindowReport(w, dry_run=False, restored=restored, bytes=10 * restored,
                        partitions={w.partition: PartitionCount(restored, 10 * restored)}, **kw)


def test_the_archive_starts_where_the_first_of_its_windows_of_each_partition_does():
    assert first_starts([OffsetWindow(0, 30, 40), OffsetWindow(1, 5, 9), OffsetWindow(0, 20, 30)]) == {0: 20, 1: 5}
    assert first_starts([]) == {}


def test_the_sinks_objects_at_or_past_the_archives_start_are_left_out_as_the_archives():
    listing = [ListedObject(f"sink/orders-0-{o}.gz", 10) for o in (0, 100, 250)]
    p = plan(source(), listing, {0: 100})
    assert [fw.window.start for fw in p.windows] == [0]
    assert p.taken_over() == ["sink/orders-0-100.gz", "sink/orders-0-250.gz"]
    assert plan(source(), listing).taken_over() == []


def test_a_foreign_run_sums_the_sinks_objects_and_the_archives_windows_as_one_run():
    request = RestoreRequest("orders", "restored")
    listing = [ListedObject("sink/orders-0-0.gz", 10), ListedObject("sink/notes.txt", 3)]
    planned = plan(source(), listing, {0: 100})
    planned.skipped["sink/bad.gz"] = "not gzip"
    run = ForeignRun(RunSummary(request), planned, archive_windows=1, cold=ColdReport(cold=2, requested=1))
    run.summary.add(report(OffsetWindow(0, 0, 100), 100, skipped=3, transactions=1, timestamps_replaced=2))
    run.summary.add(report(OffsetWindow(0, 100, 150), 50, filtered=4, transactions=2))
    meta = run.metadata()
    assert meta == {
        "target_topic": "restored", "dry_run": False, "windows": 2, "records_restored": 150,
        "records_skipped_already_present": 3, "records_filtered": 4, "bytes": 1500, "transactions": 3,
        "timestamps_replaced": 2, "archive_windows": 1, "cold_objects": 2, "cold_restores_requested": 1,
        "ignored_objects": 1, "ignored": {"sink/notes.txt": meta["ignored"]["sink/notes.txt"]},
        "skipped_objects": 1, "skipped": {"sink/bad.gz": "not gzip"},
        "per_target_partition": {"0": {"records": 150, "bytes": 1500}}}
    assert list(meta) == list(ForeignRun(RunSummary(request), run.planned, archive_windows=0).metadata())
    assert "archive_windows" not in ForeignRun(RunSummary(request), run.planned).metadata()
    assert run.line() == "restored 150 records of 2 objects into 'restored' (3 already present)"
