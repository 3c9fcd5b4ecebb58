"""A single-node KRaft Apache Kafka broker run from the Maven jars, on 127.0.0.1."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from s3_archive.io.paths import jars
from s3_archive.local.processes import StackError, ensure_port_free, free_port, spawn, stop_pid, wait_until

_LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = file
"""


@dataclass
class KafkaBroker:
    """Formats storage with `kafka.tools.StorageTool`, then runs `kafka.Kafka` in combined broker+controller mode."""

    data_dir: Path
    port: int = 0
    controller_port: int = 0
    heap: str = "512m"
    log_level: str = "WARN"
    proc: subprocess.Popen | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.data_dir / "broker.log"

    def _java(self) -> str:
        java = shutil.which("java")
        if java is None:
            raise StackError("java not found on PATH; install a JDK 17 (e.g. apt-get install openjdk-17-jdk-headless)")
        return java

    def _write_config(self) -> Path:
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.data_dir / "logs"),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "group.initial.rebalance.delay.ms": "0",
            # Let tests see compaction and retention happen in seconds, not minutes.
            "log.cleaner.backoff.ms": "500",
            "log.retention.check.interval.ms": "1000",
            "log.segment.delete.delay.ms": "0",
            "message.max.bytes": str(16 * 1024 * 1024),
        }
        cfg = self.data_dir / "server.properties"
        cfg.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (self.data_dir / "log4j2.properties").write_text(_LOG4J2.format(log=self.log, level=self.log_level))
        return cfg

    def _cmd(self, main: str, *args: str) -> list[str]:
        classpath = os.pathsep.join(str(p) for p in jars("kafka-broker"))
        return [
            self._java(), f"-Xmx{self.heap}", "-XX:+UseG1GC", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
            "-cp", classpath, main, *args,
        ]

    def start(self, timeout: float = 90.0) -> None:
        if self.port:
            ensure_port_free(self.port, "the Kafka broker")
        else:
            self.port = free_port()
        if self.controller_port:
            ensure_port_free(self.controller_port, "the Kafka controller")
        else:
            self.controller_port = free_port()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cfg = self._write_config()
        if not (self.data_dir / "logs" / "meta.properties").exists():
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            fmt = subprocess.run(
                # `--cluster-id=ID`, not `-t ID`: an id starting with '-' (1 in 64) would parse as an option.
                self._cmd("kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "-c", str(cfg)),
                capture_output=True, text=True, timeout=120,
            )
            if fmt.returncode != 0:
                raise StackError(f"formatting Kafka storage in {self.data_dir} failed: {fmt.stderr.strip()[-500:]}")
        self.proc = spawn(self._cmd("kafka.Kafka", str(cfg)), self.data_dir / "broker.out")
        try:
            wait_until(self._ready, timeout, self.proc, f"the Kafka broker on {self.bootstrap_servers}", self.log)
        except BaseException:
            self.stop()
            raise

    def _ready(self) -> bool:
        import socket

        from confluent_kafka.admin import AdminClient

        # Cheap TCP probe first, so the Kafka client does not log a refusal on every try.
        socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "socket.timeout.ms": 2000})
        admin.list_topics(timeout=2)
        return True

    def stop(self) -> None:
        if self.proc is not None:
            stop_pid(self.proc.pid)
            self.proc = None
