"""One Spark Connect server and one standalone cluster (master + worker) per test session, started by the project's
own code (s3_archive/local/spark_*.py) and only when a test asks for them; both reach the session's broker and moto.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from s3_archive.local.spark_cluster import SparkCluster
from s3_archive.local.spark_connect import SparkConnectServer
from s3_archive_tests.credentials import TEST_AWS


@pytest.fixture(scope="session")
def spark_connect(services) -> Iterator[SparkConnectServer]:
    # The server's S3 credentials come through its environment (the default chain), as a deployed server's do.
    server = SparkConnectServer(services.data_dir / "spark-connect", driver_memory="1g",
                                s3_endpoint_url=services.s3_endpoint_url, s3_path_style=True,
                                env={k: TEST_AWS[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")})
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def spark_cluster(services) -> Iterator[SparkCluster]:
    # The worker's environment (hence its executors') has the S3 keys for the AWS SDK's default chain, which
    # Iceberg's S3 client on the executors takes, as a deployed worker takes its role's.
    cluster = SparkCluster(services.data_dir / "spark-cluster", cores=2, memory="1g",
                           env={k: TEST_AWS[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")})
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()

