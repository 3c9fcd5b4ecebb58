"""The fault proxy's HTTP path, in front of a toy S3 (a dict behind the standard library's HTTP server; no moto, no
lock needed): each fault kind reaches boto3 as S3 would send it, and botocore's own retries get through it."""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3
import pytest
from botocore.config import Config

from s3_archive.local.fault_proxy import FaultProxy, FaultRule


class ToyS3(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    objects: dict[str, bytes] = {}
    puts: Counter = Counter()

    def log_message(self, *args) -> None:
        return None

    def do_PUT(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.objects[self.path], self.puts[self.path] = body, self.puts[self.path] + 1
        self.send_response(200)
        self.send_header("ETag", f'"{hashlib.md5(body).hexdigest()}"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802
        body = self.objects[self.path.split("?")[0]]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory):
    toy = ThreadingHTTPServer(("127.0.0.1", 0), ToyS3)
    threading.Thread(target=toy.serve_forever, daemon=True).start()
    p = FaultProxy(tmp_path_factory.mktemp("proxy"), f"http://127.0.0.1:{toy.server_port}")
    p.start()
    yield p
    p.stop()
    toy.shutdown()


def _client(p: FaultProxy, attempts: int):
    return boto3.client("s3", endpoint_url=p.endpoint_url, region_name="us-east-1", aws_access_key_id="k",
                        aws_secret_access_key="s", config=Config(s3={"addressing_style": "path"},
                                                                 retries={"mode": "standard", "max_attempts": attempts}))


@pytest.mark.parametrize("kind,error", [("slowdown", "SlowDown"), ("internal", "InternalError"),
                                        ("reset", "Connection was closed|Connection reset|aborted"),
                                        ("lost", "Connection was closed|Connection reset|aborted")])
def test_each_fault_reaches_boto3_as_s3_would_send_it(proxy, kind, error):
    proxy.set_rules([FaultRule(kind, method="PUT")])
    with pytest.raises(Exception, match=error):
        _client(proxy, 0).put_object(Bucket="toy-bucket", Key=f"no-retry-{kind}", Body=b"x")
    took_effect = kind == "lost"
    assert (f"/toy-bucket/no-retry-{kind}" in ToyS3.objects) is took_effect  # lost: it took effect, the client never heard
    proxy.clear()


def test_botocore_retries_get_through_one_fault_of_each_kind_and_lost_puts_happen_twice(proxy):
    proxy.set_rules([FaultRule(k, method="PUT", path=f"/{k}", times=1) for k in ("slowdown", "internal", "reset",
                                                                                  "lost")]
                    + [FaultRule("lost", method="GET", times=1)])
    s3 = _client(proxy, 3)
    for k in ("slowdown", "internal", "reset", "lost"):
        s3.put_object(Bucket="toy-bucket", Key=f"{k}/1", Body=k.encode() * 1000)
        assert s3.get_object(Bucket="toy-bucket", Key=f"{k}/1")["Body"].read() == k.encode() * 1000
    stats = proxy.stats()
    assert stats["faults"] == {"slowdown": 1, "internal": 1, "reset": 1, "lost": 2}
    assert stats["requests_by_operation"] == {"PUT": 8, "GET": 5}
    assert ToyS3.puts["/toy-bucket/lost/1"] == 2 and ToyS3.puts["/toy-bucket/reset/1"] == 1
    proxy.clear()


def test_the_calls_are_listed_by_operation_path_and_prefix_until_the_counters_are_zeroed(proxy):
    proxy.clear()
    s3 = _client(proxy, 1)
    s3.put_object(Bucket="b", Key="calls/a b", Body=b"x", IfNoneMatch="*")
    s3.get_object(Bucket="b", Key="calls/a b")
    assert proxy.calls() == [("PUT If-None-Match", "/b/calls/a%20b", ""), ("GET", "/b/calls/a%20b", "")]
    assert proxy.stats()["requests"] == 2
    proxy.reset()
    assert proxy.calls() == []
