"""The connector's key and value converters: Schema Registry converters (Confluent's Avro, Protobuf and JSON Schema
converters, which the Aiven and Lenses sinks use too, and Apicurio's) become `value_decoding` / `key_decoding`
of the registry type, and their registry URL and credentials the S3_ARCHIVE_SCHEMA_REGISTRY_* variables."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from s3_archive.config.connect_import.notes import Props, Translation, is_secret

CONVERTERS = {
    "io.confluent.connect.avro.AvroConverter": "avro",
    "io.confluent.connect.protobuf.ProtobufConverter": "protobuf",
    "io.confluent.connect.json.JsonSchemaConverter": "json_schema",
    "io.apicurio.registry.utils.converter.AvroConverter": "avro",
    "io.apicurio.registry.utils.converter.ProtobufConverter": "protobuf",
    "io.apicurio.registry.utils.converter.JsonSchemaConverter": "json_schema",
}
_DECODED_FORMATS = ("parquet", "avro", "iceberg")
_STRATEGY = "value.subject.name.strategy"


@dataclass
class Decodings:
    """What the converters say, applied to every archive of the import."""

    archive: dict[str, Any] = field(default_factory=dict)
    notes: list[tuple[str, str, str, str]] = field(default_factory=list)  # (YAML key, option, value, text)
    env: dict[str, tuple[str, str]] = field(default_factory=dict)

    def apply(self, t: Translation) -> None:
        fmt = t.archive.get("format", "parquet")
        for key, value in self.archive.items():
            if fmt in _DECODED_FORMATS:
                t.archive[key] = value
            else:
                t.note(key, "", None, f"the converter's {value['type']} payloads are stored as bytes: typed columns "
                                      f"need format parquet, avro or iceberg (this archive's is {fmt!r})")
        for key, option, value, text in self.notes:
            t.note(key, option, value, text)
        for var, v in self.env.items():
            t.env.setdefault(var, v)


def converters(props: Props) -> Decodings:
    """Read the key and value converters and their registry settings (marking them used)."""
    out = Decodings()
    for part in ("value", "key"):
        cls = props.get(f"{part}.converter")
        kind = CONVERTERS.get(cls or "")
        if kind is None:
            continue
        yaml_key = f"{part}_decoding"
        out.archive[yaml_key] = {"type": kind} if part == "key" else {"type": kind, "on_error": "fail"}
        out.notes.append((yaml_key, f"{part}.converter", cls or "", "the Confluent wire format with schemas from "
                          "the Schema Registry: fields become typed columns, the raw bytes stay (docs/formats.md, "
                          "'Schema Registry')"))
        url = props.get(f"{part}.converter.schema.registry.url")
        if url:
            first = url.split(",")[0].strip()
            out.env.setdefault("S3_ARCHIVE_SCHEMA_REGISTRY_URL", (first, f"{part}.converter.schema.registry.url"))
        auth = f"{part}.converter.basic.auth.user.info"
        if props.get(auth) is not None:
            out.env.setdefault("S3_ARCHIVE_SCHEMA_REGISTRY_USERNAME", ("<the user>", auth))
            out.env.setdefault("S3_ARCHIVE_SCHEMA_REGISTRY_PASSWORD", ("<the secret>", auth))
        props.get(f"{part}.converter.basic.auth.credentials.source")
        truststore = props.get(f"{part}.converter.schema.registry.ssl.truststore.location")
        if truststore:
            out.env.setdefault("S3_ARCHIVE_SCHEMA_REGISTRY_CA_LOCATION",
                               ("<the CA as PEM>", f"{part}.converter.schema.registry.ssl.truststore.location"))
        strategy = props.get(f"{part}.converter.{_STRATEGY.split('.', 1)[1]}")
        if strategy and not strategy.endswith("TopicNameStrategy"):
            out.notes.append((yaml_key, f"{part}.converter.{_STRATEGY.split('.', 1)[1]}", strategy,
                              f"set {yaml_key}.subject to the subject whose versions describe the topic's "
                              f"{part}s (the default is '<topic>-{part}')"))
        for option in [o for o in props.data if o.startswith(f"{part}.converter.") and is_secret(o)]:
            props.get(option)
            out.env.setdefault("S3_ARCHIVE_SCHEMA_REGISTRY_PASSWORD", ("<the secret>", option))
    return out
