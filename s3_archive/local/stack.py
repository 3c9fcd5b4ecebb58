"""`s3-archive local up | down | status`: the broker and the moto server as background processes, and on
request PostgreSQL for a Dagster instance of the deployed shape (`--postgres`), a Spark Connect server
(`--spark-connect`), a Spark standalone master + worker (`--spark-cluster`) and a Schema Registry
(`--schema-registry`: Apicurio Registry, local/registry_server.py).

State (ports, PIDs) is kept in `<local dir>/stack.json`; `down` stops only the PIDs recorded there, and only if
their command line is still the one we started (a recycled PID is left alone). Every server keeps its data under
the local dir across `down` and `up` — the broker's log, moto's bucket (its request recording, replayed at start),
PostgreSQL's cluster — so a restarted stack is the stack that stopped; `down --purge` (or `up --fresh`) removes it
all. `up --kafka-security sasl_ssl` starts
the broker with a SASL_SSL listener only (SCRAM-SHA-512 user `s3-archive`, a local CA); its password is made once
and kept, like `stack.json` and `stack.env`, in files only their owner can read.
"""

from __future__ import annotations

import json
import secrets
import shlex
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3

from s3_archive.io.paths import default_local_dir, local_stack_dir
from s3_archive.local.kafka_broker import SCRAM, SECURITY, KafkaBroker
from s3_archive.local.moto_server import MotoServer
from s3_archive.local.postgres import DEFAULT_DATABASE, DEFAULT_USER, PostgresServer
from s3_archive.local.processes import StackError, pid_alive, stop_pid, write_private
from s3_archive.local.registry_server import MAIN_JAR as REGISTRY_JAR
from s3_archive.local.registry_server import SchemaRegistryServer
from s3_archive.local.spark_cluster import MASTER_CLASS, WORKER_CLASS, SparkCluster
from s3_archive.local.spark_connect import MAIN_CLASS as CONNECT_CLASS
from s3_archive.local.spark_connect import SparkConnectServer

# moto accepts any credentials; these are the local stack's, never real ones.
LOCAL_AWS = {"AWS_ACCESS_KEY_ID": "local-stack", "AWS_SECRET_ACCESS_KEY": "local-stack", "AWS_REGION": "us-east-1"}
DEFAULT_BUCKET = "s3-archive-local"
KAFKA_USER = "s3-archive"  # the client login of a sasl_ssl local broker
TAG_FILE = ".s3-archive-local"  # in every dir `up` made: `down --purge` removes no other dir


@dataclass
class StackState:
    bootstrap_servers: str
    s3_endpoint_url: str
    bucket: str
    broker_pid: int
    moto_pid: int
    kafka_security: str = "plaintext"
    kafka_password: str | None = None  # sasl_ssl: of KAFKA_USER
    kafka_ca_file: str | None = None  # sasl_ssl: the local CA (PEM)
    postgres_pid: int | None = None
    postgres_port: int | None = None
    spark_connect_url: str | None = None
    spark_connect_pid: int | None = None
    spark_master_url: str | None = None
    spark_master_pid: int | None = None
    spark_worker_pid: int | None = None
    spark_jars_dir: str | None = None  # the jars on the worker's classpath (SparkResource.worker_jars_dir)
    schema_registry_url: str | None = None
    schema_registry_pid: int | None = None


    def env(self) -> dict[str, str]:
        """The environment the project's resources read (defs/resources.py, docs/configuration.md); with
        PostgreSQL, what deploy/dagster.postgres.yaml reads except the password (in `postgres/password`).
        `S3_ARCHIVE_SPARK_MASTER`: the Connect server if there is one (it runs on the cluster when both are up),
        else the cluster's master."""
        kafka = {"S3_ARCHIVE_KAFKA_BOOTSTRAP_SERVERS": self.bootstrap_servers}
        if self.kafka_security == "sasl_ssl":
            kafka |= {"S3_ARCHIVE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "S3_ARCHIVE_KAFKA_SASL_MECHANISM": SCRAM,
                      "S3_ARCHIVE_KAFKA_SASL_USERNAME": KAFKA_USER,
                      "S3_ARCHIVE_KAFKA_SASL_PASSWORD": self.kafka_password or "",
                      "S3_ARCHIVE_KAFKA_SSL_CA_LOCATION": self.kafka_ca_file or ""}
        pg = {} if self.postgres_port is None else {
            "DAGSTER_PG_HOST": "127.0.0.1", "DAGSTER_PG_PORT": str(self.postgres_port),
            "DAGSTER_PG_USERNAME": DEFAULT_USER, "DAGSTER_PG_DB": DEFAULT_DATABASE}
        spark = {}
        if self.spark_connect_url:
            spark = {"S3_ARCHIVE_SPARK_MASTER": self.spark_connect_url}
        elif self.spark_master_url:
            spark = {"S3_ARCHIVE_SPARK_MASTER": self.spark_master_url,
                     "S3_ARCHIVE_SPARK_WORKER_JARS_DIR": self.spark_jars_dir or ""}
        registry = {"S3_ARCHIVE_SCHEMA_REGISTRY_URL": self.schema_registry_url} if self.schema_registry_url else {}
        return {
            **kafka,
            **registry,
            "S3_ARCHIVE_S3_ENDPOINT_URL": self.s3_endpoint_url,
            "S3_ARCHIVE_BUCKET": self.bucket,
            **spark,
            **LOCAL_AWS,
            **pg,
        }


def _kafka_password(root: Path) -> str:
    """The local client user's password: made once per stack directory (the broker keeps its SCRAM users)."""
    f = root / "kafka-user.password"
    if not f.exists():
        write_private(f, secrets.token_urlsafe(18) + "\n")
    return f.read_text().strip()


def _state_file(root: Path) -> Path:
    return root / "stack.json"


def moto_recording(root: Path) -> Path:
    """moto's request recording: the local bucket's state across restarts (local/moto_server.py)."""
    return root / "moto" / "recording.jsonl"


def read_state(root: Path | None = None) -> StackState | None:
    f = _state_file(root or local_stack_dir())
    if not f.exists():
        return None
    return StackState(**json.loads(f.read_text()))


def local_s3_client(endpoint_url: str) -> Any:
    """A boto3 S3 client on a local moto server, with the local stack's (fake) credentials."""
    return boto3.client("s3", endpoint_url=endpoint_url, region_name=LOCAL_AWS["AWS_REGION"],
                        aws_access_key_id=LOCAL_AWS["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=LOCAL_AWS["AWS_SECRET_ACCESS_KEY"])


def create_bucket(endpoint_url: str, bucket: str) -> None:
    s3 = local_s3_client(endpoint_url)
    try:
        s3.create_bucket(Bucket=bucket)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass


@contextmanager
def temporary_stack(prefix: str, bucket: str, broker_heap: str = "1g", remove: bool = False,
                    ) -> Iterator[tuple[KafkaBroker, MotoServer, Path]]:
    """A broker and a moto server (with `bucket`) under a new temp directory, stopped on exit (and the directory
    removed with `remove`): for benchmarks and the test suite's xdist runs, which must not share the `local up`
    stack."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    broker, moto = KafkaBroker(root / "kafka", heap=broker_heap), MotoServer(root / "moto")
    broker.start()
    try:
        moto.start()
        create_bucket(moto.endpoint_url, bucket)
        yield broker, moto, root
    finally:
        moto.stop()
        broker.stop()
        if remove:
            shutil.rmtree(root, ignore_errors=True)


@dataclass(frozen=True)
class StackOptions:
    """What `up` starts (the flags of `s3-archive local up`): the broker and moto always, on their ports (0: a free
    one) with `bucket`; `fresh`: the local data wiped first; `kafka_security`: plaintext or sasl_ssl, None: as the
    local data was made, else plaintext; and on request PostgreSQL, a Spark cluster, a Spark Connect server and a
    Schema Registry."""

    bucket: str = DEFAULT_BUCKET
    fresh: bool = False
    kafka_port: int = 0
    s3_port: int = 0
    kafka_security: str | None = None
    postgres: bool = False
    spark_connect: bool = False
    spark_connect_port: int = 0
    spark_cluster: bool = False
    spark_master_port: int = 0
    schema_registry: bool = False
    schema_registry_port: int = 0


def up(root: Path | None = None, options: StackOptions = StackOptions()) -> StackState:
    """Start the stack, or what it lacks of what is asked if it runs already, and record it."""
    kafka_security = options.kafka_security
    if kafka_security is not None and kafka_security not in SECURITY:
        raise StackError(f"--kafka-security {kafka_security!r} is not supported; allowed: {', '.join(SECURITY)}")
    root = root or local_stack_dir()
    state = read_state(root)
    if state is not None and not _running(state):
        down(root)  # half-dead stack from an earlier session: clear it before starting anew
        state = None
    if state is not None and kafka_security not in (None, state.kafka_security):
        raise StackError(f"the local stack runs with Kafka security {state.kafka_security}; run `s3-archive "
                         f"local down` first, then `up --kafka-security {kafka_security}`")
    if state is None:
        state = _start(root, options)
    if options.postgres and state.postgres_pid is None:
        pg = PostgresServer(root / "postgres", detached=True)
        pg.start()
        state.postgres_pid, state.postgres_port = pg.proc.pid, pg.port
        _save(root, state)
    if options.schema_registry and state.schema_registry_url is None:
        registry = SchemaRegistryServer(root / "schema-registry", port=options.schema_registry_port, detached=True,
                                        persistent=True)
        registry.start()
        state.schema_registry_url, state.schema_registry_pid = registry.url, registry.proc.pid
        _save(root, state)
    if options.spark_cluster and state.spark_master_url is None:
        # The worker's environment holds the S3 keys of its executors' default chain (Iceberg's S3 client), as a
        # deployed worker's role does.
        cluster = SparkCluster(root / "spark-cluster", port=options.spark_master_port, detached=True,
                               env={k: LOCAL_AWS[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")})
        cluster.start()
        state.spark_master_url, state.spark_jars_dir = cluster.master_url, cluster.worker_jars_dirs
        state.spark_master_pid, state.spark_worker_pid = cluster.master_proc.pid, cluster.worker_proc.pid
        _save(root, state)
    if options.spark_connect and state.spark_connect_url is None:
        # On the cluster when there is one (executors in their own JVMs), else in local mode.
        server = SparkConnectServer(root / "spark-connect", port=options.spark_connect_port, detached=True,
                                    master=state.spark_master_url or "local[*]",
                                    worker_jars_dir=state.spark_jars_dir, s3_endpoint_url=state.s3_endpoint_url,
                                    s3_region=LOCAL_AWS["AWS_REGION"], s3_path_style=True,
                                    env={k: LOCAL_AWS[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")})
        server.start()
        state.spark_connect_url, state.spark_connect_pid = server.url, server.proc.pid
        _save(root, state)
    return state


def _start(root: Path, options: StackOptions) -> StackState:
    """The broker and moto (with the bucket) of a stack that does not run, recorded."""
    if options.fresh:
        _remove(root)
    root.mkdir(parents=True, exist_ok=True)
    (root / TAG_FILE).touch()
    security = options.kafka_security or KafkaBroker.formatted_security(root / "kafka") or "plaintext"
    password = _kafka_password(root) if security == "sasl_ssl" else None
    # `up` returns and the stack stays: every server is detached from this process.
    broker = KafkaBroker(root / "kafka", port=options.kafka_port, security=security,
                         users={KAFKA_USER: password} if password else {}, detached=True)
    moto = MotoServer(root / "moto", port=options.s3_port, detached=True, recording=moto_recording(root))
    broker.start()
    try:
        moto.start()
        create_bucket(moto.endpoint_url, options.bucket)
    except BaseException:
        broker.stop()
        moto.stop()
        raise
    state = StackState(broker.bootstrap_servers, moto.endpoint_url, options.bucket, broker.proc.pid, moto.proc.pid,
                       security, password, str(broker.ca_file) if broker.secured else None)
    _save(root, state)
    return state


def _save(root: Path, state: StackState) -> None:
    write_private(_state_file(root), json.dumps(state.__dict__, indent=2))
    # The database password stays in its file (mode 0600): the env file reads it when sourced.
    pg = PostgresServer(root / "postgres")
    secret = (f'export DAGSTER_PG_PASSWORD="$(cat {shlex.quote(str(pg.password_file))})"\n'
              if state.postgres_pid is not None else "")
    write_private(root / "stack.env",
                  "".join(f"export {k}={shlex.quote(v)}\n" for k, v in state.env().items()) + secret)


def _ours(pid: int, marker: str) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return marker in cmdline


_MARKERS = {"broker_pid": "kafka.Kafka", "moto_pid": "moto.server", "postgres_pid": "postgres",
            "spark_master_pid": MASTER_CLASS, "spark_worker_pid": WORKER_CLASS, "spark_connect_pid": CONNECT_CLASS,
            "schema_registry_pid": REGISTRY_JAR}


def _recorded(state: StackState) -> list[tuple[str, int, str]]:
    """(key, pid, marker) of every process the state records (PostgreSQL and Spark only when started)."""
    return [(k, getattr(state, k), m) for k, m in _MARKERS.items() if getattr(state, k) is not None]


def _running(state: StackState) -> bool:
    return all(pid_alive(pid) and _ours(pid, m) for _, pid, m in _recorded(state))


def down(root: Path | None = None, purge: bool = False) -> list[str]:
    """Stop what `up` started; with `purge`, then remove the local dir: every server's data, the demo's Dagster
    instance and topic state, the local CA and passwords."""
    root = root or local_stack_dir()
    state = read_state(root)
    stopped: list[str] = []
    for _, pid, marker in reversed(_recorded(state) if state else []):  # Spark first: it uses the broker and moto
        if pid_alive(pid) and _ours(pid, marker):
            stop_pid(pid)
            stopped.append(f"{marker} (pid {pid})")
    _state_file(root).unlink(missing_ok=True)
    if purge:
        _remove(root)
    return stopped


def _remove(root: Path) -> None:
    """Remove the local dir, if `up` made it (a mistaken $S3_ARCHIVE_LOCAL_DIR must not cost a user a folder)."""
    if not root.exists():
        return
    if not (root / TAG_FILE).exists() and root != default_local_dir():
        raise StackError(f"{root} was not made by `s3-archive local up` (there is no {TAG_FILE} in it); "
                         "not removing it")
    shutil.rmtree(root)


def status(root: Path | None = None) -> str:
    state = read_state(root)
    if state is None:
        return "local stack: not running"
    lines = []
    for _, pid, marker in _recorded(state):
        alive = pid_alive(pid) and _ours(pid, marker)
        lines.append(f"{marker}: {'running' if alive else 'STOPPED'} (pid {pid})")
    lines.append(f"kafka bootstrap servers: {state.bootstrap_servers} ({state.kafka_security}"
                 + (f", user {KAFKA_USER!r}, CA {state.kafka_ca_file})" if state.kafka_security == "sasl_ssl" else ")"))
    lines.append(f"s3 endpoint: {state.s3_endpoint_url}  bucket: {state.bucket}")
    if state.postgres_port is not None:
        lines.append(f"postgres: 127.0.0.1:{state.postgres_port} (Dagster instance: deploy/dagster.postgres.yaml)")
    if state.spark_master_url:
        lines.append(f"spark master: {state.spark_master_url}  (worker jars: {state.spark_jars_dir})")
    if state.spark_connect_url:
        lines.append(f"spark connect: {state.spark_connect_url}")
    if state.schema_registry_url:
        lines.append(f"schema registry: {state.schema_registry_url}")
    return "\n".join(lines)


__all__ = ["StackError", "StackOptions", "StackState", "up", "down", "status", "read_state", "create_bucket",
           "LOCAL_AWS"]
