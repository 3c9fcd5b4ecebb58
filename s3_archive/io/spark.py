"""SparkResource: a SparkSession with the Kafka source, Avro and S3A on its classpath; local, a cluster master URL,
or a Spark Connect endpoint. The tuning fields are explained in docs/deployment.md, "Spark tuning".
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlparse

import dagster as dg
from pydantic import Field, PrivateAttr

from s3_archive.io import paths
from s3_archive.io.jvm import JVM_PROFILES, driver_java_options
from s3_archive.io.pyspark_daemon import same_batches
from s3_archive.io.s3_resource import S3_ENV, check_storage_class
from s3_archive.io.truststore import TRUSTSTORE_PASSWORD, java_truststore
from s3_archive.model.errors import MissingJars

log = logging.getLogger(__name__)

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
WARM_UP_GROUP = "s3-archive-python-workers"  # start_python_workers's Spark job group (the UI shows it)
# Spark's Kafka source keeps each task's consumer (with its last fetch: up to kafka.max.partition.fetch.bytes,
# 16 MiB in archive/driver/spark_job.py) and its last poll's records (up to kafka.max.poll.records, 10,000) for
# reuse: by default 64
# consumers and every poll of the last 5 minutes. A batch read never reuses them (each read has a group id of its
# own), so a session running 20-window runs back to back kept 546,000 records of old polls and 1.1 GB of fetch
# buffers live, and its JVM ran out of a 2 GB heap (in a task: Spark exits the JVM; docs/performance.md,
# "Memory"). Keep a few, briefly: the heap then depends on the tasks running, not on the runs before.
KAFKA_CACHE_CONF = {
    "spark.kafka.consumer.cache.capacity": "4",
    "spark.kafka.consumer.cache.timeout": "30s",
    "spark.kafka.consumer.cache.evictorThreadRunInterval": "10s",
    "spark.kafka.consumer.fetchedData.cache.timeout": "30s",
    "spark.kafka.consumer.fetchedData.cache.evictorThreadRunInterval": "10s",
}
PYSPARK_DAEMON = "s3_archive.io.pyspark_daemon"
# s3a's credentials without static keys: the AWS SDK's default chain (environment, profile, web identity, container
# and instance roles), as boto3 does.
DEFAULT_CREDENTIALS = "software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider"
REDACTED_OPTIONS = r"(?i)url|sasl\.jaas|ssl\.keystore\.key|private key"
# The settings a Spark Connect client sends (the rest of spark_conf is the server's own, see session_conf).
CONNECT_CLIENT_CONF = ("spark.sql.", "spark.s3archive.")


class SparkResource(dg.ConfigurableResource):
    """A SparkSession with the Kafka source, Avro and S3A on its classpath.

    Built on dagster-pyspark's `LazyPySparkResource`: the session starts on first use, not when a run starts.
    `local[*]` by default; any master URL, or a Spark Connect endpoint through `remote` (`sc://host:15002`).
    The tuning fields (committer, Parquet row group, minPartitions, UI) are explained in docs/deployment.md,
    "Spark tuning", and measured by `make bench` (docs/benchmarks.md, docs/performance.md).
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
    s3_secret_access_key: str | None = Field(default=None, description="bind with dg.EnvVar; never logged, never "
                                             "on a command line (set in the session at run time)")
    s3_session_token: str | None = Field(default=None, description="with temporary static keys; like the secret")
    s3_path_style: bool = False
    s3_max_attempts: int = Field(default=3, ge=0, description="s3a's own retries: fs.s3a.attempts.maximum (the AWS "
                                 "SDK's attempts per request) and fs.s3a.retry.limit (s3a's retries of a failed "
                                 "operation)")
    s3_ca_bundle: str | None = Field(default=None, description="PEM CA bundle of a custom endpoint: the JVMs get a "
                                     "truststore of the JDK's CAs plus these (same path needed on executors)")
    s3_sse_kms_key_id: str | None = Field(default=None, description="SSE-KMS key for every object s3a writes")
    s3_storage_class: str | None = Field(default=None, description="storage class of the objects s3a writes")
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
    worker_jars_dir: str | None = Field(
        default=None, description="a `spark://` master: the directory on every worker machine that holds the jars "
        "of `scripts/fetch-jars` (e.g. baked into the worker image), or several separated by ':' (e.g. the `spark` "
        "and `iceberg` groups); executors put them on their classpath. None: ship the jars with spark.jars from "
        "the driver at every session start (~540 MB, docs/deployment.md)")
    local_slots_per_core: int = Field(default=2, ge=1, description="`local[*]`: task slots per core (local[N] "
                                      "with N = slots x cores): a task's thread waits for Kafka fetches and for its "
                                      "Python worker, so more tasks than cores keep the cores busy (docs/"
                                      "performance.md: 1.08x median at make bench's shape with 2 per core)")
    extra_conf: dict[str, str] = Field(default_factory=dict)
    _lazy: Any = PrivateAttr(default=None)  # dagster_pyspark's LazyPySparkResource, made on first use

    def spark_conf(self) -> dict[str, str]:
        if self.s3_committer not in S3_COMMITTERS:
            raise ValueError(f"SparkResource.s3_committer is {self.s3_committer!r}; allowed: "
                             f"{', '.join(S3_COMMITTERS)}")
        connect = self.connect_url
        jars = [] if connect else [str(p) for p in paths.spark_jars()]
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
        } | KAFKA_CACHE_CONF
        if self.kafka_min_partitions is not None:
            conf[KAFKA_MIN_PARTITIONS_CONF] = str(self.kafka_min_partitions)
        if self.s3_committer == "magic" and not connect:  # a Connect server configures its own committer
            if not any(os.path.basename(j).startswith("spark-hadoop-cloud_") for j in jars):
                raise MissingJars(
                    f"SparkResource.s3_committer is 'magic' but no spark-hadoop-cloud jar is in "
                    f"{paths.jar_dir('spark')}; run `scripts/fetch-jars` (jvm/spark/pom.xml lists it), or set "
                    "s3_committer='file'")
            conf |= MAGIC_COMMITTER_CONF
        if not connect:
            # Python workers import the installed pyspark, not Spark's zips of it (io/pyspark_daemon.py: 0.6 s
            # less per worker start, 0.13 s less per task)
            conf["spark.python.daemon.module"] = PYSPARK_DAEMON
            java_opts = driver_java_options(self.jvm_profile, jars if self.master.startswith("local") else [])
            if java_opts:
                conf["spark.driver.extraJavaOptions"] = java_opts
        if connect:
            conf["spark.remote"] = connect  # the Connect server carries its own jars
        elif self.master.startswith("local"):
            # Driver and executors share one JVM: put the jars on its classpath instead of shipping ~560 MB
            # through Spark's file server (which costs ~20 s at every session start).
            conf |= {"spark.master": self.local_master(), "spark.driver.extraClassPath": os.pathsep.join(jars),
                     "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
        else:
            conf |= self._cluster_conf(jars)
        conf |= self.s3a_conf()
        # Data source options in plans (UI, logs): Spark redacts keys or values matching secret|password|token by
        # default; also the Kafka source's inline client key (KafkaResource.spark_options).
        conf["spark.sql.redaction.options.regex"] = REDACTED_OPTIONS
        if self.s3_ca_bundle and not connect:
            conf |= self.s3a_truststore_conf(conf)
        return conf | self.extra_conf

    def local_master(self) -> str:
        """The local master Spark gets: `local[*]` becomes local[slots per core x cores]; any other as given."""
        if self.master != "local[*]":
            return self.master
        return f"local[{self.local_slots_per_core * (os.cpu_count() or 1)}]"

    def s3a_conf(self) -> dict[str, str]:
        """s3a's settings that hold no secret (they are on the driver JVM's command line): endpoint, region, path
        style, which credentials, SSE-KMS and storage class of what it writes."""
        check_storage_class(self.s3_storage_class, f"${S3_ENV['storage_class']}")
        s3a = {
            "endpoint.region": self.s3_region,
            "path.style.access": str(self.s3_path_style).lower(),
            "retry.limit": str(self.s3_max_attempts),
            "attempts.maximum": str(self.s3_max_attempts),
            # Static keys come through the session at run time (s3a_secret_conf), never through this conf.
            "aws.credentials.provider": (DEFAULT_CREDENTIALS if not self.s3_access_key_id
                                         else "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
                                         if self.s3_session_token
                                         else "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"),
        }
        if self.s3_endpoint_url:
            s3a |= {"endpoint": self.s3_endpoint_url,
                    "connection.ssl.enabled": str(self.s3_endpoint_url.startswith("https")).lower()}
        if self.s3_sse_kms_key_id:
            s3a |= {"encryption.algorithm": "SSE-KMS", "encryption.key": self.s3_sse_kms_key_id}
        if self.s3_storage_class:
            s3a["create.storage.class"] = self.s3_storage_class
        return {f"spark.hadoop.fs.s3a.{k}": v for k, v in s3a.items()}

    def s3a_secret_conf(self) -> dict[str, str]:
        """Static S3 keys as Hadoop settings of the session, set at run time (`session`): they reach s3a in the
        driver and, with each query's Hadoop conf, the executors, but no command line (`ps`); Spark's redaction
        (`spark.redaction.regex`: secret, token, access.key) hides them in its UI. Without keys: none (the JVMs'
        default chain, e.g. AWS_* in their environment, which the driver JVM inherits from this process)."""
        if not self.s3_access_key_id:
            return {}
        secret = {"fs.s3a.access.key": self.s3_access_key_id, "fs.s3a.secret.key": self.s3_secret_access_key or ""}
        if self.s3_session_token:
            secret["fs.s3a.session.token"] = self.s3_session_token
        return secret

    def s3a_truststore_conf(self, conf: dict[str, str]) -> dict[str, str]:
        """JVM options making driver and executors trust `s3_ca_bundle` (appended to any already in `conf`)."""
        store = java_truststore(self.s3_ca_bundle, f"${S3_ENV['ca_bundle']}")
        opts = (f"-Djavax.net.ssl.trustStore={store} -Djavax.net.ssl.trustStoreType=PKCS12 "
                f"-Djavax.net.ssl.trustStorePassword={TRUSTSTORE_PASSWORD}")
        keys = ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions")
        return {k: f"{conf[k]} {opts}" if conf.get(k) else opts for k in keys}

    @property
    def connect_url(self) -> str | None:
        """The Spark Connect endpoint: `remote`, or a `master` that is an `sc://` URL; None for a classic session."""
        if self.remote:
            return self.remote
        return self.master if self.master.startswith("sc://") else None

    @contextmanager
    def _jvm_credentials(self) -> Iterator[None]:
        """Static S3 keys in the environment of a driver JVM that this process launches (the AWS SDK's default
        chain: what Iceberg's Glue client and S3FileIO use), never on its command line; this process's own
        environment is restored right after the launch."""
        env = {"AWS_ACCESS_KEY_ID": self.s3_access_key_id, "AWS_SECRET_ACCESS_KEY": self.s3_secret_access_key,
               "AWS_SESSION_TOKEN": self.s3_session_token, "AWS_REGION": self.s3_region}
        add = {k: v for k, v in env.items() if v}
        # keys already in the environment are the chain's own: never mix them with ours
        if self.connect_url is not None or not self.s3_access_key_id or "AWS_ACCESS_KEY_ID" in os.environ:
            yield
            return
        saved = {k: os.environ.get(k) for k in add}
        os.environ.update(add)
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def _cluster_conf(self, jars: list[str]) -> dict[str, str]:
        """A cluster master (`spark://`, `yarn`, `k8s://`): executors are other JVMs, which need the jars too."""
        conf = {"spark.master": self.master}
        if self.worker_jars_dir:
            # The driver (this process) has the jars locally; each worker has them at worker_jars_dir.
            dirs = [d.rstrip("/") for d in self.worker_jars_dir.split(os.pathsep) if d.strip()]
            conf |= {"spark.driver.extraClassPath": os.pathsep.join(jars),
                     "spark.executor.extraClassPath": os.pathsep.join(f"{d}/*" for d in dirs)}
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
        return client | {"spark.remote": connect}

    def session(self):
        """The SparkSession (one per process: a second call, or another resource instance, reuses it)."""
        if self._lazy is None:
            from dagster_pyspark import LazyPySparkResource  # imports pyspark: not at load

            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            self._lazy = LazyPySparkResource(spark_config=self.session_conf())
            with self._jvm_credentials():  # the JVM starts here
                self._lazy.spark_session  # noqa: B018
            if self.connect_url is None and self.master.startswith("local"):
                start_python_workers(self._lazy.spark_session)
        spark = self._lazy.spark_session
        if self.connect_url is None:  # a Connect server owns its S3A settings: no credential is sent to it
            for key, value in self.s3a_secret_conf().items():
                spark.conf.set(key, value)
        return spark


def start_python_workers(spark: Any) -> threading.Thread:
    """Starts PySpark's worker daemon now, beside whatever the driver does next, instead of inside the first
    Python task. In a fresh process the daemon's start (an interpreter, pyspark and the write path, about 2 s:
    io/pyspark_daemon.py) came after the driver had planned the run's job (about 3 s of a new JVM), and the run
    waited for both in turn (docs/performance.md, "A fresh run"). One task of
    a one-row mapInArrow job does it (an RDD job would start a daemon of its own: Spark keeps one per
    runner environment); its worker stays in the pool for the run's first task. Local masters only: there
    the driver's JVM is the executor. A failure is logged and the run's own tasks start the daemon as before."""

    def run() -> None:
        sc = spark.sparkContext
        try:
            sc.setJobGroup(WARM_UP_GROUP, "s3-archive: start the Python workers before the run's job needs them")
            # the run's tasks are mapInArrow's: the same Python runner and environment, hence the same daemon
            spark.range(1, numPartitions=1).mapInArrow(same_batches, "id long").collect()
        except Exception as e:  # noqa: BLE001 (the run does not depend on it: its tasks start the daemon)
            log.warning("starting the Python workers ahead of the run failed (the run's tasks start them): %s", e)

    thread = threading.Thread(target=run, name="s3-archive-python-workers", daemon=True)
    thread.start()
    return thread
