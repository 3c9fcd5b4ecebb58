"""Output formats: the archived envelope and how each format is written. Pure: no Spark session, no I/O.

The envelope is what Spark's Kafka source gives, renamed to snake_case and kept lossless:
key and value as bytes, headers as an ordered list of (key, value) keeping duplicates and nulls, and the
record's coordinates and timestamp.
"""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True)
class FormatSpec:
    name: str
    spark_format: str
    extension: str
    codecs: tuple[str, ...]
    default_codec: str
    # codec -> suffix appended to the object name (compressed text formats)
    codec_suffix: dict[str, str]

    def spark_options(self, codec: str) -> dict[str, str]:
        opts = {"compression": codec}
        if self.spark_format == "json":
            # Nulls stay explicit ("key": null) so a reader can tell a null key from a missing field.
            opts |= {"ignoreNullFields": "false", "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"}
        return opts

    def object_suffix(self, codec: str) -> str:
        return self.extension + self.codec_suffix.get(codec, "")


FORMATS: dict[str, FormatSpec] = {
    "parquet": FormatSpec("parquet", "parquet", ".parquet", ("snappy", "zstd", "gzip", "lz4_raw", "none"),
                          "snappy", {}),
    "jsonl": FormatSpec("jsonl", "json", ".jsonl", ("none", "gzip", "zstd"), "none",
                        {"gzip": ".gz", "zstd": ".zst"}),
}
