"""SparkResource: a SparkSession with the Kafka source, Avro and S3A on its classpath; local, a cluster master URL,
or a Spark Connect endpoint. The tuning fields are explained in docs/deployment.md, "Spark tuning".
"""

from __future__ import annotations

import os
import sys
from urllib.parse import urlparse

import dagster as dg
from dagster_pyspark import LazyPySparkResource
from pydantic import Field, PrivateAttr

from s3_archive.io import paths
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
# The settings a Spark Connect client sends (the rest of spark_conf is the server's own, see session_conf).
CONNECT_CLIENT_CONF = ("spark.sql.", "spark.s3archive.")
# Spark 4.0's Connect server reuses a plan analyzed for `df.schema`/`df.columns` without registering the plan's
# Observation, whose metrics then never arrive (SPARK-53908, fixed in 4.1); archive/write.py takes a window's
# statistics from an Observation on a plan it analyzes first. A per-session setting.
CONNECT_SESSION_CONF = {"spark.connect.session.planCache.enabled": "false"}


class SparkResource(dg.ConfigurableResource):
    """A SparkSession with the Kafka source, Avro and S3A on its classpath.

    Built on dagster-pyspark's `LazyPySparkResource`: the session starts on first use, not when a run starts.
    `local[*]` by default; any master URL, or a Spark Connect endpoint through `remote` (`sc://host:15002`).
    The tuning fields (committer, Parquet row group, minPartitions, UI) are explained in docs/deployment.md,
    "Spark tuning", and measured by docs/benchmarks.md and bench/tuning.py.
    """

    master: str = "local[*]"
    remote: str | None = Field(default=None, description="Spark Connect URL (`sc://host:15002`; a `master` "
                               "that is an sc:// URL means the same); when set, `master` is ignored")
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
    ui_enabled: bool = Field(default=False, description="Spark's web UI (off: nothing listens on port 4040)")
    worker_jars_dir: str | None = Field(
        default=None, description="a `spark://` master: the directory on every worker machine that holds the jars "
        "of `scripts/fetch-jars` (e.g. baked into the worker image); executors put it on their classpath. None: "
        "ship the jars with spark.jars from the driver at every session start (~540 MB, docs/deployment.md)")
    extra_conf: dict[str, str] = Field(default_factory=dict)
    _lazy: LazyPySparkResource | None = PrivateAttr(default=None)

    def spark_conf(self) -> dict[str, str]:
        if self.s3_committer not in S3_COMMITTERS:
            raise ValueError(f"SparkResource.s3_committer is {self.s3_committer!r}; allowed: "
                             f"{', '.join(S3_COMMITTERS)}")
        connect = self.connect_url
        jars = [] if connect else [str(p) for p in paths.jars("spark")]
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
        if self.s3_committer == "magic" and not connect:  # a Connect server configures its own committer
            if not any(os.path.basename(j).startswith("spark-hadoop-cloud_") for j in jars):
                raise MissingJars(
                    f"SparkResource.s3_committer is 'magic' but no spark-hadoop-cloud jar is in "
                    f"{paths.jar_dir('spark')}; run `scripts/fetch-jars` (jvm/spark/pom.xml lists it), or set "
                    "s3_committer='file'")
            conf |= MAGIC_COMMITTER_CONF
        if connect:
            conf["spark.remote"] = connect  # the Connect server carries its own jars
        elif self.master.startswith("local"):
            # Driver and executors share one JVM: put the jars on its classpath instead of shipping ~560 MB
            # through Spark's file server (which costs ~20 s at every session start).
            conf |= {"spark.master": self.master, "spark.driver.extraClassPath": os.pathsep.join(jars),
                     "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
        else:
            conf |= self._cluster_conf(jars)
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

    @property
    def connect_url(self) -> str | None:
        """The Spark Connect endpoint: `remote`, or a `master` that is an `sc://` URL; None for a classic session."""
        if self.remote:
            return self.remote
        return self.master if self.master.startswith("sc://") else None

    def _cluster_conf(self, jars: list[str]) -> dict[str, str]:
        """A cluster master (`spark://`, `yarn`, `k8s://`): executors are other JVMs, which need the jars too."""
        conf = {"spark.master": self.master}
        if self.worker_jars_dir:
            # The driver (this process) has the jars locally; each worker has them at worker_jars_dir.
            conf |= {"spark.driver.extraClassPath": os.pathsep.join(jars),
                     "spark.executor.extraClassPath": f"{self.worker_jars_dir.rstrip('/')}/*"}
        else:
            conf["spark.jars"] = ",".join(jars)
        if urlparse(self.master).hostname in ("127.0.0.1", "localhost"):
            # A master on the loopback has its workers on this machine: keep the driver there too.
            conf |= {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
        return conf

    def session_conf(self) -> dict[str, str]:
        """What the session is built with. Over Spark Connect, only what a client may set: SQL settings, ours
        (`spark.s3archive.*`) and extra_conf; the server owns its JVM, classpath, master and S3A settings, so no
        S3 credential is sent to it."""
        conf = self.spark_conf()
        connect = self.connect_url
        if connect is None:
            return conf
        client = {k: v for k, v in conf.items() if k.startswith(CONNECT_CLIENT_CONF) or k in self.extra_conf}
        return CONNECT_SESSION_CONF | client | {"spark.remote": connect}

    def session(self):
        """The SparkSession (one per process: a second call, or another resource instance, reuses it)."""
        if self._lazy is None:
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            self._lazy = LazyPySparkResource(spark_config=self.session_conf())
        return self._lazy.spark_session
