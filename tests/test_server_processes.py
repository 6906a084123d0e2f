"""``memcairn server --workers 2``: two processes, each listening on a socket of its own on the one port
(``server/processes.py``), a second server refused the port, and the processes gone with their parent."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from processes import free_port, mentioning, processes_of
from team_server_cli import MEMCAIRN, cli, make_key, wait_ready

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def port_frees(port: int) -> bool:
    """Whether the port can be bound within 10 s (a wait, not a timed assertion)."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", port))
                return True
            except OSError:
                pass
        time.sleep(0.1)
    return False


def test_two_processes_share_the_port_and_go_with_their_parent(tmp_path: Path, pg_database: str) -> None:
    from postgres_server import TEST_SECRET

    home = tmp_path / "home"
    (home / "server").mkdir(parents=True, mode=0o700)
    (home / "server" / "secret").write_text(TEST_SECRET.hex() + "\n")  # the cluster's memcairn_app password
    make_key(home, "--tenant", "acme", "--database", pg_database)
    port = free_port()
    log = tmp_path / "server.log"
    with log.open("wb") as sink:
        server = subprocess.Popen([MEMCAIRN, "server", "--database", pg_database, "--port", str(port),
                                   "--workers", "2"], env={**os.environ, "MEMCAIRN_HOME": str(home)},
                                  stdout=sink, stderr=sink)
    try:
        wait_ready(f"http://127.0.0.1:{port}", server, log)
        # keep-alive connections opened together, one request each: both processes answer (a request id
        # starts with its process's mark)
        connections = [http.client.HTTPConnection("127.0.0.1", port, timeout=30) for _ in range(24)]
        marks = set()
        for connection in connections:
            connection.request("GET", "/v1/health")
            answer = connection.getresponse()
            answer.read()
            assert answer.status == 200
            marks.add(answer.getheader("X-Request-Id", "")[:16])
        assert len(marks) == 2
        for connection in connections:
            connection.close()

        second = cli(home, "server", "--database", pg_database, "--port", str(port), "--workers", "2")
        assert second.returncode != 0 and "in use" in second.stderr.lower(), second.stderr

        children = processes_of(home, mentioning(b"spawn_main"))
        assert len(children) == 2
        server.kill()  # the parent killed outright: its processes do not outlive it
        server.wait(timeout=60)
        for _ in range(100):  # a wait, not a timed assertion
            if not processes_of(home, mentioning(b"spawn_main")):
                break
            time.sleep(0.1)
        assert processes_of(home, mentioning(b"spawn_main")) == []
        assert port_frees(port)  # and the port is free again, once the kernel has closed their sockets
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=60)
