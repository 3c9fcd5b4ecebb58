"""A Spark standalone cluster from the venv's pyspark: one master and one worker (`spark-class
org.apache.spark.deploy.master.Master` / `...worker.Worker`) on 127.0.0.1. A session with
`SparkResource(master=cluster.master_url)` gets executors in their own JVMs, launched by the worker.

The worker's machine has the project's jars at `jars_dir` (here the jar cache itself), so a session can put them on
the executors' classpath (`SparkResource.worker_jars_dir`) instead of shipping them (docs/deployment.md, "Spark");
`worker_jars_dirs` adds Iceberg's runtime when it was fetched (`format: iceberg` writes its data files from the
executors). The worker's environment (`env`, e.g. AWS keys) is its executors' too: what Iceberg's S3 client takes
through the AWS SDK's default chain, as a deployed worker takes its role's.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from s3_archive.io import paths
from s3_archive.local.processes import ensure_port_free, free_port, spawn, stop_pid, wait_until
from s3_archive.local.spark_bundle import conf_dir, spark_class, spark_env

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


@dataclass
class SparkCluster:
    """A standalone master and one worker with `cores` cores and `memory` for its executors."""

    data_dir: Path
    port: int = 0
    cores: int = 2
    memory: str = "2g"
    daemon_memory: str = "256m"  # the master's and the worker's own heap; executors get `memory`
    master_proc: subprocess.Popen | None = None
    worker_proc: subprocess.Popen | None = None
    webui_port: int = 0
    env: dict[str, str] = field(default_factory=dict)  # the worker's (and its executors') extra environment
    detached: bool = False  # outlive the process that starts it (`local up`); see processes.spawn

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def jars_dir(self) -> str:
        """Where the worker's machine keeps the project's jars (for SparkResource.worker_jars_dir)."""
        return str(paths.jar_dir("spark"))

    @property
    def worker_jars_dirs(self) -> str:
        """`jars_dir`, and the iceberg group's directory when it was fetched, ':'-separated (for
        SparkResource.worker_jars_dir): executors of `format: iceberg` need Iceberg's runtime."""
        dirs = [self.jars_dir] + ([str(paths.jar_dir("iceberg"))] if paths.optional_jars("iceberg") else [])
        return os.pathsep.join(dirs)

    @property
    def log(self) -> Path:
        return self.data_dir / "spark-cluster.log"

    def start(self, timeout: float = 120.0) -> None:
        if self.port:
            ensure_port_free(self.port, "the Spark master")
        else:
            self.port = free_port()
        self.webui_port = free_port()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        work = self.data_dir / "work"
        work.mkdir(exist_ok=True)
        env = spark_env(conf_dir(self.data_dir, self.log), self.data_dir) | {
            "SPARK_DAEMON_MEMORY": self.daemon_memory,
            # The worker deletes the directories of finished applications (jars, logs) after an hour.
            "SPARK_WORKER_OPTS": "-Dspark.worker.cleanup.enabled=true -Dspark.worker.cleanup.appDataTtl=3600",
        }
        what = f"the Spark master on {self.master_url}"
        try:
            self.master_proc = spawn(spark_class(MASTER_CLASS, "--host", "127.0.0.1", "--port", str(self.port),
                                                 "--webui-port", str(self.webui_port)),
                                     self.data_dir / "master.out", env=env, detached=self.detached)
            wait_until(lambda: self._status() is not None, timeout, self.master_proc, what, self.log)
            self.worker_proc = spawn(spark_class(WORKER_CLASS, "--host", "127.0.0.1", "--port", str(free_port()),
                                                 "--webui-port", str(free_port()), "--cores", str(self.cores),
                                                 "--memory", self.memory, "--work-dir", str(work), self.master_url),
                                     self.data_dir / "worker.out", env=env | self.env,
                                     detached=self.detached)
            wait_until(lambda: self._alive_workers() >= 1, timeout, self.worker_proc,
                       f"the Spark worker of {self.master_url}", self.log)
        except BaseException:
            self.stop()
            raise

    def _status(self) -> dict | None:
        """The master's state (its web UI's JSON: workers, applications)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.webui_port}/json/", timeout=2) as r:
            return json.load(r)

    def _alive_workers(self) -> int:
        status = self._status() or {}
        return sum(1 for w in status.get("workers", []) if w.get("state") == "ALIVE")

    def stop(self) -> None:
        for attr in ("worker_proc", "master_proc"):
            proc = getattr(self, attr)
            if proc is not None:
                stop_pid(proc.pid)
                setattr(self, attr, None)
