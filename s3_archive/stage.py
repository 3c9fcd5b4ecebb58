"""Read one window from Kafka with Spark and write it to a staging prefix in S3.

Executors read Kafka and write S3; the driver only plans and receives the window's statistics, which are
aggregated on the executors during the same pass (`DataFrame.observe`). The DataFrame API only, so this also
runs over Spark Connect.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from s3_archive.formats import ENVELOPE_COLUMNS, FormatSpec
from s3_archive.windows import OffsetWindow

MAX_GAP_RANGES = 10_000


@dataclass(frozen=True)
class StageStats:
    records: int
    bytes_read: int  # key + value + header bytes
    first_offset: int | None
    last_offset: int | None
    min_timestamp_ms: int | None
    max_timestamp_ms: int | None
    schema_json: str


def read_window(spark: SparkSession, kafka_options: dict[str, str], topic: str, partition: int, start: int,
                end: int) -> DataFrame:
    """Exactly offsets [start, end) of one topic-partition, committed records only, as the envelope."""
    df = (
        spark.read.format("kafka")
        .options(**kafka_options)
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


def to_output(df: DataFrame, fmt: FormatSpec, csv_fields: list[str]) -> DataFrame:
    """The envelope as the format stores it (identity for the lossless, typed formats)."""
    if fmt.name == "text":
        return df.select(F.coalesce(F.col("value").cast("string"), F.lit("")).alias("value"))
    if fmt.name == "csv":
        pairs = F.transform("headers", lambda h: F.concat(F.base64(F.encode(h["key"], "UTF-8")), F.lit(":"),
                                                          F.coalesce(F.base64(h["value"]), F.lit(""))))
        cols = {"key": F.base64("key"), "value": F.base64("value"), "offset": F.col("offset"),
                "timestamp": F.unix_millis("timestamp"), "headers": F.concat_ws(";", pairs)}
        return df.select(*[cols[f].alias(f) for f in csv_fields])
    return df


def stage_window(spark: SparkSession, kafka_options: dict[str, str], topic: str, window: OffsetWindow,
                 read_start: int, fmt: FormatSpec, codec: str, staging_uri: str,
                 max_records_per_object: int | None, csv_fields: list[str] | None = None) -> StageStats:
    obs = Observation(f"w_{topic}_{window.key}")
    header_bytes = F.aggregate(
        F.coalesce(F.col("headers"), F.array().cast("array<struct<key:string,value:binary>>")), F.lit(0).cast("long"),
        lambda acc, h: acc + F.coalesce(F.octet_length(h["key"]), F.lit(0)) + F.coalesce(F.octet_length(h["value"]),
                                                                                          F.lit(0)),
    )
    df = read_window(spark, kafka_options, topic, window.partition, read_start, window.end)
    observed = df.observe(
        obs,
        F.count(F.lit(1)).alias("records"),
        F.sum(F.coalesce(F.octet_length("key"), F.lit(0)) + F.coalesce(F.octet_length("value"), F.lit(0))
              + header_bytes).alias("bytes"),
        F.min("offset").alias("first"),
        F.max("offset").alias("last"),
        F.min(F.unix_millis("timestamp")).alias("min_ts"),
        F.max(F.unix_millis("timestamp")).alias("max_ts"),
    )
    out = to_output(observed, fmt, csv_fields or [])
    writer = out.write.format(fmt.spark_format).options(**fmt.spark_options(codec)).mode("errorifexists")
    if max_records_per_object:
        writer = writer.option("maxRecordsPerFile", str(max_records_per_object))
    writer.save(staging_uri)
    m = obs.get
    return StageStats(
        records=int(m["records"]),
        bytes_read=int(m["bytes"] or 0),
        first_offset=m["first"],
        last_offset=m["last"],
        min_timestamp_ms=m["min_ts"],
        max_timestamp_ms=m["max_ts"],
        schema_json=df.schema.json(),
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
