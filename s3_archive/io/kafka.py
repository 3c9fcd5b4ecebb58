"""KafkaResource: a Kafka cluster, reached with confluent-kafka (admin, producer, consumer) and by Spark's Kafka
source with the same settings: bootstrap servers, security protocol, SASL (PLAIN, SCRAM-SHA-256/512) and TLS (a CA,
a client certificate and key for mTLS, hostname verification). Each setting is its own environment variable
(`KAFKA_ENV`, bound in defs/resources.py). Secrets (the SASL password, the key's password) are never logged, and
no error carries one: errors name the bootstrap servers and the user.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import dagster as dg
from confluent_kafka import ConsumerGroupTopicPartitions, IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, OffsetSpec, ResourceType
from pydantic import Field, PrivateAttr

from s3_archive.model.errors import InvalidConfig, KafkaRefused, KafkaUnavailable, UnknownTopic
from s3_archive.model.logger import Logger

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
LOGIN_MODULES = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
                 "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
                 "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}
# Each KafkaResource setting and the environment variable it is read from (docs/configuration.md, "Environment").
KAFKA_ENV = {
    "bootstrap_servers": "S3_ARCHIVE_KAFKA_BOOTSTRAP_SERVERS",
    "security_protocol": "S3_ARCHIVE_KAFKA_SECURITY_PROTOCOL",
    "sasl_mechanism": "S3_ARCHIVE_KAFKA_SASL_MECHANISM",
    "sasl_username": "S3_ARCHIVE_KAFKA_SASL_USERNAME",
    "sasl_password": "S3_ARCHIVE_KAFKA_SASL_PASSWORD",
    "ssl_ca_location": "S3_ARCHIVE_KAFKA_SSL_CA_LOCATION",
    "ssl_certificate_location": "S3_ARCHIVE_KAFKA_SSL_CERTIFICATE_LOCATION",
    "ssl_key_location": "S3_ARCHIVE_KAFKA_SSL_KEY_LOCATION",
    "ssl_key_password": "S3_ARCHIVE_KAFKA_SSL_KEY_PASSWORD",
    "ssl_verify_hostname": "S3_ARCHIVE_KAFKA_SSL_VERIFY_HOSTNAME",
    "timeout_s": "S3_ARCHIVE_KAFKA_TIMEOUT_S",
}
_AUTH_CODES = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED})
_REFUSALS = _AUTH_CODES | {KafkaError._SSL}
# A group coordinator that is not ready yet: a cluster just started (its offsets topic still being made) or a
# coordinator moving. Asked again.
_COORDINATOR_NOT_READY = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
                          KafkaError.COORDINATOR_LOAD_IN_PROGRESS}
T = TypeVar("T")


class _Refusals:
    """A client's `error_cb`: keeps the authentication and TLS errors it reports. librdkafka reports them only
    there (a call just times out or sees a transport failure), and delivers them on `poll`."""

    def __init__(self) -> None:
        self.seen: list[KafkaError] = []

    def __call__(self, err: KafkaError) -> None:
        if err.code() in _REFUSALS:
            self.seen.append(err)

    def first(self, client: Any) -> KafkaError | None:
        client.poll(0)
        return self.seen[0] if self.seen else None


# Answers to a request sent to a partition's leader as the client last knew it (a topic just created, a leader that
# moved): retried after the topic's metadata is asked for again, until the request's timeout.
# A broker that was fenced (a restart, a pause longer than its session) comes back with its partitions' leader epochs
# moved: a request made with the kept client's older view fails with FENCED_LEADER_EPOCH until it asks again.
# librdkafka's admin ListOffsets answers _NOENT ("Failed to query partition leaders: No leaders found") when its
# metadata names no leader for the partitions: a broker the controller fenced (it was frozen or partitioned past its
# session) and not yet back, a leader being elected. Transient like the others; the request timeout still bounds it.
_LEADER_MOVED = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.FENCED_LEADER_EPOCH,
                 KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError._NOENT)
# The kept admin client retries a lost broker at most a second apart (librdkafka's default backs off to 10 s), so a
# request made right after a broker restart does not wait out a long backoff.
ADMIN_RECONNECT = {"reconnect.backoff.max.ms": 1000}


def jaas_string(value: str) -> str:
    """`value` as a double-quoted string of Kafka's JAAS parser (java.io.StreamTokenizer): a backslash escapes the
    next character, and a quoted string may not span lines, so backslash, quote, CR and LF are escaped."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{escaped}"'


def jaas_config(mechanism: str, username: str, password: str) -> str:
    """The `sasl.jaas.config` of a Java Kafka client logging in as `username` (quoted, never concatenated raw)."""
    return (f"{LOGIN_MODULES[mechanism]} required username={jaas_string(username)} "
            f"password={jaas_string(password)};")


def _env(field: str) -> str:
    return f"${KAFKA_ENV[field]}"


class KafkaResource(dg.ConfigurableResource):
    """A Kafka cluster, reached with confluent-kafka (admin, producer, consumer) and by Spark's Kafka source.

    Settings are checked when a client is made (`check`), each error naming the environment variable to fix."""

    bootstrap_servers: str = Field(description="host:port[,host:port…]")
    security_protocol: str = Field(default="PLAINTEXT", description="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")
    sasl_mechanism: str | None = Field(default=None, description="PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
    sasl_username: str | None = None
    sasl_password: str | None = Field(default=None, description="bind with dg.EnvVar; never logged")
    ssl_ca_location: str | None = Field(default=None, description="CA certificate(s), PEM; None: the system's CAs")
    ssl_certificate_location: str | None = Field(default=None, description="client certificate, PEM (mTLS)")
    ssl_key_location: str | None = Field(default=None, description="client private key, PEM (PKCS#8 for Spark)")
    ssl_key_password: str | None = Field(default=None, description="the client key's password; bind with dg.EnvVar")
    ssl_verify_hostname: bool = Field(default=True, description="False skips checking that the broker's "
                                      "certificate names the host (the certificate is still verified)")
    timeout_s: float = Field(default=15.0, description="each admin request's timeout in seconds (> 0)")
    _admin: Any = PrivateAttr(default=None)  # (pid, AdminClient): see `admin`

    @property
    def sasl(self) -> bool:
        return self.security_protocol.upper().startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.security_protocol.upper() in ("SSL", "SASL_SSL")

    def check(self) -> None:
        """InvalidConfig naming the variable when the settings cannot work together (never echoing a secret)."""
        if not self.timeout_s > 0:
            raise InvalidConfig(f"the Kafka request timeout ({_env('timeout_s')}) is {self.timeout_s:g}; it must be a "
                                "number of seconds > 0")
        protocol = self.security_protocol.upper()
        if protocol not in PROTOCOLS:
            raise InvalidConfig(f"Kafka security protocol {self.security_protocol!r} ({_env('security_protocol')}) "
                                f"is not supported; allowed: {', '.join(PROTOCOLS)}")
        if self.sasl:
            if (self.sasl_mechanism or "").upper() not in MECHANISMS:
                raise InvalidConfig(f"Kafka security protocol {protocol} needs a SASL mechanism "
                                    f"({_env('sasl_mechanism')}); got {self.sasl_mechanism!r}, allowed: "
                                    f"{', '.join(MECHANISMS)}")
            missing = [_env(f) for f in ("sasl_username", "sasl_password") if not getattr(self, f)]
            if missing:
                raise InvalidConfig(f"Kafka security protocol {protocol} needs {' and '.join(missing)}")
        else:
            given = [_env(f) for f in ("sasl_mechanism", "sasl_username", "sasl_password") if getattr(self, f)]
            if given:
                raise InvalidConfig(f"{', '.join(given)} set, but the Kafka security protocol is {protocol} "
                                    f"({_env('security_protocol')}): use SASL_SSL or SASL_PLAINTEXT, or unset them")
        tls_fields = ("ssl_ca_location", "ssl_certificate_location", "ssl_key_location", "ssl_key_password")
        if not self.tls:
            given = [_env(f) for f in tls_fields if getattr(self, f)]
            if given:
                raise InvalidConfig(f"{', '.join(given)} set, but the Kafka security protocol is {protocol} "
                                    f"({_env('security_protocol')}): use SSL or SASL_SSL, or unset them")
        if bool(self.ssl_certificate_location) != bool(self.ssl_key_location):
            raise InvalidConfig(f"a Kafka client certificate needs its key: set both {_env('ssl_certificate_location')}"
                                f" and {_env('ssl_key_location')}, or neither")
        for f in tls_fields[:3]:
            path = getattr(self, f)
            if path and not os.path.isfile(path):
                raise InvalidConfig(f"{_env(f)} is {path!r}, which is not a readable file")

    @property
    def who(self) -> str:
        """The cluster and the login, for errors: 'Kafka at host:9096 as user 'archiver' (SCRAM-SHA-512)'."""
        who = f"Kafka at {self.bootstrap_servers}"
        if self.sasl and self.sasl_username:
            who += f" as user {self.sasl_username!r} ({self.sasl_mechanism})"
        return who

    def client_config(self, **extra: Any) -> dict[str, Any]:
        """librdkafka settings of an admin client, producer or consumer (plus `extra`)."""
        self.check()
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers,
                                "security.protocol": self.security_protocol.upper()}
        if self.sasl:
            conf |= {"sasl.mechanism": self.sasl_mechanism.upper(), "sasl.username": self.sasl_username,
                     "sasl.password": self.sasl_password}
        if self.tls:
            conf |= {k: v for k, v in (("ssl.ca.location", self.ssl_ca_location),
                                       ("ssl.certificate.location", self.ssl_certificate_location),
                                       ("ssl.key.location", self.ssl_key_location),
                                       ("ssl.key.password", self.ssl_key_password)) if v}
            if not self.ssl_verify_hostname:
                conf["ssl.endpoint.identification.algorithm"] = "none"
        return conf | extra

    def spark_options(self) -> dict[str, str]:
        """The same connection as `kafka.*` options for Spark's Kafka source (a Java client). They travel with the
        query (to the executors, or a Spark Connect server), never on a command line; Spark redacts
        `sasl.jaas.config` in its logs and UI. Files (CA) must exist at the same path where executors run; the
        client certificate and key are passed inline (PEM), so they need not."""
        self.check()
        opts = {"kafka.bootstrap.servers": self.bootstrap_servers,
                "kafka.security.protocol": self.security_protocol.upper()}
        if self.sasl:
            mechanism = self.sasl_mechanism.upper()
            opts |= {"kafka.sasl.mechanism": mechanism,
                     "kafka.sasl.jaas.config": jaas_config(mechanism, self.sasl_username, self.sasl_password)}
        if self.tls:
            if self.ssl_ca_location:
                opts |= {"kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": self.ssl_ca_location}
            if self.ssl_certificate_location:
                with open(self.ssl_certificate_location) as cert, open(self.ssl_key_location) as key:
                    opts |= {"kafka.ssl.keystore.type": "PEM", "kafka.ssl.keystore.certificate.chain": cert.read(),
                             "kafka.ssl.keystore.key": key.read()}
                if self.ssl_key_password:
                    opts["kafka.ssl.key.password"] = self.ssl_key_password
            if not self.ssl_verify_hostname:
                opts["kafka.ssl.endpoint.identification.algorithm"] = ""
        return opts

    def scrub(self, text: str) -> str:
        """`text` without any secret of this resource (a last guard on messages built from client errors)."""
        for secret in (self.sasl_password, self.ssl_key_password):
            if secret:
                text = text.replace(secret, "***")
        return text

    def admin(self) -> AdminClient:
        """This resource's admin client, made on first use and kept for the process (a forked child makes its own);
        its authentication and TLS errors are kept for `unavailable` (`refusals`). One client, not one per
        request: each new client opens its connections again (with SASL/TLS, their handshakes too), and on a
        loopback broker about 1 in 100 `list_offsets` through a new client waited 1 or 3 s for its connection,
        so a run (four admin requests) sometimes stalled 3 s with the cores idle (docs/performance.md,
        "Warm archive"). It reconnects after a broker restart within a second of the broker's return."""
        cached = self._admin
        if cached is not None and cached[0] == os.getpid():
            return cached[1]
        refusals = _Refusals()
        admin = AdminClient(self.client_config(error_cb=refusals, **ADMIN_RECONNECT))
        admin.refusals = refusals
        self._admin = (os.getpid(), admin)  # a race makes two; one is kept, both work
        return admin

    def close(self) -> None:
        """Destroy the kept admin client, if this process made it (the next request makes a new one): its
        threads stop, and stop reconnecting to a cluster that went away."""
        cached, self._admin = self._admin, None
        if cached is not None and cached[0] == os.getpid():
            cached[1].__exit__(None, None, None)  # AdminClient has no close(): leaving its context destroys it

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        """The copy Dagster made for a run or a sensor tick closes its admin client when they end."""
        self.close()

    def unavailable(self, e: BaseException, client: Any = None, what: str = "", since: float | None = None,
                    ) -> KafkaUnavailable:
        """One clear KafkaUnavailable for a failed call of `client` (made by `admin`) that started at `since`
        (time.monotonic(); the message says how long it really took): refused credentials or a failed TLS handshake
        say so, naming the servers and the user, never a secret."""
        err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
        refusals = getattr(client, "refusals", None)
        refused = refusals.first(client) if refusals is not None else None
        if refused is None and err is not None and err.code() in _REFUSALS:
            refused = err
        doing = f" ({what})" if what else ""
        if refused is not None:
            reason = self.scrub(refused.str())
            if refused.code() == KafkaError._SSL:
                fix = f"Check {_env('ssl_ca_location')} (the CA that signed the broker's certificate)"
                if self.ssl_certificate_location:
                    fix += f" and the client certificate {_env('ssl_certificate_location')}"
                return KafkaRefused(f"the TLS handshake with {self.who} failed{doing}: {reason}. {fix}")
            fix = (f"Check {_env('sasl_username')} and {_env('sasl_password')}" if self.sasl
                   else f"Check the client certificate {_env('ssl_certificate_location')} and key")
            return KafkaRefused(f"{self.who} refused the login{doing}: {reason}. {fix}")
        text = err.str() if err is not None else str(e)
        if err is not None and text.rstrip().endswith(":"):  # the request's name alone ("ConsumerGroupDescribe: ")
            text += err.name()
        reason = self.scrub(text)
        took = f"after {time.monotonic() - since:.1f}s, " if since is not None else ""
        return KafkaUnavailable(f"cannot reach {self.who}{doing} ({took}request timeout {self.timeout_s:.0f}s): "
                                f"{reason}. Check bootstrap_servers, the network and the credentials")

    def riding(self, outage_s: float, call: Callable[[], T], log: Logger | None = None) -> T:
        """`call()` (a request of this resource), made again while the cluster cannot be reached — a broker
        restarting, its partitions' leaders not elected yet — until `outage_s` seconds after the first try; then
        the last KafkaUnavailable, saying how long the cluster stayed unreachable. A refused login or TLS handshake
        (KafkaRefused) and any other error are raised at once."""
        start, warned = time.monotonic(), False
        while True:
            try:
                return call()
            except KafkaRefused:
                raise
            except KafkaUnavailable as e:
                elapsed = time.monotonic() - start
                if elapsed >= outage_s:
                    raise KafkaUnavailable(f"{e}; Kafka stayed unreachable for {elapsed:.1f}s "
                                           f"(broker_outage_seconds: {outage_s:g})") from e
                if log is not None and not warned:
                    log.warning(f"{e}; trying again for up to {outage_s - elapsed:.0f}s more (broker_outage_seconds)")
                    warned = True
                time.sleep(min(1.0, outage_s - elapsed))

    def topics(self) -> list[str]:
        """Every topic on the cluster (one metadata request)."""
        admin, since = self.admin(), time.monotonic()
        try:
            return sorted(admin.list_topics(timeout=self.timeout_s).topics)
        except KafkaException as e:
            raise self.unavailable(e, admin, since=since) from e

    def partitions(self, topic: str) -> list[int]:
        """The topic's partition ids, or UnknownTopic / KafkaUnavailable."""
        admin, since = self.admin(), time.monotonic()
        try:
            md = admin.list_topics(topic=topic, timeout=self.timeout_s)
        except KafkaException as e:
            raise self.unavailable(e, admin, f"reading the metadata of topic {topic!r}", since=since) from e
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
        found = self.list_offsets_many({(topic, p): s for p, s in specs.items()}, read_committed)
        return {p: o for (_, p), o in found.items()}

    def list_offsets_many(self, specs: dict[tuple[str, int], OffsetSpec], read_committed: bool = False,
                          ) -> dict[tuple[str, int], int]:
        """`list_offsets` for partitions of any topics at once: one request per broker, not one per topic."""
        if not specs:
            return {}
        admin, since = self.admin(), time.monotonic()
        level = IsolationLevel.READ_COMMITTED if read_committed else IsolationLevel.READ_UNCOMMITTED
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                futures = admin.list_offsets({TopicPartition(t, p): s for (t, p), s in specs.items()},
                                             isolation_level=level, request_timeout=self.timeout_s)
                return {(tp.topic, tp.partition): f.result(timeout=self.timeout_s + 5).offset
                        for tp, f in futures.items()}
            except (KafkaException, TimeoutError) as e:
                err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
                if err is None or err.code() not in _LEADER_MOVED or time.monotonic() > deadline:
                    topics = ", ".join(repr(t) for t in sorted({t for t, _ in specs}))
                    raise self.unavailable(e, admin, f"listing the offsets of {topics}", since=since) from e
                # The kept client's view of the leaders is older than the request (a topic just created, a
                # leader moved): ask for the topics' metadata again, then retry.
                for topic in sorted({t for t, _ in specs}):
                    try:
                        admin.list_topics(topic=topic, timeout=self.timeout_s)
                    except KafkaException:
                        pass
                time.sleep(0.1)

    def topic_partitions(self, topics: list[str]) -> dict[str, list[int]]:
        """The partition ids of each of `topics` that exists, from one metadata request for the whole cluster."""
        admin, since = self.admin(), time.monotonic()
        try:
            md = admin.list_topics(timeout=self.timeout_s)
        except KafkaException as e:
            raise self.unavailable(e, admin, since=since) from e
        out = {}
        for topic in topics:
            t = md.topics.get(topic)
            if t is not None and t.error is None and t.partitions:
                out[topic] = sorted(t.partitions)
        return out

    def group_request(self, what: str, request: Callable[[AdminClient], Any], missing_ok: bool = False) -> Any:
        """`request(admin)`'s future's result: a request to a consumer group's coordinator. A coordinator not ready
        yet (a cluster just started, its offsets topic still being made; a coordinator moving) is asked again until
        the request timeout; a group Kafka does not know gives None when `missing_ok`; any other error is
        KafkaUnavailable saying `what` was being done. The one retry rule of every group request."""
        admin, since = self.admin(), time.monotonic()
        while True:
            try:
                return request(admin).result(timeout=self.timeout_s + 5)
            except KafkaException as e:
                err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
                if missing_ok and err is not None and err.code() == KafkaError.GROUP_ID_NOT_FOUND:
                    return None
                if err is None or err.code() not in _COORDINATOR_NOT_READY or \
                        time.monotonic() - since > self.timeout_s:
                    raise self.unavailable(e, admin, what, since=since) from e
                time.sleep(0.2)
            except TimeoutError as e:
                raise self.unavailable(e, admin, what, since=since) from e

    def group_offsets(self, group: str, topic: str, partitions: list[int]) -> dict[int, int]:
        """The consumer group's committed offsets of the topic's partitions (absent: none committed). Admin API:
        nothing joins the group."""
        request = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in partitions])]
        result = self.group_request(
            f"reading the offsets of consumer group {group!r}",
            lambda admin: admin.list_consumer_group_offsets(request, request_timeout=self.timeout_s)[group])
        return {tp.partition: tp.offset for tp in result.topic_partitions if tp.error is None and tp.offset >= 0}

    def set_group_offsets(self, group: str, topic: str, offsets: dict[int, int], note: str = "") -> None:
        """Commit `offsets` (the next offset to read, per partition) as the consumer group's, through the admin
        API: the group is never joined, so no consumer of it is rebalanced. Kafka refuses it while the group has
        active members (someone else consumes with that group id)."""
        if not offsets:
            return
        request = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p, o, metadata=note)
                                                        for p, o in sorted(offsets.items())])]
        result = self.group_request(
            f"committing the offsets of consumer group {group!r}",
            lambda admin: admin.alter_consumer_group_offsets(request, request_timeout=self.timeout_s)[group])
        failed = [f"partition {tp.partition}: {tp.error.str()}" for tp in result.topic_partitions
                  if tp.error is not None]
        if failed:
            raise KafkaUnavailable(f"{self.who} refused the offsets of consumer group {group!r}: {'; '.join(failed)}")

    def group_members(self, group: str) -> int:
        """How many members the consumer group has now (a running consumer, e.g. a connector's task, is one); 0 for
        a group Kafka does not know."""
        desc = self.group_request(
            f"describing consumer group {group!r}",
            lambda admin: admin.describe_consumer_groups([group], request_timeout=self.timeout_s)[group],
            missing_ok=True)
        return 0 if desc is None else len(desc.members)

    def count_records(self, topic: str, partition: int, start: int, end: int, timeout_s: float = 30.0) -> int:
        """How many committed records (read_committed: no transaction markers, no aborted records) the partition
        holds at offsets [start, end). The range must still be in the log."""
        if end <= start:
            return 0
        from confluent_kafka import Consumer

        consumer = Consumer(self.client_config(**{
            "group.id": f"s3-archive-count-{uuid.uuid4().hex}", "enable.auto.commit": False,
            "isolation.level": "read_committed", "auto.offset.reset": "earliest", "enable.partition.eof": True}))
        try:
            consumer.assign([TopicPartition(topic, partition, start)])
            count, deadline = 0, time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                for msg in consumer.consume(10_000, timeout=1.0):
                    if msg.error() is None and msg.offset() < end:
                        count += 1
                pos = consumer.position([TopicPartition(topic, partition)])[0].offset
                if pos >= end or pos >= self.list_offsets(topic, {partition: OffsetSpec.latest()},
                                                          read_committed=True)[partition]:
                    return count
            raise KafkaUnavailable(f"counting the records of {topic!r} partition {partition} at offsets [{start}, "
                                   f"{end}) took longer than {timeout_s:.0f}s on {self.who}")
        finally:
            consumer.close()

    def producer(self, **extra: Any):
        from confluent_kafka import Producer

        return Producer(self.client_config(**extra))

    def retention_ms(self, topic: str) -> int:
        """The topic's `retention.ms` (broker default included); -1: infinite. One DescribeConfigs round trip."""
        admin, since = self.admin(), time.monotonic()
        resource = ConfigResource(ResourceType.TOPIC, topic)
        try:
            entries = admin.describe_configs([resource], request_timeout=self.timeout_s)[resource].result(
                timeout=self.timeout_s + 5)
        except (KafkaException, TimeoutError) as e:
            raise self.unavailable(e, admin, f"describing the configs of topic {topic!r}", since=since) from e
        return int(entries["retention.ms"].value)

    def first_record_timestamps(self, topic: str, offsets: dict[int, int], timeout_s: float = 10.0) -> dict[int, int]:
        """Per partition, the timestamp (ms) of the first committed record at or after the given offset: one
        consumer, assigned to every partition at once, reads one record each (read_committed). A partition whose
        record does not arrive within `timeout_s` (e.g. only aborted records or markers left) is left out."""
        if not offsets:
            return {}
        from confluent_kafka import Consumer

        consumer = Consumer(self.client_config(**{
            "group.id": f"s3-archive-headroom-{uuid.uuid4().hex}", "enable.auto.commit": False,
            "isolation.level": "read_committed", "auto.offset.reset": "earliest", "enable.partition.eof": False,
            "fetch.max.bytes": 1 << 20, "max.partition.fetch.bytes": 1 << 20}))
        try:
            consumer.assign([TopicPartition(topic, p, o) for p, o in offsets.items()])
            out: dict[int, int] = {}
            deadline = time.monotonic() + timeout_s
            while len(out) < len(offsets) and time.monotonic() < deadline:
                msg = consumer.poll(min(1.0, max(0.0, deadline - time.monotonic())))
                if msg is None or msg.error() is not None:
                    continue
                if msg.partition() not in out:
                    out[msg.partition()] = msg.timestamp()[1]
                    # Stop fetching a partition once its record is read.
                    consumer.pause([TopicPartition(topic, msg.partition())])
            return out
        finally:
            consumer.close()
