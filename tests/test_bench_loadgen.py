"""The benchmarks' load generator against a real HTTP server on a loopback port: answers by length, chunked or
with the connection closed, a connection dropped without an answer (reported, and the next request reconnects),
headers and bodies as sent, and requests offered at a rate."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from memcairn.bench.loadgen import Reply, run_clients


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    connections: set[int] = set()

    def log_message(self, *_args: object) -> None:
        pass

    def _send(self, status: int, payload: bytes, *, close: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(payload)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
        type(self).connections.add(id(self.connection))
        if self.path == "/drop":
            self.close_connection = True  # no answer at all
            return
        if self.path == "/chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (b'{"parts": ', b"[1, 2]", b"}"):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
            return
        if self.path == "/close":
            self._send(200, b'{"closed": true}', close=True)
            return
        self._send(404 if self.path == "/missing" else 200,
                   json.dumps({"path": self.path, "auth": self.headers.get("Authorization")}).encode())

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self._send(202, json.dumps({"echo": body.decode(), "key": self.headers.get("Idempotency-Key")}).encode())


@pytest.fixture
def port() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _collect(port: int, requests: list[tuple[str, str, bytes | None, dict[str, str]]], clients: int,
             **kwargs: object) -> tuple[dict[int, Reply | str], float]:
    replies: dict[int, Reply | str] = {}
    wall = run_clients(port, requests, clients, lambda i, _ms, reply: replies.__setitem__(i, reply),
                       **kwargs)  # type: ignore[arg-type]
    return replies, wall


def test_every_request_is_answered_once_with_its_status_body_and_headers(port: int) -> None:
    requests = [("GET", f"/item/{n}", None, {}) for n in range(40)] + [
        ("GET", "/missing", None, {}), ("GET", "/chunked", None, {}), ("GET", "/close", None, {}),
        ("POST", "/events", b'{"n": 1}', {"Idempotency-Key": "k-1"})]
    replies, _ = _collect(port, requests, 5, headers={"Authorization": "Bearer mck_1_x"})
    assert sorted(replies) == list(range(len(requests)))
    for n in range(40):
        reply = replies[n]
        assert isinstance(reply, Reply) and reply.status == 200
        assert json.loads(reply.body) == {"path": f"/item/{n}", "auth": "Bearer mck_1_x"}
    assert isinstance(replies[40], Reply) and replies[40].status == 404
    assert json.loads(replies[41].body) == {"parts": [1, 2]}  # type: ignore[union-attr]
    assert json.loads(replies[42].body) == {"closed": True}  # type: ignore[union-attr]
    assert json.loads(replies[43].body) == {"echo": '{"n": 1}', "key": "k-1"}  # type: ignore[union-attr]


def test_a_dropped_connection_is_reported_and_the_next_request_reconnects(port: int) -> None:
    requests = [("GET", "/a", None, {}), ("GET", "/drop", None, {}), ("GET", "/b", None, {}),
                ("GET", "/close", None, {}), ("GET", "/c", None, {})]
    replies, _ = _collect(port, requests, 1)
    assert isinstance(replies[1], str) and replies[1].startswith("/drop: ")
    assert [replies[i].status for i in (0, 2, 3, 4)] == [200, 200, 200, 200]  # type: ignore[union-attr]


def test_nothing_listening_is_an_error_per_request_not_an_exception() -> None:
    probe = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    free = probe.server_address[1]
    probe.server_close()
    replies, _ = _collect(free, [("GET", "/x", None, {}), ("GET", "/y", None, {})], 2, timeout=5.0)
    assert all(isinstance(r, str) and "ConnectionRefusedError" in r for r in replies.values())


def test_with_a_rate_requests_are_offered_over_time_not_at_once(port: int) -> None:
    latencies: list[float] = []
    wall = run_clients(port, [("GET", f"/r/{n}", None, {}) for n in range(21)], 4,
                       lambda _i, ms, reply: latencies.append(ms), rate=100.0)
    assert wall >= 0.19  # the last of 21 is due 0.2 s after the first
    assert len(latencies) == 21
