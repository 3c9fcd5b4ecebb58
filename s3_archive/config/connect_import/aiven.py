"""Aiven's S3 sink (`io.aiven.kafka.connect.s3.AivenKafkaConnectS3SinkConnector`) → one archive.

Objects keep the sink's names: `aws.s3.prefix` + `file.name.template` rendered + the compression's suffix (no
format extension, as the sink writes them), so restore's Aiven reader (`foreign_sources:` with layout aiven) and
the sink's own source connector read them. Deprecated underscore names (`aws_s3_bucket`, …) are read too.
"""

from __future__ import annotations

from s3_archive.config.connect_import.notes import Props, Translation, archive_name, refuse, settle_rest, topic_list
from s3_archive.keys.foreign_keys import DEFAULT_AIVEN_TEMPLATE, aiven_template
from s3_archive.keys.template import InvalidTemplate

_FORMATS = ("csv", "json", "jsonl", "avro", "parquet")
_FIELDS = ("key", "value", "offset", "timestamp", "headers")
_TEXT_CODECS = {"none": "none", "gzip": "gzip", "zstd": "zstd"}
_FILE_CODECS = {"none": "none", "gzip": "gzip", "zstd": "zstd", "snappy": "snappy"}


def translate(props: Props) -> list[Translation]:
    t = Translation({"name": archive_name(props.get("name"))})
    topic_list(t, props)
    bucket = props.get("aws.s3.bucket.name", "aws_s3_bucket")
    if not bucket:
        raise refuse("aws.s3.bucket.name", None, "the bucket is required")
    t.archive["bucket"] = bucket
    prefix = props.get("aws.s3.prefix", "aws_s3_prefix", "file.name.prefix", default="")
    if "{{" in prefix:
        raise refuse("aws.s3.prefix", prefix, "a fixed prefix (the window's keys must not depend on the date "
                     "they are written: {{utc_date}} / {{local_date}} are not supported)")
    if prefix:
        t.archive["prefix"] = prefix
        if not prefix.endswith("/"):
            t.note("prefix", "aws.s3.prefix", prefix, "approximate: s3-archive ends a prefix with '/', the sink "
                   f"uses it as is; objects are under {prefix}/ instead of {prefix}")

    fmt = (props.get("format.output.type") or "csv").lower()
    if fmt not in _FORMATS:
        raise refuse("format.output.type", fmt, f"allowed: {', '.join(_FORMATS)}")
    fields = [f.strip() for f in (props.get("format.output.fields") or "value").split(",") if f.strip()]
    if bad := [f for f in fields if f not in _FIELDS]:
        raise refuse("format.output.fields", ",".join(fields), f"field(s) {bad}: allowed {', '.join(_FIELDS)}")
    encoding = (props.get("format.output.fields.value.encoding") or "base64").lower()
    envelope = props.bool("format.output.envelope", True)
    codec = (props.get("file.compression.type") or "gzip").lower()
    if codec not in _FILE_CODECS:
        raise refuse("file.compression.type", codec, f"allowed: {', '.join(_FILE_CODECS)}")

    if not envelope and fmt in ("jsonl", "json", "csv"):
        # One bare value per line: our text format (the value as UTF-8 text, one per line).
        if fields != ["value"]:
            raise refuse("format.output.envelope", "false", "the sink needs format.output.fields=value with it")
        t.archive["format"] = "text"
        t.note("format", "format.output.envelope", "false", f"approximate: the sink writes each value ({fmt}, "
               f"{encoding}); format text writes each value as a UTF-8 line. Not restorable (no key, headers, "
               "offsets)")
    else:
        t.archive["format"] = fmt
    if fmt == "csv" and envelope:
        t.archive["csv_fields"] = fields
        if encoding == "none":
            t.note("csv_fields", "format.output.fields.value.encoding", "none", "approximate: csv values are "
                   "always base64 here")
    elif t.archive["format"] != "text":
        env = {"key": "key" in fields, "value": "value" in fields, "headers": "headers" in fields,
               "metadata": "offset" in fields or "timestamp" in fields}
        if not all(env.values()):
            t.archive["envelope"] = env
        t.note("envelope", "format.output.fields", ",".join(fields),
               "the parts kept; metadata is topic, partition, offset, timestamp and timestamp_type together; "
               "field order is the archive's" + ("" if all(env.values()) else ". Restore needs all four parts"))
        if encoding == "none":
            t.note("envelope", "format.output.fields.value.encoding", "none", "approximate: the value is stored "
                   "as bytes (base64 in json/jsonl), losslessly; value_decoding: {type: utf8} would store text")
    # Compression: text formats compress the object (suffix .gz / .zst); avro and parquet inside the file.
    if fmt == "avro" and codec == "gzip":
        t.archive["compression"] = "deflate"
        t.note("compression", "file.compression.type", codec, "approximate: Avro's deflate codec (Avro has no gzip)")
    elif fmt in ("avro", "parquet"):
        t.archive["compression"] = codec
    elif codec != "none":
        if codec not in _TEXT_CODECS:
            raise refuse("file.compression.type", codec, f"for format {fmt}: allowed none, gzip, zstd")
        t.archive["compression"] = codec
    if "file.compression.type" not in props.used:
        t.note("compression", "file.compression.type", "(unset)", "the sink's default, gzip")

    _layout(t, props, fmt)
    _flush(t, props)
    if "{{" in prefix:
        t.sink = f"aws.s3.prefix {prefix!r} changes with the date"
    else:
        t.sink = {"layout": "aiven", "bucket": bucket, "prefix": prefix, "template": t.archive["layout"]["template"],
                  "format": fmt, "fields": fields, "value_encoding": encoding, "envelope": envelope,
                  "compression": "none" if fmt in ("avro", "parquet") else codec}
    settle_rest(props, t)
    return [t]


def _layout(t: Translation, props: Props, fmt: str) -> None:
    template = props.get("file.name.template") or DEFAULT_AIVEN_TEMPLATE
    try:
        parsed = aiven_template(template)
    except InvalidTemplate as e:
        raise refuse("file.name.template", template, str(e)) from None
    slots = {s.split(":")[0] for s in parsed.slots}
    if not {"topic", "partition", "start_offset"} <= slots or "key" in slots:
        raise refuse("file.name.template", template, "a template with {{topic}}, {{partition}} and "
                     "{{start_offset}} and without {{key}} (each window's objects need their own names; a key "
                     "grouping keeps only the last record per key, not a log)")
    layout: dict = {"template": template, "partition_by": [], "padding": {"type": "none"}, "extension": ""}
    if tz := props.get("file.name.timestamp.timezone"):
        layout["timezone"] = tz
    if "timestamp" in slots:
        source = props.get("file.name.timestamp.source") or "wallclock"
        t.note("layout", "file.name.timestamp.source", source, "approximate: {{timestamp}} is the record's Kafka "
               "timestamp (a re-run writes the same keys), which also splits a window by that time")
    t.archive["layout"] = layout
    if not template.startswith("{{topic}}/"):
        t.note("layout", "file.name.template", template, "objects are not under <prefix><topic>/, where the "
               "lifecycle rules' data prefix and the objects check's listing look (docs/import-connect.md)")


def _flush(t: Translation, props: Props) -> None:
    flush: dict = {}
    records = props.int("file.max.records", 0)
    if records:
        flush["count"] = records
        t.note("flush", "file.max.records", records, "windows of this many records, one object each")
    else:
        t.note("flush", "file.max.records", "0", "approximate: the sink writes what arrived between offset "
               "commits; windows here hold `count` records (default 10000), or what the interval cut")
    ms = props.int("offset.flush.interval.ms", 60_000, minimum=1)
    flush["interval_seconds"] = ms / 1000
    t.note("flush", "offset.flush.interval.ms", ms, "approximate: a partial window is cut once its oldest record "
           "is this old (the sink writes a file at each offset commit)")
    t.archive["flush"] = flush
