"""Read one window from Kafka with Spark and write it to a staging prefix in S3.

Executors read Kafka and write S3; the driver only plans and receives the window's statistics, which are
aggregated on the executors during the same pass (`DataFrame.observe`). The DataFrame API only, so this also
runs over Spark Connect.

"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from s3_archive.archive.buckets import bucket_column
from s3_archive.config.archive import ArchiveConfig
from s3_archive.keys.buckets import BUCKET_COLUMN
from s3_archive.keys.layout import OutputLayout
from s3_archive.model.formats import ENVELOPE_COLUMNS, FORMATS, FormatSpec
from s3_archive.model.windows import OffsetWindow

MAX_GAP_RANGES = 10_000


class UndecodableValue(ValueError):
    """A record value does not decode as configured (value_decoding.on_error: fail)."""


@dataclass(frozen=True)
class Output:
    """How a window is written: everything stage_window needs from the archive config (config/archive.py)."""

    fmt: FormatSpec
    codec: str
    columns: tuple[str, ...]  # envelope columns kept, envelope order
    csv_fields: tuple[str, ...] = ()
    decoding: str = "bytes"  # bytes | utf8 | json
    json_schema: str | None = None  # json: Spark DDL of the fields; None: inferred per window
    column_prefix: str = ""
    on_error: str = "fail"  # fail | dead_letter
    max_records: int | None = None
    max_bytes: int | None = None
    layout: OutputLayout | None = None  # None: the default layout, no bucket column

    @classmethod
    def of(cls, cfg: ArchiveConfig) -> Output:
        d = cfg.value_decoding
        return cls(FORMATS[cfg.format], cfg.codec, tuple(cfg.envelope.columns()), tuple(cfg.csv_fields), d.type,
                   d.json_schema, d.column_prefix, d.on_error, cfg.max_records_per_object, cfg.max_bytes_per_object,
                   cfg.layout)

    @property
    def split_cols(self) -> list[str]:
        """The staging directories a window's output is split into: bucket (layout), then part (rotation)."""
        return ([BUCKET_COLUMN] if self.layout else []) + (["_part"] if self.rotates else [])

    @property
    def rotates(self) -> bool:
        return bool(self.max_records or self.max_bytes)


@dataclass(frozen=True)
class StageStats:
    records: int  # every committed record read in the window (dead-lettered ones included)
    bytes_read: int  # key + value + header bytes
    first_offset: int | None
    last_offset: int | None
    min_timestamp_ms: int | None
    max_timestamp_ms: int | None
    schema_json: str  # of the written data
    undecodable: int = 0
    first_undecodable_offset: int | None = None
    offsets_in_output: bool = True  # the written objects hold every archived record's offset (absent_ranges)


def read_window(spark: SparkSession, kafka_options: dict[str, str], topic: str, partition: int, start: int,
                end: int) -> DataFrame:
    """Exactly offsets [start, end) of one topic-partition, committed records only, as the envelope.

    With `SparkResource.kafka_min_partitions` (a Spark conf) the range is split into that many Spark tasks, in
    offset order: task i (staged file part-0000i) holds offsets below task i+1's."""
    from s3_archive.io.spark import KAFKA_MIN_PARTITIONS_CONF

    min_partitions = spark.conf.get(KAFKA_MIN_PARTITIONS_CONF, None)
    df = (
        spark.read.format("kafka")
        .options(**kafka_options)
        .options(**({"minPartitions": min_partitions} if min_partitions else {}))
        .option("assign", json.dumps({topic: [partition]}))
        .option("startingOffsets", json.dumps({topic: {str(partition): start}}))
        .option("endingOffsets", json.dumps({topic: {str(partition): end}}))
        .option("includeHeaders", "true")
        .option("kafka.isolation.level", "read_committed")
        # Compaction and transaction markers leave holes in the offsets; they are not loss. Real loss (retention)
        # is detected by comparing the log start offset with the window before and after the read.
        .option("failOnDataLoss", "false")
        .load()
    )
    return df.select(*[F.col(src).alias(dst) for dst, src in ENVELOPE_COLUMNS])


_HEADERS_TYPE = "array<struct<key:string,value:binary>>"


def record_bytes() -> Column:
    """key + value + header bytes of a record (what the connectors' flush.size counts)."""
    headers = F.aggregate(
        F.coalesce(F.col("headers"), F.array().cast(_HEADERS_TYPE)), F.lit(0).cast("long"),
        lambda acc, h: acc + F.coalesce(F.octet_length(h["key"]), F.lit(0)) + F.coalesce(F.octet_length(h["value"]),
                                                                                          F.lit(0)),
    )
    return F.coalesce(F.octet_length("key"), F.lit(0)) + F.coalesce(F.octet_length("value"), F.lit(0)) + headers


JSON_COLUMN = "_json"  # the value parsed once as a VARIANT (value_decoding json): checked, inferred and decoded


def with_parsed_json(df: DataFrame, decoding: str) -> DataFrame:
    """The records plus JSON_COLUMN when decoding json, so each value is parsed once, not once per use."""
    if decoding != "json":
        return df
    return df.withColumn(JSON_COLUMN, F.try_parse_json(F.col("value").cast("string")))


def _parsed_json() -> Column:
    return F.col(JSON_COLUMN)


def decodable(decoding: str) -> Column:
    """True for a record whose value decodes as configured; a null value (tombstone) always does."""
    if decoding == "bytes":
        return F.lit(True)
    valid = F.col("value").isNull() | F.is_valid_utf8("value")
    if decoding == "utf8":
        return valid
    return F.col("value").isNull() | (F.is_valid_utf8("value")
                                      & F.coalesce(F.schema_of_variant(_parsed_json()).startswith("OBJECT<"),
                                                   F.lit(False)))


_VARIANT_LEAF = re.compile(r"(?<=[:<] )(VARIANT|VOID)(?=[,>])|(?<=<)(VARIANT|VOID)(?=[,>])")


def variant_schema_to_ddl(schema: str) -> str:
    """`schema_of_variant_agg`'s OBJECT<...> as a DDL struct for `try_variant_get`: objects become structs, and
    fields whose type varies between records (VARIANT) or is always null (VOID) become JSON text (STRING)."""
    ddl = schema.replace("OBJECT<", "STRUCT<")
    return _VARIANT_LEAF.sub("STRING", ddl)


def infer_json_ddl(df: DataFrame) -> str | None:
    """The merged schema of the window's JSON-object values (a pass over the window), None if it has none."""
    row = (df.where(F.col("value").isNotNull() & decodable("json"))
           .select(F.schema_of_variant_agg(_parsed_json()).alias("s")).collect())
    schema = row[0]["s"] if row else None
    if not schema or not schema.startswith("OBJECT<"):
        return None
    return variant_schema_to_ddl(schema)


def _decode(df: DataFrame, out: Output, json_ddl: str | None) -> DataFrame:
    """The kept envelope columns plus the decoded value, for the good records."""
    cols = [F.col(c) for c in out.columns]
    if out.decoding == "utf8":
        cols = [F.col(c).cast("string").alias(c) if c == "value" else F.col(c) for c in out.columns]
    cols += [F.col("offset").alias("_offset"), F.col("_rec_bytes")]
    if out.layout:
        cols.append(F.col(BUCKET_COLUMN))
    decoded = df.select(*cols)
    if out.decoding == "json" and json_ddl:
        ddl = json_ddl if json_ddl.upper().startswith("STRUCT<") else f"STRUCT<{json_ddl}>"
        decoded = df.select(*cols, F.try_variant_get(_parsed_json(), "$", ddl).alias("_decoded"))
        fields = [f.name for f in decoded.schema["_decoded"].dataType.fields]
        clash = sorted({out.column_prefix + f for f in fields} & set(out.columns))
        if clash:
            raise UndecodableValue(f"decoded value field(s) {clash} clash with envelope columns; set "
                                   "value_decoding.column_prefix (e.g. 'value_') or turn those envelope parts off")
        decoded = decoded.select(*out.columns, "_offset", "_rec_bytes", *([BUCKET_COLUMN] if out.layout else []),
                                 *[F.col("_decoded")[f].alias(out.column_prefix + f) for f in fields])
    return decoded


def _with_parts(df: DataFrame, out: Output) -> DataFrame:
    """A `_part` column numbering the window's objects in offset order: a part ends after the record that brings
    it to max_records records or to max_bytes bytes (like the connectors' flush.count / flush.size rotation)."""
    if not out.rotates:
        return df.withColumn("_part", F.lit(0).cast("long"))
    bucket = [BUCKET_COLUMN] if out.layout else []
    w = Window.partitionBy(*bucket).orderBy("_offset")  # parts count within a bucket
    part = F.lit(0).cast("long")
    if out.max_bytes:
        before = F.sum("_rec_bytes").over(w.rowsBetween(Window.unboundedPreceding, -1))
        df = df.withColumn("_bpart", F.floor(F.coalesce(before, F.lit(0)) / F.lit(out.max_bytes)).cast("long"))
        part = F.col("_bpart") * F.lit(1 << 31)
    if out.max_records:
        by = Window.partitionBy(*bucket, "_bpart").orderBy("_offset") if out.max_bytes else w
        part = part + F.floor((F.row_number().over(by) - 1) / F.lit(out.max_records)).cast("long")
    return df.withColumn("_part", part)


def _json_array_lines(df: DataFrame, value_cols: list[str], keys: list[Column]) -> DataFrame:
    """One text line per record, `[rec` first in a part, `,rec` after, `]` closing the part's last line: each
    object is one JSON array (Aiven's json format)."""
    w = Window.partitionBy(*[c for c in (BUCKET_COLUMN, "_part") if c in df.columns]).orderBy("_offset")
    rec = F.to_json(F.struct(*value_cols), {"ignoreNullFields": "false",
                                            "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"})
    line = F.concat(F.when(F.row_number().over(w) == 1, F.lit("[")).otherwise(F.lit(",")), rec,
                    F.when(F.lead("_offset").over(w).isNull(), F.lit("]")).otherwise(F.lit("")))
    return df.select(*keys, line.alias("value"))


def to_output(df: DataFrame, out: Output) -> DataFrame:
    """The decoded records as the format stores them, plus `_part` (object number) and `_offset` (write order)."""
    fmt = out.fmt
    keys = [F.col(c) for c in ([BUCKET_COLUMN] if out.layout else []) + ["_part", "_offset"]]
    if fmt.name == "text":
        return df.select(*keys, F.coalesce(F.col("value").cast("string"), F.lit("")).alias("value"))
    if fmt.name == "csv":
        pairs = F.transform("headers", lambda h: F.concat(F.base64(F.encode(h["key"], "UTF-8")), F.lit(":"),
                                                          F.coalesce(F.base64(h["value"]), F.lit(""))))
        cols = {"key": F.base64("key"), "value": F.base64("value"), "offset": F.col("offset"),
                "timestamp": F.unix_millis("timestamp"), "headers": F.concat_ws(";", pairs)}
        return df.select(*keys, *[cols[f].alias(f) for f in out.csv_fields])
    if fmt.name == "bytes":  # staged as parquet; commit.py publishes one object per record
        return df.select(*keys, F.col("_offset").alias("offset"), "value")
    data_cols = [c for c in df.columns if c not in ("_part", "_offset", "_rec_bytes", "_bpart", BUCKET_COLUMN)]
    if fmt.name == "json":
        return _json_array_lines(df, data_cols, keys)
    return df.select(*keys, *data_cols)


def _write(df: DataFrame, out: Output, uri: str) -> None:
    if out.split_cols or out.fmt.name == "json":
        # Keep each object's records in offset order: a partitioned write sorts by its directory columns only,
        # and a spilled sort does not keep ties in order. (Window functions put the window in one task.)
        df = df.sortWithinPartitions(*out.split_cols, "_offset")
    df = df.drop(*[c for c in ("_offset", BUCKET_COLUMN, "_part") if c not in out.split_cols])
    bytes_fmt = out.fmt.name == "bytes"
    # "error", not its alias "errorifexists", which Spark Connect's client refuses ([UNSUPPORTED_OPERATION]).
    writer = (df.write.format("parquet" if bytes_fmt else out.fmt.spark_format)
              .options(**({} if bytes_fmt else out.fmt.spark_options(out.codec))).mode("error"))
    if out.split_cols:
        writer = writer.partitionBy(*out.split_cols)
    writer.save(uri)


# Adaptive execution replaces a plan whose shuffle turns out empty with an empty relation, dropping the
# CollectMetrics node with it: the observation is then never delivered and Observation.get waits forever. That is
# a window with no committed record (all aborted, compacted or deleted) written through a window function
# (rotation, json, layout). Keeping the rule out costs nothing for non-empty windows.
_AQE_RULES = "spark.sql.adaptive.optimizer.excludedRules"
_EMPTY_RELATION_RULE = "org.apache.spark.sql.execution.adaptive.AQEPropagateEmptyRelation"


def keep_observations(spark: SparkSession) -> None:
    """Exclude AQEPropagateEmptyRelation from the session's adaptive rules (keeping any other exclusions)."""
    current = spark.conf.get(_AQE_RULES, "") or ""
    rules = [r for r in current.split(",") if r.strip()]
    if _EMPTY_RELATION_RULE not in rules:
        spark.conf.set(_AQE_RULES, ",".join([*rules, _EMPTY_RELATION_RULE]))


OBSERVATION_TIMEOUT_S = 300.0


def observed_metrics(obs: Observation, topic: str, window: OffsetWindow,
                     timeout_s: float = OBSERVATION_TIMEOUT_S) -> dict:
    """The window's statistics, which Spark delivers when the write's query finishes. `Observation.get` waits
    without a limit; if Spark never delivers (a plan rewrite that drops the observation, see keep_observations),
    fail the window with a clear error after `timeout_s` instead of hanging the run. Nothing is committed then."""
    import threading

    box: dict[str, object] = {}

    def wait() -> None:
        try:
            box["metrics"] = obs.get
        except BaseException as e:  # delivered to the caller below
            box["error"] = e

    t = threading.Thread(target=wait, name=f"observe-{window.key}", daemon=True)
    t.start()
    t.join(timeout_s)
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    if not box.get("metrics"):  # Spark Connect delivers nothing as {} at once instead of waiting
        raise RuntimeError(f"topic {topic!r} window {window.key}: Spark wrote the window but did not deliver its "
                           f"statistics within {timeout_s:.0f} s; nothing was committed, re-run the window")
    return box["metrics"]  # type: ignore[return-value]


def stage_window(spark: SparkSession, kafka_options: dict[str, str], topic: str, window: OffsetWindow,
                 read_start: int, out: Output, staging_uri: str, dead_letter_uri: str | None = None,
                 ) -> StageStats:
    """Write offsets [read_start, window.end) to `staging_uri` as configured; with on_error dead_letter, records
    whose value does not decode go, as the full raw envelope in parquet, to `dead_letter_uri`."""
    keep_observations(spark)
    obs = Observation(f"w_{topic}_{window.key}")
    df = with_parsed_json(read_window(spark, kafka_options, topic, window.partition, read_start, window.end),
                          out.decoding)
    json_ddl = out.json_schema
    if out.decoding == "json" and json_ddl is None:
        json_ddl = infer_json_ddl(df)
    good = decodable(out.decoding)
    if out.layout:
        df = df.withColumn(BUCKET_COLUMN, bucket_column(out.layout))
    observed = df.withColumn("_rec_bytes", record_bytes()).observe(
        obs,
        F.count(F.lit(1)).alias("records"),
        F.sum("_rec_bytes").alias("bytes"),
        F.min("offset").alias("first"),
        F.max("offset").alias("last"),
        F.min(F.unix_millis("timestamp")).alias("min_ts"),
        F.max(F.unix_millis("timestamp")).alias("max_ts"),
        F.sum(F.when(good, 0).otherwise(1)).alias("bad"),
        F.min(F.when(good, None).otherwise(F.col("offset"))).alias("first_bad"),
    )
    decoded = _decode(observed.where(good), out, json_ddl)
    staged = to_output(_with_parts(decoded, out), out)
    _write(staged, out, staging_uri)
    m = observed_metrics(obs, topic, window)
    bad = int(m["bad"] or 0)
    if bad and out.on_error == "fail":
        raise UndecodableValue(
            f"topic {topic!r} partition {window.partition}: {bad} record(s) in window {window.key} have a value "
            f"that is not {'UTF-8' if out.decoding == 'utf8' else 'a UTF-8 JSON object'}, the first at offset "
            f"{m['first_bad']}. Nothing was committed. To keep such records under the dead-letter prefix and "
            "archive the rest, set value_decoding.on_error: dead_letter")
    if bad and dead_letter_uri is not None:
        (df.where(~good).drop(BUCKET_COLUMN, JSON_COLUMN).write.format("parquet").options(compression="snappy")
         .mode("error").save(dead_letter_uri))
    written = [c for c in staged.columns if c not in ("_part", "_offset", BUCKET_COLUMN)]
    text_like = out.fmt.name in ("json", "text", "bytes", "csv")
    return StageStats(
        records=int(m["records"]),
        bytes_read=int(m["bytes"] or 0),
        first_offset=m["first"],
        last_offset=m["last"],
        min_timestamp_ms=m["min_ts"],
        max_timestamp_ms=m["max_ts"],
        schema_json=(decoded.drop("_rec_bytes", "_offset", BUCKET_COLUMN).schema if out.fmt.name != "csv"
                     else staged.drop("_part", "_offset", BUCKET_COLUMN).schema).json(),
        undecodable=bad,
        first_undecodable_offset=m["first_bad"],
        offsets_in_output=bad == 0 and "offset" in written and not text_like,
    )


def absent_ranges(spark: SparkSession, fmt: FormatSpec, staging_uri: str, schema_json: str, start: int, end: int,
                  ) -> tuple[list[list[int]], bool]:
    """Offsets in [start, end) that are in no staged record, as [from, to) ranges (compaction, transaction
    markers, aborted records). Reads only the offset column of the staged output. Returns (ranges, truncated)."""
    from pyspark.sql.types import StructType

    schema = StructType.fromJson(json.loads(schema_json))
    offsets = spark.read.format(fmt.spark_format).schema(schema).load(staging_uri).select("offset")
    return _gaps(spark, offsets, start, end)


def absent_ranges_from_kafka(spark: SparkSession, kafka_options: dict[str, str], topic: str, partition: int,
                             start: int, end: int) -> tuple[list[list[int]], bool]:
    """As absent_ranges, for formats that do not store offsets: a second, offsets-only read of the window."""
    return _gaps(spark, read_window(spark, kafka_options, topic, partition, start, end).select("offset"), start, end)


def _gaps(spark: SparkSession, offsets: DataFrame, start: int, end: int) -> tuple[list[list[int]], bool]:
    bounds = spark.createDataFrame([(start - 1,), (end,)], "offset long")
    w = Window.orderBy("offset")
    gaps = (
        offsets.unionByName(bounds)
        .withColumn("next", F.lead("offset").over(w))
        .where(F.col("next") > F.col("offset") + 1)
        .select((F.col("offset") + 1).alias("from"), F.col("next").alias("to"))
        .orderBy("from")
        .limit(MAX_GAP_RANGES + 1)
        .collect()
    )
    ranges = [[r["from"], r["to"]] for r in gaps]
    return ranges[:MAX_GAP_RANGES], len(ranges) > MAX_GAP_RANGES
