"""The restore's producer, side by side: make bench's bare produce (confluent-kafka, one `produce()` per record, the
restore's producer settings, no transaction) against native/'s producer (`s3_archive_native.Producer`: Arrow
batches, no Python per record, the GIL released while librdkafka queues them):

- `native`: the records as Arrow batches of 2,048 (the restore's Parquet batches), no transaction;
- `native_txn`: the same, transactional as the restore commits (every `transaction_records` and at each source
  partition's end, with a ledger-like `send_offsets_to_transaction`);
- `native_txn_parquet`: the same, reading the batches from local Parquet files first (the restore's read, no S3);
- `native_txn_lists`: the same, the batches first held as Python lists (what restore/batch.py's `Records` holds
  today) and made Arrow arrays per batch (`pa.array`): the cost of wiring the native producer without changing
  the readers;
- `native_txn_2threads`: two transactional producers in two threads, two partitions each (producer groups);
- `produce_x2`: the bare produce in two processes (the most that producer groups in processes could reach).

Same records (bench/workload.py), rounds interleaved, each contender into a fresh topic; ratios are paired per round.

    flock -o /tmp/locks/heavy .venv/bin/python -m bench.tools.produce_ab --mb 200 --rounds 3 [--json FILE]

Starts its own broker (and moto, unused but for the stack's shape), stops it at the end.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench import workload as wl
from bench.common import machine, machine_at_end, say
from bench.config import BUCKET, PARTITIONS, PRODUCER_CONF
from bench.parallel import run_parallel, shares
from bench.stats import Summary, paired_ratios
from bench.under_test import DEFAULT_TRANSACTION_RECORDS, KafkaResource, temporary_stack

BATCH = 2048  # records per Arrow batch: the restore's Parquet batches (restore/readers.py PARQUET_BATCH)
HEADER = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
CONTENDERS = ("produce", "native", "native_txn", "native_txn_parquet", "native_txn_lists", "native_txn_2threads",
              "produce_x2")


def native_module() -> Any:
    try:
        import s3_archive_native
    except ImportError as e:
        raise SystemExit(f"the native producer is not built ({e}); run `make setup`") from None
    if not hasattr(s3_archive_native, "Producer"):
        raise SystemExit("s3_archive_native has no Producer: an older build; run `make setup`")
    return s3_archive_native


def partition_tables(n: int) -> dict[int, pa.Table]:
    """The workload's records by partition, in offset order, as the archive holds them (key, value, headers,
    timestamp in ms)."""
    cols: dict[int, dict[str, list]] = {p: {"key": [], "value": [], "headers": [], "timestamp": []}
                                        for p in range(PARTITIONS)}
    t0 = 1_700_000_000_000
    for i, (p, k, v, h) in enumerate(wl.records(n)):
        c = cols[p]
        c["key"].append(k)
        c["value"].append(v)
        c["headers"].append([{"key": a, "value": b} for a, b in h])
        c["timestamp"].append(t0 + i)
    return {p: pa.table({"key": pa.array(c["key"], pa.binary()), "value": pa.array(c["value"], pa.binary()),
                         "headers": pa.array(c["headers"], HEADER), "timestamp": pa.array(c["timestamp"], pa.int64())})
            for p, c in cols.items()}


def as_lists(batch: pa.RecordBatch) -> tuple[list, list, list, list]:
    """A batch as restore/batch.py's Records holds it: keys, values, headers as (name, value) tuples, ms."""
    headers = [[(h["key"], h["value"]) for h in hs] for hs in batch.column("headers").to_pylist()]
    return (batch.column("key").to_pylist(), batch.column("value").to_pylist(), headers,
            batch.column("timestamp").to_pylist())


def from_lists(cols: tuple[list, list, list, list]) -> pa.RecordBatch:
    keys, values, headers, stamps = cols
    return pa.record_batch({"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary()),
                            "headers": pa.array(headers, HEADER), "timestamp": pa.array(stamps, pa.int64())})


def native_config(kafka: KafkaResource, txn_id: str | None) -> list[tuple[str, str]]:
    conf = kafka.client_config(**PRODUCER_CONF, **{"delivery.report.only.error": False})
    if txn_id:
        conf |= {"transactional.id": txn_id, "transaction.timeout.ms": 300_000}
    return [(k, str(v).lower() if isinstance(v, bool) else str(v)) for k, v in conf.items()]


Source = Callable[[int], Iterable[pa.RecordBatch]]  # a partition's batches, in offset order (read while timed)


def native_produce(kafka: KafkaResource, topic: str, parts: list[int], source: Source, txn_records: int | None,
                   txn_id: str) -> tuple[int, float]:
    """`parts`' batches produced to the same partitions of `topic`, transactional when `txn_records`; (records,
    seconds spent in commits). Returns once every record is acknowledged (or committed)."""
    native = native_module()
    prod = native.Producer(native_config(kafka, txn_id if txn_records else None), kafka.bootstrap_servers)
    if txn_records:
        prod.init_transactions(30.0)
    in_txn, size, commits, n = False, 0, 0.0, 0

    def commit(p: int, upto: int) -> float:
        t = time.monotonic()
        prod.send_offsets_to_transaction([(topic, p, upto, f"bench ledger {p}:{upto}")], f"ledger-{txn_id}", 30.0)
        prod.commit_transaction(60.0)
        return time.monotonic() - t

    for p in parts:
        produced = 0
        for b in source(p):
            if txn_records and not in_txn:
                prod.begin_transaction()
                in_txn = True
            prod.produce_arrow(topic, p, b.column("key"), b.column("value"), b.column("headers"),
                               b.column("timestamp"))
            produced += b.num_rows
            size += b.num_rows
            if txn_records and size >= txn_records:
                commits += commit(p, produced)
                in_txn, size = False, 0
        if in_txn:
            commits += commit(p, produced)
            in_txn, size = False, 0
        n += produced
    left = prod.flush(60.0)
    delivered, failed, err, _ = prod.take_deliveries()
    if left or failed or delivered != n:
        raise RuntimeError(f"native produce to {topic!r}: {left} left, {failed} failed ({err}), {delivered}/{n}")
    return n, commits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--transaction-records", type=int, default=DEFAULT_TRANSACTION_RECORDS)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    native_module()
    mach = machine()
    say(f"machine: nproc {mach['nproc']}, load {mach['load_start']}; {mach['other_work']}; {mach['heavy_lock']}")
    n, txn = wl.records_for_mb(args.mb), args.transaction_records
    tables = partition_tables(n)
    batches = {p: t.to_batches(BATCH) for p, t in tables.items()}
    lists = {p: [as_lists(b) for b in bs] for p, bs in batches.items()}
    secs: dict[str, list[float]] = {k: [] for k in CONTENDERS}
    commit_s: list[float] = []
    with tempfile.TemporaryDirectory(prefix="s3a-produce-ab-") as tmp, \
            temporary_stack("s3a-produce-ab-", BUCKET, remove=True) as (broker, moto, _root):
        files = {p: Path(tmp) / f"p{p}.parquet" for p in tables}
        for p, t in tables.items():
            pq.write_table(t, files[p], compression="zstd")
        del tables
        kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers, timeout_s=30)
        stack = {"bootstrap_servers": broker.bootstrap_servers, "s3_endpoint_url": moto.endpoint_url,
                 "bucket": BUCKET, "remote": None}
        ends = {p: n // PARTITIONS for p in range(PARTITIONS)}
        sources: dict[str, Source] = {
            "native": batches.__getitem__, "native_txn": batches.__getitem__,
            "native_txn_parquet": lambda p: pq.ParquetFile(files[p]).iter_batches(batch_size=BATCH),
            "native_txn_lists": lambda p: map(from_lists, lists[p]), "native_txn_2threads": batches.__getitem__}
        say(f"{n:,} records ({n * wl.record_bytes() / 1e6:,.0f} MB), {PARTITIONS} partitions, batches of {BATCH}, "
            f"transactions of {txn:,}")
        for r in range(args.rounds):
            say(f"round {r + 1}/{args.rounds}")
            for name in CONTENDERS:
                topic = f"ab-{name}-r{r}"
                wl.create_topic(kafka, topic)
                t = time.monotonic()
                if name == "produce":
                    s = wl.produce(kafka, topic, n)
                elif name == "produce_x2":
                    out = run_parallel("produce", stack, [{"topic": topic, "count": n, "pieces": sh}
                                                          for sh in shares(ends, 2)])
                    assert out["records"] == n, out
                    s = out["seconds"]
                elif name == "native_txn_2threads":
                    with ThreadPoolExecutor(2) as pool:
                        done = list(pool.map(lambda g: native_produce(kafka, topic, [g, g + 2], sources[name], txn,
                                                                      f"{topic}-g{g}"), [0, 1]))
                    s = time.monotonic() - t
                    assert sum(k for k, _ in done) == n, done
                else:
                    k, c = native_produce(kafka, topic, list(range(PARTITIONS)), sources[name],
                                          None if name == "native" else txn, topic)
                    s = time.monotonic() - t
                    assert k == n, (k, n)
                    if name == "native_txn":
                        commit_s.append(c)
                got = sum(kafka.offsets(topic, "latest").values())
                if got < n:  # a transactional topic also holds a commit marker per partition and transaction
                    raise RuntimeError(f"{topic}: {got} offsets for {n} records")
                secs[name].append(s)
                wl.delete_topic(kafka, topic)
                say(f"  {name:>20}: {s:.2f}s, {n / s:,.0f} rec/s, {n * wl.record_bytes() / s / 1e6:,.1f} MB/s")
    machine_at_end(mach)
    say(f"native_txn's commits: {Summary.of(commit_s).fmt(2)} s per run")
    ratios = {f"{k}_vs_produce": paired_ratios(v, secs["produce"]).as_dict() for k, v in secs.items()
              if k != "produce"}
    ratios["native_txn_vs_produce_x2"] = paired_ratios(secs["native_txn"], secs["produce_x2"]).as_dict()
    for k, v in secs.items():
        say(f"{k:>20}: {Summary.of(v).fmt(2)} s")
    for k, d in ratios.items():
        say(f"{k}: {d['min']:.2f} / {d['median']:.2f} / {d['max']:.2f} (min / median / max; > 1: faster)")
    say(f"machine at the end: load {mach['load_end']}; {mach['other_work_end']}")
    if args.json:
        args.json.write_text(json.dumps({"mb": args.mb, "rounds": args.rounds, "records": n, "machine": mach,
                                         "seconds": secs, "ratios": ratios}, indent=2) + "\n")


if __name__ == "__main__":
    main()
