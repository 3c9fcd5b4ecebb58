"""The task's readers never hang: a broker that does not answer ends the read with one clear error naming the
broker, topic, partition and offset, after the stall deadline (a closed port on the loopback: no broker needed),
with the native reader (`task_reader: native`) as with the Python one; a failed TLS handshake is a refusal at once. The
native reader missing where the tasks run is one error naming the setting and the fix, never a silent fall back."""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from s3_archive.archive.executor import kafka_read, native_read
from s3_archive.archive.protocol import KafkaConnection
from s3_archive.model.errors import InvalidConfig, KafkaUnavailable, NativeReaderMissing


@pytest.mark.parametrize("reader", [native_read.read_range, kafka_read.read_range], ids=["native", "python"])
def test_an_unreachable_broker_fails_the_read_after_the_stall_deadline_naming_what_was_not_read(reader):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conn = KafkaConnection.of_config({"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "PLAINTEXT",
                                      "sasl.password": "never-shown"})
    t0 = time.monotonic()
    with pytest.raises(KafkaUnavailable) as err:
        list(reader(conn, "t", 3, 10, 20, stall_s=2))
    assert time.monotonic() - t0 < 15
    text = str(err.value)
    assert f"127.0.0.1:{port}" in text and "topic 't' partition 3" in text and "offset 10" in text
    assert "no progress at offset 10 for 2s (offsets [10, 20) not read" in text
    assert "never-shown" not in text and "never-shown" not in repr(conn)


@pytest.fixture
def not_tls() -> Iterator[int]:
    """A loopback port that answers a TLS client hello with plain text (a listener speaking neither Kafka nor TLS)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)

    def serve() -> None:
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            with c:
                try:
                    c.recv(4096)
                    c.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\nnot TLS\n" * 4)
                except OSError:
                    pass

    threading.Thread(target=serve, daemon=True).start()
    yield srv.getsockname()[1]
    srv.close()


@pytest.mark.parametrize("reader", [native_read.read_range, kafka_read.read_range], ids=["native", "python"])
def test_a_failed_tls_handshake_is_a_refusal_at_once(reader, not_tls):
    conn = KafkaConnection.of_config({"bootstrap.servers": f"127.0.0.1:{not_tls}", "security.protocol": "SSL",
                                      "ssl.key.password": "never-shown"})
    t0 = time.monotonic()
    with pytest.raises(KafkaUnavailable) as err:
        list(reader(conn, "t", 0, 0, 10, stall_s=30))
    assert time.monotonic() - t0 < 10  # not the stall deadline: no retry mends a refusal
    text = str(err.value)
    assert text.startswith(f"reading offsets [0, 10) of topic 't' partition 0 from Kafka at 127.0.0.1:{not_tls} "
                           "failed (KafkaRefused): ")
    assert "SSL handshake failed" in text and "never-shown" not in text


def test_the_native_reader_missing_is_one_error_naming_the_setting_and_the_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "s3_archive_native", None)  # as where the extension was never built
    conn = KafkaConnection.of_config({"bootstrap.servers": "127.0.0.1:9", "security.protocol": "PLAINTEXT"})
    with pytest.raises(NativeReaderMissing) as err:
        list(native_read.read_range(conn, "t", 0, 0, 10))
    text = str(err.value)
    assert isinstance(err.value, InvalidConfig)  # no retry mends it
    assert "task_reader: native" in text and "`make setup`" in text and "task_reader: python" in text
    assert sys.executable in text


def test_a_setting_the_native_reader_refuses_is_named_without_its_value():
    conn = KafkaConnection.of_config({"bootstrap.servers": "127.0.0.1:9", "security.protocol": "PLAINTEXT",
                                      "sasl.password": "never-shown", "ssl.bogus.setting": "secret-value"})
    with pytest.raises(KafkaUnavailable) as err:
        list(native_read.read_range(conn, "t", 0, 0, 10))
    text = str(err.value)
    assert "'ssl.bogus.setting'" in text or '"ssl.bogus.setting"' in text
    assert "secret-value" not in text and "never-shown" not in text
