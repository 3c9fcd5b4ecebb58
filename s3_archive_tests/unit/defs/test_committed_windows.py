"""Which windows count as committed for the checks: materialized at least once, whatever their latest run did
(an ephemeral Dagster instance; no service)."""

import dagster as dg

from s3_archive.defs.archive.instance import materialized_windows
from s3_archive.defs.archive.partitions import archive_asset_key, window_partitions
from s3_archive.model.windows import OffsetWindow


def test_a_failed_rerun_of_a_committed_window_keeps_it_committed():
    topic = "committed"
    w1, w2, w3, w4 = (OffsetWindow(0, s, s + 10) for s in (0, 10, 20, 30))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(window_partitions(topic).name, [w.key for w in (w1, w2, w3, w4)])
    for w in (w1, w2):
        instance.report_runless_asset_event(dg.AssetMaterialization(archive_asset_key(topic), partition=w.key))

    @dg.asset(key=archive_asset_key(topic), partitions_def=window_partitions(topic))
    def failing() -> None:
        raise RuntimeError("this run of the window fails")

    for w in (w2, w3):  # w2: committed, then a re-run failed; w3: only ever failed
        assert not dg.materialize([failing], partition_key=w.key, instance=instance, raise_on_error=False).success

    keys = [w.key for w in (w1, w2, w3, w4)]
    status = instance.get_status_by_partition(archive_asset_key(topic), keys, window_partitions(topic))
    assert status[w2.key] == dg.AssetPartitionStatus.FAILED  # what the status alone would say
    assert materialized_windows(instance, topic, keys) == {w1.key, w2.key}
    assert materialized_windows(dg.DagsterInstance.ephemeral(), topic, keys) == set()  # never materialized
