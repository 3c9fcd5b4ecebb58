"""Where a write task's CPU goes for each format, step by step, without Spark or Kafka: one partition of `make bench`'s
workload as the task's envelope batches (bench/workload.py's records, BATCH_RECORDS a batch), then per format

- render: the stored columns the task makes (task_lines.py's csv / JSON lines, the value for text; the envelope's
  columns for parquet),
- encode: the format's encoder (encoders.py) writing into a sink that keeps what it is given (no copy),
- spool + hash: those bytes written into the object's upload (upload.py::ObjectUpload.write: spool, SHA-256),
- PUT: the object stored (ObjectUpload.finish: botocore's checksums and signing, the HTTP body) in a moto server,

each timed as this thread's CPU (so the split holds whatever else the machine runs; the least of `--rounds`), with the moto server's CPU for
the PUT (from /proc) and what it comes to per MB stored.

    flock -o /tmp/locks/heavy .venv/bin/python -m bench.tools.lines_profile --mb 200 [--formats jsonl,csv]

Starts its own moto server and stops it at the end.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from bench import workload as wl
from bench.config import BUCKET, PARTITIONS, TOPIC
from bench.tools.encode_split import Kept
from bench.tools.procstat import cpu_delta, descendants, snapshot

FORMATS = ("parquet", "text", "csv", "jsonl", "json")
ENVELOPE = ("key", "value", "headers", "topic", "partition", "offset", "timestamp", "timestamp_type")
CSV_FIELDS = ("key", "value", "offset", "timestamp", "headers")  # bench.worker's csv


def envelopes(mb: float) -> list[pa.RecordBatch]:
    """Partition 0's records of the workload of `mb` as the readers' envelope batches."""
    from s3_archive.archive.executor.kafka_read import BATCH_RECORDS, ENVELOPE_SCHEMA

    n = wl.records_for_mb(mb) // PARTITIONS
    recs = list(wl.records(n * PARTITIONS, pieces=[(0, 0, n)]))
    t0 = 1_700_000_000_000
    out = []
    for lo in range(0, n, BATCH_RECORDS):
        part = recs[lo:lo + BATCH_RECORDS]
        out.append(pa.RecordBatch.from_arrays([
            pa.array([k for _, k, _, _ in part], pa.binary()), pa.array([v for _, _, v, _ in part], pa.binary()),
            pa.array([[{"key": a, "value": b} for a, b in h] for *_, h in part], ENVELOPE_SCHEMA.field("headers").type),
            pa.array([TOPIC] * len(part)), pa.array([0] * len(part), pa.int32()),
            pa.array(range(lo, lo + len(part)), pa.int64()),
            pa.array([(t0 + lo + i) * 1000 for i in range(len(part))], pa.timestamp("us", tz="UTC")),
            pa.array([0] * len(part), pa.int32())], schema=ENVELOPE_SCHEMA))
    return out


def _spark_schema(env: pa.Schema) -> str:
    types = {"key": "binary", "value": "binary", "topic": "string", "partition": "integer", "offset": "long",
             "timestamp": "timestamp", "timestamp_type": "integer"}
    headers = {"type": "array", "containsNull": True, "elementType": {"type": "struct", "fields": [
        {"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in (("key", "string"), ("value", "binary"))]}}
    return json.dumps({"type": "struct", "fields": [
        {"name": f.name, "type": types.get(f.name, headers), "nullable": True, "metadata": {}} for f in env]})


def ended(fmt: str) -> bool:
    """Whether the task renders `fmt`'s lines with their end (task_columns.py::_line; a tree from before that
    joins them in the encoder: compared as it is)."""
    from s3_archive.archive.executor import encoders

    return fmt in ("csv", "jsonl", "json") and hasattr(encoders, "line_end")


def render(fmt: str, env: pa.RecordBatch) -> pa.Table:
    """The stored columns of `fmt` the task makes from one envelope batch (task_columns.py::_line)."""
    from s3_archive.archive.executor.task_lines import csv_lines, json_lines
    from s3_archive.archive.protocol import LinePlan

    if fmt == "parquet":
        return pa.Table.from_batches([env])
    end = ()
    if ended(fmt):
        from s3_archive.archive.executor.encoders import line_end

        end = (line_end(fmt).decode(),)
    if fmt == "text":
        line = pc.fill_null(env.column("value"), b"")
    elif fmt == "csv":
        line = csv_lines(env, LinePlan("csv", CSV_FIELDS), *end)
    else:
        line = json_lines(env, LinePlan("json", ENVELOPE), None, *end).cast(pa.binary())
    return pa.table({"_line": line})


def profile(fmt: str, batches: list[pa.RecordBatch], conn: Any, moto_pid: int) -> dict[str, float]:
    """CPU seconds of each step of one object of `fmt` holding `batches`, the moto server's for its PUT, MB stored."""
    from s3_archive.archive.executor.encoders import open_encoder
    from s3_archive.archive.executor.upload import ObjectUpload
    from s3_archive.archive.protocol import FormatPlan

    plan = FormatPlan(fmt, "snappy" if fmt == "parquet" else "none", f".{fmt}",
                      spark_schema=_spark_schema(batches[0].schema))
    steps = dict.fromkeys(("render", "encode", "spool + hash", "PUT (client)", "PUT (moto)"), 0.0)
    kept = Kept()
    encoder = open_encoder(plan, kept, f"profile/{fmt}", *((True,) if ended(fmt) else ()))
    for env in batches:
        t = time.thread_time()
        table = render(fmt, env)
        steps["render"] += time.thread_time() - t
        t = time.thread_time()
        encoder.write(table)
        steps["encode"] += time.thread_time() - t
    t = time.thread_time()
    encoder.close()
    steps["encode"] += time.thread_time() - t
    upload = ObjectUpload(conn, BUCKET, f"profile/{fmt}/{time.time_ns()}", "profile/_manifest")
    t = time.thread_time()
    for piece in kept.pieces:
        upload.write(piece)
    steps["spool + hash"] = time.thread_time() - t
    before, t = snapshot(), time.thread_time()
    written = upload.finish()
    steps["PUT (client)"] = time.thread_time() - t
    after = snapshot()
    steps["PUT (moto)"] = cpu_delta(before.procs, after.procs, lambda procs: descendants(procs, moto_pid))
    conn.client().delete_object(Bucket=BUCKET, Key=written.key)
    return steps | {"MB": written.size / 1e6}


def main() -> None:
    from s3_archive.archive.protocol import S3Connection
    from s3_archive.local.moto_server import MotoServer
    from s3_archive.local.stack import local_s3_client

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=200, help="the workload's size; one partition (a quarter) is profiled")
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--rounds", type=int, default=3,
                    help="each format's object made this many times; each step's least CPU is shown")
    args = ap.parse_args()
    batches = envelopes(args.mb)
    records = sum(b.num_rows for b in batches)
    with tempfile.TemporaryDirectory(prefix="s3a-lines-profile-") as root:
        moto = MotoServer(Path(root))
        moto.start()
        try:
            s3 = local_s3_client(moto.endpoint_url)
            s3.create_bucket(Bucket=BUCKET)
            conn = S3Connection.of_client(s3)
            print(f"partition 0 of {args.mb:g} MB: {records:,} records; CPU seconds of this thread, moto's for the PUT")
            for fmt in args.formats.split(","):
                runs = [profile(fmt, batches, conn, moto.proc.pid) for _ in range(args.rounds)]  # type: ignore[union-attr]
                med = {k: min(r[k] for r in runs) for k in runs[0]}  # the least: what the step costs, less noise
                task = sum(v for k, v in med.items() if k not in ("MB", "PUT (moto)"))
                print(f"{fmt}: {med['MB']:.1f} MB; task {task:.2f} CPU-s (" +
                      ", ".join(f"{k} {v:.3f}" for k, v in med.items() if k not in ("MB", "PUT (moto)")) +
                      f"); moto {med['PUT (moto)']:.2f} CPU-s, {med['PUT (moto)'] / med['MB'] * 1000:.1f} ms/MB")
        finally:
            moto.stop()


if __name__ == "__main__":
    main()
