"""SparkResource.spark_conf: the tuning fields become the Spark settings docs/benchmarks.md measured."""

from __future__ import annotations

import pytest

from s3_archive.io.spark import KAFKA_CACHE_CONF, KAFKA_MIN_PARTITIONS_CONF, MAGIC_COMMITTER_CONF, SparkResource
from s3_archive.model.errors import MissingJars

SPARK_JARS = ["spark-sql-kafka-0-10_2.13-4.0.0.jar", "hadoop-aws-3.4.1.jar", "spark-hadoop-cloud_2.13-4.0.0.jar"]


@pytest.fixture
def jar_home(tmp_path, monkeypatch):
    monkeypatch.setenv("S3_ARCHIVE_HOME", str(tmp_path))
    d = tmp_path / "jars" / "spark"
    d.mkdir(parents=True)
    for name in SPARK_JARS:
        (d / name).write_bytes(b"")
    return d


def test_defaults_keep_parquets_row_group_and_turn_the_ui_off(jar_home):
    conf = SparkResource().spark_conf()
    assert not set(MAGIC_COMMITTER_CONF) & set(conf)  # FileOutputCommitter v2, Spark's own commit protocol
    assert conf["spark.hadoop.mapreduce.fileoutputcommitter.algorithm.version"] == "2"
    assert conf["spark.hadoop.parquet.block.size"] == str(128 * 1024 * 1024)
    assert conf["spark.ui.enabled"] == "false"
    assert KAFKA_MIN_PARTITIONS_CONF not in conf


def test_magic_committer_binds_the_s3a_committer_and_its_jar_is_on_the_classpath(jar_home):
    conf = SparkResource(s3_committer="magic", parquet_block_size_mb=8, ui_enabled=True).spark_conf()
    assert {k: conf[k] for k in MAGIC_COMMITTER_CONF} == MAGIC_COMMITTER_CONF
    assert conf["spark.hadoop.fs.s3a.committer.name"] == "magic"
    assert str(jar_home / "spark-hadoop-cloud_2.13-4.0.0.jar") in conf["spark.driver.extraClassPath"].split(":")
    assert conf["spark.hadoop.parquet.block.size"] == str(8 * 1024 * 1024)
    assert conf["spark.ui.enabled"] == "true"


def test_kafka_min_partitions_is_passed_as_a_conf(jar_home):
    assert SparkResource(kafka_min_partitions=4).spark_conf()[KAFKA_MIN_PARTITIONS_CONF] == "4"


def test_an_unknown_committer_names_the_allowed_ones(jar_home):
    with pytest.raises(ValueError, match=r"s3_committer is 'directory'; allowed: file, magic"):
        SparkResource(s3_committer="directory").spark_conf()


def test_magic_without_the_hadoop_cloud_jar_says_how_to_fix_it(jar_home):
    (jar_home / "spark-hadoop-cloud_2.13-4.0.0.jar").unlink()
    with pytest.raises(MissingJars, match=r"no spark-hadoop-cloud jar .*scripts/fetch-jars.*s3_committer='file'"):
        SparkResource(s3_committer="magic").spark_conf()
    assert "spark.driver.extraClassPath" in SparkResource().spark_conf()


def test_a_connect_server_gets_no_local_jars_nor_committer(monkeypatch, tmp_path):
    monkeypatch.setenv("S3_ARCHIVE_HOME", str(tmp_path))  # no jars at all: a Connect client needs none
    conf = SparkResource(remote="sc://spark:15002", s3_committer="magic").spark_conf()
    assert conf["spark.remote"] == "sc://spark:15002"
    assert not set(MAGIC_COMMITTER_CONF) & set(conf) and "spark.driver.extraClassPath" not in conf


@pytest.mark.parametrize("field,value", [("parquet_block_size_mb", 0), ("kafka_min_partitions", 0)])
def test_sizes_below_one_are_refused(field, value):
    with pytest.raises(Exception, match=field):
        SparkResource(**{field: value})


def test_the_kafka_sources_consumer_caches_stay_small_and_short(jar_home):
    # Spark's defaults (64 consumers, 5 minutes) let a warm session's idle consumers fill a 2 GB heap: its JVM
    # exited in the 1 GB benchmark (docs/performance.md, "Memory")
    conf = SparkResource().spark_conf()
    assert int(conf["spark.kafka.consumer.cache.capacity"]) <= 4
    for key in ("spark.kafka.consumer.cache.timeout", "spark.kafka.consumer.fetchedData.cache.timeout"):
        assert conf[key] == "30s"
    assert conf.items() >= KAFKA_CACHE_CONF.items()
