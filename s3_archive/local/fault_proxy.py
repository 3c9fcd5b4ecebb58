"""An S3 fault proxy: a small HTTP proxy in front of an S3 endpoint (the moto server) that, for a seeded share of
requests, answers `503 SlowDown` or `500 InternalError` (S3's XML error bodies) or drops the connection — before
forwarding, or after the server processed the request but before the client sees its answer (`lost`: the 200 is
lost, the request took effect); or it forwards a request without its `If-None-Match` / `If-Match` headers
(`ignore_conditions`: a store that ignores conditional writes, which the store check must refuse). Tests, bench/
and scripts/ point boto3 (and s3a) at `FaultProxy.endpoint_url`.

It runs as a child process (`python -m s3_archive.local.fault_proxy`), started and stopped by PID like the other
servers of the local stack: Spark's executors, a restore subprocess and the test process all reach it the same way,
and a hung proxy never blocks the test's own threads. Rules and counters are changed and read over HTTP under
`/__fault_proxy__/` (no S3 bucket name can start with `_`), so a test changes the faults at run time; `calls` lists
the requests since the counters were last zeroed (operation, path and a listing's prefix), so a test counts them by
kind and key.

A rule: `kind` (slowdown, internal, reset, lost), `share` of the matching requests (0..1), optional filters
`method`, `query` (a query parameter that must be present, e.g. `uploads`, `uploadId`, `delete`), `header` (a
request header that must be present, e.g. `If-None-Match`), `path` (a substring of the path) and `times` (at most
this many faults from the rule). The first matching rule whose die roll hits applies.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import socket
import struct
import sys
import threading
import urllib.request
import uuid
from collections import Counter, deque
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from s3_archive.local.processes import ensure_port_free, free_port, spawn, stop_pid, wait_until

CONTROL = "/__fault_proxy__"
KINDS = ("slowdown", "internal", "reset", "lost")  # the faults (`mixed` splits a share over them)
IGNORE_CONDITIONS = "ignore_conditions"
_CONDITIONS = {"if-none-match", "if-match"}
MAX_CALLS = 100_000  # requests kept for `calls`
_ERRORS = {"slowdown": (503, "SlowDown", "Please reduce your request rate."),
           "internal": (500, "InternalError", "We encountered an internal error. Please try again.")}
# Hop-by-hop headers: this proxy owns its two connections (and answers Expect: 100-continue itself).
_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade", "expect"}


@dataclass(frozen=True)
class FaultRule:
    """Which requests get which fault (see the module docstring)."""

    kind: str
    share: float = 1.0
    method: str | None = None
    query: str | None = None
    header: str | None = None
    path: str | None = None
    times: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in (*KINDS, IGNORE_CONDITIONS):
            raise ValueError(f"fault kind {self.kind!r} is not one of {', '.join((*KINDS, IGNORE_CONDITIONS))}")
        if not 0.0 <= self.share <= 1.0:
            raise ValueError(f"fault share {self.share} must be between 0 and 1")

    def matches(self, method: str, path: str, query: dict[str, str], headers: Any) -> bool:
        return ((self.method is None or self.method.upper() == method)
                and (self.query is None or self.query in query)
                and (self.header is None or headers.get(self.header) is not None)
                and (self.path is None or self.path in path))


def operation(method: str, query: dict[str, str], headers: Any) -> str:
    """A request's S3 operation as counted: method, query parameter names, and a conditional header if any
    (`PUT ?uploadId,partNumber`, `PUT If-None-Match`, `POST ?delete`)."""
    names = sorted(k for k in query if k not in ("x-id", "encoding-type", "prefix", "max-keys", "continuation-token",
                                                  "delimiter", "start-after", "fetch-owner"))
    cond = [h for h in ("If-None-Match", "If-Match") if headers.get(h) is not None]
    return " ".join([method] + ([f"?{','.join(names)}"] if names else []) + cond)


@dataclass
class _State:
    rules: list[FaultRule] = field(default_factory=list)
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    used: Counter = field(default_factory=Counter)  # faults per rule index
    requests: Counter = field(default_factory=Counter)  # per operation
    faults: Counter = field(default_factory=Counter)  # per kind
    faults_by_op: Counter = field(default_factory=Counter)  # per "kind operation"
    calls: deque = field(default_factory=lambda: deque(maxlen=MAX_CALLS))  # [operation, path, prefix]
    lock: threading.Lock = field(default_factory=threading.Lock)

    def configure(self, rules: list[FaultRule], seed: int) -> None:
        with self.lock:
            self.rules, self.rng, self.used = rules, random.Random(seed), Counter()

    def reset_counts(self) -> None:
        with self.lock:
            self.requests, self.faults, self.faults_by_op = Counter(), Counter(), Counter()
            self.calls.clear()

    def pick(self, method: str, path: str, query: dict[str, str], headers: Any) -> str | None:
        op = operation(method, query, headers)
        with self.lock:
            self.requests[op] += 1
            self.calls.append([op, path, query.get("prefix", "")])
            for i, rule in enumerate(self.rules):
                if not rule.matches(method, path, query, headers):
                    continue
                if rule.times is not None and self.used[i] >= rule.times:
                    continue
                if self.rng.random() < rule.share:
                    self.used[i] += 1
                    return rule.kind
            return None

    def count_fault(self, kind: str, method: str, query: dict[str, str], headers: Any) -> None:
        with self.lock:
            self.faults[kind] += 1
            self.faults_by_op[f"{kind} {operation(method, query, headers)}"] += 1

    def stats(self) -> dict[str, Any]:
        with self.lock:
            return {"requests": sum(self.requests.values()), "requests_by_operation": dict(self.requests),
                    "faults": dict(self.faults), "faults_by_operation": dict(self.faults_by_op),
                    "rules": [asdict(r) for r in self.rules]}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, and `Expect: 100-continue` answered here
    server: _ProxyServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        return None

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's names
        self._handle()

    do_PUT = do_POST = do_DELETE = do_HEAD = do_GET  # noqa: N815

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                out += self.rfile.read(size)
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return bytes(out)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _reply(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.send_response_only(status)
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _drop(self) -> None:
        """Close the connection with a reset and no answer (the client sees the connection drop)."""
        self.close_connection = True
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    def _control(self, path: str, body: bytes) -> None:
        state = self.server.state
        if path == f"{CONTROL}/rules" and self.command == "PUT":
            spec = json.loads(body or b"{}")
            state.configure([FaultRule(**r) for r in spec.get("rules", [])], int(spec.get("seed", 0)))
        elif path == f"{CONTROL}/reset" and self.command == "POST":
            state.reset_counts()
        elif not (path in (f"{CONTROL}/stats", f"{CONTROL}/calls") and self.command == "GET"):
            self._reply(404, [("Content-Length", "0")], b"")
            return
        if path == f"{CONTROL}/calls":
            with state.lock:
                out = json.dumps(list(state.calls)).encode()
        else:
            out = json.dumps(state.stats()).encode()
        self._reply(200, [("Content-Type", "application/json"), ("Content-Length", str(len(out)))], out)

    def _handle(self) -> None:
        url = urlsplit(self.path)
        body = self._body()
        if url.path.startswith(CONTROL):
            self._control(url.path, body)
            return
        query = dict(parse_qsl(url.query, keep_blank_values=True))
        state = self.server.state
        kind = state.pick(self.command, url.path, query, self.headers)
        if kind in _ERRORS:
            state.count_fault(kind, self.command, query, self.headers)
            status, code, message = _ERRORS[kind]
            xml = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message>'
                   f"<Resource>{url.path}</Resource><RequestId>{uuid.uuid4().hex[:16].upper()}</RequestId></Error>"
                   ).encode()
            self._reply(status, [("Content-Type", "application/xml"), ("Content-Length", str(len(xml)))], xml)
            return
        if kind == "reset":
            state.count_fault(kind, self.command, query, self.headers)
            self._drop()
            return
        if kind == IGNORE_CONDITIONS and any(h.lower() in _CONDITIONS for h in self.headers):
            state.count_fault(kind, self.command, query, self.headers)
        status, headers, answer = self._forward(body, drop=_CONDITIONS if kind == IGNORE_CONDITIONS else set())
        if kind == "lost" and 200 <= status < 300:
            state.count_fault(kind, self.command, query, self.headers)
            self._drop()  # the server did it; the client never hears so
            return
        self._reply(status, headers, answer)

    def _forward(self, body: bytes, drop: set[str]) -> tuple[int, list[tuple[str, str]], bytes]:
        host, port = self.server.upstream
        conn = http.client.HTTPConnection(host, port, timeout=300)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP and k.lower() not in drop}
            headers["Content-Length"] = str(len(body))
            if self.command in ("GET", "HEAD", "DELETE") and not body:
                headers.pop("Content-Length")
            conn.request(self.command, self.path, body=body or None, headers=headers)
            resp = conn.getresponse()
            answer = resp.read()
            out = [(k, v) for k, v in resp.getheaders() if k.lower() not in _HOP and k.lower() != "content-length"]
            length = resp.getheader("Content-Length") if self.command == "HEAD" else None
            out.append(("Content-Length", length or str(len(answer))))
            return resp.status, out, answer
        finally:
            conn.close()


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, port: int, upstream: tuple[str, int]) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.upstream = upstream
        self.state = _State()


@dataclass
class FaultProxy:
    """The proxy as a child process in front of `upstream` (an http:// endpoint): start, stop by PID, rules and
    counters over HTTP."""

    data_dir: Path
    upstream: str
    port: int = 0
    proc: Any = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        if self.port:
            ensure_port_free(self.port, "the S3 fault proxy")
        else:
            self.port = free_port()
        log = self.data_dir / "fault-proxy.log"
        self.proc = spawn([sys.executable, "-m", "s3_archive.local.fault_proxy", "--port", str(self.port),
                           "--upstream", self.upstream], log)
        try:
            wait_until(lambda: self.stats() is not None, timeout, self.proc, f"the S3 fault proxy on "
                       f"{self.endpoint_url}", log)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if self.proc is not None:
            stop_pid(self.proc.pid)
            self.proc = None

    def _call(self, method: str, what: str, payload: dict | None = None) -> dict[str, Any]:
        data = json.dumps(payload).encode() if payload is not None else None
        req = urllib.request.Request(f"{self.endpoint_url}{CONTROL}/{what}", data=data, method=method)
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def set_rules(self, rules: list[FaultRule], seed: int = 0) -> dict[str, Any]:
        """Replace the rules (and restart the seeded die); counters stay."""
        return self._call("PUT", "rules", {"seed": seed, "rules": [asdict(r) for r in rules]})

    def clear(self) -> None:
        """No faults, counters zeroed."""
        self.set_rules([])
        self.reset()

    def reset(self) -> dict[str, Any]:
        """Zero the counters."""
        return self._call("POST", "reset", {})

    def stats(self) -> dict[str, Any]:
        """requests (total and per operation), faults per kind and per kind+operation, the rules."""
        return self._call("GET", "stats")

    def calls(self) -> list[tuple[str, str, str]]:
        """The requests since the counters were zeroed, oldest first (at most MAX_CALLS): operation (as counted),
        path (`/bucket/key`, URL-encoded) and a listing's `prefix` (empty for other requests)."""
        return [tuple(c) for c in self._call("GET", "calls")]  # type: ignore[misc]


def mixed(share: float) -> list[FaultRule]:
    """`share` of all requests faulted, split evenly over the four kinds."""
    each = share / len(KINDS)
    # The rules roll in turn: the i-th only sees what the ones before it let through.
    return [FaultRule(kind, each / (1 - i * each)) for i, kind in enumerate(KINDS)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--upstream", required=True, help="http://host:port of the S3 endpoint")
    args = p.parse_args()
    up = urlsplit(args.upstream)
    if up.scheme != "http" or not up.hostname or not up.port:
        raise SystemExit(f"--upstream {args.upstream!r}: expected http://host:port")
    _ProxyServer(args.port, (up.hostname, up.port)).serve_forever()


if __name__ == "__main__":
    main()
