"""A request head or body trickled in holds no connection for long: a real worker (and a real team server) on a
loopback port answer 408 or close a connection whose head does not arrive whole within the head deadline, or
whose body falls behind its size's allowance, while other clients are served meanwhile."""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from processes import free_port

from memcairn.wire import lifecycle
from memcairn.wire.config import load_settings
from memcairn.worker.read_deadlines import BODY_FLOOR_SECONDS, HEAD_SECONDS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
SLACK = 2.0  # the loop's timer, a busy machine


@pytest.fixture
def worker_port(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    monkeypatch.setenv("MEMCAIRN_PORT", str(free_port()))
    monkeypatch.setenv("MEMCAIRN_EMBEDDING_MODEL", "hash")
    started = subprocess.run([sys.executable, "-m", "memcairn", "worker", "start", "--json"], env=dict(os.environ),
                             capture_output=True, text=True, timeout=60)
    assert started.returncode == 0, started.stderr
    yield load_settings().port
    lifecycle.stop(load_settings(), timeout=10)


def trickle(port: int, first: bytes, rest: bytes, every: float, bound: float) -> tuple[float, bytes]:
    """Send ``first``, then ``rest`` a byte each ``every`` seconds until the server answers or closes: (seconds
    it took from the first byte, what it answered). Still open past ``bound`` seconds: the test fails."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        began = time.monotonic()
        sock.sendall(first)
        got = b""
        sock.settimeout(every)
        for byte in rest:
            assert time.monotonic() - began < bound, f"the connection is still open after {bound:.0f} s"
            try:
                sock.sendall(bytes([byte]))
                chunk = sock.recv(4096)
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                break
            got += chunk
            if not chunk:
                break
        else:
            raise AssertionError("the server took the whole trickle")
        sock.settimeout(2)
        try:
            while chunk := sock.recv(4096):
                got += chunk
        except (TimeoutError, ConnectionResetError):
            pass
        return time.monotonic() - began, got


def served_meanwhile(port: int, path: str, stop: threading.Event, answers: list[int]) -> None:
    while not stop.is_set():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", path)
        answers.append(conn.getresponse().status)
        conn.close()
        time.sleep(0.2)


def check_trickles(port: int, health: str, post: str) -> None:
    stop, answers = threading.Event(), []
    other = threading.Thread(target=served_meanwhile, args=(port, health, stop, answers))
    other.start()
    try:
        head = f"POST {post} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n".encode()
        took, got = trickle(port, b"P", head[1:] + b"X-Slow: " + b"a" * 200, every=1.0,  # a header byte a second
                            bound=HEAD_SECONDS + SLACK)
        assert (got == b"" or got.startswith(b"HTTP/1.1 408")), (took, got)
        body = b'{"project": "demo", "text": "' + b"x" * 200 + b'"}'
        took, got = trickle(port, head + f"Content-Length: {len(body)}\r\n\r\n".encode(), body, every=0.5,
                            bound=BODY_FLOOR_SECONDS + SLACK)  # two bytes a second
        assert (got == b"" or got.startswith(b"HTTP/1.1 408")), (took, got)
        with socket.create_connection(("127.0.0.1", port), timeout=HEAD_SECONDS + SLACK) as silent:
            assert silent.recv(4096) == b""  # one that never sends a byte is closed, without an answer
    finally:
        stop.set()
        other.join()
    assert len(answers) >= 10 and set(answers) == {200}, answers


def test_the_worker_cuts_a_trickled_head_or_body_and_serves_others(worker_port: int) -> None:
    check_trickles(worker_port, "/api/health", "/api/memory/save")
    # an honest client sending its body at once in pieces is served as before
    with socket.create_connection(("127.0.0.1", worker_port), timeout=30) as sock:
        body = b'{"project": "demo", "text": "sent in two pieces"}'
        sock.sendall(f"POST /api/memory/save HTTP/1.1\r\nHost: 127.0.0.1:{worker_port}\r\nContent-Type: "
                     f"application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode())
        time.sleep(0.5)
        sock.sendall(body)
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")


def test_the_team_server_cuts_a_trickled_head_or_body_and_serves_others(tmp_path: Path) -> None:
    pytest.importorskip("pg0")
    pytest.importorskip("psycopg")
    home, port, log = tmp_path / "home", free_port(), tmp_path / "server.log"
    memcairn = str(Path(sys.executable).parent / "memcairn")
    with log.open("wb") as sink:  # its default: one process per core, each with the protocol it was given
        server = subprocess.Popen([memcairn, "server", "--embedded", "--port", str(port)],
                                  env={**os.environ, "MEMCAIRN_HOME": str(home)}, stdout=sink, stderr=sink)
    try:
        for _ in range(600):
            assert server.poll() is None, log.read_text(errors="replace")
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            try:
                conn.request("GET", "/v1/health")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                time.sleep(0.2)
            finally:
                conn.close()
        check_trickles(port, "/v1/health", "/v1/memories")
    finally:
        server.terminate()
        server.wait(timeout=60)
