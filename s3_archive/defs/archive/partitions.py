"""Window partitions, defined once per topic and shared by the archive asset, sensors and schedules.

Kafka topic names (a-z A-Z 0-9 . _ -) are valid in Dagster asset keys and partition-set names as they are,
so the topic is used verbatim: `kafka_archive/<topic>` and `windows__<topic>`.
"""

from __future__ import annotations

import dagster as dg

ASSET_PREFIX = "kafka_archive"


def archive_asset_key(topic: str) -> dg.AssetKey:
    return dg.AssetKey([ASSET_PREFIX, topic])


def window_partitions(topic: str) -> dg.DynamicPartitionsDefinition:
    return dg.DynamicPartitionsDefinition(name=f"windows__{topic}")
