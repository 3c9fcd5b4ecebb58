"""The task's reader never hangs: a broker that does not answer ends the read with one clear error naming the
broker, topic, partition and offset, after the stall deadline (a closed port on the loopback: no broker needed)."""

from __future__ import annotations

import socket
import time

import pytest

from s3_archive.archive.executor.kafka_read import read_range
from s3_archive.archive.protocol import KafkaConnection
from s3_archive.model.errors import KafkaUnavailable


def test_an_unreachable_broker_fails_the_read_after_the_stall_deadline_naming_what_was_not_read():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conn = KafkaConnection.of_config({"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "PLAINTEXT",
                                      "sasl.password": "never-shown"})
    t0 = time.monotonic()
    with pytest.raises(KafkaUnavailable) as err:
        list(read_range(conn, "t", 3, 10, 20, stall_s=2))
    assert time.monotonic() - t0 < 15
    text = str(err.value)
    assert f"127.0.0.1:{port}" in text and "topic 't' partition 3" in text and "offset 10" in text
    assert "never-shown" not in text and "never-shown" not in repr(conn)
