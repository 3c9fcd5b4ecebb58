"""Peer: Apache Flink 2.0.0 (jvm/bench-flink), a Flink SQL job Kafka → Parquet filesystem sink on `s3://`, keeping
key, value, headers, partition, offset and timestamp: the closest peer to our archive model.

One JVM runs the job in a local MiniCluster (bench/peers/FlinkSqlJob.java, compiled before the clock starts),
bounded at the topic's end offsets (`scan.bounded.mode = latest-offset`). The filesystem sink makes its files
visible at checkpoints (every `checkpoint_interval`) and at the end of the input, so the job's end is the time
until every record is visible; the finished files' row counts are checked, and their upload times give the
commits from which the steady rate is taken.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from bench.peers.common import (
    JavaProcess,
    PeerResult,
    PeerUnavailable,
    aws_env,
    jar_dir,
    java,
    log4j2_properties,
    steady_rate,
)
from bench.under_test import LOCAL_AWS, list_objects

JOB = Path(__file__).with_name("FlinkSqlJob.java")


def _rows(fs: Any, bucket: str, key: str) -> int:
    """Rows of one Parquet object, from its footer (ranged reads)."""
    with fs.open_input_file(f"{bucket}/{key}") as f:
        return pq.ParquetFile(f).metadata.num_rows


def run(*, bootstrap_servers: str, s3_endpoint_url: str, s3: Any, bucket: str, topic: str, records: int,
        workdir: Path, tag: str, checkpoint_interval: str = "5 s", parallelism: int = 2,
        timeout_s: float = 1800) -> PeerResult:
    """Archive the whole `topic` with the Flink SQL job into s3://bucket/flink-<tag>/."""
    jars = jar_dir("bench-flink")
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / f"flink-{tag}.log"
    (workdir / "flink-log4j2.properties").write_text(log4j2_properties(log, "WARN"))
    prefix = f"flink-{tag}/"
    classes = workdir / "classes"
    if not (classes / "FlinkSqlJob.class").exists():
        javac = subprocess.run([str(Path(java()).resolve().parent / "javac"), "-cp", f"{jars}/*", "-d", str(classes),
                                str(JOB)], capture_output=True, text=True)
        if javac.returncode != 0:
            raise PeerUnavailable(f"compiling {JOB.name} failed: {javac.stderr[-2000:]}")
    env = aws_env()
    out = workdir / f"flink-{tag}.out"
    cmd = [java(), "-Xmx1g", f"-Dlog4j2.configurationFile={workdir / 'flink-log4j2.properties'}",
           # Flink's own module opens (its flink-conf's env.java.opts.all), which its Kryo and RPC need on JDK 17
           "--add-opens=java.base/java.util=ALL-UNNAMED", "--add-opens=java.base/java.lang=ALL-UNNAMED",
           "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED", "--add-opens=java.base/java.io=ALL-UNNAMED",
           "--add-opens=java.base/java.nio=ALL-UNNAMED", "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
           "--add-opens=java.base/java.net=ALL-UNNAMED", "--add-opens=java.base/java.text=ALL-UNNAMED",
           "--add-opens=java.base/java.time=ALL-UNNAMED", "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
           "--add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED",
           "--add-opens=java.base/java.util.concurrent.locks=ALL-UNNAMED",
           "-cp", f"{classes}:{jars}/*", "FlinkSqlJob", bootstrap_servers, topic, f"s3://{bucket}/{prefix}", s3_endpoint_url,
           checkpoint_interval, str(parallelism)]
    t0, wall0 = time.monotonic(), time.time()
    proc = JavaProcess(cmd, out, env)
    try:
        while proc.alive():
            if time.monotonic() - t0 > timeout_s:
                raise PeerUnavailable(f"the Flink job did not finish in {timeout_s:.0f}s; see {out} and {log}")
            time.sleep(0.2)
        visible = time.monotonic() - t0
    finally:
        proc.stop()
    if proc.proc.returncode != 0:
        raise PeerUnavailable(f"the Flink job exited with {proc.proc.returncode}; {out}:\n{proc.tail()}")
    phases = {ln.split()[1]: int(ln.split()[2]) / 1000 - wall0
              for ln in out.read_text(errors="replace").splitlines() if ln.startswith("@@PHASE ")}
    # finished files only: in-progress part files are hidden (a leading dot)
    objs = [o for o in list_objects(s3, bucket, prefix) if not Path(o["Key"]).name.startswith((".", "_"))]
    fs = pafs.S3FileSystem(endpoint_override=s3_endpoint_url, scheme=s3_endpoint_url.split(":")[0],
                           access_key=LOCAL_AWS["AWS_ACCESS_KEY_ID"], secret_key=LOCAL_AWS["AWS_SECRET_ACCESS_KEY"],
                           region=LOCAL_AWS["AWS_REGION"])
    counted = [(o["LastModified"].timestamp() - wall0, _rows(fs, bucket, o["Key"])) for o in objs]
    total = sum(n for _, n in counted)
    if total != records:
        raise PeerUnavailable(f"the Flink job's finished files hold {total} rows, expected {records}")
    by_time: dict[float, int] = {}
    for t, n in counted:
        by_time[t] = by_time.get(t, 0) + n
    commits, acc = [], 0
    for t in sorted(by_time):
        acc += by_time[t]
        commits.append((t, acc))
    return PeerResult(records=total, visible_s=visible, commits=commits, steady_records_per_s=steady_rate(commits),
                      objects=len(objs), bytes_written=sum(o["Size"] for o in objs),
                      extra={"checkpoint_interval": checkpoint_interval, "parallelism": parallelism,
                             "phases_s": phases})
