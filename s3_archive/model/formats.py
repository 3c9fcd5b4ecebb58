"""Output formats: the archived envelope and how each format is written. Pure: no Spark session, no I/O.

The envelope is what Spark's Kafka source gives, renamed to snake_case and kept lossless:
key and value as bytes, headers as an ordered list of (key, value) keeping duplicates and nulls, and the
record's coordinates and timestamp.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ENVELOPE_COLUMNS: tuple[tuple[str, str], ...] = (
    # (archived column, Spark Kafka source column)
    ("key", "key"),
    ("value", "value"),
    ("headers", "headers"),
    ("topic", "topic"),
    ("partition", "partition"),
    ("offset", "offset"),
    ("timestamp", "timestamp"),
    ("timestamp_type", "timestampType"),
)


# Envelope parts a config can switch off (Lenses store.envelope.fields.*); metadata is the record's coordinates.
ENVELOPE_PARTS: dict[str, tuple[str, ...]] = {
    "key": ("key",),
    "value": ("value",),
    "headers": ("headers",),
    "metadata": ("topic", "partition", "offset", "timestamp", "timestamp_type"),
}


def envelope_columns(*, key: bool = True, value: bool = True, headers: bool = True, metadata: bool = True,
                     ) -> list[str]:
    """The archived envelope columns kept, in envelope order."""
    keep = {"key": key, "value": value, "headers": headers, "metadata": metadata}
    kept = {c for part, cols in ENVELOPE_PARTS.items() if keep[part] for c in cols}
    return [c for c, _ in ENVELOPE_COLUMNS if c in kept]


def parse_ddl_fields(ddl: str) -> list[str]:
    """Top-level field names of a Spark DDL schema string ('id BIGINT, `a b` STRING, s STRUCT<x: INT>').

    Checks the shape only (names, balanced brackets, a type after each name); Spark checks the types when it
    parses the schema. Raises ValueError naming what is wrong."""
    fields, depth, cur, quoted = [], 0, "", False
    for ch in ddl + ",":
        if ch == "`":
            quoted = not quoted
        elif not quoted and ch in "<(":
            depth += 1
        elif not quoted and ch in ">)":
            depth -= 1
            if depth < 0:
                raise ValueError(f"json_schema {ddl!r}: unbalanced {ch!r}")
        if ch == "," and depth == 0 and not quoted:
            fields.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if depth or quoted:
        raise ValueError(f"json_schema {ddl!r}: unbalanced brackets or backticks")
    names = []
    for f in fields:
        if f.startswith("`"):
            end = f.find("`", 1)
            name, rest = f[1:end], f[end + 1:]
        else:
            name, _, rest = f.partition(" ")
            name = name.rstrip(":")
        if not name or not rest.strip().lstrip(":").strip():
            raise ValueError(f"json_schema {ddl!r}: field {f!r} needs a name and a type, e.g. 'id BIGINT'")
        names.append(name)
    if len(set(names)) != len(names):
        raise ValueError(f"json_schema {ddl!r}: a field is named twice: {names}")
    return names


# Value and key decodings of Confluent-framed payloads with schemas from a Schema Registry (typed columns).
REGISTRY_TYPES = ("avro", "protobuf", "json_schema")

# Fields a csv archive can carry (Aiven's format.output.fields), in the order given by the config.
CSV_FIELDS = ("key", "value", "offset", "timestamp", "headers")
# Spark 4.0's text writers (json, csv, text) have no zstd without Hadoop's native library, so for zstd Spark
# writes the text uncompressed and the commit compresses each part while publishing it (PUBLISH_CODECS).
_TEXT_CODECS = ("none", "gzip", "bzip2", "zstd")
_TEXT_SUFFIX = {"gzip": ".gz", "bzip2": ".bz2", "zstd": ".zst"}
PUBLISH_CODECS = frozenset({"zstd"})


# Codecs that take a level (`compression_level`), with the levels their libraries accept.
CODEC_LEVELS: dict[str, tuple[int, int]] = {"gzip": (1, 9), "zstd": (1, 22), "brotli": (0, 11), "deflate": (1, 9)}


@dataclass(frozen=True)
class FormatSpec:
    name: str
    spark_format: str
    extension: str
    codecs: tuple[str, ...]
    default_codec: str
    # codec -> suffix appended to the object name (compressed text formats)
    codec_suffix: dict[str, str]
    # our codec name -> Spark's, where they differ
    spark_codec: dict[str, str] = field(default_factory=dict)
    lossless: bool = True  # carries key, value and headers byte for byte (restore needs this)
    envelope: bool = True  # stores the envelope's columns (selectable with `envelope`, decoded value fields)
    stores: str = "the envelope"  # what an object holds, for error messages and docs
    table: bool = False  # rows of a table format (Iceberg), committed by the table's catalog, not objects of ours

    def publish_codec(self, codec: str) -> str | None:
        """The codec the commit applies while publishing a staged part (Spark cannot write it), or None."""
        return codec if self.codec_suffix and codec in PUBLISH_CODECS else None

    def spark_options(self, codec: str) -> dict[str, str]:
        spark_codec = "none" if self.publish_codec(codec) else self.spark_codec.get(codec, codec)
        opts = {"compression": spark_codec}
        if self.spark_format == "json":
            # Nulls stay explicit ("key": null) so a reader can tell a null key from a missing field.
            opts |= {"ignoreNullFields": "false", "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"}
        if self.spark_format == "csv":
            # Empty strings and nulls stay apart: null is an empty field, "" is a quoted empty field.
            opts |= {"header": "false", "nullValue": "", "emptyValue": '""', "escape": '"'}
        return opts

    def object_suffix(self, codec: str) -> str:
        return self.extension + self.codec_suffix.get(codec, "")


FORMATS: dict[str, FormatSpec] = {
    "parquet": FormatSpec("parquet", "parquet", ".parquet", ("snappy", "zstd", "gzip", "lz4_raw", "brotli", "none"),
                          "snappy", {}),
    "avro": FormatSpec("avro", "avro", ".avro", ("snappy", "deflate", "zstd", "bzip2", "xz", "none"), "snappy", {},
                       {"zstd": "zstandard", "none": "uncompressed"}),
    "jsonl": FormatSpec("jsonl", "json", ".jsonl", _TEXT_CODECS, "none", _TEXT_SUFFIX),
    # Aiven's json: each object is one JSON array of the records (same fields and encoding as jsonl). Written by
    # Spark's text writer from lines `[rec`, `,rec`, ..., `,rec]` (archive/driver/spark_job.py).
    "json": FormatSpec("json", "text", ".json", _TEXT_CODECS, "none", _TEXT_SUFFIX),
    # Aiven's csv: the configured fields, key and value base64, headers as name:value pairs (both base64)
    # separated by ';'. A null value and an absent header value are both empty: not lossless.
    "csv": FormatSpec("csv", "csv", ".csv", _TEXT_CODECS, "none", _TEXT_SUFFIX, lossless=False, envelope=False,
                      stores="the csv_fields"),
    # One record's value per line, decoded as UTF-8 (Aiven/Lenses text): for values that are text.
    "text": FormatSpec("text", "text", ".txt", _TEXT_CODECS, "none", _TEXT_SUFFIX, lossless=False, envelope=False,
                       stores="the value as text"),
    # Lenses BYTES: one object per record holding the value's bytes (images, documents). Not lossless: no key,
    # headers or timestamp, and a tombstone becomes an empty object. archive/driver/commit.py publishes one object per
    # record.
    "bytes": FormatSpec("bytes", "bytes", ".bin", ("none",), "none", {}, lossless=False, envelope=False,
                        stores="one record value per object"),
    # Apache Iceberg: the envelope (and decoded value fields) appended to one table per topic through a catalog;
    # Iceberg writes Parquet data files (write.parquet.compression-codec) and its own metadata
    # (archive/driver/iceberg_commit.py).
    "iceberg": FormatSpec("iceberg", "iceberg", "", ("zstd", "snappy", "gzip", "lz4", "none"), "zstd", {},
                          {"none": "uncompressed"}, stores="rows of one Iceberg table per topic", table=True),
}
