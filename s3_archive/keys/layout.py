"""The `layout:` config of an archive: the object key template and the partition_by dimensions.

These models live with the key engine because they are its input: config/archive.py composes them into
ArchiveConfig, and keys/buckets.py and keys/objects.py render and parse keys from them. Validation refuses a
layout whose keys could collide or could not be parsed back (keys/template.check_template).
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from s3_archive.keys.template import DEFAULT_TEMPLATE, KeyTemplate, Padding, check_template, parse_template
from s3_archive.keys.values import COARSER_UNITS, check_timezone, parse_path_format, render_format
from s3_archive.model.base import StrictModel

# Data columns of the archived record: a Hive-style partition column may not repeat one (readers refuse it).
RESERVED_NAMES = frozenset({"key", "value", "headers", "topic", "partition", "offset", "timestamp", "timestamp_type"})
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_EXTENSION = re.compile(r"(?:\.[A-Za-z0-9]{1,16}){0,3}")
_FIELD = re.compile(r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*")


def _check_field(v: str | None) -> str | None:
    if v is not None and not _FIELD.fullmatch(v):
        raise ValueError(f"not a field path: {v!r} (names of A-Z a-z 0-9 _ -, nested with '.', e.g. 'order.region')")
    return v


class KafkaPartition(StrictModel):
    """The Kafka partition (the default): `kafka_partition=3`."""

    kind: Literal["kafka_partition"] = "kafka_partition"
    hive: bool = True

    @property
    def name(self) -> str:
        return "kafka_partition"


class RecordTime(StrictModel):
    """Time buckets (Confluent TimeBasedPartitioner): the record's wall-clock time in `timezone`, floored to
    `duration_seconds` if given, written with `path_format`."""

    kind: Literal["time"] = "time"
    source: Literal["kafka_timestamp", "value", "header"] = "kafka_timestamp"
    field: str | None = Field(default=None, description="value: the JSON field; header: the header name. Its "
                                                        "text must be epoch milliseconds")
    path_format: str = "'year'=yyyy/'month'=MM/'day'=dd/'hour'=HH"
    timezone: str | None = Field(default=None, description="IANA name; None: the layout's timezone (UTC default)")
    duration_seconds: int | None = Field(default=None, ge=60, description="bucket size, a multiple of 60; "
                                                                          "None: one bucket per path")

    @field_validator("timezone")
    @classmethod
    def _tz(cls, v: str | None) -> str | None:
        return None if v is None else check_timezone(v)

    @model_validator(mode="after")
    def _check(self) -> RecordTime:
        if (self.source == "kafka_timestamp") != (self.field is None):
            raise ValueError("time: give `field` with source 'value' (a JSON field) or 'header' (a header name), "
                             "and not with source 'kafka_timestamp'")
        if self.source == "value":
            _check_field(self.field)
        tokens = parse_path_format(self.path_format)
        units = {t[0] for t in tokens if isinstance(t, tuple)}
        for u in units:
            if missing := [c for c in COARSER_UNITS[u] if c not in units]:
                raise ValueError(f"path_format {self.path_format!r} has {u} but not {', '.join(missing)}: "
                                 "different buckets would share a path")
        if (d := self.duration_seconds) is not None:
            if d % 60:
                raise ValueError(f"duration_seconds must be a multiple of 60, got {d}")
            need = "dd" if d % 86_400 == 0 else "HH" if d % 3_600 == 0 else "mm"
            if need not in units:
                raise ValueError(f"path_format {self.path_format!r} cannot show buckets of {d} s: it needs {need}")
        return self

    @cached_property
    def tokens(self) -> tuple[str | tuple[str], ...]:
        return parse_path_format(self.path_format)

    @property
    def segments(self) -> int:
        return render_format(self.tokens, None).count("/") + 1

    def hive_names(self) -> list[str]:
        """The `name=` literals of the path (checked against data columns like the other dimensions' names)."""
        return [seg.split("=", 1)[0] for seg in render_format(self.tokens, None).split("/") if "=" in seg]


class _FieldDimension(StrictModel):
    hive: bool = True
    name: str | None = Field(default=None, description="the Hive column name; default from the field or header")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is not None and not _NAME.fullmatch(v):
            raise ValueError(f"not a column name: {v!r} (a letter or _, then letters, digits, _)")
        return v


class ValueField(_FieldDimension):
    """A JSON field of the record value (Confluent FieldPartitioner, Lenses `_value.f`)."""

    kind: Literal["value"] = "value"
    field: str

    @field_validator("field")
    @classmethod
    def _field(cls, v: str) -> str:
        return _check_field(v)  # type: ignore[return-value]

    @property
    def column(self) -> str:
        return self.name or self.field.replace(".", "_").replace("-", "_")


class KeyField(_FieldDimension):
    """A JSON field of the record key, or the whole key as text (Lenses `_key`, `_key.f`)."""

    kind: Literal["key"] = "key"
    field: str | None = None

    @field_validator("field")
    @classmethod
    def _field(cls, v: str | None) -> str | None:
        return _check_field(v)

    @property
    def column(self) -> str:
        return self.name or ("kafka_key" if self.field is None else self.field.replace(".", "_").replace("-", "_"))


class Header(_FieldDimension):
    """A header's value as text (the last header of that name; Lenses `_header.h`)."""

    kind: Literal["header"] = "header"
    header: str = Field(min_length=1)

    @property
    def column(self) -> str:
        if self.name:
            return self.name
        if not _NAME.fullmatch(self.header):
            raise ValueError(f"header {self.header!r} is not a column name; give `name`")
        return self.header


Dimension = Annotated[KafkaPartition | RecordTime | ValueField | KeyField | Header, Field(discriminator="kind")]


class OutputLayout(StrictModel):
    """Object keys and partitioning of an archive's data objects (`layout:` in the config)."""

    template: str = DEFAULT_TEMPLATE
    partition_by: list[Dimension] = Field(default_factory=lambda: [KafkaPartition()])
    padding: Padding = Padding()
    timezone: str = Field(default="UTC", description="for {{timestamp:unit=…}} and time dimensions without one")
    extension: str | None = Field(
        default=None, description="the object name's extension in place of the format's: '' for none (as the Aiven "
                                  "sink names objects), or e.g. '.json'; a compression suffix still follows")
    on_missing: Literal["bucket", "fail", "skip", "dead_letter"] = Field(
        default="bucket", description="a record the layout cannot place (a partition_by field, header or time, or "
                                      "the {{key}}, that it lacks): the (null) bucket, fail the window, skip it "
                                      "(counted), or a dead letter")

    @field_validator("timezone")
    @classmethod
    def _tz(cls, v: str) -> str:
        return check_timezone(v)

    @field_validator("extension")
    @classmethod
    def _extension(cls, v: str | None) -> str | None:
        if v is not None and not _EXTENSION.fullmatch(v):
            raise ValueError(f"extension must be '' or up to three of '.' + 1-16 of a-z A-Z 0-9 (e.g. '.json', "
                             f"'.snappy.parquet'), got {v!r}")
        return v

    @model_validator(mode="after")
    def _check(self) -> OutputLayout:
        seen: dict[str, int] = {}
        for i, d in enumerate(self.partition_by):
            for n in _hive_names(d):
                if n.lower() in RESERVED_NAMES:
                    raise ValueError(f"partition_by[{i}]: Hive column {n!r} repeats a data column "
                                     f"({', '.join(sorted(RESERVED_NAMES))}); give another `name`")
                if n.lower() in seen:
                    raise ValueError(f"partition_by[{i}]: Hive column {n!r} is already used by "
                                     f"partition_by[{seen[n.lower()]}]")
                seen[n.lower()] = i
        self.check(rotation=False)
        return self

    def check(self, rotation: bool) -> None:
        """Raise InvalidTemplate unless every key is unique and parses back (rotation: {{part}} required)."""
        record_slots = ("partition_by",) if any(not isinstance(d, KafkaPartition) for d in self.partition_by) else ()
        check_template(self.key_template, rotation=rotation, record_slots=record_slots)

    @cached_property
    def key_template(self) -> KeyTemplate:
        return parse_template(self.template, self.padding, self.path_segments)

    @property
    def path_segments(self) -> int:
        return sum(d.segments if isinstance(d, RecordTime) else 1 for d in self.partition_by)

    @property
    def template_slots(self) -> tuple[str, ...]:
        """Record-level template values in the bucket: `key`, `timestamp:<unit>`."""
        return tuple(s for s in self.key_template.slots if s == "key" or s.startswith("timestamp:"))

    def time_zone(self, d: RecordTime) -> str:
        return d.timezone or self.timezone

    @property
    def missing_segments(self) -> tuple[int, ...]:
        """The positions, among a bucket's `/`-separated values (keys/buckets.py), of those that come from the record
        and read `(null)` when it lacks them: field, header and field- or header-time dimensions, and `{{key}}`."""
        fixed = (KafkaPartition,)  # from Kafka's own fields: never lacking
        out = [i for i, d in enumerate(self.partition_by)
               if not isinstance(d, fixed) and not (isinstance(d, RecordTime) and d.source == "kafka_timestamp")]
        out += [len(self.partition_by) + j for j, slot in enumerate(self.template_slots) if slot == "key"]
        return tuple(out)


def _hive_names(d: KafkaPartition | RecordTime | ValueField | KeyField | Header) -> list[str]:
    if isinstance(d, RecordTime):
        return d.hive_names()
    if not d.hive:
        return []
    return [d.name] if isinstance(d, KafkaPartition) else [d.column]
