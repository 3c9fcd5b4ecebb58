"""The machine a benchmark ran on, and the other work that competed with it for the cores."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _ppid(pid: str) -> int:
    stat = _read(f"/proc/{pid}/stat")
    return int(stat.rsplit(")", 1)[1].split()[1]) if stat else 0


def other_work() -> str:
    """Processes that this benchmark did not start and that compete for the 2 cores (other workers' tests)."""
    me = os.getpid()
    procs = [d.name for d in Path("/proc").iterdir() if d.name.isdigit()]
    parent = {int(p): _ppid(p) for p in procs}

    def ours(pid: int) -> bool:
        for _ in range(64):
            if pid == me:
                return True
            if pid <= 1:
                return False
            pid = parent.get(pid, 0)
        return False

    counts = {"pytest": 0, "kafka.Kafka": 0, "org.apache.spark": 0, "moto.server": 0, "bench/": 0, "postgres": 0,
              "dagster": 0}
    for p in procs:
        if ours(int(p)):
            continue
        cmd = _read(f"/proc/{p}/cmdline").replace("\0", " ")
        for k in counts:
            if k in cmd:
                counts[k] += 1
    busy = {k: v for k, v in counts.items() if v}
    if not busy:
        return "no other test processes were seen running"
    return ("other work was running on the machine (processes not started by this benchmark: "
            + ", ".join(f"{v} × {k}" for k, v in busy.items()) + "); figures are noisier for it")


def heavy_lock(lock: str = "/tmp/locks/heavy") -> str:
    """Whether this process or one of its ancestors holds the machine's heavy-run lock (`flock`), from /proc/locks:
    a figure taken while holding it had no other heavy run (broker, Spark, benchmark) beside it."""
    try:
        inode = os.stat(lock).st_ino
    except OSError:
        return f"no {lock} on this machine"
    ancestors, pid = set(), os.getpid()
    for _ in range(64):
        ancestors.add(pid)
        if pid <= 1:
            break
        pid = _ppid(str(pid))
    for line in _read("/proc/locks").splitlines():
        f = line.split()
        if len(f) > 5 and f[1] == "FLOCK" and f[5].rsplit(":", 1)[-1] == str(inode) and int(f[4]) in ancestors:
            return f"held {lock} (flock) for the whole run: no other heavy run beside it"
    return f"did NOT hold {lock}: other heavy runs may have run beside it"


def machine() -> dict[str, Any]:
    cpu = next((ln.split(":", 1)[1].strip() for ln in _read("/proc/cpuinfo").splitlines()
                if ln.startswith("model name")), platform.processor() or "unknown")
    mem_kb = next((int(ln.split()[1]) for ln in _read("/proc/meminfo").splitlines() if ln.startswith("MemTotal")), 0)
    nproc = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    import confluent_kafka
    import dagster
    import pyarrow
    import pyspark

    from s3_archive.io.spark import SparkResource

    master = SparkResource().local_master()  # what the benchmark's sessions get from the default `local[*]`
    return {"cpu": cpu, "nproc": int(nproc or 0), "mem_gb": mem_kb / 1024 / 1024,
            "kernel": f"Linux {platform.release()}", "load_start": " ".join(_read("/proc/loadavg").split()[:3]),
            "other_work": other_work(), "heavy_lock": heavy_lock(),
            "software": f"Python {platform.python_version()}, {java}, pyspark {pyspark.__version__} (local[*] = {master}), "
                        f"dagster {dagster.__version__}, confluent-kafka {confluent_kafka.version()[0]} "
                        f"(librdkafka {confluent_kafka.libversion()[0]}), pyarrow {pyarrow.__version__}, "
                        "Kafka 4.1.1 broker (KRaft), moto server"}
