"""The driver's side of a run, in order (it reads no record itself: the executors do):

    coordinator.py     a run's windows end to end: committed already? still in Kafka? write, then commit each
    output.py          the archive config as the write job sees it
    spark_job.py       the one Spark job: Kafka's offset ranges read, the format's columns, mapInArrow tasks
    bucket_column.py   a record's layout bucket as a Spark column (keys/buckets.py is its Python reference)
    commit.py          the exactly-once commit: LIST, strays removed, manifest with If-None-Match (CommitStep)
    iceberg_commit.py  format iceberg: the run's windows in one Iceberg commit, then their manifests
"""
