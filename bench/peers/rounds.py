"""The peers in `make bench`'s rounds: each selected peer archives the whole workload once per round, right after the
other contenders of that round (bench/throughput.py). A peer that fails is reported on the page with its error and
not run again."""

from __future__ import annotations

import traceback
from typing import Any

from bench import workload as wl
from bench.common import SparkWorker, say
from bench.config import BUCKET, TOPIC
from bench.peers import connect_iceberg, flink, spark_streaming
from bench.peers.common import PeerResult

# where each peer writes in the bucket, per round: <prefix>-r<round>/
PREFIXES = {"connect_iceberg": "iceberg", "flink": "flink", "spark_streaming": "streaming"}


class Peers:
    """Runs each selected peer once per round; a peer that fails is reported with its error and not run again."""

    def __init__(self, names: list[str], ctx: dict[str, Any]) -> None:
        self.names = names
        self.ctx = ctx
        self.results: dict[str, list[PeerResult]] = {n: [] for n in names}
        self.failed: dict[str, str] = {}

    def run_round(self, r: int, worker: SparkWorker) -> None:
        c = self.ctx
        for name in self.names:
            if name in self.failed:
                continue
            tag = f"r{r}"
            try:
                if name == "spark_streaming":
                    res = spark_streaming.run(worker, topic=TOPIC, records=c["records"], tag=tag)
                else:
                    mod = {"connect_iceberg": connect_iceberg, "flink": flink}[name]
                    res = mod.run(bootstrap_servers=c["bootstrap_servers"], s3_endpoint_url=c["s3_endpoint_url"],
                                  s3=c["s3"], bucket=BUCKET, topic=TOPIC, records=c["records"],
                                  workdir=c["workdir"] / name, tag=tag)
                self.results[name].append(res)
                steady = (f"{res.steady_records_per_s:,.0f} rec/s steady"
                          if res.steady_records_per_s else "steady rate: fewer than two commits")
                say(f"  peer {name}: every record visible after {res.visible_s:.1f}s; {steady}; "
                    f"{len(res.commits)} commits")
            except Exception as e:  # reported on the page with its error, never replaced by a guess
                self.failed[name] = f"{type(e).__name__}: {e}"
                say(f"  peer {name} FAILED (not run again): {self.failed[name][:2000]}")
                c["workdir"].mkdir(parents=True, exist_ok=True)
                (c["workdir"] / f"{name}-error.txt").write_text(traceback.format_exc())
            finally:
                wl.empty_prefix(c["s3"], BUCKET, f"{PREFIXES[name]}-{tag}/")
