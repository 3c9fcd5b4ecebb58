"""How an archive stores each record's payload: the envelope columns kept, the value's and the key's decoding, and
the sink-compatible output options (the `envelope`, `value_decoding`, `key_decoding` and `sink_output` keys of an
archive, config/archive.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from s3_archive.model.base import StrictModel
from s3_archive.model.formats import REGISTRY_TYPES, envelope_columns, parse_ddl_fields


class Envelope(StrictModel):
    """Which parts of each record an archive stores (Lenses `store.envelope.fields.*`, Aiven `format.output.fields`).

    metadata = topic, partition, offset, timestamp, timestamp_type. Restore needs all four parts."""

    key: bool = True
    value: bool = True
    headers: bool = True
    metadata: bool = True

    def columns(self) -> list[str]:
        return envelope_columns(key=self.key, value=self.value, headers=self.headers, metadata=self.metadata)

    @property
    def complete(self) -> bool:
        return self.key and self.value and self.headers and self.metadata


class ValueDecoding(StrictModel):
    """How the record value is stored: raw bytes (lossless), UTF-8 text, JSON whose top-level fields become columns,
    or a Schema Registry payload (Confluent-framed Avro, Protobuf or JSON Schema) whose fields become typed columns
    (next to the raw `value`, unless `envelope.value` is off)."""

    type: Literal["bytes", "utf8", "json", "avro", "protobuf", "json_schema"] = "bytes"
    json_schema: str | None = Field(
        default=None, description="json only: the fields as a Spark DDL string, e.g. 'id BIGINT, name STRING'; "
                                  "None: inferred per window from the window's values")
    column_prefix: str = Field(default="", description="json and the registry types: prepended to each decoded "
                                                       "field's column name")
    subject: str | None = Field(
        default=None, description="registry types: the subject whose versions' fields are the window's columns; "
                                  "None: '<topic>-value' (TopicNameStrategy)")
    on_error: Literal["fail", "dead_letter", "skip"] = Field(
        default="fail", description="a value that does not decode (not UTF-8; for json also not a JSON object; for "
                                    "the registry types not framed, an unknown schema id, or not decodable with "
                                    "its schema): fail the window naming topic, partition, offset and the reason, "
                                    "write the raw record under <prefix>_dead_letter/ (committed with the window, "
                                    "never dropped; also to dead_letter_topic when set), or skip it (counted in the "
                                    "manifest)")

    @model_validator(mode="after")
    def _json_only(self) -> ValueDecoding:
        if self.type != "json" and self.json_schema is not None:
            raise ValueError(f"json_schema applies to type 'json' only, not {self.type!r}")
        if self.type not in ("json", *REGISTRY_TYPES) and self.column_prefix:
            raise ValueError(f"column_prefix applies to types json, {', '.join(REGISTRY_TYPES)}, not {self.type!r}")
        if self.type not in REGISTRY_TYPES and self.subject is not None:
            raise ValueError(f"subject applies to types {', '.join(REGISTRY_TYPES)}, not {self.type!r}")
        if self.json_schema is not None:
            parse_ddl_fields(self.json_schema)  # raises ValueError naming the problem
        return self

    @property
    def registry(self) -> bool:
        """Decoded with schemas from a Schema Registry."""
        return self.type in REGISTRY_TYPES


class KeyDecoding(StrictModel):
    """How the record key is decoded besides its raw bytes: not at all (`bytes`), or a Schema Registry payload
    whose fields become typed columns named `column_prefix` + field (a key that is not a record: one column,
    `column_prefix` without its trailing `_`)."""

    type: Literal["bytes", "avro", "protobuf", "json_schema"] = "bytes"
    column_prefix: str = Field(default="key_", description="prepended to each decoded key field's column name")
    subject: str | None = Field(default=None, description="the subject whose versions' fields are the "
                                                          "window's columns; None: '<topic>-key'")

    @property
    def registry(self) -> bool:
        return self.type in REGISTRY_TYPES


class SinkOutput(StrictModel):
    """Objects shaped as a Kafka Connect S3 sink writes them, for the readers of its bucket (docs/formats.md,
    "Sink-compatible output"). Lossy by nature: an archive with `value` other than base64 or `skip_tombstones` is
    not restorable."""

    value: Literal["base64", "json", "text"] = Field(
        default="base64", description="jsonl, json: base64 (lossless) or json: the value as JSON when it parses, "
                                      "else as a string of its text; csv: base64 or text: the raw value, unquoted "
                                      "(Aiven format.output.fields.value.encoding: none)")
    csv_header: bool = Field(default=False, description="csv: each object starts with a row of the csv_fields "
                                                        "names (Lenses CSV_WITHHEADERS)")
    skip_tombstones: bool = Field(default=False, description="records with a null value are not written, only "
                                                             "counted (tombstones_skipped; Confluent "
                                                             "behavior.on.null.values=ignore, Lenses "
                                                             "connect.s3.skip.null.values)")

    @property
    def lossy(self) -> bool:
        return self.value != "base64" or self.skip_tombstones
