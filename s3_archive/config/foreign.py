"""`foreign_sources:`: archives written by Kafka Connect S3 sinks (Aiven, Confluent) that restore can replay."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from s3_archive.keys.foreign_keys import DEFAULT_AIVEN_TEMPLATE, aiven_template
from s3_archive.keys.template import InvalidTemplate, KeyTemplate

LAYOUTS = ("aiven", "confluent")
AIVEN_FORMATS = ("csv", "jsonl", "json", "avro", "parquet", "bytes")
CONFLUENT_FORMATS = ("avro", "json", "parquet", "bytes")
FIELDS = ("key", "value", "offset", "timestamp", "headers")
COMPRESSIONS = {"none": "", "gzip": ".gz", "snappy": ".snappy", "zstd": ".zst"}


class ForeignSource(BaseModel):
    """A restore source written by a Kafka Connect S3 sink (`foreign_sources:` in the archive YAML)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str = Field(description="asset name: kafka_restore_foreign/<name>")
    layout: Literal["aiven", "confluent"]
    bucket: str
    prefix: str | None = Field(default=None, description="aiven: aws.s3.prefix (default ''); confluent: "
                                                         "topics.dir + '/' (default 'topics/')")
    topic: str = Field(description="the Kafka topic the sink archived (names the restore ledger)")
    template: str | None = Field(default=None, description="aiven: file.name.template")
    format: Literal["csv", "jsonl", "json", "avro", "parquet", "bytes"] = Field(
        default="csv", description="aiven: format.output.type (bytes: raw values); confluent: avro, json, parquet, "
                                   "bytes")
    fields: list[Literal["key", "value", "offset", "timestamp", "headers"]] = Field(
        default=["value"], min_length=1, description="aiven: format.output.fields, in order")
    value_encoding: Literal["base64", "none"] = Field(
        default="base64", description="aiven: format.output.fields.value.encoding")
    envelope: bool = Field(default=True, description="aiven: format.output.envelope")
    compression: Literal["none", "gzip", "snappy", "zstd"] = Field(
        default="none", description="aiven: file.compression.type; confluent json/bytes: gzip = s3.compression.type")
    line_separator: str | None = Field(
        default=None, description="bytes: separator between raw values (confluent: format.bytearray.separator, "
                                  "default newline); aiven: none, an object is one value")
    error_tolerance: Literal["none", "skip"] = Field(
        default="none", description="skip: an object whose records cannot be read is skipped (listed in the run's "
                                    "metadata) and the run goes on; none: it fails the run")
    follow_target_topic: str | None = Field(
        default=None, description="a sensor restores the objects the sink adds into this existing topic")
    # Cold storage: what the restore does with GLACIER / DEEP_ARCHIVE objects.
    cold_restore_days: int = Field(default=7, ge=1, description="RestoreObject Days")
    cold_restore_tier: Literal["Standard", "Bulk", "Expedited"] = "Standard"

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not re.fullmatch(r"[a-z][a-z0-9_]{0,62}", v):
            raise ValueError(f"must match [a-z][a-z0-9_]{{0,62}} (lowercase letters, digits, _), got {v!r}")
        return v

    @field_validator("topic", "follow_target_topic")
    @classmethod
    def _topic(cls, v: str | None) -> str | None:
        if v is not None and (not re.fullmatch(r"[a-zA-Z0-9._-]{1,249}", v) or v in (".", "..")):
            raise ValueError(f"not a valid Kafka topic name: {v!r} (allowed: 1-249 of a-z A-Z 0-9 . _ -)")
        return v

    @model_validator(mode="after")
    def _check(self) -> ForeignSource:
        if self.prefix is not None and self.prefix.startswith("/"):
            raise ValueError(f"prefix must not start with '/', got {self.prefix!r}")
        if self.follow_target_topic == self.topic:
            raise ValueError(f"follow_target_topic is the archived topic {self.topic!r} itself: following would "
                             "append every record again")
        if len(set(self.fields)) != len(self.fields):
            raise ValueError(f"fields lists a field twice: {self.fields}")
        if self.layout == "confluent":
            if "format" not in self.model_fields_set:
                raise ValueError(f"layout 'confluent' needs format: one of {', '.join(CONFLUENT_FORMATS)} (the "
                                 "sink's format.class)")
            if self.format not in CONFLUENT_FORMATS:
                raise ValueError(f"format {self.format!r} is not a Confluent S3 sink format; allowed: "
                                 f"{', '.join(CONFLUENT_FORMATS)}")
            for key in ("template", "fields", "value_encoding", "envelope"):
                if key in self.model_fields_set:
                    raise ValueError(f"{key} applies to layout 'aiven' only")
            if self.compression not in ("none", "gzip") or (self.compression == "gzip"
                                                             and self.format not in ("json", "bytes")):
                raise ValueError(f"compression {self.compression!r}: the Confluent sink compresses only json and "
                                 "bytes objects, with gzip (avro and parquet compress inside the file)")
            return self
        try:
            t = aiven_template(self.template or DEFAULT_AIVEN_TEMPLATE)
        except InvalidTemplate as e:
            raise ValueError(str(e)) from None
        if "partition" not in t.slots or "start_offset" not in t.slots:
            raise ValueError(f"template {t.text!r} needs {{{{partition}}}} and {{{{start_offset}}}} to be restored in "
                             "order (a {{key}} template keeps only the latest record per key: not a log)")
        if "key" in t.slots:
            raise ValueError(f"template {t.text!r}: {{{{key}}}} groups records by key, keeping only the latest of "
                             "each; such objects are not a log and cannot be restored in order")
        if self.format == "bytes" and "fields" in self.model_fields_set and self.fields != ["value"]:
            raise ValueError("format 'bytes' carries only the value; fields must be [value]")
        if not self.envelope and len(self.fields) != 1:
            raise ValueError("envelope: false needs exactly one field (the sink writes the value unwrapped)")
        if "value" not in self.fields:
            raise ValueError(f"fields {self.fields} have no value: nothing to restore")
        if self.format == "csv" and self.value_encoding == "none" and self.fields[-1] != "value":
            raise ValueError("csv with value_encoding none: value must be the last field (a raw value may contain "
                             "commas)")
        if self.format in ("avro", "parquet") and self.compression != "none":
            raise ValueError(f"format {self.format!r} compresses inside the file; compression must be none")
        return self

    @property
    def key_prefix(self) -> str:
        p = self.prefix if self.prefix is not None else ("topics/" if self.layout == "confluent" else "")
        return p if p == "" or p.endswith("/") or self.layout == "aiven" else p + "/"

    @property
    def key_template(self) -> KeyTemplate:
        return aiven_template(self.template or DEFAULT_AIVEN_TEMPLATE)

    @property
    def separator(self) -> bytes | None:
        if self.line_separator is not None:
            return self.line_separator.encode()
        return b"\n" if self.layout == "confluent" else None

    @property
    def has_timestamps(self) -> bool:
        return self.layout == "aiven" and "timestamp" in self.fields and self.envelope
