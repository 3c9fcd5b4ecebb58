"""Where a write task's CPU goes on `read_path: librdkafka`, without Spark: one partition of `make bench`'s
workload read with the task's own reader (`--reader`: native, archive/executor/native_read.py, the default; python,
kafka_read.py, its consume and envelope steps apart), made into task batches (task_columns.py) and encoded as
Parquet/snappy into memory, in this process, timed step by step (thread CPU time), so the split holds whatever else
the machine runs. librdkafka's own fetch threads are not this thread's.

`--split` then takes the partition's stored tables apart further (bench/tools/encode_split.py): the encoder's own
Python steps, the Parquet writer per column and with one setting changed at a time (statistics, dictionary,
compression, page size, page index), the object's SHA-256 and spool, and its PUT to moto (this thread's CPU and
moto's).

    flock -o /tmp/locks/heavy .venv/bin/python -m bench.tools.task_read_profile --mb 50 [--reader python] [--split]

Starts its own broker and moto (`temporary_stack`) and stops them at the end.
"""

from __future__ import annotations

import argparse
import io
import time
from typing import Any

import bench.under_test as ut
from bench import workload as wl
from bench.config import BUCKET, TOPIC


def _clock() -> float:
    return time.thread_time()


def main() -> None:
    from s3_archive.archive.driver.output import Output
    from s3_archive.archive.executor import kafka_read, native_read
    from s3_archive.archive.executor.encoders import ParquetEncoder
    from s3_archive.archive.executor.task_columns import task_batch
    from s3_archive.archive.protocol import PARQUET_DICTIONARY, FormatPlan, KafkaConnection, WriteJob
    from s3_archive.config.archive import ArchiveConfig

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=50)
    ap.add_argument("--reader", choices=("native", "python"), default="native", help="ArchiveConfig.task_reader")
    ap.add_argument("--split", action="store_true", help="then the encode, hash, spool and PUT split (encode_split)")
    args = ap.parse_args()
    with ut.temporary_stack("s3a-taskread-", BUCKET) as (broker, moto, _root):
        kafka = ut.KafkaResource(bootstrap_servers=broker.bootstrap_servers, timeout_s=30)
        wl.create_topic(kafka, TOPIC)
        n = wl.records_for_mb(args.mb)
        wl.produce(kafka, TOPIC, n)
        end = kafka.offsets(TOPIC, "latest")[0]
        out = Output.of(ArchiveConfig(name="p", topics=[TOPIC], bucket=BUCKET))
        schema = _task_schema(out)
        fmt = FormatPlan("parquet", "snappy", ".parquet", spark_schema=schema[1], dictionary=PARQUET_DICTIONARY)
        job = WriteJob(topic=TOPIC, bucket=BUCKET, prefix="", fmt=fmt,
                       conn=None, slices=(), derived=(("topic", ""), ("partition", "_partition"),
                                                      ("offset", "_offset")),
                       payload=("key", "value", "headers", "topic", "partition", "offset", "timestamp",
                                "timestamp_type"), ts_stored=True, task_schema=schema[0])
        conn = KafkaConnection.of_config(kafka.client_config())
        read_step = f"read ({args.reader} reader: librdkafka's poll, the envelope's Arrow arrays)"
        steps: dict[str, float] = {read_step: 0.0, "task batch": 0.0, "parquet encode": 0.0}
        parts: dict[str, float] = {"consume (librdkafka, messages)": 0.0, "envelope (Arrow)": 0.0}
        consume = kafka_read._consumer

        def timed_consumer(*a: Any, **kw: Any) -> Any:
            return _TimedConsumer(consume(*a, **kw), parts)

        envelope = kafka_read._envelope

        def timed_envelope(*a: Any) -> Any:
            t = _clock()
            try:
                return envelope(*a)
            finally:
                parts["envelope (Arrow)"] += _clock() - t

        kafka_read._consumer, kafka_read._envelope = timed_consumer, timed_envelope
        sink = io.BytesIO()
        import pyarrow.parquet  # noqa: F401  the encoder imports it at its first row group; the workers' daemon has it

        from s3_archive.archive.executor.task import _stored_table

        encoder = ParquetEncoder(job.fmt, sink)
        wall, cpu0, records = time.monotonic(), _clock(), 0
        tables = []
        batches = (native_read if args.reader == "native" else kafka_read).read_range(conn, TOPIC, 0, 0, end)
        while True:
            t = _clock()
            env = next(batches, None)
            steps[read_step] += _clock() - t
            if env is None:
                break
            t = _clock()
            b = task_batch(job, env)
            table = _stored_table(job, b)
            steps["task batch"] += _clock() - t
            if args.split:
                tables.append(table)
            t = _clock()
            encoder.write(table)
            steps["parquet encode"] += _clock() - t
            records += env.num_rows
        t = _clock()
        encoder.close()
        steps["parquet encode"] += _clock() - t
        total, wall = _clock() - cpu0, time.monotonic() - wall
        print(f"partition 0: {records:,} records, {sink.tell() / 1e6:.1f} MB of Parquet; wall {wall:.2f} s, "
              f"this thread's CPU {total:.2f} s")
        for k, v in steps.items():
            print(f"  {k}: {v:.2f} CPU-s ({v / total:.0%}), {v / records * 1e6:.2f} µs per record")
            if k == read_step and args.reader == "python":
                for part, secs in parts.items():
                    print(f"    of which {part}: {secs:.2f} CPU-s, {secs / records * 1e6:.2f} µs per record")
        rest = total - sum(steps.values())
        print(f"  rest (the loop here): {rest:.2f} CPU-s ({rest / total:.0%})")
        if args.split:
            from bench.tools import encode_split

            encode_split.report(job.fmt, tables, ut.local_s3_client(moto.endpoint_url), BUCKET,
                                moto.proc.pid if moto.proc else 0)


class _TimedConsumer:
    """The consumer's `consume` timed on this thread (librdkafka's own threads fetch in the background)."""

    def __init__(self, consumer: Any, steps: dict[str, float]) -> None:
        self._c, self._steps = consumer, steps

    def consume(self, *a: Any) -> Any:
        t = _clock()
        try:
            return self._c.consume(*a)
        finally:
            self._steps["consume (librdkafka, messages)"] += _clock() - t

    def __getattr__(self, name: str) -> Any:
        return getattr(self._c, name)


def _task_schema(out: Any) -> tuple[str, str]:
    """The task batches' and the stored columns' Spark schemas (JSON) for parquet with the whole envelope, as
    driver/spark_job.py::write_frame gives them (written out here: this tool runs no Spark)."""
    import json

    def f(name: str, t: Any) -> dict[str, Any]:
        return {"name": name, "type": t, "nullable": True, "metadata": {}}

    headers = {"type": "array", "containsNull": True, "elementType": {"type": "struct", "fields": [
        f("key", "string"), f("value", "binary")]}}
    task = [f("_partition", "integer"), f("_offset", "long"), f("_rec_bytes", "long"), f("key", "binary"),
            f("value", "binary"), f("headers", headers), f("timestamp", "timestamp"), f("timestamp_type", "integer")]
    stored = [f("key", "binary"), f("value", "binary"), f("headers", headers), f("topic", "string"),
              f("partition", "integer"), f("offset", "long"), f("timestamp", "timestamp"),
              f("timestamp_type", "integer")]
    return (json.dumps({"type": "struct", "fields": task}), json.dumps({"type": "struct", "fields": stored}))


if __name__ == "__main__":
    main()
