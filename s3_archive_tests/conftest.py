"""Session-scoped real services: one Kafka broker (from the Maven jars), one moto server, one SparkSession, and
(started only by the tests that ask for it) one PostgreSQL server.

Integration tests share them and isolate themselves by topic name, S3 prefix and database.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest

from s3_archive.io.kafka import KafkaResource
from s3_archive.io.spark import SparkResource
from s3_archive.local.kafka_broker import KafkaBroker
from s3_archive.local.moto_server import MotoServer
from s3_archive.local.postgres import PostgresServer
from s3_archive.local.stack import create_bucket
from s3_archive_tests.credentials import TEST_AWS

BUCKET = "s3-archive-test"



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
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    root = tmp_path_factory.mktemp("stack")
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
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    """One PostgreSQL server for the session (Dagster instances on Postgres); each user creates its own database."""
    # fsync off: a test server's data need not survive a crash of this machine.
    server = PostgresServer(tmp_path_factory.mktemp("postgres"), settings={"fsync": "off"})
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def kafka(services: Services) -> KafkaResource:
    return KafkaResource(bootstrap_servers=services.bootstrap_servers)


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


@pytest.fixture
def unique() -> str:
    return uuid.uuid4().hex[:8]


@pytest.fixture(autouse=True, scope="session")
def _no_proxy() -> None:
    # Everything here is on 127.0.0.1; a proxy from the environment must not intercept it.
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
