import re
import typing

import pytest

from s3_archive.config.archive import ArchiveConfig
from s3_archive.model.formats import ENVELOPE_COLUMNS, FORMATS, FormatSpec

# Formats whose output is objects of ours (iceberg's is a table: Iceberg names its own data files)
ALL = [(name, codec) for name, spec in sorted(FORMATS.items()) for codec in spec.codecs if not spec.table]


def test_formats_known():
    assert set(FORMATS) == {"parquet", "avro", "jsonl", "json", "csv", "text", "bytes", "iceberg"}
    assert [n for n, s in FORMATS.items() if s.table] == ["iceberg"]


def test_settings_offer_exactly_the_known_formats():
    assert set(typing.get_args(ArchiveConfig.model_fields["format"].annotation)) == set(FORMATS)


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_spec_is_consistent(name):
    spec = FORMATS[name]
    assert isinstance(spec, FormatSpec)
    assert spec.name == name
    assert spec.default_codec in spec.codecs
    assert len(set(spec.codecs)) == len(spec.codecs)
    assert "none" in spec.codecs  # every format can be written uncompressed
    assert set(spec.codec_suffix) <= set(spec.codecs)
    assert spec.extension == ("" if spec.table else {"text": ".txt", "bytes": ".bin"}.get(name, f".{name}"))
    assert spec.lossless <= spec.envelope  # a lossless format stores the envelope


def test_defaults():
    assert FORMATS["parquet"].default_codec == "snappy"
    assert FORMATS["jsonl"].default_codec == "none"
    assert FORMATS["parquet"].spark_format == "parquet"
    assert FORMATS["jsonl"].spark_format == "json"


@pytest.mark.parametrize("name,codec,suffix", [
    ("jsonl", "gzip", ".jsonl.gz"),
    ("jsonl", "bzip2", ".jsonl.bz2"),
    ("jsonl", "none", ".jsonl"),
    ("parquet", "zstd", ".parquet"),
    ("parquet", "snappy", ".parquet"),
    ("parquet", "gzip", ".parquet"),
    ("parquet", "lz4_raw", ".parquet"),
    ("parquet", "none", ".parquet"),
])
def test_object_suffix(name, codec, suffix):
    assert FORMATS[name].object_suffix(codec) == suffix


@pytest.mark.parametrize("name,codec", ALL)
def test_object_suffix_starts_with_extension(name, codec):
    spec = FORMATS[name]
    suffix = spec.object_suffix(codec)
    assert suffix.startswith(spec.extension)
    assert re.fullmatch(r"(\.[a-z0-9]+)+", suffix)


@pytest.mark.parametrize("name,codec", ALL)
def test_publish_codec_only_where_spark_cannot_compress(name, codec):
    spec = FORMATS[name]
    assert spec.publish_codec(codec) == (codec if codec == "zstd" and name in ("jsonl", "json", "csv", "text")
                                         else None)
    assert spec.object_suffix(codec).endswith(".zst") == (spec.publish_codec(codec) == "zstd")


def test_suffixes_tell_jsonl_codecs_apart():
    spec = FORMATS["jsonl"]
    suffixes = [spec.object_suffix(c) for c in spec.codecs]
    assert len(set(suffixes)) == len(suffixes)


@pytest.mark.parametrize("codec", FORMATS["jsonl"].codecs)
def test_json_spark_options_keep_nulls(codec):
    opts = FORMATS["jsonl"].spark_options(codec)
    assert opts["ignoreNullFields"] == "false"
    # zstd: Spark writes plain text and the commit compresses (Spark 4.0 has no zstd for text without native libs)
    assert opts["compression"] == ("none" if codec == "zstd" else codec)
    # microsecond timestamps with an offset: nothing of Kafka's millisecond timestamps is lost
    assert opts["timestampFormat"] == "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"
    assert all(isinstance(v, str) for v in opts.values())


@pytest.mark.parametrize("codec", FORMATS["parquet"].codecs)
def test_parquet_spark_options_are_just_the_codec(codec):
    assert FORMATS["parquet"].spark_options(codec) == {"compression": codec}


def test_spark_options_are_fresh_dicts():
    spec = FORMATS["jsonl"]
    a = spec.spark_options("gzip")
    a["ignoreNullFields"] = "true"
    assert spec.spark_options("gzip")["ignoreNullFields"] == "false"


def test_format_spec_is_frozen():
    with pytest.raises(AttributeError):
        FORMATS["parquet"].default_codec = "zstd"  # type: ignore[misc]


def test_envelope_columns():
    archived = [a for a, _ in ENVELOPE_COLUMNS]
    source = [s for _, s in ENVELOPE_COLUMNS]
    assert archived == ["key", "value", "headers", "topic", "partition", "offset", "timestamp", "timestamp_type"]
    assert dict(ENVELOPE_COLUMNS)["timestamp_type"] == "timestampType"
    assert len(set(archived)) == len(archived) and len(set(source)) == len(source)
    assert all(re.fullmatch(r"[a-z][a-z_]*", a) for a in archived)  # snake_case
    # every Spark Kafka source column is kept
    assert set(source) == {"key", "value", "headers", "topic", "partition", "offset", "timestamp", "timestampType"}
