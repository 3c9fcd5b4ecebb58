"""Seconds to decode one batch of Schema Registry Avro payloads in the write task (archive/executor/
registry_decode.py's `decode`), natively (native/'s arrow-avro decoder) and with fastavro, on bench/registry.py's
schema and the workload's records; no services, no Spark.

    .venv/bin/python -m bench.tools.registry_decode_ab [--records 10000] [--rounds 7]

Prints the median seconds per batch of each path, fastavro's over native's, and whether both gave the same batch.
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
from s3_archive.archive.executor.registry_decode import decode
from s3_archive.archive.protocol import DecodedPart, DecodePlan
from s3_archive.io.registry_client import RegistrySchema
from s3_archive.model.registry_types import avro_columns


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=7)
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


if __name__ == "__main__":
    main()
