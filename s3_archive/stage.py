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


def stage_window(spark: SparkSession, kafka_options: dict[str, str], topic: str, window: OffsetWindow,
                 read_start: int, fmt: FormatSpec, codec: str, staging_uri: str,
                 max_records_per_object: int | None) -> StageStats:
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
    writer = observed.write.format(fmt.spark_format).options(**fmt.spark_options(codec)).mode("errorifexists")
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
