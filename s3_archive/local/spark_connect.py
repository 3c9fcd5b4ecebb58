"""A Spark Connect server from the venv's pyspark (`jars/spark-connect_2.13-*.jar` ships in it), on 127.0.0.1, with
the project's Kafka/S3A/Avro jars on its classpath: `SparkResource(remote="sc://127.0.0.1:<port>")` runs against it.

The server is the Spark driver of every client session: its S3A endpoint and credentials are its own (the
credentials through its environment, as a deployed server gets them from its role), and clients send only session
settings (docs/deployment.md, "Spark").
"""

from __future__ import annotations

import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from s3_archive.io.spark import SparkResource
from s3_archive.local.processes import ensure_port_free, free_port, spawn, stop_pid, wait_until
from s3_archive.local.spark_bundle import conf_dir, spark_class, spark_env

MAIN_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
# Client-only settings of SparkResource.spark_conf that a server must not take as its own.
_CLIENT_ONLY = ("spark.app.name", "spark.remote")


@dataclass
class SparkConnectServer:
    """`spark-submit --class SparkConnectServer`: in local mode (driver = executors, one JVM) by default, or the
    driver of a cluster's `master` (`worker_jars_dir`: where the workers have the jars)."""

    data_dir: Path
    port: int = 0
    master: str = "local[*]"
    worker_jars_dir: str | None = None
    driver_memory: str = "2g"
    s3_endpoint_url: str | None = None
    s3_region: str = "us-east-1"
    s3_path_style: bool = False
    env: dict[str, str] = field(default_factory=dict)  # e.g. AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY for S3A
    detached: bool = False  # outlive the process that starts it (`local up`); see processes.spawn
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.data_dir / "spark-connect.log"

    def server_conf(self) -> dict[str, str]:
        """The server's Spark settings: a SparkResource's for its master and S3 (without credentials), plus the
        gRPC binding."""
        resource = SparkResource(master=self.master, worker_jars_dir=self.worker_jars_dir,
                                 driver_memory=self.driver_memory,
                                 s3_endpoint_url=self.s3_endpoint_url, s3_region=self.s3_region,
                                 s3_path_style=self.s3_path_style)
        conf = {k: v for k, v in resource.spark_conf().items() if k not in _CLIENT_ONLY}
        return conf | {"spark.app.name": "s3-archive Spark Connect server",
                       "spark.connect.grpc.binding.address": "127.0.0.1",
                       "spark.connect.grpc.binding.port": str(self.port)}

    def start(self, timeout: float = 120.0) -> None:
        if self.port:
            ensure_port_free(self.port, "the Spark Connect server")
        else:
            self.port = free_port()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        conf = conf_dir(self.data_dir, self.log, self.server_conf())
        cmd = spark_class("org.apache.spark.deploy.SparkSubmit", "--class", MAIN_CLASS,
                          "--name", "s3-archive Spark Connect server")
        self.proc = spawn(cmd, self.data_dir / "spark-connect.out",
                          env=spark_env(conf, self.data_dir / "work") | self.env, detached=self.detached)
        try:
            wait_until(self._ready, timeout, self.proc, f"the Spark Connect server on {self.url}", self.log)
        except BaseException:
            self.stop()
            raise

    def _ready(self) -> bool:
        # The gRPC service binds its port only after the server's SparkSession is up.
        socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        return True

    def stop(self) -> None:
        if self.proc is not None:
            stop_pid(self.proc.pid)
            self.proc = None
