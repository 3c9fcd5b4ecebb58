"""KafkaResource: each setting on its own, checked with errors naming the variable; the same connection for
librdkafka and for Spark's Java client (JAAS quoting); errors that never carry a secret."""

from __future__ import annotations

import re
import time

import dagster as dg
import pytest
from confluent_kafka import KafkaError, KafkaException
from hypothesis import given
from hypothesis import strategies as st

from s3_archive.io.kafka import KafkaResource, jaas_config, jaas_string
from s3_archive.model.errors import InvalidConfig, KafkaRefused, KafkaUnavailable

SASL = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "archiver",
        "sasl_password": "pw-never-shown"}


def stream_tokenizer_quoted(text: str) -> tuple[str, str]:
    """How java.io.StreamTokenizer (Kafka's JAAS parser) reads a quoted string at the start of `text`: the string
    and the rest. A backslash escapes (a b f n r t v, 1-3 octal digits, else the character itself); a newline
    ends the string."""
    quote, i, out = text[0], 1, []
    escapes = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
    while i < len(text) and text[i] not in (quote, "\n", "\r"):
        c = text[i]
        if c == "\\":
            i += 1
            c = text[i]
            if c in "01234567":
                digits = c
                while len(digits) < (3 if digits[0] <= "3" else 2) and text[i + 1] in "01234567":
                    i += 1
                    digits += text[i]
                c = chr(int(digits, 8))
            else:
                c = escapes.get(c, c)
        out.append(c)
        i += 1
    return "".join(out), text[i + 1:]


@given(st.text())
def test_jaas_strings_read_back_as_written(value):
    parsed, rest = stream_tokenizer_quoted(jaas_string(value) + ";")
    assert (parsed, rest) == (value, ";")


def test_jaas_config_quotes_names_and_passwords_with_quotes_spaces_and_backslashes():
    conf = jaas_config("SCRAM-SHA-512", 'arch "iver" \\ one', 'p;w "x" \\ y\n')
    assert conf == ('org.apache.kafka.common.security.scram.ScramLoginModule required '
                    'username="arch \\"iver\\" \\\\ one" password="p;w \\"x\\" \\\\ y\\n";')
    assert jaas_config("PLAIN", "u", "p").startswith("org.apache.kafka.common.security.plain.PlainLoginModule ")


def test_sasl_ssl_with_a_ca_for_librdkafka_and_spark(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("pem")
    k = KafkaResource(bootstrap_servers="b:9096", ssl_ca_location=str(ca), **SASL)
    assert k.client_config() == {"bootstrap.servers": "b:9096", "security.protocol": "SASL_SSL",
                                 "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "archiver",
                                 "sasl.password": "pw-never-shown", "ssl.ca.location": str(ca)}
    assert k.spark_options() == {
        "kafka.bootstrap.servers": "b:9096", "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": jaas_config("SCRAM-SHA-512", "archiver", "pw-never-shown"),
        "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": str(ca)}


def test_mtls_and_no_hostname_check(tmp_path):
    cert, key = tmp_path / "client.crt", tmp_path / "client.key"
    cert.write_text("-----BEGIN CERTIFICATE-----\nc\n-----END CERTIFICATE-----\n")
    key.write_text("-----BEGIN PRIVATE KEY-----\nk\n-----END PRIVATE KEY-----\n")
    k = KafkaResource(bootstrap_servers="b:9093", security_protocol="ssl", ssl_certificate_location=str(cert),
                      ssl_key_location=str(key), ssl_key_password="kpw", ssl_verify_hostname=False)
    assert k.client_config() == {"bootstrap.servers": "b:9093", "security.protocol": "SSL",
                                 "ssl.certificate.location": str(cert), "ssl.key.location": str(key),
                                 "ssl.key.password": "kpw", "ssl.endpoint.identification.algorithm": "none"}
    opts = k.spark_options()
    # Inline PEM: executors (or a Spark Connect server) need no copy of the files.
    assert (opts["kafka.ssl.keystore.type"], opts["kafka.ssl.keystore.certificate.chain"],
            opts["kafka.ssl.keystore.key"], opts["kafka.ssl.key.password"]) == ("PEM", cert.read_text(),
                                                                               key.read_text(), "kpw")
    assert opts["kafka.ssl.endpoint.identification.algorithm"] == ""
    assert "kafka.ssl.truststore.location" not in opts  # the JVM's CAs


@pytest.mark.parametrize("settings,message", [
    ({"security_protocol": "TLS"}, r"security protocol 'TLS' \(\$S3_ARCHIVE_KAFKA_SECURITY_PROTOCOL\) is not "
                                   r"supported; allowed: PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
    ({**SASL, "sasl_mechanism": "GSSAPI"}, r"SASL_SSL needs a SASL mechanism \(\$S3_ARCHIVE_KAFKA_SASL_MECHANISM\); "
                                           r"got 'GSSAPI', allowed: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
    ({**SASL, "sasl_password": None}, r"SASL_SSL needs \$S3_ARCHIVE_KAFKA_SASL_PASSWORD$"),
    ({"sasl_username": "u", "sasl_password": "p"},
     r"\$S3_ARCHIVE_KAFKA_SASL_USERNAME, \$S3_ARCHIVE_KAFKA_SASL_PASSWORD set, but the Kafka security protocol "
     r"is PLAINTEXT .*use SASL_SSL or SASL_PLAINTEXT, or unset them"),
    ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_username": "u", "sasl_password": "p",
      "ssl_ca_location": "/ca.pem"}, r"\$S3_ARCHIVE_KAFKA_SSL_CA_LOCATION set, but the Kafka security protocol is "
                                     r"SASL_PLAINTEXT .*use SSL or SASL_SSL"),
    ({"security_protocol": "SSL", "ssl_certificate_location": "/c.pem"},
     r"needs its key: set both \$S3_ARCHIVE_KAFKA_SSL_CERTIFICATE_LOCATION and \$S3_ARCHIVE_KAFKA_SSL_KEY_LOCATION"),
    ({"security_protocol": "SSL", "ssl_ca_location": "/nowhere/ca.pem"},
     r"\$S3_ARCHIVE_KAFKA_SSL_CA_LOCATION is '/nowhere/ca.pem', which is not a readable file"),
    ({"timeout_s": 0}, r"the Kafka request timeout \(\$S3_ARCHIVE_KAFKA_TIMEOUT_S\) is 0; it must be a number of "
                       r"seconds > 0"),
])
def test_settings_that_cannot_work_name_the_variable(settings, message):
    k = KafkaResource(bootstrap_servers="b:9092", **settings)
    for make in (k.client_config, k.spark_options):
        with pytest.raises(InvalidConfig, match=message) as e:
            make()
        assert "pw-never-shown" not in str(e.value) and "'p'" not in str(e.value)


def test_a_refused_login_names_servers_and_user_never_the_password():
    k = KafkaResource(bootstrap_servers="b:9096", **SASL)
    # Even if a client's message quoted it, the password is scrubbed.
    err = KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error: bad pw-never-shown")
    msg = str(k.unavailable(KafkaException(err), what="listing topics"))
    assert msg.startswith("Kafka at b:9096 as user 'archiver' (SCRAM-SHA-512) refused the login (listing topics)")
    assert "$S3_ARCHIVE_KAFKA_SASL_USERNAME and $S3_ARCHIVE_KAFKA_SASL_PASSWORD" in msg
    assert "pw-never-shown" not in msg and "bad ***" in msg
    tls = str(k.unavailable(KafkaException(KafkaError(KafkaError._SSL, "SSL handshake failed"))))
    assert tls.startswith("the TLS handshake with Kafka at b:9096 as user 'archiver'") and \
        "$S3_ARCHIVE_KAFKA_SSL_CA_LOCATION" in tls
    down = str(k.unavailable(KafkaException(KafkaError(KafkaError._TRANSPORT, "Broker transport failure"))))
    assert down.startswith("cannot reach Kafka at b:9096 as user 'archiver' (SCRAM-SHA-512) (request timeout 15s): "
                           "Broker transport failure")
    # the time the failed call really took, not its timeout
    took = str(k.unavailable(KafkaException(KafkaError(KafkaError._TRANSPORT, "No leaders found")),
                             what="listing the offsets of 't'", since=time.monotonic() - 0.25))
    assert re.match(r"cannot reach Kafka at b:9096 .* \(listing the offsets of 't'\) \(after 0\.[23]s, request "
                    r"timeout 15s\): No leaders found", took), took


def test_riding_waits_out_an_outage_up_to_its_bound_and_never_a_refusal():
    k = KafkaResource(bootstrap_servers="b:9092")
    answers = iter([KafkaUnavailable("cannot reach Kafka at b:9092 (after 0.0s, request timeout 15s): down."),
                    KafkaUnavailable("cannot reach Kafka at b:9092 (after 0.0s, request timeout 15s): down."),
                    {0: 5}])
    warned: list[str] = []

    class Log:
        def warning(self, msg: str) -> None:
            warned.append(msg)

    def call():
        a = next(answers)
        if isinstance(a, Exception):
            raise a
        return a

    t0 = time.monotonic()
    assert k.riding(10, call, Log()) == {0: 5}
    assert 1.5 < time.monotonic() - t0 < 5  # a second apart
    assert len(warned) == 1 and "; trying again for up to" in warned[0]

    def down():
        raise KafkaUnavailable("cannot reach Kafka at b:9092 (after 0.0s, request timeout 15s): down.")

    with pytest.raises(KafkaUnavailable, match=r"; Kafka stayed unreachable for 1\.\ds \(broker_outage_seconds: "
                                               r"1\)"):
        k.riding(1, down)
    calls = []

    def refused():
        calls.append(1)
        raise KafkaRefused("Kafka at b:9092 refused the login")

    with pytest.raises(KafkaRefused):
        k.riding(30, refused)
    assert calls == [1]


def test_the_admin_client_is_made_once_per_resource_and_process(monkeypatch):
    """Every admin request of a resource goes through one client (a new one per request opened its connections
    again, and sometimes waited seconds for them); another resource has its own, and so does a forked child (a
    librdkafka client does not survive a fork)."""
    kafka = KafkaResource(bootstrap_servers="127.0.0.1:9")  # nothing is asked of it: no broker needed
    first = kafka.admin()
    assert kafka.admin() is first
    assert KafkaResource(bootstrap_servers="127.0.0.1:9").admin() is not first
    monkeypatch.setattr("s3_archive.io.kafka.os.getpid", lambda: -1)  # what a forked child sees
    child = kafka.admin()
    assert child is not first
    assert kafka.admin() is child


def test_close_destroys_the_kept_admin_client_and_a_run_closes_its_own(monkeypatch):
    """`close` destroys the kept client (its threads stop reconnecting to a cluster that went away) and the next
    request makes a new one; the copy Dagster makes for a run or a tick closes its client when they end; a client
    another process made (before a fork) is left alone."""
    kafka = KafkaResource(bootstrap_servers="127.0.0.1:9")  # nothing is asked of it: no broker needed
    first = kafka.admin()
    kafka.close()
    with pytest.raises(RuntimeError, match="closed"):
        first.list_topics(timeout=0.1)
    second = kafka.admin()
    assert second is not first
    kafka.close()
    kafka.close()  # nothing kept: nothing to do

    with dg.build_resources({"kafka": KafkaResource(bootstrap_servers="127.0.0.1:9")}) as res:
        in_run = res.kafka.admin()
        assert res.kafka.admin() is in_run
    with pytest.raises(RuntimeError, match="closed"):
        in_run.list_topics(timeout=0.1)

    with monkeypatch.context() as m:
        m.setattr("s3_archive.io.kafka.os.getpid", lambda: -1)  # made by another process: its parent, say
        parents = kafka.admin()
    kafka.close()
    with pytest.raises(KafkaException):  # alive: the request times out (a destroyed one raises RuntimeError)
        parents.list_topics(timeout=0.1)
    parents.__exit__(None, None, None)


class _Future:
    """What the admin client's request returns: its answer, or the KafkaException it raises."""

    def __init__(self, answer):
        self.answer = answer

    def result(self, timeout=None):
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


def test_every_group_request_asks_a_coordinator_not_ready_again_and_nothing_else():
    """The one retry rule of the group requests (offsets read and committed, members described, disaster
    recovery's offsets): a coordinator not ready yet is asked again; an unknown group is None only where the caller
    allows it; any other error is at once KafkaUnavailable naming what was being done."""
    kafka = KafkaResource(bootstrap_servers="127.0.0.1:9", timeout_s=5)
    not_ready = [KafkaException(KafkaError(c)) for c in (KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                                                         KafkaError.NOT_COORDINATOR,
                                                         KafkaError.COORDINATOR_NOT_AVAILABLE)]
    answers = iter([*not_ready, "the group's answer"])
    asked = []

    def request(admin):
        asked.append(admin)
        return _Future(next(answers))

    assert kafka.group_request("describing consumer group 'g'", request) == "the group's answer"
    assert len(asked) == 4 and all(a is kafka.admin() for a in asked)

    unknown = KafkaException(KafkaError(KafkaError.GROUP_ID_NOT_FOUND))
    assert kafka.group_request("describing consumer group 'g'", lambda admin: _Future(unknown),
                               missing_ok=True) is None
    with pytest.raises(KafkaUnavailable, match="describing consumer group 'g'"):
        kafka.group_request("describing consumer group 'g'", lambda admin: _Future(unknown))
    authz = KafkaException(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED))
    calls = []

    def denied(admin):
        calls.append(1)
        return _Future(authz)

    with pytest.raises(KafkaUnavailable, match="committing the offsets of consumer group 'g'"):
        kafka.group_request("committing the offsets of consumer group 'g'", denied)
    assert calls == [1]


def test_listing_offsets_asks_again_while_a_partition_has_no_leader_and_stops_at_the_timeout(monkeypatch):
    """A partition with no leader for a moment (a broker the controller fenced after a freeze, a leader being
    elected: librdkafka says "No leaders found") is asked again with fresh metadata until it has one; the request
    timeout still ends the asking, and any other error ends it at once."""
    kafka = KafkaResource(bootstrap_servers="127.0.0.1:9", timeout_s=1)
    admin = kafka.admin()
    no_leader = KafkaException(KafkaError(KafkaError._NOENT, "Failed to query partition leaders: No leaders found"))
    answers, refreshed = iter([no_leader, no_leader, type("Answer", (), {"offset": 42})()]), []
    monkeypatch.setattr(admin, "list_offsets", lambda specs, **kw: {tp: _Future(next(answers)) for tp in specs},
                        raising=False)
    monkeypatch.setattr(admin, "list_topics", lambda topic=None, timeout=None: refreshed.append(topic),
                        raising=False)
    assert kafka.offsets("t", "latest", partitions=[0]) == {0: 42}
    assert refreshed == ["t", "t"]

    monkeypatch.setattr(admin, "list_offsets", lambda specs, **kw: {tp: _Future(no_leader) for tp in specs},
                        raising=False)
    t0 = time.monotonic()
    with pytest.raises(KafkaUnavailable, match="listing the offsets of 't'.*No leaders found"):
        kafka.offsets("t", "latest", partitions=[0])
    assert 1.0 <= time.monotonic() - t0 < 3.0

    denied = KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    calls = []
    monkeypatch.setattr(admin, "list_offsets", lambda specs, **kw: calls.append(1) or {tp: _Future(denied)
                                                                                         for tp in specs},
                        raising=False)
    with pytest.raises(KafkaUnavailable, match="listing the offsets of 't'"):
        kafka.offsets("t", "latest", partitions=[0])
    assert calls == [1]
