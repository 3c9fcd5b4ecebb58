"""The archive asset on a Spark standalone cluster (pyspark's own master and worker): executors are JVMs the worker
launched, not the driver's, with the project's jars on their classpath from the worker's machine; their Python
workers import s3_archive. The run is a fresh process (runner.py), as a deployed run is."""

from __future__ import annotations

import pytest

import s3_archive
from s3_archive.io import paths
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.credentials import TEST_AWS
from s3_archive_tests.integration.archive_helpers import archive_config, archived_records, manifest, staging_objects
from s3_archive_tests.integration.spark.iceberg_checks import archive_and_check_iceberg
from s3_archive_tests.integration.spark.runner import archive_job
from s3_archive_tests.kafka_helpers import NASTY, create_topic, produce

pytestmark = pytest.mark.integration

EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


def test_archive_on_a_standalone_cluster_runs_in_the_workers_executor_jvms(spark_cluster, kafka, s3, services,
                                                                           unique):
    topic = create_topic(kafka, f"cluster-{unique}", partitions=2)
    produced = produce(kafka, topic, [(i % 2, k, v, h) for i, (k, v, h) in enumerate(NASTY * 2)])
    cfg = archive_config(services.bucket, topic, f"cluster/{unique}/")
    windows = [OffsetWindow(0, 0, 8), OffsetWindow(1, 0, 8)]
    spark = {"master": spark_cluster.master_url, "worker_jars_dir": spark_cluster.jars_dir, "driver_memory": "1g",
             "s3_endpoint_url": services.s3_endpoint_url, "s3_path_style": True,
             "s3_access_key_id": TEST_AWS["AWS_ACCESS_KEY_ID"], "s3_secret_access_key": TEST_AWS["AWS_SECRET_ACCESS_KEY"]}
    out = archive_job(services, spark, cfg, topic, windows, probe=True, secrets=(TEST_AWS["AWS_SECRET_ACCESS_KEY"],))

    assert out["success"], "\n".join(out["failures"] + out["errors"])
    assert archived_records(s3, cfg, topic) == produced
    assert all(manifest(s3, cfg, topic, w).record_count == 8 for w in windows)
    assert staging_objects(s3, cfg, topic) == []
    probe = out["probe"]
    for task in probe["tasks"]:
        # an executor JVM the worker started: not the driver's JVM, not in the driver's process tree
        assert task["jvm_main"] == EXECUTOR_CLASS and task["jvm_pid"] != probe["driver_jvm_pid"]
        assert task["jvm_parent"] == spark_cluster.worker_proc.pid
        assert f"{spark_cluster.jars_dir}/*" in task["classpath"].split(":")  # the jars from the worker's disk
        assert task["s3_archive"] == s3_archive.__file__
    # The S3 secret is on no command line of any process seen while the run went on (the driver's JVM included).
    seen = out["process_list"]
    assert seen["leaks"] == []
    assert any("SparkSubmit" in cmd for cmd in seen["spark_jvms"]), seen["spark_jvms"]


def test_iceberg_archive_on_a_standalone_cluster_writes_from_the_executors_and_restores_byte_exact(
        spark_cluster, kafka, s3, services, unique):
    """format: iceberg on the cluster: Iceberg's runtime on the driver's classpath and, from the worker's disk, on
    the executors' (which write the data files through Iceberg's S3 client, with the keys of the worker's
    environment)."""
    spark = {"master": spark_cluster.master_url, "worker_jars_dir": spark_cluster.worker_jars_dirs,
             "driver_memory": "1g", "s3_endpoint_url": services.s3_endpoint_url, "s3_path_style": True,
             "s3_access_key_id": TEST_AWS["AWS_ACCESS_KEY_ID"], "s3_secret_access_key": TEST_AWS["AWS_SECRET_ACCESS_KEY"]}
    out = archive_and_check_iceberg(services, kafka, s3, spark, f"cluster-ice-{unique}", probe=True)
    for task in out["probe"]["tasks"]:
        assert task["jvm_main"] == EXECUTOR_CLASS and task["jvm_parent"] == spark_cluster.worker_proc.pid
        assert f"{paths.jar_dir('iceberg')}/*" in task["classpath"].split(":")
