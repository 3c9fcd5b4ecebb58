"""The archive asset on a Spark standalone cluster (pyspark's own master and worker): executors are JVMs the worker
launched, not the driver's, with the project's jars on their classpath from the worker's machine; their Python
workers import s3_archive. The run is a fresh process (runner.py), as a deployed run is. It reads Kafka over SASL_SSL
(the secured broker: SCRAM, a password with quotes and backslashes) and writes S3 with static keys, while every
process's command line is read: neither secret is on the master's, the worker's, the executor's or the driver's."""

from __future__ import annotations

import s3_archive
from s3_archive.io import paths
from s3_archive.local.kafka_broker import SCRAM
from s3_archive.local.spark_cluster import MASTER_CLASS, WORKER_CLASS
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.conftest import SECURE_USER
from s3_archive_tests.credentials import TEST_AWS
from s3_archive_tests.integration.archive_helpers import archive_config, archived_records, manifest, staging_objects
from s3_archive_tests.integration.spark.iceberg_checks import archive_and_check_iceberg
from s3_archive_tests.integration.spark.runner import archive_job
from s3_archive_tests.kafka_helpers import NASTY, create_topic, produce

EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


def test_archive_on_a_standalone_cluster_runs_in_the_workers_executor_jvms(spark_cluster, secure_services, s3,
                                                                           services, unique):
    secure = secure_services
    kafka = secure.kafka()
    kafka_fields = {"bootstrap_servers": secure.bootstrap_servers, "security_protocol": "SASL_SSL",
                    "sasl_mechanism": SCRAM, "sasl_username": SECURE_USER, "sasl_password": secure.password,
                    "ssl_ca_location": secure.ca_file}
    # The password's random part too: found however a command line would quote or escape the rest.
    secrets = (TEST_AWS["AWS_SECRET_ACCESS_KEY"], secure.password, secure.password.split('"')[1])
    topic = create_topic(kafka, f"cluster-{unique}", partitions=2)
    produced = produce(kafka, topic, [(i % 2, k, v, h) for i, (k, v, h) in enumerate(NASTY * 2)])
    cfg = archive_config(services.bucket, topic, f"cluster/{unique}/")
    windows = [OffsetWindow(0, 0, 8), OffsetWindow(1, 0, 8)]
    spark = {"master": spark_cluster.master_url, "worker_jars_dir": spark_cluster.jars_dir, "driver_memory": "1g",
             "s3_endpoint_url": services.s3_endpoint_url, "s3_path_style": True,
             "s3_access_key_id": TEST_AWS["AWS_ACCESS_KEY_ID"], "s3_secret_access_key": TEST_AWS["AWS_SECRET_ACCESS_KEY"]}
    out = archive_job(services, spark, cfg, topic, windows, probe=True, secrets=secrets, kafka=kafka_fields)

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
    # Neither the S3 secret nor the SASL password is on any command line seen while the run went on ...
    seen = out["process_list"]
    assert seen["leaks"] == []
    assert any("SparkSubmit" in cmd for cmd in seen["spark_jvms"]), seen["spark_jvms"]
    # ... and the watcher did see each JVM of the cluster: the master, the worker, the executor that ran the tasks
    # (it lives only while the application does) and the driver.
    cmd = seen["seen"]
    assert MASTER_CLASS in cmd.get(spark_cluster.master_proc.pid, ""), seen["spark_jvms"]
    assert WORKER_CLASS in cmd.get(spark_cluster.worker_proc.pid, ""), seen["spark_jvms"]
    assert {EXECUTOR_CLASS in cmd.get(task["jvm_pid"], "") for task in probe["tasks"]} == {True}, seen["spark_jvms"]
    assert "SparkSubmit" in cmd.get(probe["driver_jvm_pid"], ""), seen["spark_jvms"]


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
