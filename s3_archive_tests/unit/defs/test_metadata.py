"""Plots: the per-window metadata of the archive and restore assets has the same keys and types on every window and
path (committed, already committed, adopted; restored, dry run), numbers as int/float metadata values."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from s3_archive.archive.driver.coordinator import WindowResult
from s3_archive.config.settings import parse_settings
from s3_archive.defs.archive.assets import build_archive_asset
from s3_archive.defs.metadata import PLOT_KEYS, typed
from s3_archive.defs.restore.assets import build_restore_asset
from s3_archive.keys.objects import WindowLocation, manifest_key
from s3_archive.model.manifest import parse_manifest
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.request import PartitionCount, RestoreRequest, WindowReport
from s3_archive.restore.summary import RunSummary

MANIFESTS = Path(__file__).parents[1] / "model" / "manifests"
KIND = {int: dg.IntMetadataValue, float: dg.FloatMetadataValue}


def shape(meta: dict[str, dg.MetadataValue]) -> dict[str, type]:
    return {k: type(v) for k, v in meta.items()}


def archive_metadata() -> list[dict[str, dg.MetadataValue]]:
    out = []
    for path in sorted(MANIFESTS.glob("*.json")):
        m = parse_manifest(path.read_text())
        # A window whose offsets hold no record (only transaction markers): offsets and timestamps are None.
        empty = m.model_copy(update={"record_count": 0, "first_offset": None, "last_offset": None,
                                     "min_timestamp_ms": None, "max_timestamp_ms": None, "min_timestamp": None,
                                     "max_timestamp": None})
        for manifest in (m, empty):
            for outcome, seconds in (("committed", 1.5), ("already_committed", 0.0),
                                     ("committed_by_concurrent_attempt", 2)):
                where = WindowLocation("b", "", manifest.topic, manifest.window, ".parquet")
                out.append(typed(WindowResult(where, manifest, outcome, seconds).metadata()))
    return out


def restore_metadata() -> list[dict[str, dg.MetadataValue]]:
    out = []
    w = OffsetWindow(0, 0, 10)
    for dry in (False, True):
        full = WindowReport(w, dry, archived=10, restored=7, skipped=3, bytes=70, transactions=1, seconds=0.25,
                            partitions={0: PartitionCount(7, 70)}, objects=2, max_timestamp_ms=1_700_000_000_000)
        nothing = WindowReport(w, dry)  # filtered out, no timestamps known (a foreign source)
        for rep in (full, nothing):
            out.append(typed({"target_topic": "t", **rep.metadata()}))
    return out


def test_every_window_of_each_asset_has_the_same_keys_and_types():
    for metas in (archive_metadata(), restore_metadata()):
        assert all(shape(m) == shape(metas[0]) for m in metas)


def test_the_plot_keys_are_numeric_and_shared_by_archive_and_restore():
    for meta in (archive_metadata()[0], restore_metadata()[0]):
        assert {k: type(meta[k]) for k in PLOT_KEYS} == {k: KIND[t] for k, t in PLOT_KEYS.items()}
    a, r = archive_metadata()[0], restore_metadata()[0]
    assert a["lag_seconds"].value > 0 and r["lag_seconds"].value > 0
    first = parse_manifest(sorted(MANIFESTS.glob("*.json"))[0].read_text())
    url = f"s3://b/{manifest_key('', first.topic, first.window)}"  # the window's manifest in bucket "b"
    assert isinstance(a["manifest"], dg.PathMetadataValue) and a["manifest"].value == url
    # Every number is an int or a float value (the UI plots those), never text.
    for meta in (a, r):
        assert all(not isinstance(v, dg.TextMetadataValue) for k, v in meta.items()
                   if k not in ("outcome", "attempt", "target_topic", "min_timestamp", "max_timestamp"))


def test_typed_refuses_none():
    with pytest.raises(TypeError, match="'x'"):
        typed({"x": None})


def test_the_plan_of_a_dry_run_sums_windows_and_names_the_ledger():
    request = RestoreRequest("src", "dst", dry_run=True)
    plan = RunSummary(request)
    from s3_archive.restore.ledger import RangeSet
    plan.ledger_seen({0: RangeSet([[0, 5]]), 4: RangeSet([[0, 9]])})
    for s in (0, 10):
        plan.add(WindowReport(OffsetWindow(0, s, s + 10), True, archived=10, restored=5 if s == 0 else 10,
                              skipped=5 if s == 0 else 0, bytes=50, objects=1, partitions={1: PartitionCount(5, 50)}))
    meta = typed(plan.metadata())
    assert meta["windows"].value == 2 and meta["objects"].value == 2 and meta["records_to_restore"].value == 15
    assert meta["records_skipped_already_present"].value == 5
    assert meta["ledger_id"].value == "s3-archive-restore.src.dst"
    assert meta["ledger_ranges"].value == {"0": [[0, 5]]}  # only the run's source partitions
    assert meta["per_target_partition"].value == {"1": {"records": 10, "bytes": 100}}
    assert "| 1 | 10 | 100 |" in meta["plan"].value


def test_descriptions_link_the_manifest_prefix_the_glue_table_and_the_docs():
    cfg = parse_settings({"archives": [{"name": "a", "topics": ["Orders.v1"], "bucket": "bkt", "prefix": "p/",
                                        "catalog": {"database": "lake", "table_prefix": "raw_"}}]}).archives[0]
    for asset, doc in ((build_archive_asset(cfg, "Orders.v1"), "docs/commit-protocol.md"),
                       (build_restore_asset(cfg, "Orders.v1"), "docs/restore.md")):
        text = next(iter(asset.descriptions_by_key.values()))
        assert "`s3://bkt/p/_manifests/Orders.v1/`" in text
        assert "`lake.raw_orders_v1`" in text and doc in text and "docs/metadata.md" in text
