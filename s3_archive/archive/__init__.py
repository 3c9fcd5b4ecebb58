"""Archiving Kafka offset windows to S3, in the order it happens.

    plan.py        which windows to cut from Kafka's offsets (pure; the offsets sensor calls it)
    scan.py        where each partition's next window starts and how far it may reach (Kafka's offsets)
    cursor.py      what the offsets sensor remembers between ticks (pure)
    sweep.py       the offsets sensor's sweeps: lost manifests and records waiting too long
    protocol.py    what the driver sends each write task and what comes back (pure; both sides import it)
    protobuf_schemas.py  a registry's Protobuf schemas compiled (both sides: the driver's columns, the tasks' decoder)
    driver/        on the Spark driver: the run, its one Spark job, the commit
    executor/      in the executors' Python workers: the write task, encoders, upload (no Spark, no Dagster)
    health.py      the verdicts of the asset checks: contiguity, objects, retention, headroom, take-over
    retirement.py  which old windows may leave Dagster's partition set (docs/windows.md)
"""
