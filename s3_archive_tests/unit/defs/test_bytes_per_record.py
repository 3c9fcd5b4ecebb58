"""The input bytes per record the offsets sensor sizes windows and runs with: from each topic's latest windows'
metadata, and nothing asked of topics with no window archived yet (an in-memory Dagster instance, no Kafka)."""

import dagster as dg
import pytest

from s3_archive.defs.archive.partitions import archive_asset_key, window_partitions
from s3_archive.defs.archive.sensors import bytes_per_record_by_topic
from s3_archive.model.windows import OffsetWindow


def materialize(instance: dg.DagsterInstance, topic: str, window: OffsetWindow, bytes_read: int) -> None:
    instance.add_dynamic_partitions(window_partitions(topic).name, [window.key])
    instance.report_runless_asset_event(dg.AssetMaterialization(
        asset_key=archive_asset_key(topic), partition=window.key,
        metadata={"bytes_read": bytes_read, "records": window.end - window.start}))


def test_archived_topics_get_their_windows_estimate_and_the_others_none(monkeypatch):
    instance = dg.DagsterInstance.ephemeral()
    materialize(instance, "a", OffsetWindow(0, 0, 10), 1000)
    materialize(instance, "a", OffsetWindow(0, 10, 100), 9000)
    materialize(instance, "b", OffsetWindow(0, 0, 4), 2000)
    asked: list[str] = []
    import s3_archive.defs.archive.sensors as sensors

    real = sensors.recent_bytes_per_record

    def counted(inst: dg.DagsterInstance, topic: str) -> float | None:
        asked.append(topic)
        return real(inst, topic)

    monkeypatch.setattr(sensors, "recent_bytes_per_record", counted)
    topics = ["a", "b", *[f"new.{i}" for i in range(50)]]
    bpr = bytes_per_record_by_topic(instance, topics)
    assert bpr["a"] == pytest.approx(100.0) and bpr["b"] == pytest.approx(500.0)
    assert all(bpr[f"new.{i}"] is None for i in range(50))
    assert sorted(asked) == ["a", "b"]  # no query of its own for a topic with no window archived
