"""Where a window's objects live in the bucket. Pure functions of (prefix, topic, window, format).

    <prefix><topic>/kafka_partition=<p>/<topic>+<p>+<start:019d>-<end:019d>+<part:05d><ext>   data (final)
    <prefix>_manifests/<topic>/kafka_partition=<p>/<window key>.json              commit record
    <prefix>_staging/<topic>/<window key>/<attempt>/                              one attempt's Spark output
    <prefix>_dead_letter/<topic>/kafka_partition=<p>/<same name as data>.parquet  undecodable records (raw)
    format bytes: <topic>+<p>+<start>-<end>+<offset:019d>.bin, one object per record

The directory is `kafka_partition=`, not Connect's `partition=`, because every record also carries a `partition`
column, and Hive-style readers (Spark, Athena, pyarrow) reject a partition column that repeats a data column.
Data keys sort in offset order within a partition. The window's start and end offsets in the name mean a re-run
of the same window rewrites the same keys, and no other window's objects share the name stem (so deleting a
window's stale parts can never touch another window's data). See docs/layout.md.
"""

from __future__ import annotations

from s3_archive.windows import OFFSET_DIGITS, OffsetWindow

PART_DIGITS = 5
MAX_PART = 10**PART_DIGITS - 1
MANIFESTS = "_manifests"
STAGING = "_staging"
DEAD_LETTER = "_dead_letter"


def partition_dir(prefix: str, topic: str, partition: int) -> str:
    return f"{prefix}{topic}/kafka_partition={partition}/"


def window_object_stem(prefix: str, topic: str, window: OffsetWindow) -> str:
    """Every data object of the window starts with this (and no other window's does)."""
    return (f"{partition_dir(prefix, topic, window.partition)}{topic}+{window.partition}+"
            f"{window.start:0{OFFSET_DIGITS}d}-{window.end:0{OFFSET_DIGITS}d}+")


def object_key(prefix: str, topic: str, window: OffsetWindow, part: int, suffix: str) -> str:
    if not 0 <= part <= MAX_PART:
        raise ValueError(f"part number must be in 0..{MAX_PART}, got {part}; raise max_records_per_object")
    return f"{window_object_stem(prefix, topic, window)}{part:0{PART_DIGITS}d}{suffix}"


def record_object_key(prefix: str, topic: str, window: OffsetWindow, offset: int, suffix: str) -> str:
    """The `bytes` format's one object per record: named by the record's offset instead of a part number."""
    if not window.start <= offset < window.end:
        raise ValueError(f"offset {offset} is outside window {window.key}")
    return f"{window_object_stem(prefix, topic, window)}{offset:0{OFFSET_DIGITS}d}{suffix}"


def dead_letter_stem(prefix: str, topic: str, window: OffsetWindow) -> str:
    """Records of the window whose value did not decode: raw envelope, parquet, under the dead-letter prefix."""
    return window_object_stem(f"{prefix}{DEAD_LETTER}/", topic, window)


def dead_letter_key(prefix: str, topic: str, window: OffsetWindow, part: int) -> str:
    return object_key(f"{prefix}{DEAD_LETTER}/", topic, window, part, ".parquet")


def manifest_key(prefix: str, topic: str, window: OffsetWindow) -> str:
    return f"{prefix}{MANIFESTS}/{topic}/kafka_partition={window.partition}/{window.key}.json"


def manifest_prefix(prefix: str, topic: str) -> str:
    return f"{prefix}{MANIFESTS}/{topic}/"


def staging_prefix(prefix: str, topic: str, window: OffsetWindow, attempt: str | None = None) -> str:
    base = f"{prefix}{STAGING}/{topic}/{window.key}/"
    return base if attempt is None else f"{base}{attempt}/"
