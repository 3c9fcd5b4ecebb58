"""The table's partitions: `kafka_partition int` by default (partition projection), or the layout's Hive-style
directories (registered explicitly), and the Glue partition values of a directory. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from s3_archive.config.archive import ArchiveConfig
from s3_archive.keys.buckets import parse_path
from s3_archive.keys.layout import KafkaPartition, KeyField, OutputLayout, RecordTime, ValueField
from s3_archive.keys.values import encode_bytes

PARTITION_KEY = "kafka_partition"


_COLUMN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"  # the partition value Hive, Spark and Athena read as NULL
_DEFAULT_KEYS = [{"Name": PARTITION_KEY, "Type": "int",
                  "Comment": f"Kafka partition (the layout directory {PARTITION_KEY}=<p>)"}]


def layout_reason(layout: OutputLayout) -> str | None:
    """Why a Hive table cannot describe this layout, or None. A table can when every object lies in
    `<topic>/<partition_by path>/<file name>`, the path made only of Hive-style `name=value` segments."""
    parts = layout.key_template.parts
    head = [p if isinstance(p, str) else p.name for p in parts[:3]]
    rest = parts[3:]
    if (not layout.partition_by or head != ["topic", "/", "partition_by"] or not rest
            or not isinstance(rest[0], str) or not rest[0].startswith("/")):
        return (f"template {layout.template!r} does not start with '{{{{topic}}}}/{{{{partition_by}}}}/' (a table "
                "needs its partitions as the directories under <prefix><topic>/)")
    name = [rest[0][1:], *rest[1:]]
    if any("/" in p for p in name if isinstance(p, str)) or any(
            not isinstance(p, str) and p.name == "partition_by" for p in name):
        return (f"template {layout.template!r}: the file name after '{{{{partition_by}}}}/' makes more directories "
                "(a '/' or a second {{partition_by}}), which are not partitions a table declares")
    if name[0] and name[0][0] in "._":
        return (f"template {layout.template!r}: file names starting with {name[0][0]!r} are hidden files to "
                "Hive, Spark and Athena, which would read no data")
    for i, d in enumerate(layout.partition_by):
        if isinstance(d, RecordTime):
            names = d.hive_names()
            if len(names) != d.segments or not all(_COLUMN.fullmatch(n) for n in names):
                return (f"partition_by[{i}] (time): path_format {d.path_format!r} is not name=value segments with "
                        "column names (e.g. 'year'=yyyy/'month'=MM)")
        elif not d.hive:
            return (f"partition_by[{i}] ({d.kind}) has hive: false; a table needs name=value directories "
                    "(hive: true)")
    return None


def projectable(layout: OutputLayout) -> bool:
    """Partition projection describes only `kafka_partition=<p>/` (an integer range); other keys would need every
    value enumerated or `injected` (a WHERE on each key in every query), so they are registered explicitly."""
    return [type(d) for d in layout.partition_by] == [KafkaPartition]


def projection_refused(archive: str, layout: OutputLayout) -> str:
    keys = ", ".join(k["Name"] for k in _layout_keys(layout))
    return (f"archive {archive!r}: catalog partitions 'projection' cannot describe the layout's partition keys "
            f"({keys}); only kafka_partition alone can be projected. Set `catalog: {{partitions: explicit}}` (the "
            "default for such layouts)")


def _layout_keys(layout: OutputLayout) -> list[dict[str, str]]:
    keys: list[dict[str, str]] = []
    for d in layout.partition_by:
        if isinstance(d, KafkaPartition):
            keys.append(_DEFAULT_KEYS[0])
        elif isinstance(d, RecordTime):
            source = d.source if d.field is None else f"{d.source} {d.field!r}"
            keys += [{"Name": n, "Type": "string",
                      "Comment": f"record time ({source}), path_format {d.path_format}, "
                                 f"{layout.time_zone(d)}"} for n in d.hive_names()]
        else:
            if isinstance(d, ValueField):
                what = f"value field {d.field!r}"
            elif isinstance(d, KeyField):
                what = "record key" if d.field is None else f"key field {d.field!r}"
            else:
                what = f"header {d.header!r}"
            keys.append({"Name": d.column, "Type": "string",
                         "Comment": f"{what} as text; null when absent"})
    return keys


def partition_keys(cfg: ArchiveConfig) -> list[dict[str, str]]:
    """The table's partition keys: `kafka_partition int`, or the layout's Hive names in order (time keys and
    field values `string`)."""
    layout = cfg.layout
    return [dict(k) for k in (_DEFAULT_KEYS if layout is None else _layout_keys(layout))]


def partition_values(layout: OutputLayout, path: str) -> list[str]:
    """The Glue partition values of one partition_by path (`day=2024-03-31/region=eu%2Fwest` -> ['2024-03-31',
    'eu/west']): decoded, as Spark's and Hive's partition discovery give them; null is HIVE_NULL, a binary value
    that is not UTF-8 keeps its `(hex)…` text. ValueError for a path the layout does not write."""
    out: list[str] = []
    for d, v in zip(layout.partition_by, parse_path(layout, path), strict=True):
        if isinstance(d, RecordTime):
            names = d.hive_names()
            out += [HIVE_NULL] * len(names) if v is None else [s.split("=", 1)[1] for s in str(v).split("/")]
        elif v is None:
            out.append(HIVE_NULL)
        elif isinstance(v, bytes):
            out.append(encode_bytes(v))
        else:
            out.append(str(v))
    return out


@dataclass(frozen=True)
class SkippedDirectory:
    """A directory under the table location that the layout does not write: not registered as a partition."""

    directory: str  # relative to the location, no trailing '/'; '' for objects directly under the location
    key: str  # the first object found in it, relative to the location
    reason: str


def layout_partition_dirs(layout: OutputLayout, keys: Iterable[str],
                          ) -> tuple[dict[str, list[str]], list[SkippedDirectory]]:
    """Partition directory (relative to the table location, no trailing '/') -> values, for object keys given
    relative to the location; and the directories that do not parse with the layout (for the caller to report).
    Two directories with the same values (e.g. a non-UTF-8 key `(hex)FF` and the text '(hex)FF') cannot both be
    partitions: ValueError."""
    dirs: dict[str, list[str]] = {}
    skipped: dict[str, SkippedDirectory] = {}
    for key in keys:
        directory = key.rpartition("/")[0]
        if directory in dirs or directory in skipped:
            continue
        if not directory:
            skipped[directory] = SkippedDirectory(directory, key, "not in a partition directory")
            continue
        try:
            dirs[directory] = partition_values(layout, directory)
        except ValueError as e:
            skipped[directory] = SkippedDirectory(directory, key, str(e))
    seen: dict[tuple[str, ...], str] = {}
    for directory, values in sorted(dirs.items()):
        other = seen.setdefault(tuple(values), directory)
        if other != directory:
            raise ValueError(f"directories {other!r} and {directory!r} have the same partition values {values}; "
                             "a table can register only one of them")
    return dict(sorted(dirs.items())), sorted(skipped.values(), key=lambda d: d.directory)


def layout_partition_input(table_input: dict[str, Any], directory: str, values: Sequence[str]) -> dict[str, Any]:
    sd = table_input["StorageDescriptor"]
    return {"Values": list(values), "StorageDescriptor": {**sd, "Location": f"{sd['Location']}{directory}/"}}


def partition_input(table_input: dict[str, Any], partition: int) -> dict[str, Any]:
    sd = table_input["StorageDescriptor"]
    return {"Values": [str(partition)],
            "StorageDescriptor": {**sd, "Location": f"{sd['Location']}{PARTITION_KEY}={partition}/"}}
