"""The Spark job of a run: one Kafka read of every slice of the run's windows, the format's columns computed by
Spark, and the objects written by the tasks themselves (executor/task.py through `DataFrame.mapInArrow`).

Only the DataFrame API and mapInArrow: no RDD, no JVM access from Python, so it runs on a standalone cluster and
over Spark Connect alike. The executors import s3_archive (archive/executor/ and what it imports): their Python
environment must have the package (docs/deployment.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import replace
from functools import partial, reduce

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from s3_archive.archive.driver.bucket_column import bucket_column, decoded_field
from s3_archive.archive.driver.output import Output
from s3_archive.archive.driver.registry_plan import dead_letter_schema as registry_dead_letter
from s3_archive.archive.driver.registry_plan import stored_schema
from s3_archive.archive.executor.registry_decode import table_rows
from s3_archive.archive.executor.task import write_task
from s3_archive.archive.protocol import (
    DERIVED,
    PARQUET_DICTIONARY,
    RESULT_SCHEMA,
    DecodePlan,
    FormatPlan,
    JobOutput,
    JobShape,
    JobTemplate,
    Slice,
    WriteJob,
)
from s3_archive.keys.buckets import BUCKET_COLUMN
from s3_archive.keys.values import NULL
from s3_archive.model.columns import SOURCE_FIELD, stored_names
from s3_archive.model.errors import UndecodableValue
from s3_archive.model.formats import ENVELOPE_COLUMNS
from s3_archive.model.registry_types import avro_schema

# Spark's Kafka consumer fetches at most max.poll.records per poll, each poll costing a seek and a round trip:
# bigger fetches keep the task's thread busy converting records instead of waiting.
KAFKA_READ_OPTIONS = {"kafka.max.poll.records": "10000", "kafka.max.partition.fetch.bytes": str(16 << 20),
                      "kafka.fetch.max.bytes": str(64 << 20), "kafka.receive.buffer.bytes": str(4 << 20)}
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # a column name Spark takes as a reference as it is


def _kafka(spark: SparkSession, kafka_options: dict[str, str], topic: str, ranges: dict[int, tuple[int, int]],
           ) -> DataFrame:
    """Offsets [start, end) of each listed partition, committed records only, as the envelope."""
    df = (
        spark.read.format("kafka")
        .options(**KAFKA_READ_OPTIONS)
        .options(**kafka_options)
        .option("assign", json.dumps({topic: sorted(ranges)}))
        .option("startingOffsets", json.dumps({topic: {str(p): s for p, (s, _) in ranges.items()}}))
        .option("endingOffsets", json.dumps({topic: {str(p): e for p, (_, e) in ranges.items()}}))
        .option("includeHeaders", "true")
        .option("kafka.isolation.level", "read_committed")
        # Compaction and transaction markers leave holes in the offsets; they are not loss. Real loss (retention)
        # is detected by comparing the log start offset with the window before and after the read.
        .option("failOnDataLoss", "false")
        .load()
    )
    return df.select(*[F.col(src).alias(dst) for dst, src in ENVELOPE_COLUMNS])


def read_window(spark: SparkSession, kafka_options: dict[str, str], topic: str, partition: int, start: int,
                end: int) -> DataFrame:
    """Exactly offsets [start, end) of one topic-partition, committed records only, as the envelope (one task)."""
    return _kafka(spark, kafka_options, topic, {partition: (start, end)})


def read_slices(spark: SparkSession, kafka_options: dict[str, str], topic: str, slices: Iterable[Slice],
                ) -> DataFrame:
    """Every slice, one Spark task each: the k-th slices of all partitions form one read (Spark's Kafka source
    makes one task per partition's range), and the reads are united."""
    by_partition: dict[int, list[Slice]] = {}
    for s in slices:
        by_partition.setdefault(s.window.partition, []).append(s)
    layers: list[dict[int, tuple[int, int]]] = []
    for p, ss in sorted(by_partition.items()):
        for k, s in enumerate(sorted(ss, key=lambda s: s.start)):
            if len(layers) <= k:
                layers.append({})
            layers[k][p] = (s.start, s.end)
    return reduce(DataFrame.unionAll, [_kafka(spark, kafka_options, topic, layer) for layer in layers])


_HEADERS_TYPE = "array<struct<key:string,value:binary>>"


def record_bytes() -> Column:
    """key + value + header bytes of a record (what the connectors' flush.size counts), without a lambda: a
    binary cast to string keeps its bytes, so octet_length of the concatenated header names and values counts
    them exactly."""
    h = F.coalesce(F.col("headers"), F.array().cast(_HEADERS_TYPE))
    return (F.coalesce(F.octet_length("key"), F.lit(0)) + F.coalesce(F.octet_length("value"), F.lit(0))
            + F.octet_length(F.concat_ws("", h["key"])).cast("long")
            + F.octet_length(F.concat_ws("", h["value"].cast("array<string>"))).cast("long"))


JSON_COLUMN = "_json"  # the value parsed once as a VARIANT (value_decoding json): checked, inferred and decoded


def with_parsed_json(df: DataFrame, decoding: str) -> DataFrame:
    """The records plus JSON_COLUMN when decoding json, so each value is parsed once, not once per use."""
    if decoding != "json":
        return df
    return df.withColumn(JSON_COLUMN, F.try_parse_json(F.col("value").cast("string")))


def decodable(decoding: str) -> Column:
    """True for a record whose value decodes as configured; a null value (tombstone) always does."""
    if decoding == "bytes":
        return F.lit(True)
    valid = F.col("value").isNull() | F.is_valid_utf8("value")
    if decoding == "utf8":
        return valid
    return F.col("value").isNull() | (F.is_valid_utf8("value")
                                      & F.coalesce(F.schema_of_variant(F.col(JSON_COLUMN)).startswith("OBJECT<"),
                                                   F.lit(False)))


_VARIANT_LEAF = re.compile(r"(?<=[:<] )(VARIANT|VOID)(?=[,>])|(?<=<)(VARIANT|VOID)(?=[,>])")


def variant_schema_to_ddl(schema: str) -> str:
    """`schema_of_variant_agg`'s OBJECT<...> as a DDL struct for `try_variant_get`: objects become structs, and
    fields whose type varies between records (VARIANT) or is always null (VOID) become JSON text (STRING)."""
    ddl = schema.replace("OBJECT<", "STRUCT<")
    return _VARIANT_LEAF.sub("STRING", ddl)


def infer_json_ddls(df: DataFrame, slices: list[Slice]) -> dict[str, str | None]:
    """Per window key: the merged schema of the window's JSON-object values (None if it has none), in one pass
    over all the windows."""
    win: Column = F.lit(None).cast("string")
    for s in slices:
        w = s.window
        win = F.when((F.col("partition") == w.partition) & (F.col("offset") >= w.start) & (F.col("offset") < w.end),
                     F.lit(w.key)).otherwise(win)
    rows = (with_parsed_json(df, "json").where(F.col("value").isNotNull() & decodable("json"))
            .groupBy(win.alias("w")).agg(F.schema_of_variant_agg(F.col(JSON_COLUMN)).alias("s")).collect())
    found = {r["w"]: r["s"] for r in rows}
    return {s.window.key: (variant_schema_to_ddl(found[s.window.key])
                           if (found.get(s.window.key) or "").startswith("OBJECT<") else None) for s in slices}


def stored_columns(df: DataFrame, out: Output, json_ddl: str | None) -> list[Column]:
    """The kept envelope columns plus the decoded value fields (what parquet/avro/jsonl/json store).

    Field names come from payloads: two may differ only in case, or hold a backtick or a dot. The decoded struct is
    cast (positionally) to one with plain field names, each field is taken by that name and aliased to the name
    it is stored under (`model/columns.py::stored_names`: its own, unless another field or a kept envelope column
    differs from it only in case). So no payload name is ever resolved by Spark, whatever the session's
    spark.sql.caseSensitive; a renamed column's metadata keeps the field's own name (SOURCE_FIELD)."""
    cols = [F.col(c).cast("string").alias(c) if c == "value" and out.decoding == "utf8" else F.col(c)
            for c in out.columns]
    if out.decoding == "json" and json_ddl:
        ddl = json_ddl if json_ddl.upper().startswith("STRUCT<") else f"STRUCT<{json_ddl}>"
        decoded = F.try_variant_get(F.col(JSON_COLUMN), "$", ddl)
        struct = df.select(decoded.alias("d")).schema["d"].dataType
        fields = [f.name for f in struct.fields]
        clash = sorted({out.column_prefix + f for f in fields} & set(out.columns))
        if clash:
            raise UndecodableValue(f"decoded value field(s) {clash} clash with envelope columns; set "
                                   "value_decoding.column_prefix (e.g. 'value_') or turn those envelope parts off")
        names = stored_names([out.column_prefix + f for f in fields], out.columns)
        plain = StructType([StructField(f"_{i}", f.dataType, f.nullable) for i, f in enumerate(struct.fields)])
        by_position = decoded.cast(plain)
        for i, f in enumerate(fields):
            name = names[out.column_prefix + f]
            meta = {SOURCE_FIELD: f} if name != out.column_prefix + f else None
            cols.append(by_position[f"_{i}"].alias(name, metadata=meta) if meta else by_position[f"_{i}"].alias(name))
    return cols


_JSON_OPTIONS = {"ignoreNullFields": "false", "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"}


def json_value(value: Column) -> Column:
    """A value as JSON text: itself when it parses as JSON (re-serialized compactly), else a JSON string of its text
    (sink_output.value json, as the sinks write a converted value). Null stays null."""
    text = value.cast("string")
    as_string = F.regexp_extract(F.to_json(F.struct(text.alias("v"))), r'^\{"v":(.*)\}$', 1)
    return F.when(value.isNotNull(), F.coalesce(F.to_json(F.try_parse_json(text)), as_string))


def _payload(df: DataFrame, out: Output, json_ddl: str | None) -> tuple[list[Column], DataFrame]:
    """The columns a task stores (see executor/task.py) and a frame whose schema is what the manifest records."""
    name = out.fmt.name
    if name == "csv":
        pairs = F.transform("headers", lambda h: F.concat(F.base64(F.encode(h["key"], "UTF-8")), F.lit(":"),
                                                          F.coalesce(F.base64(h["value"]), F.lit(""))))
        fields = {"key": F.base64("key"), "value": F.base64("value"), "offset": F.col("offset"),
                  "timestamp": F.unix_millis("timestamp"), "headers": F.concat_ws(";", pairs)}
        cols = [fields[f].alias(f) for f in out.csv_fields]
        opts = {"nullValue": "", "emptyValue": '""', "escape": '"'}
        if out.value_as == "text":  # Aiven's value.encoding none: the raw value last, unquoted (null: empty)
            raw = F.coalesce(F.col("value"), F.lit(b"").cast("binary"))
            before = cols[:-1]
            line = raw if not before else F.concat(F.to_csv(F.struct(*before), opts).cast("binary"),
                                                   F.lit(b",").cast("binary"), raw)
            return [line.alias("_line")], df.select(*before, F.col("value").cast("string").alias("value"))
        return [F.to_csv(F.struct(*cols), opts).cast("binary").alias("_line")], df.select(*cols)
    stored = stored_columns(df, out, json_ddl)
    described = df.select(*stored)
    if name in ("jsonl", "json") and out.value_as == "json" and "value" in out.columns:
        # The record's JSON with the value first, as JSON (to_json would write the binary value as base64).
        i = out.columns.index("value")
        rest = F.to_json(F.struct(*stored[:i], *stored[i + 1:]), _JSON_OPTIONS)
        value = F.coalesce(json_value(F.col("value")), F.lit("null"))
        tail = F.when(rest == F.lit("{}"), F.lit("}")).otherwise(F.concat(F.lit(","), rest.substr(F.lit(2),
                                                                                                  F.length(rest))))
        return [F.concat(F.lit('{"value":'), value, tail).cast("binary").alias("_line")], described
    if name in ("jsonl", "json"):
        return [F.to_json(F.struct(*stored), _JSON_OPTIONS).cast("binary").alias("_line")], described
    if name == "text":
        return [F.coalesce(F.col("value"), F.lit(b"").cast("binary")).alias("_line")], described
    if name == "bytes":
        return [F.col("value")], described
    return stored, described


def _derived(out: Output, names: tuple[str, ...]) -> tuple[dict[str, str], bool]:
    """The stored columns a write task makes itself rather than receive, each with its source (job.DERIVED), and
    whether it computes `_ts` from the stored timestamp. Every column crosses the JVM -> Python Arrow hand-off row
    by row (Spark sizes the batch after each row, over all vectors), so a column sent twice, or a constant sent
    per record, costs task time. Only for parquet and avro, whose stored envelope columns are Spark's own."""
    if out.fmt.name not in ("parquet", "avro"):
        return {}, False
    kept = {n for n in names if n in out.columns}
    return {n: src for n, src in DERIVED.items() if n in kept}, "timestamp" in kept


def write_frame(df: DataFrame, out: Output, json_ddl: str | None, decode: DecodePlan | None = None,
                ) -> tuple[DataFrame, JobShape]:
    """The frame a write job maps (internal columns, then the stored ones) and the job's shape, what follows from
    the output: payload names, schemas, format plan. `decode`: the Schema Registry payloads the tasks decode
    (registry_plan.py); their columns follow the envelope's in the stored schema."""
    decoding = out.spark_decoding
    df = with_parsed_json(df, decoding)
    payload, described = _payload(df, out, json_ddl)
    names = tuple(df.select(*payload).columns)
    derived, ts_stored = _derived(out, names)
    good = decodable(decoding)
    ts = [] if ts_stored else [F.unix_millis("timestamp").alias("_ts")]
    internal = [F.col("partition").alias("_partition"), F.col("offset").alias("_offset"), *ts,
                record_bytes().alias("_rec_bytes")]
    if decoding != "bytes":
        internal.append(good.alias("_good"))
    if out.layout is not None:
        internal.append(bucket_column(out.layout, frozenset(p.part for p in decode.parts) if decode else frozenset()))
    envelope = [c for c, _ in ENVELOPE_COLUMNS]
    dead_letter = (decoding != "bytes" or decode is not None) and out.on_error == "dead_letter"
    missing = out.layout.missing_segments if out.layout is not None and out.layout.on_missing != "bucket" else ()
    # Records the layout cannot place become dead letters too (layout.on_missing dead_letter): their raw envelope.
    raw = dead_letter or (bool(missing) and out.layout is not None and out.layout.on_missing == "dead_letter")
    if raw and decode is None:
        unplaced = (reduce(Column.__or__, [F.split(bucket_column(out.layout), "/").getItem(i) == NULL
                                           for i in missing])
                    if missing and out.layout is not None and out.layout.on_missing == "dead_letter" else None)
        if unplaced is not None and out.skip_tombstones:  # a skipped tombstone is counted, not a dead letter
            unplaced = unplaced & F.col("value").isNotNull()
        internal.append(F.when(~good if unplaced is None else ~good | unplaced, F.struct(*envelope)).alias("_raw"))
    if out.skip_tombstones:
        internal.append(F.col("value").isNull().alias("_tomb"))
    sent = [(c, n) for c, n in zip(payload, names, strict=True) if n not in derived]
    # mapInArrow takes each column of the frame by name (`frame[name]`), which a payload name can break (a
    # backtick, a dot): then the frame's payload columns are _p0, _p1, ... and the write task names them back.
    plain = () if all(_PLAIN.fullmatch(n) for _, n in sent) else tuple(f"_p{i}" for i in range(len(sent)))
    # registry decoding: the raw payloads (with dead letters, the whole envelope) the tasks read, when not stored
    wanted = ([] if decode is None else ["key", "value", "headers", "timestamp", "timestamp_type"] if raw
              else [p.part for p in decode.parts])
    frame = df.select(*internal, *([c.alias(a) for (c, _), a in zip(sent, plain, strict=True)] if plain
                                   else [c for c, _ in sent]),
                      *[F.col(c) for c in wanted if c not in {n for _, n in sent}])
    schema_json = described.schema.json()
    dead_letter_schema = df.select(*envelope).schema.json() if raw else ""
    if decode is not None:
        schema_json = stored_schema(schema_json, decode)
        if out.layout is not None:
            parts = frozenset(p.part for p in decode.parts)
            decode = replace(decode, bucket_fields=tuple(
                (i, *f) for i, d in enumerate(out.layout.partition_by) if (f := decoded_field(d, parts)) is not None))
        names = names + tuple(decode.stored_columns())
        if raw:
            dead_letter_schema = registry_dead_letter(dead_letter_schema)
            decode = replace(decode, dead_letter_schema=dead_letter_schema)
    if out.bucketed:
        frame = frame.sortWithinPartitions(BUCKET_COLUMN, "_offset")
    fmt = FormatPlan(out.fmt.name, out.codec, out.fmt.object_suffix(out.codec) if out.suffix is None else out.suffix,
                     spark_schema=schema_json,
                     avro_schema=avro_schema(schema_json) if out.fmt.name == "avro" else "",
                     dictionary=PARQUET_DICTIONARY, level=out.codec_level,
                     column_codecs=(("value", out.value_codec),) if out.value_codec else (),
                     header=",".join(out.csv_fields).encode() if out.csv_header else b"")
    shape = JobShape(fmt=fmt, layout=out.layout, bucketed=out.bucketed, max_records=out.max_records,
                     max_bytes=out.max_bytes, decoding=decoding != "bytes" or decode is not None,
                     dead_letter=dead_letter, skip_tombstones=out.skip_tombstones, payload=names,
                     payload_columns=plain, derived=tuple(derived.items()), ts_stored=ts_stored,
                     dead_letter_schema=dead_letter_schema, decode=decode,
                     skip_bad=(decoding != "bytes" or decode is not None) and out.on_error == "skip",
                     on_missing=out.layout.on_missing if missing and out.layout is not None else "bucket",
                     missing_segments=missing)
    return frame, shape


def run_write_job(spark: SparkSession, kafka_options: dict[str, str], template: JobTemplate, out: Output,
                  json_ddl: str | None, undecodable_only: bool = False, decode: DecodePlan | None = None,
                  envelope: DataFrame | None = None) -> JobOutput:
    """Read `template.slices` from Kafka and write them (one Spark job); every task's result rows. `undecodable_only`:
    only the records whose value does not decode, so the job writes their dead letters and nothing else (format
    iceberg, whose rows go to the table; its slice rows then count those records only). `envelope`: the slices'
    records read otherwise (task_read_job.py::envelope_frame) instead of by Spark's Kafka source."""
    df = envelope if envelope is not None else read_slices(spark, kafka_options, template.topic, template.slices)
    frame, shape = write_frame(df, out, json_ddl, decode)
    if undecodable_only and decode is None:
        frame = frame.where(~F.col("_good"))
    job = WriteJob.of(template, shape, undecodable_only=undecodable_only and decode is not None)
    rows = [r.asDict() for r in frame.mapInArrow(partial(write_task, job), RESULT_SCHEMA).collect()]
    return JobOutput(rows, shape.fmt.spark_schema)


def decoded_table_rows(df: DataFrame, out: Output, decode: DecodePlan, fail_marker: str | None) -> DataFrame:
    """The stored rows of a table format (Iceberg) with Schema Registry payloads decoded in Python tasks
    (executor/registry_decode.py::table_rows): the kept envelope columns, then the decoded ones."""
    from pyspark.sql.types import StructType

    envelope = [c for c, _ in ENVELOPE_COLUMNS]
    schema = StructType.fromJson(json.loads(stored_schema(df.select(*out.columns).schema.json(), decode)))
    columns = tuple(f.name for f in schema.fields)
    return df.select(*envelope).mapInArrow(partial(table_rows, decode, columns, fail_marker), schema)
