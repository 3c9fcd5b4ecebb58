"""Session-scoped real services: one Kafka broker (from the Maven jars), one moto server, one SparkSession; and,
started only by the tests that ask for them, one SASL_SSL broker with one HTTPS moto server (`secure_services`, for
the tests of secured connections), one PostgreSQL server, Schema Registries (Apicurio; `registry_server`, and a
second one, `target_registry_server`, for restores into another registry), and versitygw, a second real S3 server
(`store`: the commit protocol's tests run against moto and against it).

Integration tests share them and isolate themselves by topic name, S3 prefix and database. On pytest-xdist
workers (`make test`), the broker and moto server are still one of each for the whole run, and each other server
is started by one worker: `workers.py`.

A test's tier is its folder, declared here once (`TIERS`): `unit/`, `integration/` and `e2e/` mark their tests
with the marker of the same name (`make test-unit` = `pytest -m unit`), and `integration/reliability/` (faults,
outages and races against the real stack) adds `reliability`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import boto3
import pytest

from s3_archive.io.kafka import KafkaResource
from s3_archive.io.s3_resource import S3Resource
from s3_archive.io.spark import SparkResource
from s3_archive.local.fault_proxy import FaultProxy
from s3_archive.local.kafka_broker import SCRAM, KafkaBroker
from s3_archive.local.moto_server import MotoServer
from s3_archive.local.postgres import PostgresServer
from s3_archive.local.processes import write_private
from s3_archive.local.registry_server import SchemaRegistryServer
from s3_archive.local.stack import create_bucket
from s3_archive.local.tls import server_tls
from s3_archive.local.versitygw import VersityGateway
from s3_archive_tests import workers
from s3_archive_tests.credentials import TEST_AWS

BUCKET = "s3-archive-test"
LOCKED_BUCKET = "s3-archive-test-locked"  # created with S3 Object Lock (moto_locked_store)
SECURE_BUCKET = "s3-archive-secure"
# A SCRAM user whose name and password hold quotes, spaces and backslashes: every client (librdkafka, and Spark's
# Java client through its JAAS config) must pass them through unchanged.
SECURE_USER = 'arch "iver" \\ one'
SECURE_S3_KEY_ID = "secure-access-key"

TESTS = Path(__file__).parent
# Folder under s3_archive_tests/ -> the markers of its tests (the longest matching folder wins).
TIERS = {("unit",): ("unit",), ("integration",): ("integration",), ("e2e",): ("e2e",),
         ("integration", "reliability"): ("integration", "reliability")}


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The locked bucket's commit is the same on both read paths: it runs on one (librdkafka), to keep the suite short.
    twice = [i for i in items if getattr(i, "callspec", None) is not None
             and str(i.callspec.params.get("store")).endswith("-locked") and i.callspec.params.get("read_path") == "spark"]
    if twice:
        config.hook.pytest_deselected(items=twice)
        items[:] = [i for i in items if i not in twice]
    for item in items:
        parts = item.path.relative_to(TESTS).parts
        folder = max((f for f in TIERS if parts[:len(f)] == f), key=len, default=None)
        if folder is None:
            raise pytest.UsageError(f"{item.nodeid}: a test lives in a tier folder ({', '.join('/'.join(f) for f in TIERS)})")
        for name in TIERS[folder]:
            item.add_marker(name)
    if (shared := workers.shared_stack(config)) is not None:
        workers.write_groups(Path(shared["dir"]), workers.groups(items, TESTS))


def pytest_sessionstart(session: pytest.Session) -> None:
    if workers.is_controller(session.config):
        workers.start_shared_stack(session, BUCKET)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    workers.hand_to_worker(node)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    return workers.scheduler(config, log)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item):
    """On xdist workers, a test marked `alone` runs with no test of the other worker beside it: the turn covers
    its setup and teardown, so also the module and session fixtures they start or stop."""
    shared = workers.shared_stack(item.config)
    if shared is None:
        return (yield)
    with workers.turn(Path(shared["dir"]), alone=item.get_closest_marker("alone") is not None):
        return (yield)


@dataclass
class Services:
    bootstrap_servers: str
    s3_endpoint_url: str
    bucket: str
    data_dir: Path

    def env(self) -> dict[str, str]:
        return {"S3_ARCHIVE_KAFKA_BOOTSTRAP_SERVERS": self.bootstrap_servers,
                "S3_ARCHIVE_S3_ENDPOINT_URL": self.s3_endpoint_url, "S3_ARCHIVE_BUCKET": self.bucket, **TEST_AWS}


@pytest.fixture(scope="session")
def services(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    root = tmp_path_factory.mktemp("stack")  # on a worker, its own: for the servers it starts itself
    if (shared := workers.shared_stack(request.config)) is not None:
        yield Services(shared["bootstrap_servers"], shared["s3_endpoint_url"], BUCKET, root)
        return
    broker = KafkaBroker(root / "kafka")
    moto = MotoServer(root / "moto")
    broker.start()
    try:
        moto.start()
        create_bucket(moto.endpoint_url, BUCKET)
        yield Services(broker.bootstrap_servers, moto.endpoint_url, BUCKET, root)
    finally:
        moto.stop()
        broker.stop()


@pytest.fixture(scope="session")
def fault_proxy(services: Services) -> Iterator[FaultProxy]:
    """The S3 fault proxy in front of the session's moto server (no faults until a test sets rules)."""
    proxy = FaultProxy(services.data_dir / "fault-proxy", services.s3_endpoint_url)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()


@pytest.fixture(scope="session")
def outage_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A plaintext broker of its own for the tests that stop, freeze or restart it (reliability tier): the
    session's shared broker is never touched. Started only by the tests that ask for it, stopped by PID."""
    broker = KafkaBroker(tmp_path_factory.mktemp("outage") / "kafka")
    broker.start()
    try:
        yield broker
    finally:
        if broker.pid is not None:
            os.kill(broker.pid, signal.SIGCONT)  # a test that froze it and failed: SIGTERM must reach it
        broker.stop()


@pytest.fixture(scope="session")
def outage_kafka(outage_broker: KafkaBroker) -> Iterator[KafkaResource]:
    """`outage_broker`'s KafkaResource (5 s client timeout), its admin client closed before the broker stops."""
    kafka = KafkaResource(bootstrap_servers=outage_broker.bootstrap_servers, timeout_s=5)
    yield kafka
    kafka.close()


@pytest.fixture(scope="session")
def replacement_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """An empty plaintext broker started like the session's: the cluster that replaces a lost one in the disaster
    recovery tests (integration/recovery/). Started only by the tests that ask for it, stopped by PID."""
    broker = KafkaBroker(tmp_path_factory.mktemp("replacement") / "kafka")
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@dataclass
class SecureServices:
    """A broker whose only listener is SASL_SSL (SCRAM-SHA-512, a local CA) and a moto server on HTTPS with a
    certificate of the same CA (an S3-compatible endpoint with a custom CA); secrets unique to the session."""

    bootstrap_servers: str
    ca_file: str
    password: str  # of SECURE_USER
    s3_endpoint_url: str
    s3_secret: str
    kms_key_id: str
    bucket: str
    data_dir: Path
    made: list[KafkaResource] = field(default_factory=list)  # closed by the fixture before the broker stops

    def env(self, password: str | None = None) -> dict[str, str]:
        """The variables a deployment sets (docs/configuration.md): SASL_SSL + the CA, the endpoint + its CA bundle,
        static S3 keys of our own variables."""
        return {
            "S3_ARCHIVE_KAFKA_BOOTSTRAP_SERVERS": self.bootstrap_servers,
            "S3_ARCHIVE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "S3_ARCHIVE_KAFKA_SASL_MECHANISM": SCRAM,
            "S3_ARCHIVE_KAFKA_SASL_USERNAME": SECURE_USER,
            "S3_ARCHIVE_KAFKA_SASL_PASSWORD": self.password if password is None else password,
            "S3_ARCHIVE_KAFKA_SSL_CA_LOCATION": self.ca_file,
            "S3_ARCHIVE_S3_ENDPOINT_URL": self.s3_endpoint_url,
            "S3_ARCHIVE_S3_REGION": "us-east-1",
            "S3_ARCHIVE_S3_ACCESS_KEY_ID": SECURE_S3_KEY_ID,
            "S3_ARCHIVE_S3_SECRET_ACCESS_KEY": self.s3_secret,
            "S3_ARCHIVE_S3_CA_BUNDLE": self.ca_file,
            "S3_ARCHIVE_BUCKET": self.bucket,
        }

    def kafka(self, password: str | None = None, timeout_s: float = 15.0) -> KafkaResource:
        kafka = KafkaResource(bootstrap_servers=self.bootstrap_servers, security_protocol="SASL_SSL",
                              sasl_mechanism=SCRAM, sasl_username=SECURE_USER,
                              sasl_password=self.password if password is None else password,
                              ssl_ca_location=self.ca_file, timeout_s=timeout_s)
        self.made.append(kafka)
        return kafka

    def s3(self) -> S3Resource:
        return S3Resource(endpoint_url=self.s3_endpoint_url, region_name="us-east-1", path_style=True,
                          aws_access_key_id=SECURE_S3_KEY_ID, aws_secret_access_key=self.s3_secret,
                          ca_bundle=self.ca_file)


def _pem_pair(tls_dir: Path, out: Path) -> tuple[Path, Path]:
    """The local CA's server certificate (with its chain) and key as PEM files, for moto's HTTPS."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    tls = server_tls(tls_dir)
    key, cert, chain = pkcs12.load_key_and_certificates(tls.keystore.read_bytes(), tls.password.encode())
    out.mkdir(parents=True, exist_ok=True)
    cert_file, key_file = out / "server.crt", out / "server.key"
    cert_file.write_bytes(b"".join(c.public_bytes(serialization.Encoding.PEM) for c in [cert, *chain]))
    write_private(key_file, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption()).decode())
    return cert_file, key_file


@pytest.fixture(scope="session")
def secure_services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureServices]:
    root = tmp_path_factory.mktemp("secure")
    password = f'pa ss "{uuid.uuid4().hex}" \\ end'
    broker = KafkaBroker(root / "kafka", security="sasl_ssl", users={SECURE_USER: password})
    broker.start()
    try:
        moto = MotoServer(root / "moto", tls=_pem_pair(broker.data_dir / "tls", root / "moto-tls"))
        moto.start()
        try:
            secret = f"s3-secret-{uuid.uuid4().hex}"
            aws = {"endpoint_url": moto.endpoint_url, "region_name": "us-east-1", "verify": str(broker.ca_file),
                   "aws_access_key_id": SECURE_S3_KEY_ID, "aws_secret_access_key": secret}
            boto3.client("s3", **aws).create_bucket(Bucket=SECURE_BUCKET)
            kms_key = boto3.client("kms", **aws).create_key(Description="s3-archive tests")["KeyMetadata"]["KeyId"]
            secure = SecureServices(broker.bootstrap_servers, str(broker.ca_file), password, moto.endpoint_url,
                                    secret, kms_key, SECURE_BUCKET, root)
            try:
                yield secure
            finally:
                for kafka in secure.made:
                    kafka.close()
        finally:
            moto.stop()
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    """One PostgreSQL server for the session (Dagster instances on Postgres); each user creates its own database."""
    # fsync off: a test server's data need not survive a crash of this machine.
    server = PostgresServer(tmp_path_factory.mktemp("postgres"), settings={"fsync": "off"})
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _registry(root: Path) -> Iterator[SchemaRegistryServer]:
    server = SchemaRegistryServer(root)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def registry_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SchemaRegistryServer]:
    """A Schema Registry (Apicurio, in-memory) for the session; started only by the tests that ask for it, stopped
    by PID. Tests isolate themselves by subject (topic) names."""
    yield from _registry(tmp_path_factory.mktemp("schema-registry"))


@pytest.fixture(scope="session")
def target_registry_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SchemaRegistryServer]:
    """A second, empty Schema Registry: the registry of a restore's target cluster."""
    yield from _registry(tmp_path_factory.mktemp("target-registry"))


@dataclass
class Store:
    """An S3 server with the session's test bucket: `bootstrap_servers`, `s3_endpoint_url` and `bucket` as
    `Services` has them, so helpers taking services take a store too."""

    name: str
    bootstrap_servers: str
    s3_endpoint_url: str
    bucket: str
    retention_lock: dict | None = None  # the bucket has Object Lock: archives on it lock their windows

    @property
    def archive_options(self) -> dict:
        """What an archive on this store sets besides its bucket (`retention_lock` on a locked bucket)."""
        return {} if self.retention_lock is None else {"retention_lock": self.retention_lock}

    def client(self):
        from botocore.config import Config

        return boto3.client("s3", endpoint_url=self.s3_endpoint_url, region_name=TEST_AWS["AWS_REGION"],
                            aws_access_key_id=TEST_AWS["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=TEST_AWS["AWS_SECRET_ACCESS_KEY"],
                            config=Config(s3={"addressing_style": "path"}))


@contextlib.contextmanager
def _versitygw(name: str, services: Services, root: Path, bucket: str, locked: bool) -> Iterator[Store]:
    """versitygw over `root` with `bucket` (versioned, with S3 Object Lock, archives locked in compliance mode when
    `locked`), stopped by PID on leaving."""
    gateway = VersityGateway(root, TEST_AWS["AWS_ACCESS_KEY_ID"], TEST_AWS["AWS_SECRET_ACCESS_KEY"], versioning=locked)
    gateway.start()
    try:
        store = Store(name, services.bootstrap_servers, gateway.endpoint_url, bucket,
                      {"mode": "compliance", "days": 1} if locked else None)
        store.client().create_bucket(Bucket=bucket, **({"ObjectLockEnabledForBucket": True} if locked else {}))
        yield store
    finally:
        gateway.stop()


@contextlib.contextmanager
def _fault_proxy(services: Services, name: str, store: Store) -> Iterator[FaultProxy]:
    """The S3 fault proxy in front of `store` (no faults until a test sets rules), stopped by PID on leaving."""
    proxy = FaultProxy(services.data_dir / f"{name}-fault-proxy", store.s3_endpoint_url)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()


@pytest.fixture(scope="session")
def versitygw_store(services: Services, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """versitygw over a temporary directory, started on first use, stopped by PID."""
    with _versitygw("versitygw", services, tmp_path_factory.mktemp("versitygw"), BUCKET, locked=False) as store:
        yield store


@pytest.fixture(scope="session")
def versitygw_fault_proxy(versitygw_store: Store, services: Services) -> Iterator[FaultProxy]:
    """The S3 fault proxy in front of versitygw."""
    with _fault_proxy(services, "versitygw", versitygw_store) as proxy:
        yield proxy


@pytest.fixture(scope="session")
def versitygw_locked_store(services: Services, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """versitygw keeping versions, with a bucket created with S3 Object Lock; archives on it locked (compliance)."""
    with _versitygw("versitygw-locked", services, tmp_path_factory.mktemp("versitygw-locked"), LOCKED_BUCKET,
                    locked=True) as store:
        yield store


@pytest.fixture(scope="session")
def versitygw_locked_fault_proxy(versitygw_locked_store: Store, services: Services) -> Iterator[FaultProxy]:
    """The S3 fault proxy in front of the versioned versitygw."""
    with _fault_proxy(services, "versitygw-locked", versitygw_locked_store) as proxy:
        yield proxy


@pytest.fixture(scope="session")
def moto_locked_store(services: Services) -> Store:
    """moto with a bucket created with S3 Object Lock (so versioned), archives on it locked in compliance mode."""
    s3 = Store("moto-locked", services.bootstrap_servers, services.s3_endpoint_url, LOCKED_BUCKET).client()
    try:
        s3.create_bucket(Bucket=LOCKED_BUCKET, ObjectLockEnabledForBucket=True)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    return Store("moto-locked", services.bootstrap_servers, services.s3_endpoint_url, LOCKED_BUCKET,
                 {"mode": "compliance", "days": 1})


@pytest.fixture(params=["moto", "versitygw", "moto-locked", "versitygw-locked"])
def store(request: pytest.FixtureRequest, services: Services) -> Store:
    """Each S3 server in turn: the tests of the commit protocol run against both, and on a versioned bucket with
    Object Lock on each, where the archives lock their windows (`store.archive_options`)."""
    if request.param == "moto":
        return Store("moto", services.bootstrap_servers, services.s3_endpoint_url, services.bucket)
    if request.param in ("moto-locked", "versitygw-locked"):
        return request.getfixturevalue(f"{request.param.replace('-', '_')}_store")
    return request.getfixturevalue("versitygw_store")


@pytest.fixture(scope="session")
def kafka(services: Services) -> Iterator[KafkaResource]:
    """The session broker's KafkaResource; its admin client is closed before the broker stops."""
    kafka = KafkaResource(bootstrap_servers=services.bootstrap_servers)
    yield kafka
    kafka.close()


@pytest.fixture(scope="session")
def s3(services: Services):
    return boto3.client("s3", endpoint_url=services.s3_endpoint_url, region_name=TEST_AWS["AWS_REGION"],
                        aws_access_key_id=TEST_AWS["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=TEST_AWS["AWS_SECRET_ACCESS_KEY"])


@pytest.fixture(scope="session")
def spark_resource(services: Services) -> SparkResource:
    return SparkResource(master="local[2]", driver_memory="2g", s3_endpoint_url=services.s3_endpoint_url,
                         s3_access_key_id=TEST_AWS["AWS_ACCESS_KEY_ID"],
                         s3_secret_access_key=TEST_AWS["AWS_SECRET_ACCESS_KEY"], s3_path_style=True)


@pytest.fixture(scope="session")
def spark(spark_resource: SparkResource):
    session = spark_resource.session()
    yield session
    session.stop()


READ_PATHS = ("librdkafka", "spark")


@pytest.fixture(params=READ_PATHS)
def read_path(request: pytest.FixtureRequest) -> str:
    """ArchiveConfig.read_path: the archive tests run on both read paths while both exist."""
    return request.param


# The read paths and, on librdkafka's, the write task's two readers (ArchiveConfig.task_reader): the tests of
# read_committed, retention and compaction run on each.
READINGS = {"librdkafka": {"read_path": "librdkafka", "task_reader": "native"},
            "librdkafka-python": {"read_path": "librdkafka", "task_reader": "python"},
            "spark": {"read_path": "spark"}}


@pytest.fixture(params=READINGS)
def reading(request: pytest.FixtureRequest) -> dict[str, str]:
    """ArchiveConfig's read_path and task_reader, as archive_config's keywords."""
    return READINGS[request.param]


@pytest.fixture
def unique() -> str:
    return uuid.uuid4().hex[:8]


@pytest.fixture(autouse=True, scope="session")
def _no_proxy() -> None:
    # Everything here is on 127.0.0.1; a proxy from the environment must not intercept it.
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
