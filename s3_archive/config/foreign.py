"""`foreign_sources:`: archives written by Kafka Connect S3 sinks (Aiven, Confluent, Lenses) that restore can
replay."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from s3_archive.keys.foreign_keys import DEFAULT_AIVEN_TEMPLATE, aiven_template
from s3_archive.keys.template import InvalidTemplate, KeyTemplate

LAYOUTS = ("aiven", "confluent", "lenses")
AIVEN_FORMATS = ("csv", "jsonl", "json", "avro", "parquet", "bytes")
CONFLUENT_FORMATS = ("avro", "json", "parquet", "bytes")
LENSES_FORMATS = ("avro", "parquet", "json", "csv", "text", "bytes")
FIELDS = ("key", "value", "offset", "timestamp", "headers")
COMPRESSIONS = {"none": "", "gzip": ".gz", "snappy": ".snappy", "zstd": ".zst"}
# Keys only some layouts take: the layouts each applies to.
_ONLY = {"template": ("aiven",), "fields": ("aiven",), "partitioner": ("confluent",),
         "key_encoding": ("confluent", "lenses"), "csv_header": ("lenses",), "key_suffix": ("lenses",)}


class ForeignSource(BaseModel):
    """A restore source written by a Kafka Connect S3 sink (`foreign_sources:` in the archive YAML)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str = Field(description="asset name: kafka_restore_foreign/<name>")
    layout: Literal["aiven", "confluent", "lenses"]
    bucket: str
    prefix: str | None = Field(default=None, description="aiven: aws.s3.prefix (default ''); confluent: "
                                                         "topics.dir + '/' (default 'topics/'); lenses: the "
                                                         "KCQL's INSERT INTO bucket:prefix (default '')")
    topic: str = Field(description="the Kafka topic the sink archived (names the restore ledger)")
    template: str | None = Field(default=None, description="aiven: file.name.template")
    format: Literal["csv", "jsonl", "json", "avro", "parquet", "bytes", "text"] = Field(
        default="csv", description="aiven: format.output.type (bytes: raw values); confluent: avro, json, parquet, "
                                   "bytes; lenses: STOREAS (default json)")
    fields: list[Literal["key", "value", "offset", "timestamp", "headers"]] = Field(
        default=["value"], min_length=1, description="aiven: format.output.fields, in order")
    value_encoding: Literal["base64", "none"] = Field(
        default="base64", description="how a JSON string holds a value: base64 of its bytes (aiven: "
                                      "format.output.fields.value.encoding; confluent json and lenses: the "
                                      "ByteArrayConverter) or the text itself (StringConverter)")
    key_encoding: Literal["base64", "none"] = Field(
        default="base64", description="confluent, lenses: the same for keys (key.converter)")
    envelope: bool | None = Field(default=None, description="aiven: format.output.envelope (default true); "
                                                            "lenses: store.envelope (default false)")
    partitioner: Literal["default", "time", "field"] = Field(
        default="default", description="confluent: partitioner.class (Default; TimeBased, Hourly, Daily; Field)")
    csv_header: bool = Field(default=False, description="lenses: STOREAS CSV_WITHHEADERS (each object starts with "
                                                        "a header row)")
    key_suffix: str = Field(default="", description="lenses: the key.suffix property")
    compression: Literal["none", "gzip", "snappy", "zstd"] = Field(
        default="none", description="aiven: file.compression.type; confluent json/bytes: gzip = "
                                    "s3.compression.type; lenses json: gzip = connect.s3.compression.codec")
    line_separator: str | None = Field(
        default=None, description="bytes: separator between raw values (confluent: format.bytearray.separator, "
                                  "default newline); aiven: none, an object is one value")
    error_tolerance: Literal["none", "skip"] = Field(
        default="none", description="skip: an object whose records cannot be read is skipped (listed in the run's "
                                    "metadata) and the run goes on; none: it fails the run")
    follow_target_topic: str | None = Field(
        default=None, description="a sensor restores the objects the sink adds into this existing topic")
    archive: str | None = Field(
        default=None, description="the archive that took over from this sink (start_position consumer_group): "
                                  "its restore continues with the archive's windows, its objects under the "
                                  "archive's prefix are left to it, and the archive's checks report the boundary")
    # Cold storage: what the restore does with GLACIER / DEEP_ARCHIVE objects.
    cold_restore_days: int = Field(default=7, ge=1, description="RestoreObject Days")
    cold_restore_tier: Literal["Standard", "Bulk", "Expedited"] = "Standard"

    @model_validator(mode="before")
    @classmethod
    def _lenses_default_format(cls, data: Any) -> Any:
        # STOREAS is optional in KCQL; the sink then writes JSON.
        if isinstance(data, dict) and data.get("layout") == "lenses" and "format" not in data:
            return {**data, "format": "json"}
        return data

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
        if self.follow_target_topic is not None and self.archive is not None:
            raise ValueError(f"follow_target_topic with archive {self.archive!r}: the sink stopped when the archive "
                             "took over, so there is nothing new to follow; follow the archive with a restore "
                             "target's mode: follow")
        if len(set(self.fields)) != len(self.fields):
            raise ValueError(f"fields lists a field twice: {self.fields}")
        for key, layouts in _ONLY.items():
            if key in self.model_fields_set and self.layout not in layouts:
                raise ValueError(f"{key} applies to layout{'s' if len(layouts) > 1 else ''} "
                                 f"{' and '.join(repr(x) for x in layouts)} only")
        if self.layout == "confluent":
            self._check_confluent()
        elif self.layout == "lenses":
            self._check_lenses()
        else:
            self._check_aiven()
        return self

    def _check_confluent(self) -> None:
        if "format" not in self.model_fields_set:
            raise ValueError(f"layout 'confluent' needs format: one of {', '.join(CONFLUENT_FORMATS)} (the "
                             "sink's format.class)")
        if self.format not in CONFLUENT_FORMATS:
            raise ValueError(f"format {self.format!r} is not a Confluent S3 sink format; allowed: "
                             f"{', '.join(CONFLUENT_FORMATS)}")
        if self.envelope is not None:
            raise ValueError("envelope applies to layouts 'aiven' and 'lenses' only")
        if self.compression not in ("none", "gzip") or (self.compression == "gzip"
                                                         and self.format not in ("json", "bytes")):
            raise ValueError(f"compression {self.compression!r}: the Confluent sink compresses only json and "
                             "bytes objects, with gzip (avro and parquet compress inside the file)")

    def _check_lenses(self) -> None:
        if self.format not in LENSES_FORMATS:
            raise ValueError(f"format {self.format!r} is not a Lenses S3 sink format (STOREAS); allowed: "
                             f"{', '.join(LENSES_FORMATS)}")
        if self.envelope and self.format not in ("avro", "parquet", "json"):
            raise ValueError(f"envelope: the Lenses sink stores its envelope in avro, parquet and json only, not "
                             f"{self.format!r}")
        if self.compression not in ("none", "gzip") or (self.compression == "gzip" and self.format != "json"):
            raise ValueError(f"compression {self.compression!r}: the Lenses sink compresses only json objects as "
                             "a whole, with gzip (avro and parquet compress inside the file)")
        if "csv_header" in self.model_fields_set and self.format != "csv":
            raise ValueError("csv_header applies to format 'csv' only")
        if self.line_separator is not None:
            raise ValueError("line_separator: the Lenses sink writes BYTES as one object per record")
        if "/" in self.key_suffix:
            raise ValueError(f"key_suffix must not contain '/', got {self.key_suffix!r}")

    def _check_aiven(self) -> None:
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
        if self.format == "text":
            raise ValueError(f"format 'text' is not an Aiven S3 sink format; allowed: {', '.join(AIVEN_FORMATS)}")
        if self.format == "bytes" and "fields" in self.model_fields_set and self.fields != ["value"]:
            raise ValueError("format 'bytes' carries only the value; fields must be [value]")
        if not self.stores_envelope and len(self.fields) != 1:
            raise ValueError("envelope: false needs exactly one field (the sink writes the value unwrapped)")
        if "value" not in self.fields:
            raise ValueError(f"fields {self.fields} have no value: nothing to restore")
        if self.format == "csv" and self.value_encoding == "none" and self.fields[-1] != "value":
            raise ValueError("csv with value_encoding none: value must be the last field (a raw value may contain "
                             "commas)")
        if self.format in ("avro", "parquet") and self.compression != "none":
            raise ValueError(f"format {self.format!r} compresses inside the file; compression must be none")

    @property
    def stores_envelope(self) -> bool:
        """Whether objects hold each record's envelope (key, headers, offset, timestamp) or the value alone."""
        if self.envelope is not None:
            return self.envelope
        return self.layout == "aiven"

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
        if self.layout == "lenses":
            return self.stores_envelope
        return self.layout == "aiven" and "timestamp" in self.fields and self.stores_envelope
