"""The Spark job of a run with `read_path: librdkafka`: each Spark task reads its slice's offset range itself with
librdkafka (executor/kafka_read.py) instead of Spark's Kafka source, so records go broker → the task's Python
worker → the object, without the JVM's consumer, rows and Arrow hand-off in between (docs/performance.md).

The job maps a tiny DataFrame, one row per slice (its index in `WriteJob.slices`) and one Spark partition per
slice, with mapInArrow:
- where the task computes every column itself (`computed_in_task`: every format, layout and Schema Registry
  decoding, but not a value parsed as JSON), `executor/task.py::read_task` reads, makes the task batches
  (executor/task_columns.py: csv and JSON lines in task_lines.py, buckets in task_buckets.py) and writes; the
  job's shape (stored schema, format plan, the task batches' schema) comes from spark_job.py::write_frame over an
  empty envelope, no Kafka read, once per session, output and Schema Registry decoding plan (`task_shape`);
- otherwise (value_decoding json, sink_output.value json: VARIANT's schema inference and JSON text; and the
  undecodable-only job of format iceberg) Spark computes the columns from the tasks' envelope (`envelope_frame`,
  executor/task.py::envelope_task) with write_frame's own expressions, and the write tasks are spark_job.py's: the
  same bytes as the Spark source's path.

Only the DataFrame API and mapInArrow: it runs over Spark Connect and on a cluster as spark_job.py does. The
executors reach Kafka with the driver's connection settings (`kafka_connection`).
"""

from __future__ import annotations

import threading
import weakref
from functools import partial
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from s3_archive.archive.driver.output import Output
from s3_archive.archive.driver.spark_job import run_write_job, write_frame
from s3_archive.archive.executor.task import envelope_task, read_task
from s3_archive.archive.protocol import (
    ENVELOPE_DDL,
    RESULT_SCHEMA,
    DecodePlan,
    JobOutput,
    JobShape,
    JobTemplate,
    KafkaConnection,
    LinePlan,
    WriteJob,
)
from s3_archive.io.kafka import KafkaResource

# librdkafka takes a certificate or key inline: executors then need no file of the driver (as the Spark source's
# inline keystore). The CA stays a path, as for the Spark source: it must exist where executors run.
_INLINE_PEM = {"ssl.certificate.location": "ssl.certificate.pem", "ssl.key.location": "ssl.key.pem"}


def kafka_connection(kafka: KafkaResource) -> KafkaConnection:
    """The executors' librdkafka settings: the resource's `client_config`, certificate and key inlined."""
    config = kafka.client_config()
    for location, inline in _INLINE_PEM.items():
        if config.get(location):
            config[inline] = Path(config.pop(location)).read_text()
    return KafkaConnection.of_config(config)


def computed_in_task(out: Output) -> bool:
    """Whether the task makes every column of the task batches itself (executor/task_columns.py): every format
    but the table format, every layout and Schema Registry decoding, but not a value parsed as JSON (value_decoding
    json, sink_output.value json), whose schema inference and rendering are Spark's VARIANT's."""
    return out.fmt.name != "iceberg" and out.decoding != "json" and out.value_as != "json"


def line_plan(out: Output) -> LinePlan | None:
    """How the task renders the lines of csv, jsonl and json (executor/task_lines.py)."""
    if out.fmt.name == "csv":
        return LinePlan("csv", out.csv_fields, value_text=out.value_as == "text")
    if out.fmt.name in ("jsonl", "json"):
        return LinePlan("json", out.columns, value_utf8=out.decoding == "utf8")
    return None


def slice_frame(spark: SparkSession, job: JobTemplate) -> DataFrame:
    """One row per slice of `job` (its index), one Spark partition each."""
    n = len(job.slices)
    return spark.range(0, n, 1, n).select(F.col("id").cast("int").alias("slice"))


def envelope_frame(spark: SparkSession, job: JobTemplate) -> DataFrame:
    """The envelope of `job.slices` read by tasks with librdkafka: the columns and types of
    spark_job.py::read_slices."""
    return slice_frame(spark, job).mapInArrow(partial(envelope_task, job), ENVELOPE_DDL)


# A session's task shapes: {session: {(the output's repr, JSON DDL, the session's timestamp type, the topic of a
# Schema Registry decoding plan): (that plan, shape)}}; a plan that differs from the kept one replaces it
_Shape = tuple[JobShape, str]
_SHAPES: weakref.WeakKeyDictionary[Any, dict[tuple[str | None, ...], tuple[DecodePlan | None, _Shape]]] = \
    weakref.WeakKeyDictionary()
_SHAPES_LOCK = threading.Lock()


def task_shape(spark: SparkSession, out: Output, json_ddl: str | None, decode: DecodePlan | None = None,
               ) -> tuple[JobShape, str]:
    """The job's shape for `out` and the task batches' Spark schema (JSON): spark_job.py::write_frame over an empty
    envelope. A function of the output, of how the session parses types and of the Schema Registry decoding plan
    alone, so it is worked out once per session, output and plan, not at every run: building and analysing
    write_frame's projection takes hundreds of py4j calls and three Catalyst analyses, serial in the driver before
    the job starts (docs/performance.md, "Warm archive"). A decoding plan is made at every run from the registry
    (registry_plan.py) and the shape holds it: a kept shape serves a run whose plan equals the one it was made with
    (every field: the subject's schemas by id and text, the decoded columns, the registry's connection), so a new
    version of a subject, a schema id's new text or another registry makes a new shape, which replaces the kept one
    (one per output and topic)."""
    # the output by its repr: every field of it, none a secret (a frozen dataclass of dicts and pydantic models,
    # which do not hash); the plan compared by value (frozen dataclasses)
    key = (repr(out), json_ddl, spark.conf.get("spark.sql.timestampType", None),  # how `timestamp` parses
           decode.topic if decode is not None else None)
    try:
        with _SHAPES_LOCK:
            kept = _SHAPES.get(spark, {}).get(key)
    except TypeError:  # a session that takes no weak reference: nothing kept
        kept, key = None, None
    if kept is not None and kept[0] == decode:
        return kept[1]
    frame, shape = write_frame(spark.createDataFrame([], ENVELOPE_DDL), out, json_ddl, decode)
    made = (shape, frame.schema.json())
    if key is not None:
        with _SHAPES_LOCK:
            _SHAPES.setdefault(spark, {})[key] = (decode, made)
    return made


def run_task_read_job(spark: SparkSession, template: JobTemplate, out: Output, json_ddl: str | None,
                      undecodable_only: bool = False, decode: DecodePlan | None = None) -> JobOutput:
    """Read `template.slices` in the tasks and write them (one Spark job); every task's result rows. `decode`:
    Schema Registry payloads, decoded by the write tasks (from Spark's columns of the tasks' envelope)."""
    if undecodable_only or not computed_in_task(out):
        return run_write_job(spark, {}, template, out, json_ddl, undecodable_only, decode=decode,
                             envelope=envelope_frame(spark, template))
    shape, task_schema = task_shape(spark, out, json_ddl, decode)
    job = WriteJob.of(template, shape, task_schema=task_schema, lines=line_plan(out))
    rows = [r.asDict() for r in slice_frame(spark, job).mapInArrow(partial(read_task, job), RESULT_SCHEMA).collect()]
    return JobOutput(rows, shape.fmt.spark_schema)
