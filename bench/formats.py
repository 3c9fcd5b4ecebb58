"""Every format (the page's "Every format"): the rounds' windows archived once per archive format in the warm Spark
worker, through the same asset, on the default read path (librdkafka) and then with read_path spark; format `bytes`
writes one object per record, so it archives `BYTES_FORMAT_RECORDS` records per partition. A format that fails is
shown on the page with its error."""

from __future__ import annotations

from typing import Any

from bench import workload as wl
from bench.common import Setup, SparkWorker, moto_requests, say
from bench.config import BUCKET, BYTES_FORMAT_RECORDS, TOPIC


def empty_archive(s3: Any, worker: SparkWorker, fmt: str, prefix: str) -> None:
    """The bench archive of `fmt` under `prefix` removed, so that the next run does the same work again: a table
    format's table dropped from its catalog first (bench.worker's drop_table), then every object under the prefix."""
    if fmt == "iceberg":
        try:
            worker.call(cmd="drop_table", topic=TOPIC, prefix=prefix, format=fmt)
        except Exception as e:  # the next run of the format then fails on the table, and the page shows why
            say(f"format {fmt}: its table could not be dropped: {type(e).__name__}: {str(e)[:500]}")
    wl.empty_prefix(s3, BUCKET, prefix)


def time_every_format(s: Setup, worker: SparkWorker, formats: list[str]) -> dict[str, dict[str, Any]]:
    """Per format: seconds, records, objects, bytes written, S3 requests (or its error)."""
    out_by_format: dict[str, dict[str, Any]] = {}
    for fmt in formats:
        ws = s.wlist if fmt != "bytes" else [[p, 0, min(BYTES_FORMAT_RECORDS, e)] for p, e in sorted(s.ends.items())]
        recs = sum(e - st for _, st, e in ws)
        before = moto_requests(s.moto_log)
        try:
            out = worker.call(cmd="format", topic=TOPIC, prefix=f"fmt-{fmt}/", windows=ws, format=fmt)
            assert out["records"] == recs, out
            out |= {"requests": moto_requests(s.moto_log) - before, "payload": recs * wl.record_bytes()}
            empty_archive(s.s3, worker, fmt, f"fmt-{fmt}/")
            old = worker.call(cmd="format", topic=TOPIC, prefix=f"fmt-{fmt}/", windows=ws, format=fmt,
                              read_path="spark")
            assert old["records"] == recs, old
            out["spark_seconds"] = old["seconds"]
            say(f"format {fmt}: {out['seconds']:.2f}s, {recs / out['seconds']:,.0f} rec/s, {out['objects']} "
                f"objects, {out['bytes_written'] / 1e6:.1f} MB written; read_path spark {old['seconds']:.2f}s")
        except Exception as e:  # shown on the page
            out = {"error": f"{type(e).__name__}: {e}"[:2000]}
            say(f"format {fmt} FAILED: {out['error']}")
        out_by_format[fmt] = out
        empty_archive(s.s3, worker, fmt, f"fmt-{fmt}/")
    return out_by_format
