"""A single-node KRaft Apache Kafka broker run from the Maven jars, on 127.0.0.1: PLAINTEXT, or SASL_SSL with
SCRAM-SHA-512 users (created when the storage is formatted) and a keystore signed by a local CA (local/tls.py).

Secrets never reach a command line: the format step's `--add-scram` arguments are read from a 0600 argument file
(`java @file`), and the broker's keystore password and its own SCRAM login are in its 0600 properties file.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from s3_archive.io.kafka import jaas_config
from s3_archive.io.paths import jars
from s3_archive.local.processes import (
    StackError,
    ensure_port_free,
    free_port,
    spawn,
    stop_pid,
    wait_until,
    write_private,
)
from s3_archive.local.tls import server_tls

SECURITY = ("plaintext", "sasl_ssl")
SCRAM = "SCRAM-SHA-512"
BROKER_USER = "broker"  # the broker's own SCRAM login (inter-broker listener); clients get users of their own

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


def _argfile_quote(arg: str) -> str:
    """One argument of a `java @file`: double-quoted, with backslash escapes (the launcher's own syntax)."""
    escaped = (arg.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r"))
    return f'"{escaped}"'


def _properties_escape(value: str) -> str:
    # java.util.Properties: a backslash starts an escape, so a literal one is doubled.
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


@dataclass
class KafkaBroker:
    """Formats storage with `kafka.tools.StorageTool`, then runs `kafka.Kafka` in combined broker+controller mode.

    `security="sasl_ssl"`: the only client listener is SASL_SSL (SCRAM-SHA-512, TLS with a certificate for
    127.0.0.1 signed by the local CA at `ca_file`); `users` (name -> password) are created at format time, so they
    exist from the first start (names and passwords may hold spaces, quotes and backslashes, but no comma: the
    format tool splits on it)."""

    data_dir: Path
    port: int = 0
    controller_port: int = 0
    heap: str = "512m"
    log_level: str = "WARN"
    security: str = "plaintext"
    users: dict[str, str] = field(default_factory=dict)
    detached: bool = False  # outlive the process that starts it (`local up`); see processes.spawn
    proc: subprocess.Popen | None = None

    def __post_init__(self) -> None:
        if self.security not in SECURITY:
            raise StackError(f"Kafka security {self.security!r} is not supported; allowed: {', '.join(SECURITY)}")
        bad = [name for name, pw in self.users.items() if "," in name or "," in pw or not name]
        if bad:
            raise StackError(f"SCRAM user names and passwords must be non-empty and hold no ',' (the storage format "
                             f"tool splits on it); refused users: {', '.join(map(repr, bad))}")

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def secured(self) -> bool:
        return self.security == "sasl_ssl"

    @property
    def ca_file(self) -> Path:
        """The CA certificate (PEM) clients verify the broker with (sasl_ssl only)."""
        return self.data_dir / "tls" / "ca.pem"

    def client_config(self, user: str | None = None) -> dict[str, Any]:
        """librdkafka settings for a client of this broker; with sasl_ssl, as `user` (default: the broker's own)."""
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers}
        if self.secured:
            name = user or BROKER_USER
            password = self._broker_secrets()["password"] if name == BROKER_USER else self.users[name]
            conf |= {"security.protocol": "SASL_SSL", "sasl.mechanism": SCRAM, "sasl.username": name,
                     "sasl.password": password, "ssl.ca.location": str(self.ca_file)}
        return conf

    @staticmethod
    def formatted_security(data_dir: Path) -> str | None:
        """The security the storage in `data_dir` was formatted for; None: not formatted yet."""
        f = data_dir / "formatted.json"
        return json.loads(f.read_text())["security"] if f.exists() else None

    def _check_formatted(self) -> None:
        """A formatted storage keeps its SCRAM users: starting it with other security, or new users, cannot work."""
        f = self.data_dir / "formatted.json"
        done = json.loads(f.read_text()) if f.exists() else {"security": "plaintext", "users": []}
        missing = sorted(set(self.users) - set(done["users"]))
        if done["security"] != self.security or missing:
            why = (f"was formatted for {done['security']}" if done["security"] != self.security
                   else f"has no SCRAM user {', '.join(map(repr, missing))}")
            raise StackError(f"the Kafka storage in {self.data_dir} {why}; start it as it was, or start fresh "
                             "(`s3-archive local up --fresh`, which deletes the local data)")

    def _broker_secrets(self) -> dict[str, str]:
        """The broker's own SCRAM password, made once per data directory (a restart must log in with it)."""
        f = self.data_dir / "broker-secrets.json"
        if not f.exists():
            write_private(f, json.dumps({"password": secrets.token_hex(16)}))
        return json.loads(f.read_text())

    @property
    def log(self) -> Path:
        return self.data_dir / "broker.log"

    def _java(self) -> str:
        java = shutil.which("java")
        if java is None:
            raise StackError("java not found on PATH; install a JDK 17 (e.g. apt-get install openjdk-17-jdk-headless)")
        return java

    def _listener_props(self) -> dict[str, str]:
        name = "SASL_SSL" if self.secured else "PLAINTEXT"
        props = {
            "listeners": f"{name}://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"{name}://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": f"CONTROLLER:PLAINTEXT,{name}:{name}",
            "inter.broker.listener.name": name,
        }
        if self.secured:
            tls = server_tls(self.data_dir / "tls")
            login = jaas_config(SCRAM, BROKER_USER, self._broker_secrets()["password"])
            props |= {
                "sasl.enabled.mechanisms": SCRAM,
                "sasl.mechanism.inter.broker.protocol": SCRAM,
                f"listener.name.sasl_ssl.{SCRAM.lower()}.sasl.jaas.config": login,
                "ssl.keystore.type": "PKCS12",
                "ssl.keystore.location": str(tls.keystore),
                "ssl.keystore.password": tls.password,
                "ssl.key.password": tls.password,
                # The broker checks its settings with a client engine of its own (and logs in to itself).
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(tls.ca_pem),
                "ssl.client.auth": "none",
            }
        return props

    def _write_config(self) -> Path:
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            **self._listener_props(),
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
        write_private(cfg, "".join(f"{k}={_properties_escape(v)}\n" for k, v in props.items()))
        (self.data_dir / "log4j2.properties").write_text(_LOG4J2.format(log=self.log, level=self.log_level))
        return cfg

    def _cmd(self, main: str, *args: str) -> list[str]:
        classpath = os.pathsep.join(str(p) for p in jars("kafka-broker"))
        return [
            self._java(), f"-Xmx{self.heap}", "-XX:+UseG1GC", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
            "-cp", classpath, main, *args,
        ]

    def _format(self, cfg: Path) -> None:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        # `--cluster-id=ID`, not `-t ID`: an id starting with '-' (1 in 64) would parse as an option.
        cmd = self._cmd("kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "-c", str(cfg))
        passwords = []
        if self.secured:
            users = {BROKER_USER: self._broker_secrets()["password"], **self.users}
            for name, password in users.items():
                cmd += ["--add-scram", f"{SCRAM}=[name={name},password={password}]"]
            passwords = list(users.values())
        # The java launcher reads everything after the executable from the file, so no password is in argv.
        argfile = self.data_dir / "format.args"
        write_private(argfile, "\n".join(_argfile_quote(a) for a in cmd[1:]) + "\n")
        try:
            fmt = subprocess.run([cmd[0], f"@{argfile}"], capture_output=True, text=True, timeout=120)
        finally:
            argfile.unlink(missing_ok=True)
        if fmt.returncode != 0:
            err = fmt.stderr.strip()[-500:]
            for p in passwords:
                err = err.replace(p, "***")
            raise StackError(f"formatting Kafka storage in {self.data_dir} failed: {err}")
        (self.data_dir / "formatted.json").write_text(json.dumps({"security": self.security,
                                                                 "users": sorted(self.users)}))

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
            self._format(cfg)
        else:
            self._check_formatted()
        self.proc = spawn(self._cmd("kafka.Kafka", str(cfg)), self.data_dir / "broker.out", detached=self.detached)
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
        admin = AdminClient({**self.client_config(), "socket.timeout.ms": 2000})
        admin.list_topics(timeout=2)
        return True

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def stop(self) -> None:
        """SIGTERM (a controlled shutdown), then SIGKILL if it lingers. `start()` again restarts it on the same
        ports with the same storage and log files (the broker outages of the reliability tests)."""
        if self.proc is not None:
            stop_pid(self.proc.pid)
            self.proc = None
