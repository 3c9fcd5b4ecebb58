"""Typed Dagster resources for Kafka, S3 and Spark. They hold connection settings only; no business logic.

Secrets (SASL password, AWS secret key) are bound with `dg.EnvVar` in `definitions.py` and resolved at run time.
No field value is ever logged; errors name the endpoint, never a credential.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import dagster as dg
from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from dagster_pyspark import LazyPySparkResource
from pydantic import Field, PrivateAttr

from s3_archive import paths


class KafkaUnavailable(RuntimeError):
    """The broker could not be reached or refused us."""


class UnknownTopic(ValueError):
    """A configured topic does not exist on the cluster."""


class KafkaResource(dg.ConfigurableResource):
    """A Kafka cluster, reached with confluent-kafka (admin, producer, consumer) and by Spark's Kafka source."""

    bootstrap_servers: str = Field(description="host:port[,host:port…]")
    security_protocol: str = Field(default="PLAINTEXT", description="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")
    sasl_mechanism: str | None = Field(default=None, description="PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
    sasl_username: str | None = None
    sasl_password: str | None = Field(default=None, description="bind with dg.EnvVar; never logged")
    ssl_ca_location: str | None = None
    timeout_s: float = Field(default=15.0, description="admin request timeout")

    def client_config(self, **extra: Any) -> dict[str, Any]:
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers, "security.protocol": self.security_protocol}
        if self.sasl_mechanism:
            conf |= {"sasl.mechanism": self.sasl_mechanism, "sasl.username": self.sasl_username,
                     "sasl.password": self.sasl_password}
        if self.ssl_ca_location:
            conf["ssl.ca.location"] = self.ssl_ca_location
        return conf | extra

    def spark_options(self) -> dict[str, str]:
        """The same connection as `kafka.*` options for Spark's Kafka source (a Java client)."""
        opts = {"kafka.bootstrap.servers": self.bootstrap_servers,
                "kafka.security.protocol": self.security_protocol}
        if self.sasl_mechanism:
            module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if self.sasl_mechanism == "PLAIN"
                      else "org.apache.kafka.common.security.scram.ScramLoginModule")
            opts |= {"kafka.sasl.mechanism": self.sasl_mechanism,
                     "kafka.sasl.jaas.config": f'{module} required username="{self.sasl_username}" '
                                               f'password="{self.sasl_password}";'}
        if self.ssl_ca_location:
            opts |= {"kafka.ssl.truststore.location": self.ssl_ca_location, "kafka.ssl.truststore.type": "PEM"}
        return opts

    def admin(self) -> AdminClient:
        return AdminClient(self.client_config())

    def _unavailable(self, e: BaseException) -> KafkaUnavailable:
        err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
        reason = err.str() if err is not None else str(e)
        return KafkaUnavailable(f"cannot reach Kafka at {self.bootstrap_servers} within {self.timeout_s:.0f}s: "
                                f"{reason}. Check bootstrap_servers, the network and the credentials")

    def topics(self) -> list[str]:
        """Every topic on the cluster (one metadata request)."""
        try:
            return sorted(self.admin().list_topics(timeout=self.timeout_s).topics)
        except KafkaException as e:
            raise self._unavailable(e) from e

    def partitions(self, topic: str) -> list[int]:
        """The topic's partition ids, or UnknownTopic / KafkaUnavailable."""
        try:
            md = self.admin().list_topics(topic=topic, timeout=self.timeout_s)
        except KafkaException as e:
            raise self._unavailable(e) from e
        t = md.topics.get(topic)
        if t is None or t.error is not None and t.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise UnknownTopic(f"topic {topic!r} does not exist on {self.bootstrap_servers}")
        if t.error is not None:
            raise KafkaUnavailable(f"metadata for topic {topic!r} failed: {t.error.str()}")
        return sorted(t.partitions)

    def offsets(self, topic: str, spec: str, partitions: list[int] | None = None) -> dict[int, int]:
        """Log start (`spec="earliest"`) or high watermark (`"latest"`) per partition, in one admin round trip."""
        parts = partitions if partitions is not None else self.partitions(topic)
        offset_spec = OffsetSpec.earliest() if spec == "earliest" else OffsetSpec.latest()
        return self.list_offsets(topic, {p: offset_spec for p in parts})

    def list_offsets(self, topic: str, specs: dict[int, OffsetSpec], read_committed: bool = False,
                     ) -> dict[int, int]:
        """One admin round trip for any OffsetSpec per partition. With `read_committed`, `latest` is the last
        stable offset. -1 (from `OffsetSpec.for_timestamp`: no record that new) is returned as is."""
        if not specs:
            return {}
        admin = self.admin()  # keep a reference: a collected client never resolves its futures
        level = IsolationLevel.READ_COMMITTED if read_committed else IsolationLevel.READ_UNCOMMITTED
        try:
            futures = admin.list_offsets({TopicPartition(topic, p): s for p, s in specs.items()},
                                         isolation_level=level, request_timeout=self.timeout_s)
            return {tp.partition: f.result(timeout=self.timeout_s + 5).offset for tp, f in futures.items()}
        except (KafkaException, TimeoutError) as e:
            raise self._unavailable(e) from e

    def producer(self, **extra: Any):
        from confluent_kafka import Producer

        return Producer(self.client_config(**extra))


# Spark conf key through which `SparkResource.kafka_min_partitions` reaches `stage.read_window` (a conf, not an
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
    ui_enabled: bool = Field(default=False, description="Spark's web UI (off: nothing listens on port 4040)")
    extra_conf: dict[str, str] = Field(default_factory=dict)
    _lazy: LazyPySparkResource | None = PrivateAttr(default=None)

    def spark_conf(self) -> dict[str, str]:
        if self.s3_committer not in S3_COMMITTERS:
            raise ValueError(f"SparkResource.s3_committer is {self.s3_committer!r}; allowed: {', '.join(S3_COMMITTERS)}")
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
                raise paths.MissingJars(
                    f"SparkResource.s3_committer is 'magic' but no spark-hadoop-cloud jar is in "
                    f"{paths.jar_dir('spark')}; run `scripts/fetch-jars` (jvm/spark/pom.xml lists it), or set "
                    "s3_committer='file'")
            conf |= MAGIC_COMMITTER_CONF
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

