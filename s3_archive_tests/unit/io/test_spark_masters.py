"""SparkResource's masters: Spark Connect (what a client sends), a cluster (how executors get the jars), local."""

from __future__ import annotations

import pytest

from s3_archive.io.spark import KAFKA_MIN_PARTITIONS_CONF, SparkResource


@pytest.fixture
def jar_home(tmp_path, monkeypatch):
    monkeypatch.setenv("S3_ARCHIVE_HOME", str(tmp_path))
    d = tmp_path / "jars" / "spark"
    d.mkdir(parents=True)
    for name in ("spark-sql-kafka-0-10_2.13-4.0.0.jar", "bundle-2.24.6.jar"):
        (d / name).write_bytes(b"")
    return d


@pytest.mark.parametrize("fields", [{"remote": "sc://spark:15002"}, {"master": "sc://spark:15002"}])
def test_a_connect_client_sends_only_session_settings_and_no_secret(fields, tmp_path, monkeypatch):
    monkeypatch.setenv("S3_ARCHIVE_HOME", str(tmp_path))  # no jars: a Connect client needs none
    r = SparkResource(**fields, s3_endpoint_url="http://s3:9000", s3_access_key_id="AKIA-EXAMPLE",
                      s3_secret_access_key="never-sent", kafka_min_partitions=3, extra_conf={"spark.x.y": "1"})
    assert r.connect_url == "sc://spark:15002"
    conf = r.session_conf()
    assert conf["spark.remote"] == "sc://spark:15002"
    assert conf["spark.sql.session.timeZone"] == "UTC" and conf[KAFKA_MIN_PARTITIONS_CONF] == "3"
    assert conf["spark.x.y"] == "1"  # extra_conf is sent as given
    # the server owns its JVM, master, classpath and S3A settings: none of them, and no credential, is sent
    assert not [k for k in conf if k.startswith(("spark.hadoop.", "spark.driver.", "spark.master", "spark.jars"))]
    assert "never-sent" not in str(conf) and "spark.app.name" not in conf


def test_a_classic_session_is_built_with_all_of_spark_conf(jar_home):
    r = SparkResource(master="local[2]")
    assert r.connect_url is None and r.session_conf() == r.spark_conf()


def test_a_cluster_ships_the_jars_by_default(jar_home):
    conf = SparkResource(master="spark://spark-master:7077").spark_conf()
    assert conf["spark.master"] == "spark://spark-master:7077"
    assert conf["spark.jars"].split(",") == [str(jar_home / "bundle-2.24.6.jar"),
                                             str(jar_home / "spark-sql-kafka-0-10_2.13-4.0.0.jar")]
    assert "spark.executor.extraClassPath" not in conf
    assert "spark.driver.host" not in conf  # the workers must reach the driver at its own address


def test_a_cluster_with_the_jars_on_its_workers_ships_nothing(jar_home):
    conf = SparkResource(master="spark://127.0.0.1:7077", worker_jars_dir="/opt/s3-archive/jars/").spark_conf()
    assert "spark.jars" not in conf
    assert conf["spark.executor.extraClassPath"] == "/opt/s3-archive/jars/*"
    assert conf["spark.driver.extraClassPath"].split(":") == [str(jar_home / "bundle-2.24.6.jar"),
                                                              str(jar_home / "spark-sql-kafka-0-10_2.13-4.0.0.jar")]
    # a master on the loopback: its workers are on this machine, so is the driver's address
    assert conf["spark.driver.host"] == conf["spark.driver.bindAddress"] == "127.0.0.1"


def test_a_cluster_with_several_jar_directories_on_its_workers_puts_each_on_the_executors_classpath(jar_home):
    # format: iceberg needs Iceberg's runtime on the executors too: the spark and the iceberg groups' directories
    iceberg = jar_home.parent / "iceberg"
    iceberg.mkdir()
    (iceberg / "iceberg-spark-runtime-4.1_2.13-1.12.0.jar").write_bytes(b"")
    conf = SparkResource(master="spark://127.0.0.1:7077",
                         worker_jars_dir="/opt/jars/spark/:/opt/jars/iceberg").spark_conf()
    assert conf["spark.executor.extraClassPath"] == "/opt/jars/spark/*:/opt/jars/iceberg/*"
    assert conf["spark.driver.extraClassPath"].split(":")[-1] == str(iceberg / "iceberg-spark-runtime-4.1_2.13-1.12.0.jar")


def test_the_local_clusters_workers_get_the_iceberg_jars_when_they_were_fetched(jar_home, tmp_path):
    from s3_archive.local.spark_cluster import SparkCluster

    cluster = SparkCluster(tmp_path / "cluster")
    assert cluster.worker_jars_dirs == cluster.jars_dir == str(jar_home)
    iceberg = jar_home.parent / "iceberg"
    iceberg.mkdir()
    (iceberg / "iceberg-spark-runtime-4.1_2.13-1.12.0.jar").write_bytes(b"")
    assert cluster.worker_jars_dirs == f"{jar_home}:{iceberg}"
