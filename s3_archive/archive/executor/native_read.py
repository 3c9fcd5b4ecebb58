"""A slice's offset range read by the native reader (`task_reader: native`): native/'s Rust extension
`s3_archive_native` reads it with librdkafka and builds the envelope batches itself, handed over through the Arrow
C data interface, so no Python object is made per record. The same contract as kafka_read.py's `read_range` (its
docstring): read_committed, retention, the stall deadline and its error, refusals (`KafkaRefused`), the settings
(`consumer_settings`) and the batching (BATCH_RECORDS, BATCH_BYTES). Runs on the executors: no Spark, no Dagster.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from s3_archive.archive.executor.kafka_read import (
    BATCH_BYTES,
    BATCH_RECORDS,
    STALL_S,
    consumer_settings,
)
from s3_archive.archive.protocol import KafkaConnection
from s3_archive.model.errors import KafkaUnavailable, NativeReaderMissing


def native_module() -> Any:
    """The extension, or one error naming the setting and the fix (never a silent fall back to the Python reader)."""
    try:
        import s3_archive_native
    except ImportError as e:
        raise NativeReaderMissing(
            f"task_reader: native (the default) needs the native reader, the module s3_archive_native built from "
            f"native/, and the Python at {sys.executable} has none ({e}); run `make setup` to build it, or set "
            f"task_reader: python in the archive's config (NativeReaderMissing)") from None
    return s3_archive_native


def _setting(value: Any) -> str:
    """A setting as librdkafka takes it (confluent-kafka's conversion: booleans lower case)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def read_range(conn: KafkaConnection, topic: str, partition: int, start: int, end: int,
               stall_s: float = STALL_S) -> Iterator[pa.RecordBatch]:
    """The committed records of offsets [start, end) of one partition, in offset order, in batches."""
    native = native_module()
    if start >= end:
        return
    settings = [(k, _setting(v)) for k, v in consumer_settings(conn, end - start).items()]
    try:
        reader = native.RangeReader(settings, conn.servers, topic, partition, start, end, stall_s, BATCH_RECORDS,
                                    BATCH_BYTES)
        for batch in reader:
            yield pa.record_batch(batch)
    except native.ReadError as e:  # its text names what was not read, and never a setting's value
        raise KafkaUnavailable(str(e)) from None
