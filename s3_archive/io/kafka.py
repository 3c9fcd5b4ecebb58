"""KafkaResource: a Kafka cluster, reached with confluent-kafka (admin, producer, consumer) and by Spark's Kafka
source with the same settings. Holds connection settings only; the SASL password is bound with `dg.EnvVar` and
never logged; errors name the bootstrap servers, never a credential.
"""

from __future__ import annotations

from typing import Any

import dagster as dg
from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from pydantic import Field

from s3_archive.model.errors import KafkaUnavailable, UnknownTopic


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
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers,
                                "security.protocol": self.security_protocol}
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
