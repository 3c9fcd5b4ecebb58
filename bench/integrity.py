"""Tamper evidence (the page's "Tamper evidence", docs/compliance.md): what the SHA-256 of every object costs the
archive, and how fast `verify` re-reads an archive.

- The hash's cost: per round, the rounds' windows archived in the warm Spark worker (the write tasks hash every
  byte they write), then the same objects' bytes hashed again here in 64 KiB pieces: the CPU seconds the hash adds,
  at most (the tasks hash what the encoders hand over, in pieces as large or larger), over the archive's seconds.
  Measured directly, not as an archive with the hash switched off: the product has no such switch, and a few % is
  within the spread between two archive runs on this machine.
- `verify --full` over that archive (every object read from moto and hashed, every manifest link checked): MB/s of
  objects read, in this process.

Alone: `python -m bench.integrity --mb 100 --rounds 3` (its own broker, moto and worker)."""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import workload as wl
from bench.common import Setup, SparkWorker, say
from bench.config import BUCKET, HASH_COST_TARGET, PARTITIONS, TOPIC
from bench.under_test import ArchiveConfig, KafkaResource, list_objects, local_s3_client, temporary_stack, verify_topic

PIECE = 64 << 10


def hash_seconds(s3: Any, prefix: str) -> tuple[float, int]:
    """Seconds to SHA-256 every object under `prefix` (data and manifests apart: objects only), the bytes read
    first so that only the hash is timed; and the bytes hashed."""
    seconds, total = 0.0, 0
    for o in list_objects(s3, BUCKET, f"{prefix}{TOPIC}/"):
        body = s3.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read()
        view = memoryview(body)
        t = time.perf_counter()
        h = hashlib.sha256()
        for i in range(0, len(view), PIECE):
            h.update(view[i:i + PIECE])
        h.hexdigest()
        seconds += time.perf_counter() - t
        total += len(body)
    return seconds, total


def time_tamper_evidence(s: Setup, worker: SparkWorker, rounds: int) -> dict[str, Any]:
    """Per round: archive seconds, hash seconds of the bytes written, and `verify --full` seconds and bytes."""
    out: dict[str, Any] = {"records": s.records, "payload": s.payload, "archive_s": [], "hash_s": [],
                           "verify_s": [], "verify_bytes": [], "bytes_written": 0, "errors": [],
                           "target": HASH_COST_TARGET}
    for r in range(rounds):
        prefix = f"integrity-r{r}/"
        try:
            got = worker.call(cmd="archive", topic=TOPIC, prefix=prefix, windows=s.wlist)
            assert got["records"] == s.records, got
            hashed, total = hash_seconds(s.s3, prefix)
            assert total == got["bytes_written"], (total, got["bytes_written"])
            report = verify_topic(s.s3, ArchiveConfig(name="bench", topics=[TOPIC], bucket=BUCKET, prefix=prefix),
                                  TOPIC, full=True)
            assert not report.failures and report.bytes_read == total, report.failures[:3]
            out["archive_s"].append(got["seconds"])
            out["hash_s"].append(hashed)
            out["verify_s"].append(report.seconds)
            out["verify_bytes"].append(report.bytes_read)
            out["bytes_written"] = total
            say(f"  tamper evidence round {r + 1}: archive {got['seconds']:.2f}s, hash {hashed:.3f}s "
                f"({hashed / got['seconds']:.1%}), verify {report.bytes_read / 1e6:.1f} MB in {report.seconds:.2f}s "
                f"({report.mb_per_s:.1f} MB/s)")
        except Exception as e:  # shown on the page
            out["errors"].append(f"{type(e).__name__}: {e}"[:2000])
            say(f"  tamper evidence round {r + 1} FAILED: {out['errors'][-1]}")
        wl.empty_prefix(s.s3, BUCKET, prefix)
    return out


def summary(out: dict[str, Any]) -> dict[str, Any]:
    """The figures of the page and the JSON, min / median / max."""
    from bench.stats import Summary

    res: dict[str, Any] = {"records": out["records"], "payload_mb": round(out["payload"] / 1e6, 1),
                           "bytes_written_mb": round(out["bytes_written"] / 1e6, 1), "errors": out["errors"],
                           "target": out["target"]}
    if out["archive_s"]:
        share = Summary.of([h / a for h, a in zip(out["hash_s"], out["archive_s"], strict=True)])
        mbps = Summary.of([b / 1e6 / s for b, s in zip(out["verify_bytes"], out["verify_s"], strict=True)])
        arch = Summary.of(out["archive_s"])
        res |= {"archive_s": [round(arch.min, 2), round(arch.median, 2), round(arch.max, 2)],
                "hash_share": [round(share.min, 4), round(share.median, 4), round(share.max, 4)],
                "verify_mb_per_s": [round(mbps.min, 1), round(mbps.median, 1), round(mbps.max, 1)]}
    return res


def section(r: dict[str, Any] | None, targets: dict[str, dict[str, Any]], json_out: dict[str, Any]) -> str:
    """The page's "Tamper evidence" text, its row of targets and its JSON."""
    if r is None:
        return "Not measured in this run."
    fig = summary(r)
    json_out["tamper_evidence"] = fig
    if "hash_share" not in fig:
        return "Failed: " + "; ".join(fig["errors"])[:2000]
    lo, med, hi = fig["hash_share"]
    targets["SHA-256 of every object / archive time"] = {
        "value_fmt": f"{lo:.1%} / {med:.1%} / {hi:.1%}", "target_fmt": f"≤ {fig['target']:.0%}",
        "verdict": "reached" if med <= fig["target"] else "NOT reached",
        "note": "hash seconds of the bytes written over archive seconds, per round"}
    v = fig["verify_mb_per_s"]
    return (f"The rounds' windows ({fig['records']:,} records, {fig['payload_mb']} MB of payload, "
            f"{fig['bytes_written_mb']} MB of parquet) archived in the warm session once per round; the SHA-256 the "
            "write tasks compute as they write, timed again on the same bytes in 64 KiB pieces, over the archive's "
            "seconds; then `verify --full` over that archive (every object read back from moto and hashed, every "
            "manifest link checked) in the orchestrating process.\n\n"
            "| figure | min / median / max |\n| --- | --- |\n"
            f"| archive seconds | {' / '.join(f'{x:.2f}' for x in fig['archive_s'])} |\n"
            f"| hash seconds / archive seconds | {lo:.2%} / {med:.2%} / {hi:.2%} (target ≤ {fig['target']:.0%}) |\n"
            f"| verify throughput, MB/s | {v[0]} / {v[1]} / {v[2]} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--window-records", type=int, default=50_000)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    with temporary_stack("s3a-bench-integrity-", BUCKET, remove=True) as (broker, moto, root):
        worker = None
        try:
            stack = {"bootstrap_servers": broker.bootstrap_servers, "s3_endpoint_url": moto.endpoint_url,
                     "bucket": BUCKET, "remote": None}
            kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers, timeout_s=30)
            n = wl.records_for_mb(args.mb)
            wl.create_topic(kafka, TOPIC)
            wl.produce(kafka, TOPIC, n)
            ends = kafka.offsets(TOPIC, "latest")
            per = n // PARTITIONS
            logs = Path(tempfile.mkdtemp(prefix="s3a-bench-integrity-logs-"))
            s = Setup(stack=stack, kafka=kafka, s3=local_s3_client(moto.endpoint_url), logs=logs, kept=logs,
                      moto_log=root / "moto" / "moto.log", records=n, payload=n * wl.record_bytes(), ends=ends,
                      windows=wl.windows_for(ends, min(args.window_records, per)), per_partition=per,
                      window_records=min(args.window_records, per))
            worker = SparkWorker(stack, logs / "spark-worker.log", logs / "spark-worker.kept.log")
            worker.call(cmd="archive", topic=TOPIC, prefix="warmup/", windows=[[0, 0, min(10_000, per)]])
            wl.empty_prefix(s.s3, BUCKET, "warmup/")
            fig = summary(time_tamper_evidence(s, worker, args.rounds))
            print(json.dumps(fig, indent=2))
            if args.json:
                args.json.write_text(json.dumps(fig, indent=2) + "\n")
        finally:
            if worker is not None:
                worker.stop()


if __name__ == "__main__":
    main()
