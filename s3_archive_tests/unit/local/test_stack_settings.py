"""The local stack's connection settings: what `stack.env` exports, and the broker's SCRAM users."""

import pytest

from s3_archive.local.kafka_broker import KafkaBroker, _argfile_quote
from s3_archive.local.processes import StackError
from s3_archive.local.stack import KAFKA_USER, StackState


def test_a_sasl_ssl_stack_exports_every_kafka_variable():
    state = StackState("127.0.0.1:9096", "http://127.0.0.1:5000", "b", 1, 2, "sasl_ssl", "pw", "/ca.pem")
    env = state.env()
    assert {k: v for k, v in env.items() if k.startswith("S3_ARCHIVE_KAFKA_")} == {
        "S3_ARCHIVE_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9096", "S3_ARCHIVE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "S3_ARCHIVE_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "S3_ARCHIVE_KAFKA_SASL_USERNAME": KAFKA_USER,
        "S3_ARCHIVE_KAFKA_SASL_PASSWORD": "pw", "S3_ARCHIVE_KAFKA_SSL_CA_LOCATION": "/ca.pem"}
    plain = StackState("127.0.0.1:9092", "http://127.0.0.1:5000", "b", 1, 2).env()
    assert [k for k in plain if k.startswith("S3_ARCHIVE_KAFKA_")] == ["S3_ARCHIVE_KAFKA_BOOTSTRAP_SERVERS"]


def test_scram_users_the_format_tool_cannot_take_are_refused(tmp_path):
    with pytest.raises(StackError, match=r"hold no ','.*refused users: 'a,b'"):
        KafkaBroker(tmp_path, security="sasl_ssl", users={"a,b": "pw"})
    with pytest.raises(StackError, match=r"Kafka security 'ssl' is not supported; allowed: plaintext, sasl_ssl"):
        KafkaBroker(tmp_path, security="ssl")


def test_argument_file_quoting():
    assert _argfile_quote('SCRAM-SHA-512=[name=a "b" \\c,password=p\nq]') == \
        '"SCRAM-SHA-512=[name=a \\"b\\" \\\\c,password=p\\nq]"'
