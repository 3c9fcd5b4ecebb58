"""SparkResource: a SparkSession with the Kafka source, Avro and S3A on its classpath; local, a cluster master URL,
or a Spark Connect endpoint. The tuning fields are explained in docs/deployment.md, "Spark tuning".
"""

from __future__ import annotations

import os
import sys

import dagster as dg
from dagster_pyspark import LazyPySparkResource
from pydantic import Field, PrivateAttr

from s3_archive.io import paths
from s3_archive.io.jvm import JVM_PROFILES, driver_java_options
from s3_archive.model.errors import MissingJars

# Spark conf key through which `SparkResource.kafka_min_partitions` reaches `archive.write.read_window` (a conf, not an
# argument, so that it needs no plumbing through the asset and archive_window, and works over Spark Connect too).
KAFKA_MIN_PARTITIONS_CONF = "spark.s3archive.kafka.minPartitions"

# The S3A magic committer (hadoop-aws) bound to Spark's SQL writes by spark-hadoop-cloud: each task uploads its file
# straight to the staging key as a pending multipart upload that the job commit completes, instead of writing under
# _temporary/ and renaming (a server-side copy of every byte, then a delete) as FileOutputCommitter does.
MAGIC_COMMITTER_CONF = {
    "spark.sql.sources.commitProtocolClass": "org.apache.spark.internal.io.cloud.PathOutputCommitProtocol",
    "spark.sql.parquet.output.committer.class":
        "org.apache.spark.internal.io.cloud.BindingParquetOutputCommitter",
    "spark.hadoop.mapreduce.outputcommitter.factory.scheme.s3a":
        "org.apache.hadoop.fs.s3a.commit.S3ACommitterFactory",
    "spark.hadoop.fs.s3a.committer.name": "magic",
    "spark.hadoop.fs.s3a.committer.magic.enabled": "true",
}
S3_COMMITTERS = ("file", "magic")


class SparkResource(dg.ConfigurableResource):
    """A SparkSession with the Kafka source, Avro and S3A on its classpath.

    Built on dagster-pyspark's `LazyPySparkResource`: the session starts on first use, not when a run starts.
    `local[*]` by default; any master URL, or a Spark Connect endpoint through `remote` (`sc://host:15002`).
    The tuning fields (committer, Parquet row group, minPartitions, UI) are explained in docs/deployment.md,
    "Spark tuning", and measured by docs/benchmarks.md and bench/tuning.py.
    """

    master: str = "local[*]"
    remote: str | None = Field(default=None, description="Spark Connect URL; when set, `master` is ignored")
    app_name: str = "s3-archive"
    driver_memory: str = "2g"
    shuffle_partitions: int = 4
    s3_endpoint_url: str | None = Field(default=None, description="S3-compatible endpoint; None for AWS")
    s3_region: str = "us-east-1"
    s3_access_key_id: str | None = Field(default=None, description="None: the default AWS credential chain")
    s3_secret_access_key: str | None = Field(default=None, description="bind with dg.EnvVar; never logged")
    s3_path_style: bool = False
    s3_committer: str = Field(default="file", description="file: Hadoop's FileOutputCommitter v2 (a task's files "
                              "are renamed into staging: a server-side copy and a delete each); magic: the S3A magic "
                              "committer (uploaded once, no copy; needs the spark-hadoop-cloud jar, which "
                              "scripts/fetch-jars fetches)")
    parquet_block_size_mb: int = Field(default=128, ge=1, description="Parquet row group size (Parquet's default): "
                                       "the writer buffers up to one row group per open file, so this caps a "
                                       "task's buffer for windows larger than it")
    kafka_min_partitions: int | None = Field(
        default=None, ge=1, description="Spark's Kafka source minPartitions: split a window's offset range into at "
        "least this many Spark tasks (and as many staged files, hence objects); None: one task per window")
    jvm_profile: str = Field(default="short", description="the driver JVM's flags (s3_archive/io/jvm.py): short "
                             "for a run's own process (C1 JIT only: starts fast), long for a session kept across "
                             "runs (C2 too); both map the AppCDS archive that scripts/setup builds. One of "
                             f"{', '.join(JVM_PROFILES)}; ignored over Spark Connect")
    ui_enabled: bool = Field(default=False, description="Spark's web UI (off: nothing listens on port 4040)")
    extra_conf: dict[str, str] = Field(default_factory=dict)
    _lazy: LazyPySparkResource | None = PrivateAttr(default=None)

    def spark_conf(self) -> dict[str, str]:
        if self.s3_committer not in S3_COMMITTERS:
            raise ValueError(f"SparkResource.s3_committer is {self.s3_committer!r}; allowed: "
                             f"{', '.join(S3_COMMITTERS)}")
        jars = [] if self.remote else [str(p) for p in paths.jars("spark")]
        conf = {
            "spark.app.name": self.app_name,
            "spark.driver.memory": self.driver_memory,
            "spark.sql.shuffle.partitions": str(self.shuffle_partitions),
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
            "spark.ui.showConsoleProgress": "false",
            "spark.ui.enabled": str(self.ui_enabled).lower(),
            "spark.hadoop.parquet.block.size": str(self.parquet_block_size_mb << 20),
            "spark.pyspark.python": sys.executable,
            "spark.pyspark.driver.python": sys.executable,
            # No _SUCCESS markers in staging: our manifest is the commit record.
            "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
            "spark.hadoop.mapreduce.fileoutputcommitter.algorithm.version": "2",
            "spark.hadoop.fs.s3a.endpoint.region": self.s3_region,
            "spark.hadoop.fs.s3a.path.style.access": str(self.s3_path_style).lower(),
            "spark.hadoop.fs.s3a.retry.limit": "3",
            "spark.hadoop.fs.s3a.attempts.maximum": "3",
        }
        if self.kafka_min_partitions is not None:
            conf[KAFKA_MIN_PARTITIONS_CONF] = str(self.kafka_min_partitions)
        if self.s3_committer == "magic" and not self.remote:  # a Connect server configures its own committer
            if not any(os.path.basename(j).startswith("spark-hadoop-cloud_") for j in jars):
                raise MissingJars(
                    f"SparkResource.s3_committer is 'magic' but no spark-hadoop-cloud jar is in "
                    f"{paths.jar_dir('spark')}; run `scripts/fetch-jars` (jvm/spark/pom.xml lists it), or set "
                    "s3_committer='file'")
            conf |= MAGIC_COMMITTER_CONF
        if not self.remote:
            java_opts = driver_java_options(self.jvm_profile, jars if self.master.startswith("local") else [])
            if java_opts:
                conf["spark.driver.extraJavaOptions"] = java_opts
        if self.remote:
            conf["spark.remote"] = self.remote  # the Connect server carries its own jars
        elif self.master.startswith("local"):
            # Driver and executors share one JVM: put the jars on its classpath instead of shipping ~560 MB
            # through Spark's file server (which costs ~20 s at every session start).
            conf |= {"spark.master": self.master, "spark.driver.extraClassPath": os.pathsep.join(jars),
                     "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
        else:
            conf |= {"spark.master": self.master, "spark.jars": ",".join(jars)}
        if self.s3_endpoint_url:
            conf["spark.hadoop.fs.s3a.endpoint"] = self.s3_endpoint_url
            conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(self.s3_endpoint_url.startswith("https")).lower()
        if self.s3_access_key_id:
            conf |= {
                "spark.hadoop.fs.s3a.aws.credentials.provider":
                    "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
                "spark.hadoop.fs.s3a.access.key": self.s3_access_key_id,
                "spark.hadoop.fs.s3a.secret.key": self.s3_secret_access_key or "",
            }
        return conf | self.extra_conf

    def session(self):
        """The SparkSession (one per process: a second call, or another resource instance, reuses it)."""
        if self._lazy is None:
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            self._lazy = LazyPySparkResource(spark_config=self.spark_conf())
        return self._lazy.spark_session
