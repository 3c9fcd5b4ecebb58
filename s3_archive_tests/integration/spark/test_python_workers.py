"""The Python workers of SparkResource's sessions come from its daemon (s3_archive/io/pyspark_daemon.py), which
imported the write path before forking them: a run after a minute of idleness (Spark has stopped its idle
workers) does not pay those imports again in every new worker."""

from __future__ import annotations

import logging

from s3_archive.io.spark import WARM_UP_GROUP, start_python_workers


def _worker_state(batches):
    import gc
    import os
    import sys

    import pyarrow as pa

    for _ in batches:
        pass
    yield pa.record_batch({"pid": [os.getpid()], "frozen": [gc.get_freeze_count()],
                           "writer": ["s3_archive.archive.executor.task" in sys.modules],
                           "s3_model": [sys.modules["boto3"].DEFAULT_SESSION is not None
                                        if "boto3" in sys.modules else False]})


def test_each_python_worker_starts_with_the_write_path_loaded(spark):
    """Frozen objects in a worker can only come from the daemon's `preload` (nothing else in a worker freezes):
    without it the count is 0. Every worker of the session, reused or new, was forked by that daemon."""
    rows = (spark.range(0, 2, numPartitions=2)
            .mapInArrow(_worker_state, "pid long, frozen long, writer boolean, s3_model boolean").collect())
    assert len(rows) == 2
    for r in rows:
        assert r["frozen"] > 0, r
        assert r["writer"] and r["s3_model"], r


def test_the_python_workers_start_beside_the_driver(spark, caplog):
    """`start_python_workers` (run by SparkResource.session in a new local session) is one job of its own group
    that succeeds: the daemon and a worker exist before the run's first task asks for one."""
    tracker = spark.sparkContext.statusTracker()
    before = set(tracker.getJobIdsForGroup(WARM_UP_GROUP))
    with caplog.at_level(logging.WARNING, logger="s3_archive.io.spark"):
        thread = start_python_workers(spark)
        thread.join(120)
    assert not thread.is_alive()
    [job] = set(tracker.getJobIdsForGroup(WARM_UP_GROUP)) - before
    assert tracker.getJobInfo(job).status == "SUCCEEDED"
    assert not caplog.records, [r.getMessage() for r in caplog.records]
