"""Window partitions, defined once per topic and shared by the archive asset, sensors and schedules.

Kafka topic names (a-z A-Z 0-9 . _ -) are valid in Dagster asset keys and partition-set names as they are,
so the topic is used verbatim: `kafka_archive/<topic>` and `windows__<topic>`.
"""

from __future__ import annotations

import dagster as dg

ASSET_PREFIX = "kafka_archive"
# Tags of archive runs, read by the offsets sensor (docs/sensors.md).
TOPIC_TAG = "s3_archive/topic"
CUT_TAG = "s3_archive/cut"
RUN_ATTEMPT_TAG = "s3_archive/run_attempt"  # 2, 3, ...: the sensor requested the windows of a failed run again
RERUN_OF_TAG = "s3_archive/rerun_of"  # the failed run whose windows this run archives again
GAVE_UP_TAG = "s3_archive/not_retried"  # the run failed on an error no retry can fix
# Dagster's own tags: a run of one partition, or of a range of a dynamic partition set (in insertion order).
PARTITION_TAG = "dagster/partition"
RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"


def archive_asset_key(topic: str) -> dg.AssetKey:
    return dg.AssetKey([ASSET_PREFIX, topic])


def window_partitions(topic: str) -> dg.DynamicPartitionsDefinition:
    return dg.DynamicPartitionsDefinition(name=f"windows__{topic}")
