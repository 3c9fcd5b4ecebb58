"""Aiven's S3 sink (`io.aiven.kafka.connect.s3.AivenKafkaConnectS3SinkConnector`) → one archive.

Objects keep the sink's names: `aws.s3.prefix` + `file.name.template` rendered + the compression's suffix (no
format extension, as the sink writes them), so restore's Aiven reader (`foreign_sources:` with layout aiven) and
the sink's own source connector read them. Deprecated underscore names (`aws_s3_bucket`, …) are read too.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from s3_archive.config.connect_import.notes import Props, Translation, archive_name, refuse, settle_rest, topic_list
from s3_archive.keys.foreign_keys import DEFAULT_AIVEN_TEMPLATE, aiven_template
from s3_archive.keys.template import InvalidTemplate

_FORMATS = ("csv", "json", "jsonl", "avro", "parquet")
_FIELDS = ("key", "value", "offset", "timestamp", "headers")
_TEXT_CODECS = {"none": "none", "gzip": "gzip", "zstd": "zstd"}
_FILE_CODECS = {"none": "none", "gzip": "gzip", "zstd": "zstd", "snappy": "snappy"}


class _Output(NamedTuple):
    """How the sink writes each object: its format, the fields kept, the value's encoding, whether the fields are
    wrapped in an envelope, and the compression."""

    fmt: str
    fields: list[str]
    encoding: str
    envelope: bool
    codec: str


def translate(props: Props) -> list[Translation]:
    t = Translation({"name": archive_name(props.get("name"))})
    topic_list(t, props)
    bucket, prefix, dated = _where(t, props)
    out = _output(props)
    _format(t, out)
    _compression(t, props, out.fmt, out.codec)
    _layout(t, props, out.fmt, dated)
    _flush(t, props)
    if dated:
        t.sink = f"aws.s3.prefix {dated!r} changes with the date the sink wrote each object"
    else:
        t.sink = {"layout": "aiven", "bucket": bucket, "prefix": prefix, "template": t.archive["layout"]["template"],
                  "format": out.fmt, "fields": out.fields, "value_encoding": out.encoding, "envelope": out.envelope,
                  "compression": "none" if out.fmt in ("avro", "parquet") else out.codec}
    settle_rest(props, t)
    return [t]


def _where(t: Translation, props: Props) -> tuple[str, str, str]:
    """The bucket, the prefix, and the dated part of a prefix with a date placeholder (else "")."""
    bucket = props.get("aws.s3.bucket.name", "aws_s3_bucket")
    if not bucket:
        raise refuse("aws.s3.bucket.name", None, "the bucket is required")
    t.archive["bucket"] = bucket
    prefix = props.get("aws.s3.prefix", "aws_s3_prefix", "file.name.prefix", default="")
    dated = ""
    if "{{" in prefix:
        prefix, dated = _dated_prefix(t, props, prefix)
    if prefix:
        t.archive["prefix"] = prefix
        if not prefix.endswith("/"):
            t.note("prefix", "aws.s3.prefix", prefix, "approximate: s3-archive ends a prefix with '/', the sink "
                   f"uses it as is; objects are under {prefix}/ instead of {prefix}")
    return bucket, prefix, dated


def _output(props: Props) -> _Output:
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
    return _Output(fmt, fields, encoding, envelope, codec)


def _format(t: Translation, out: _Output) -> None:
    """The archive's format, and what of each record it keeps (csv_fields, envelope, sink_output)."""
    fmt, fields, encoding = out.fmt, out.fields, out.encoding
    if not out.envelope and fmt in ("jsonl", "json", "csv"):
        # One bare value per line: our text format (the value as UTF-8 text, one per line).
        if fields != ["value"]:
            raise refuse("format.output.envelope", "false", "the sink needs format.output.fields=value with it")
        t.archive["format"] = "text"
        t.note("format", "format.output.envelope", "false", f"approximate: the sink writes each value ({fmt}, "
               f"{encoding}); format text writes each value as a UTF-8 line. Not restorable (no key, headers, "
               "offsets)")
    else:
        t.archive["format"] = fmt
    if fmt == "csv" and out.envelope:
        t.archive["csv_fields"] = fields
        if encoding == "none" and fields[-1] == "value":
            t.archive["sink_output"] = {"value": "text"}
            t.note("sink_output", "format.output.fields.value.encoding", "none", "the raw value, last in each line "
                   "(lossy: a value holding a newline breaks its line; not restorable)")
        elif encoding == "none":
            t.note("csv_fields", "format.output.fields.value.encoding", "none", "approximate: values stay base64: "
                   "a raw value is written only as the last field (it may hold commas)")
    elif t.archive["format"] != "text":
        env = {"key": "key" in fields, "value": "value" in fields, "headers": "headers" in fields,
               "metadata": "offset" in fields or "timestamp" in fields}
        if not all(env.values()):
            t.archive["envelope"] = env
        t.note("envelope", "format.output.fields", ",".join(fields),
               "the parts kept; metadata is topic, partition, offset, timestamp and timestamp_type together; "
               "field order is the archive's" + ("" if all(env.values()) else ". Restore needs all four parts"))
        if encoding == "none" and fmt in ("jsonl", "json"):
            t.archive["sink_output"] = {"value": "json"}
            t.note("sink_output", "format.output.fields.value.encoding", "none", "the value as JSON when it parses, "
                   "else as a string of its text (lossy: not restorable)")
        elif encoding == "none":
            t.note("envelope", "format.output.fields.value.encoding", "none", "approximate: the value is stored "
                   "as bytes, losslessly; value_decoding: {type: utf8} would store text")


def _compression(t: Translation, props: Props, fmt: str, codec: str) -> None:
    """Text formats compress the object (suffix .gz / .zst); avro and parquet inside the file."""
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


_DATES = {"utc_date": "UTC", "local_date": None}
_DATE = "{{timestamp:unit=yyyy}}-{{timestamp:unit=MM}}-{{timestamp:unit=dd}}"


def _dated_prefix(t: Translation, props: Props, prefix: str) -> tuple[str, str]:
    """An aws.s3.prefix with {{utc_date}} / {{local_date}}: the fixed directories before the first placeholder
    stay the prefix; the rest goes in front of the key template, each date as the record's date (yyyy-MM-dd)."""
    names = set(re.findall(r"\{\{\s*([a-z_]+)\s*\}\}", prefix))
    if bad := sorted(names - set(_DATES)):
        raise refuse("aws.s3.prefix", prefix, f"placeholders {{{{utc_date}}}} and {{{{local_date}}}} only, not "
                     f"{', '.join(bad)}")
    if len(names) > 1:
        raise refuse("aws.s3.prefix", prefix, "one of {{utc_date}} and {{local_date}}, not both (a key has one "
                     "timezone)")
    fixed, _, dated = prefix[:prefix.index("{{")].rpartition("/")
    dated = dated + prefix[prefix.index("{{"):]
    if names == {"local_date"} and not props.has("file.name.timestamp.timezone"):
        t.note("layout", "aws.s3.prefix", prefix, "{{local_date}} is the worker's local date: give layout.timezone "
               "the Connect workers' zone (UTC here)")
    t.note("layout", "aws.s3.prefix", prefix, "the date directory is each record's date (its Kafka timestamp) "
           "where the sink writes the date the object was written: a window's records of two days go to two "
           "objects")
    return (fixed + "/" if fixed else ""), re.sub(r"\{\{\s*(utc|local)_date\s*\}\}", _DATE, dated)


def _layout(t: Translation, props: Props, fmt: str, dated: str = "") -> None:
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
    layout: dict = {"template": dated + template, "partition_by": [], "padding": {"type": "none"}, "extension": ""}
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
