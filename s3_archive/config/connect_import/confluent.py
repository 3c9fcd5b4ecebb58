"""Confluent's S3 sink (`io.confluent.connect.s3.S3SinkConnector`) → one archive.

Objects keep the sink's names: `<topics.dir>/<topic>/<partitioner path>/<topic>+<p>+<start offset, zero-padded>`
and the format's extension (`.snappy.parquet`, `.avro`, `.json[.gz]`, `.bin`), so restore's Confluent reader
(`foreign_sources:` with layout confluent) reads what the archive writes. The start offset is the window's (the
sink's is its file's first record: the same unless a partitioner splits a window).
"""

from __future__ import annotations

from s3_archive.config.connect_import.notes import (
    Props,
    Translation,
    archive_name,
    converter_encoding,
    refuse,
    settle_rest,
    topic_list,
)

_FORMAT = "io.confluent.connect.s3.format."
_FORMATS = {"parquet.ParquetFormat": "parquet", "avro.AvroFormat": "avro", "json.JsonFormat": "json",
            "bytearray.ByteArrayFormat": "bytes"}
_PARTITIONER = "io.confluent.connect.storage.partitioner."
_PARQUET_CODECS = {"snappy": "snappy", "gzip": "gzip", "zstd": "zstd", "none": "none", "uncompressed": "none",
                   "lz4": "lz4_raw", "brotli": "brotli"}
_PARQUET_EXT = {"snappy": ".snappy", "gzip": ".gz", "zstd": ".zstd", "none": "", "lz4_raw": ".lz4", "brotli": ".br"}
_AVRO_CODECS = {"null": "none", "deflate": "deflate", "snappy": "snappy", "bzip2": "bzip2", "xz": "xz",
                "zstandard": "zstd"}
# Calendar units of path.format and the bucket each one is (partition.duration.ms equal to it adds nothing).
_UNIT_MS = {"HH": 3_600_000, "dd": 86_400_000}


def translate(props: Props) -> list[Translation]:
    t = Translation({"name": archive_name(props.get("name"))})
    topic_list(t, props)
    bucket = props.get("s3.bucket.name")
    if not bucket:
        raise refuse("s3.bucket.name", None, "the bucket is required")
    t.archive["bucket"] = bucket
    topics_dir = props.get("topics.dir", default="topics").strip("/")
    if topics_dir:
        t.archive["prefix"] = topics_dir + "/"
    extension = _format(t, props)
    _layout(t, props, extension)
    _flush(t, props)
    _nulls(t, props)
    t.sink = _sink(props, bucket, topics_dir)
    settle_rest(props, t)
    return [t]


def _nulls(t: Translation, props: Props) -> None:
    """behavior.on.null.values: ignore skips tombstones (counted); fail (the default) and write keep them."""
    behavior = (props.get("behavior.on.null.values") or "fail").lower()
    if behavior == "ignore":
        t.archive["sink_output"] = {"skip_tombstones": True}
        t.note("sink_output", "behavior.on.null.values", behavior, "tombstones are not written, only counted "
               "(tombstones_skipped; not restorable)")
    elif behavior not in ("fail", "write"):
        raise refuse("behavior.on.null.values", behavior, "allowed: fail, ignore, write")
    elif "behavior.on.null.values" in props.used:
        t.note("format", "behavior.on.null.values", behavior, "a tombstone is archived like any record (the sink "
               + ("fails on one)" if behavior == "fail" else "writes it)"))


def _sink(props: Props, bucket: str, topics_dir: str) -> dict | str:
    """The sink's objects as a Confluent foreign source."""
    fmt = _FORMATS[(props.data.get("format.class") or "").removeprefix(_FORMAT)]
    if props.data.get("file.delim", "+") != "+":
        return f"file.delim {props.data['file.delim']!r}: the Confluent reader reads '+'"
    cls = (props.data.get("partitioner.class") or "DefaultPartitioner").removeprefix(_PARTITIONER)
    partitioner = "default" if cls == "DefaultPartitioner" else "field" if cls == "FieldPartitioner" else "time"
    src: dict = {"layout": "confluent", "bucket": bucket, "prefix": topics_dir + "/" if topics_dir else "",
                 "format": fmt, "partitioner": partitioner}
    if fmt in ("json", "bytes") and (props.data.get("s3.compression.type") or "none").lower() == "gzip":
        src["compression"] = "gzip"
    if fmt == "json":
        src |= {"value_encoding": converter_encoding(props, "value.converter"),
                "key_encoding": converter_encoding(props, "key.converter")}
    return src


def _format(t: Translation, props: Props) -> str:
    """Sets format and compression; returns the sink's object name extension."""
    cls = props.get("format.class") or ""
    short = _FORMATS.get(cls.removeprefix(_FORMAT))
    if short is None:
        raise refuse("format.class", cls, "allowed: " + ", ".join(_FORMAT + c for c in _FORMATS))
    if short == "parquet":
        name = (props.get("parquet.codec") or "snappy").lower()
        if name not in _PARQUET_CODECS:
            raise refuse("parquet.codec", name, f"allowed: {', '.join(_PARQUET_CODECS)}")
        codec = _PARQUET_CODECS[name]
        t.archive |= {"format": "parquet", "compression": codec}
        t.note("format", "format.class", cls, "approximate: the sink writes the value's fields (as value.converter "
               "reads them) as columns; this archive stores each record's key, value bytes, headers and metadata "
               "losslessly (restorable). For columns too, add value_decoding: {type: json} (docs/formats.md)")
        if name == "lz4":
            t.note("compression", "parquet.codec", name, "approximate: Parquet's LZ4_RAW codec")
        return _PARQUET_EXT[codec] + ".parquet"
    if short == "avro":
        name = (props.get("avro.codec") or "null").lower()
        if name not in _AVRO_CODECS:
            raise refuse("avro.codec", name, f"allowed: {', '.join(_AVRO_CODECS)}")
        t.archive |= {"format": "avro", "compression": _AVRO_CODECS[name]}
        t.note("format", "format.class", cls, "approximate: the sink writes the value as the Avro record "
               "value.converter gives; this archive stores each record's key, value bytes, headers and metadata "
               "losslessly (restorable)")
        return ".avro"
    # json and bytes: one value per line; our `text` writes each value as it is, one per line.
    t.archive["format"] = "text"
    gz = (props.get("s3.compression.type") or "none").lower()
    if gz not in ("none", "gzip"):
        raise refuse("s3.compression.type", gz, "allowed: none, gzip")
    if gz == "gzip":
        t.archive["compression"] = "gzip"
        level = props.int("s3.compression.level", -1, minimum=-1)
        if level is not None and level >= 0:
            if not 1 <= level <= 9:
                raise refuse("s3.compression.level", level, "-1 (the default, 6) or 1-9")
            t.archive["compression_level"] = level
    if short == "json":
        t.note("format", "format.class", cls, "approximate: each record's value, one per line (format text), as "
               "the bytes Kafka holds: the sink re-serializes it with value.converter, which gives the same line "
               "for compact JSON values. Keys and headers are not stored (as the sink's store.kafka.* default)")
        return ".json"
    sep = props.get("format.bytearray.separator")
    if sep not in (None, "\n", "\\n"):
        raise refuse("format.bytearray.separator", sep, "only the default newline (each value is one line)")
    t.note("format", "format.class", cls, "approximate: values are written as UTF-8 text lines (format text): "
           "binary values or values with newlines are not kept byte for byte — use parquet for those")
    return props.get("format.bytearray.extension") or ".bin"


def _layout(t: Translation, props: Props, extension: str) -> None:
    if (d := props.get("directory.delim")) not in (None, "/"):
        raise refuse("directory.delim", d, "only '/' (S3 paths)")
    delim = props.get("file.delim") or "+"
    width = props.int("filename.offset.zero.pad.width", 10)
    name = f"{{{{topic}}}}{delim}{{{{partition}}}}{delim}{{{{start_offset}}}}"
    cls = (props.get("partitioner.class") or _PARTITIONER + "DefaultPartitioner").removeprefix(_PARTITIONER)
    layout: dict = {"padding": {"type": "left", "char": "0", "partition": 0, "offset": width}, "extension": extension}
    if cls == "DefaultPartitioner":
        layout |= {"template": f"{{{{topic}}}}/partition={{{{partition}}}}/{name}", "partition_by": []}
    elif cls in ("TimeBasedPartitioner", "HourlyPartitioner", "DailyPartitioner"):
        layout |= {"template": f"{{{{topic}}}}/{{{{partition_by}}}}/{name}", "partition_by": [_time(t, props, cls)]}
        if tz := props.get("timezone"):
            layout["timezone"] = tz
    elif cls == "FieldPartitioner":
        fields = [f.strip() for f in (props.get("partition.field.name") or "").split(",") if f.strip()]
        if not fields:
            raise refuse("partition.field.name", None, "FieldPartitioner needs the value's field names")
        layout |= {"template": f"{{{{topic}}}}/{{{{partition_by}}}}/{name}",
                   "partition_by": [{"kind": "value", "field": f} for f in fields]}
        t.note("layout", "partition.field.name", ",".join(fields), "the value is read as JSON (the sink reads the "
               "converted record's field); a record without the field is in the (null) directory")
    else:
        raise refuse("partitioner.class", cls, "allowed: DefaultPartitioner, TimeBasedPartitioner, "
                     "HourlyPartitioner, DailyPartitioner, FieldPartitioner (io.confluent.connect.storage."
                     "partitioner.*)")
    t.archive["layout"] = layout


def _time(t: Translation, props: Props, cls: str) -> dict:
    if cls == "HourlyPartitioner":
        path, duration = "'year'=YYYY/'month'=MM/'day'=dd/'hour'=HH", 3_600_000
    elif cls == "DailyPartitioner":
        path, duration = "'year'=YYYY/'month'=MM/'day'=dd", 86_400_000
    else:
        path = props.get("path.format") or ""
        if not path:
            raise refuse("path.format", None, "TimeBasedPartitioner needs path.format")
        duration = props.int("partition.duration.ms", minimum=1)
        if duration is None:
            raise refuse("partition.duration.ms", None, "TimeBasedPartitioner needs partition.duration.ms")
    dim: dict = {"kind": "time", "path_format": path}
    finest = "HH" if "HH" in path else "dd" if "dd" in path else None
    if duration % 60_000:
        raise refuse("partition.duration.ms", duration, "a multiple of 60000 (whole minutes)")
    if finest is None or _UNIT_MS.get(finest) != duration:
        if "mm" in path or (finest == "HH" and duration % 3_600_000 == 0) or (
                finest == "dd" and duration % 86_400_000 == 0):
            dim["duration_seconds"] = duration // 1000
        else:
            t.note("layout", "partition.duration.ms", duration, f"approximate: buckets are the directories of "
                   f"path.format ({path}); the sink also starts a new file every {duration // 60_000} min in them")
    extractor = props.get("timestamp.extractor") or "Wallclock"
    if extractor == "RecordField":
        field = props.get("timestamp.field")
        if not field:
            raise refuse("timestamp.field", None, "timestamp.extractor RecordField needs timestamp.field")
        dim |= {"source": "value", "field": field}
        t.note("layout", "timestamp.extractor", extractor, "the value's JSON field, which must hold epoch "
               "milliseconds (the sink also reads date strings)")
    elif extractor == "Wallclock":
        t.note("layout", "timestamp.extractor", extractor, "approximate: time buckets are the record's Kafka "
               "timestamp, never the wall clock (a re-run writes the same keys)")
    elif extractor != "Record":
        raise refuse("timestamp.extractor", extractor, "allowed: Wallclock, Record, RecordField")
    return dim


def _flush(t: Translation, props: Props) -> None:
    flush: dict = {}
    size = props.int("flush.size", minimum=1)
    if size is None:
        raise refuse("flush.size", None, "the sink requires flush.size (records per file)")
    flush["count"] = size
    t.note("flush", "flush.size", size, "windows of this many records (the sensor's count cut), one object each")
    rotate = props.int("rotate.interval.ms", minimum=1)
    schedule = props.int("rotate.schedule.interval.ms", minimum=1)
    if rotate:
        flush["interval_seconds"] = rotate / 1000
        t.note("flush", "rotate.interval.ms", rotate, "approximate: the sink closes a file when a record's "
               "timestamp is this far past the file's first; here a partial window is cut once its oldest record "
               "is this old by the clock")
    if schedule:
        cron = _cron(schedule)
        if cron:
            t.archive["schedule_cron"] = cron
            t.note("schedule_cron", "rotate.schedule.interval.ms", schedule, "at each tick every partition's rest "
                   "is cut (the sink closes its open files on the same wall-clock schedule)")
        else:
            flush.setdefault("interval_seconds", schedule / 1000)
            t.note("flush", "rotate.schedule.interval.ms", schedule, "approximate: not a cron cadence; a partial "
                   "window is cut once its oldest record is this old")
    if not rotate and not schedule:
        flush["interval_seconds"] = None
        t.note("flush", "", "", "the sink closes files at flush.size only (no rotate.*): no partial windows; "
               "set interval_seconds to cut them")
    t.archive["flush"] = flush


def _cron(ms: int) -> str | None:
    """A five-field cron firing every `ms` on the wall clock, aligned as the sink's schedule is (from midnight)."""
    if ms % 60_000:
        return None
    minutes = ms // 60_000
    if minutes < 60 and 60 % minutes == 0:
        return "* * * * *" if minutes == 1 else f"*/{minutes} * * * *"
    if minutes % 60 == 0 and 24 % (hours := minutes // 60) == 0:
        return "0 * * * *" if hours == 1 else f"0 */{hours} * * *" if hours < 24 else "0 0 * * *"
    return None
