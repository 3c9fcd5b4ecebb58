"""Seconds to decode one batch of Schema Registry Avro payloads in the write task (archive/executor/
registry_decode.py's `decode`), natively (native/'s arrow-avro decoder) and with fastavro, on bench/registry.py's
schema and the workload's records; no services, no Spark.

    .venv/bin/python -m bench.tools.registry_decode_ab [--records 10000] [--rounds 7]

Prints the median seconds per batch of each path, fastavro's over native's, and whether both gave the same batch.
`--parquet` then splits what the write task pays per batch for each way of archiving the payloads, in this thread's
CPU (median over the rounds): the payloads kept raw (`value` with the format's snappy), decoded with the raw value
kept beside the typed columns (`value` zstd, the columns snappy: the default), and decoded with `envelope.value` off;
the decoding, and Parquet (archive/executor/encoders.py's ParquetEncoder, into memory) of the value and the typed
columns, with the bytes written. The envelope's other columns, the same in all three, are left out.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import time

import fastavro
import pyarrow as pa

from bench import workload as wl
from bench.registry import SCHEMA
from s3_archive.archive.executor.encoders import ParquetEncoder
from s3_archive.archive.executor.registry_decode import decode
from s3_archive.archive.protocol import DecodedPart, DecodePlan, FormatPlan
from s3_archive.io.registry_client import RegistrySchema
from s3_archive.model.registry_types import avro_columns


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--parquet", action="store_true", help="then each way's decoding and Parquet, split")
    args = ap.parse_args()
    schema = RegistrySchema(1, "AVRO", json.dumps(SCHEMA), (), "bench.avro-value", 1)
    parsed = fastavro.parse_schema(SCHEMA)
    payloads = []
    for _, _, v, _ in wl.records(args.records):
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, json.loads(v))
        payloads.append(b"\x00\x00\x00\x00\x01" + out.getvalue())
    struct = avro_columns(schema.text)
    part = DecodedPart("value", "avro", schema.subject, (schema,), json.dumps(struct),
                       tuple(f["name"] for f in struct["fields"]))
    plan = DecodePlan("bench.avro", (part,))
    n = len(payloads)
    batch = pa.RecordBatch.from_pydict({"_partition": pa.array([0] * n, pa.int32()),
                                        "_offset": pa.array(range(n), pa.int64()),
                                        "value": pa.array(payloads, pa.binary())})
    seconds: dict[str, list[float]] = {"native": [], "fastavro": []}
    outs = {}
    for _ in range(args.rounds + 1):  # the first round warms both up, not counted
        for name, native in (("native", True), ("fastavro", False)):
            t = time.perf_counter()
            outs[name] = decode(plan, batch, native=native)
            seconds[name].append(time.perf_counter() - t)
    med = {k: statistics.median(v[1:]) for k, v in seconds.items()}
    same = outs["native"].equals(outs["fastavro"])
    print(json.dumps({"records": n, "payload_bytes": sum(map(len, payloads)), "native_s": round(med["native"], 5),
                      "fastavro_s": round(med["fastavro"], 5),
                      "fastavro_over_native": round(med["fastavro"] / med["native"], 2), "same_batch": same}))
    if args.parquet:
        print(json.dumps(parquet_split(plan, batch, args.rounds)))


# Each way of archiving the payloads: (decoded, value column's codec; None: not stored)
WAYS = {"raw": (False, "snappy"), "decoded": (True, "zstd"), "decoded-novalue": (True, None)}


def parquet_split(plan: DecodePlan, batch: pa.RecordBatch, rounds: int) -> dict[str, dict[str, float]]:
    """Per way (WAYS): this thread's CPU seconds per batch (median) of decoding and of Parquet, and the bytes."""
    part = plan.parts[0]
    cpu: dict[str, dict[str, list[float]]] = {w: {"decode_s": [], "parquet_s": []} for w in WAYS}
    size: dict[str, int] = {}
    for r in range(rounds + 1):  # the first round warms up, not counted
        for way, (decoded, codec) in WAYS.items():
            t = time.thread_time()
            b = decode(plan, batch) if decoded else batch
            t_decode = time.thread_time() - t
            names = (["value"] if codec else []) + (list(part.columns) if decoded else [])
            fmt = FormatPlan("parquet", "snappy", ".parquet", spark_schema="{}",
                             column_codecs=(("value", codec),) if codec and codec != "snappy" else ())
            sink = io.BytesIO()
            t = time.thread_time()
            encoder = ParquetEncoder(fmt, sink)
            encoder.write(pa.Table.from_batches([b]).select(names))
            encoder.close()
            t_parquet = time.thread_time() - t
            if r:
                cpu[way]["decode_s"].append(t_decode)
                cpu[way]["parquet_s"].append(t_parquet)
            size[way] = sink.tell()
    return {way: {k: round(statistics.median(v), 5) for k, v in steps.items()} | {"bytes": size[way]}
            for way, steps in cpu.items()}


if __name__ == "__main__":
    main()
