"""Run overhead per Spark master, in fresh processes: local mode, Spark Connect (the server warm), and a standalone
cluster with the jars shipped (`spark.jars`) or on the worker's classpath (`SparkResource.worker_jars_dir`).

    PYTHONPATH=. flock /tmp/locks/heavy .venv/bin/python -m bench.spark_masters --repeats 3

Each run is a one-record window materialized with `dg.materialize` (commit included) first thing in a fresh
process, as a deployed run is; the session is started first and timed apart. Starts its own broker, moto server,
Connect server and cluster under a temporary directory and stops them at the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from types import SimpleNamespace

from confluent_kafka.admin import NewTopic

from s3_archive.config.archive import ArchiveConfig
from s3_archive.io.kafka import KafkaResource
from s3_archive.local.spark_cluster import SparkCluster
from s3_archive.local.spark_connect import SparkConnectServer
from s3_archive.local.stack import LOCAL_AWS, temporary_stack
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.integration.spark.runner import archive_job

BUCKET = "bench-spark"
TOPIC = "one"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--modes", default="local,connect,cluster_classpath,cluster_ship")
    args = ap.parse_args()
    modes = args.modes.split(",")
    creds = {k: LOCAL_AWS[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    with temporary_stack("s3a-bench-spark-", BUCKET, remove=True) as (broker, moto, root):
        kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers)
        admin = kafka.admin()  # kept referenced: a collected client cancels its pending futures
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
        producer = kafka.producer()
        producer.produce(TOPIC, key=b"k", value=b"v", partition=0)
        producer.flush(30)
        services = SimpleNamespace(bootstrap_servers=broker.bootstrap_servers, s3_endpoint_url=moto.endpoint_url,
                                   bucket=BUCKET)
        s3 = {"s3_endpoint_url": moto.endpoint_url, "s3_path_style": True,
              "s3_access_key_id": creds["AWS_ACCESS_KEY_ID"], "s3_secret_access_key": creds["AWS_SECRET_ACCESS_KEY"]}
        servers: dict[str, float] = {}
        connect = SparkConnectServer(root / "connect", s3_endpoint_url=moto.endpoint_url, s3_path_style=True,
                                     env=creds)
        cluster = SparkCluster(root / "cluster")
        try:
            spark: dict[str, dict] = {"local": s3}
            if "connect" in modes:
                t = time.monotonic()
                connect.start()
                servers["connect_server_start_s"] = time.monotonic() - t
                spark["connect"] = {"remote": connect.url}
            if any(m.startswith("cluster") for m in modes):
                t = time.monotonic()
                cluster.start()
                servers["cluster_start_s"] = time.monotonic() - t
                spark["cluster_classpath"] = {"master": cluster.master_url, "worker_jars_dir": cluster.jars_dir, **s3}
                spark["cluster_ship"] = {"master": cluster.master_url, **s3}
            figures: dict[str, list[dict]] = {m: [] for m in modes}
            for r in range(args.repeats + 1):  # round 0 warms the servers and the OS caches; not counted
                for m in modes:
                    cfg = ArchiveConfig(name="bench", topics=[TOPIC], bucket=BUCKET, prefix=f"{m}/{r}/")
                    t = time.monotonic()
                    out = archive_job(services, spark[m], cfg, TOPIC, [OffsetWindow(0, 0, 1)], session_first=True)
                    wall = time.monotonic() - t
                    assert out["success"], out
                    fig = {"session_s": out["session_s"], "run_s": out["run_s"], "import_s": out["import_s"],
                           "overhead_s": out["session_s"] + out["run_s"], "process_s": wall}
                    print(f"round {r}{' (warm-up)' if r == 0 else ''} {m}: " +
                          ", ".join(f"{k} {v:.2f}" for k, v in fig.items()), flush=True)
                    if r:
                        figures[m].append(fig)
        finally:
            connect.stop()
            cluster.stop()
    summary = {m: {k: statistics.median(f[k] for f in figs) for k in figs[0]} for m, figs in figures.items()}
    print(json.dumps({"servers": servers, "median": summary, "runs": figures}, indent=1))


if __name__ == "__main__":
    main()
