"""The driver's side of a run, in order (it reads no record itself: the executors do):

    coordinator.py     a run's windows end to end: committed already? still in Kafka? write, then commit each
    archive_run.py     what a run carries (ArchiveContext), the tests' levers (ArchiveHooks), the windows it writes
    output.py          the archive config as the write job sees it
    spark_job.py       the one Spark job: Kafka's offset ranges read, the format's columns, mapInArrow tasks
    bucket_column.py   a record's layout bucket as a Spark column (keys/buckets.py is its Python reference)
    manifest_draft.py  a window's manifest before its objects, for every format
    commit.py          the exactly-once commit: LIST, strays removed, manifest with If-None-Match (CommitStep)
    iceberg_commit.py  format iceberg: the run's windows in one Iceberg commit, then their manifests
"""
