"""Schema Registry decoding (the page's "Schema Registry decoding"): the same Confluent-framed Avro records archived
to parquet twice per round, in the warm Spark worker — raw (`value_decoding: bytes`) and decoded into typed columns
(`value_decoding: avro`, decoded in the write tasks) — rounds interleaved, the ratio paired per round. The records
are the workload's (id, user, event, ts, amount, pad: ≈500 bytes) as Avro, written by confluent-kafka's
AvroSerializer against the bench's own Apicurio Registry.

Alone: `python -m bench.registry --mb 50 --rounds 3` (its own broker, moto, registry and worker)."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from bench import workload as wl
from bench.common import Setup, SparkWorker, say
from bench.config import BUCKET, PARTITIONS, PRODUCER_CONF, REGISTRY_TARGET
from bench.under_test import KafkaResource, SchemaRegistryServer, local_s3_client, temporary_stack

AVRO_TOPIC = "bench.avro"
SCHEMA = {"type": "record", "name": "Event", "namespace": "bench", "fields": [
    {"name": "id", "type": "long"}, {"name": "user", "type": "string"},
    {"name": "event", "type": {"type": "enum", "name": "Kind", "symbols": ["view", "click", "buy"]}},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "amount", "type": "double"}, {"name": "pad", "type": "string"}]}


def produce_avro(kafka: Any, registry_url: str, count: int) -> int:
    """The workload's records as Confluent-framed Avro into AVRO_TOPIC; their key + value + header bytes."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    wl.create_topic(kafka, AVRO_TOPIC)
    ser = AvroSerializer(SchemaRegistryClient({"url": registry_url, "timeout": 10}), json.dumps(SCHEMA))
    ctx = SerializationContext(AVRO_TOPIC, MessageField.VALUE)
    producer = kafka.producer(**PRODUCER_CONF)
    total = 0
    for p, k, v, h in wl.records(count):
        rec = json.loads(v)
        value = ser(rec, ctx)
        total += len(k) + len(value) + sum(len(a) + len(b) for a, b in h)
        while True:
            try:
                producer.produce(AVRO_TOPIC, value, k, p, headers=h)
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush(120)
    return total


def time_registry_decoding(s: Setup, worker: SparkWorker, registry_url: str, rounds: int,
                           count: int | None = None) -> dict[str, Any]:
    """Per round: seconds of the raw and the decoded archive of the same Avro records, and their ratio."""
    n = count or s.records
    payload = produce_avro(s.kafka, registry_url, n)
    ends = s.kafka.offsets(AVRO_TOPIC, "latest")
    windows = [[p, 0, e] for p, e in sorted(ends.items())]
    out: dict[str, Any] = {"records": n, "payload": payload, "raw_s": [], "decoded_s": [], "errors": []}
    small = [[p, 0, min(2000, e)] for p, e in sorted(ends.items())]
    for decoding in ("bytes", "avro"):  # warm-up of both paths (the decoders' imports), not counted
        worker.call(cmd="decoded", topic=AVRO_TOPIC, prefix="registry-warmup/", windows=small, decoding=decoding,
                    registry_url=registry_url)
        wl.empty_prefix(s.s3, BUCKET, "registry-warmup/")
    for r in range(rounds):
        for kind, decoding in (("raw", "bytes"), ("decoded", "avro")):
            prefix = f"registry-{kind}-r{r}/"
            try:
                got = worker.call(cmd="decoded", topic=AVRO_TOPIC, prefix=prefix, windows=windows,
                                  decoding=decoding, registry_url=registry_url)
                assert got["records"] == n, got
                out[f"{kind}_s"].append(got["seconds"])
                say(f"  registry round {r + 1}: {kind} {got['seconds']:.2f}s, {n / got['seconds']:,.0f} rec/s")
            except Exception as e:  # shown on the page
                out["errors"].append(f"{kind}: {type(e).__name__}: {e}"[:2000])
                say(f"  registry round {r + 1}: {kind} FAILED: {out['errors'][-1]}")
            wl.empty_prefix(s.s3, BUCKET, prefix)
    out["ratios"] = [raw / dec for raw, dec in zip(out["raw_s"], out["decoded_s"], strict=False)]
    out["target"] = REGISTRY_TARGET
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    with temporary_stack("s3a-bench-registry-", BUCKET, remove=True) as (broker, moto, root):
        registry = SchemaRegistryServer(root / "registry")
        registry.start()
        worker = None
        try:
            stack = {"bootstrap_servers": broker.bootstrap_servers, "s3_endpoint_url": moto.endpoint_url,
                     "bucket": BUCKET, "remote": None}
            kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers, timeout_s=30)
            logs = Path(tempfile.mkdtemp(prefix="s3a-bench-registry-logs-"))
            n = wl.records_for_mb(args.mb)
            s = Setup(stack=stack, kafka=kafka, s3=local_s3_client(moto.endpoint_url), logs=logs, kept=logs,
                      moto_log=root / "moto" / "moto.log", records=n, payload=0, ends={}, windows=[],
                      per_partition=n // PARTITIONS, window_records=n // PARTITIONS)
            worker = SparkWorker(stack, logs / "spark-worker.log", logs / "spark-worker.kept.log")
            out = time_registry_decoding(s, worker, registry.url, args.rounds, n)
            print(json.dumps(summary(out), indent=2))
            if args.json:
                args.json.write_text(json.dumps(summary(out), indent=2) + "\n")
        finally:
            if worker is not None:
                worker.stop()
            registry.stop()


def summary(out: dict[str, Any]) -> dict[str, Any]:
    """The figures of the page and the JSON: records/s of each side and the ratio, min / median / max."""
    from bench.stats import Summary

    n = out["records"]
    res: dict[str, Any] = {"records": n, "payload_mb": round(out["payload"] / 1e6, 1), "errors": out["errors"],
                           "target": out["target"]}
    for kind in ("raw", "decoded"):
        if out[f"{kind}_s"]:
            sm = Summary.of([n / x for x in out[f"{kind}_s"]])
            res[f"{kind}_records_per_s"] = [round(sm.min), round(sm.median), round(sm.max)]
    if out["ratios"]:
        sm = Summary.of(out["ratios"])
        res["decoded_vs_raw"] = [round(sm.min, 3), round(sm.median, 3), round(sm.max, 3)]
    return res


if __name__ == "__main__":
    main()
