"""A real `memcairn server` process on the tests' PostgreSQL: /v1/ready, /metrics from loopback, and one JSON
access line per request on the server's own stderr (not only through the logging module in process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from postgres_server import TEST_SECRET

from memcairn.pgstore import db, keys
from memcairn.pgstore.embedded import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
MEMCAIRN = str(Path(sys.executable).parent / "memcairn")


def start(pg_database: str, tmp_path: Path, workers: int) -> tuple[subprocess.Popen[bytes], str, Path, str]:
    """``memcairn server`` with ``workers`` processes, ready; its process, URL, log and a key of tenant acme."""
    home = tmp_path / "home"
    (home / "server").mkdir(parents=True)
    (home / "server" / "secret").write_text(TEST_SECRET.hex())
    (home / "server" / "secret").chmod(0o600)
    with db.connect(pg_database) as conn:
        made = keys.create_key(conn, TEST_SECRET, "acme", scopes=["memories:read", "memories:write"])
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "server.log"
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"} | {"MEMCAIRN_HOME": str(home)}
    with log.open("wb") as sink:
        server = subprocess.Popen([MEMCAIRN, "server", "--database", pg_database, "--port", str(port),
                                   "--workers", str(workers), "--connections", "2"], env=env, stdout=sink,
                                  stderr=sink)
    for _ in range(900):
        assert server.poll() is None, log.read_text(errors="replace")
        try:
            if httpx.get(f"{url}/v1/ready", timeout=2).status_code == 200:
                return server, url, log, made["key"]
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    server.terminate()
    raise AssertionError(f"never ready: {log.read_text(errors='replace')}")


def test_a_server_process_logs_json_lines_and_serves_ready_and_metrics(pg_database: str, tmp_path: Path) -> None:
    server, url, log, key = start(pg_database, tmp_path, 1)
    made = {"key": key}
    try:
        headers = {"Authorization": f"Bearer {made['key']}", "X-Request-Id": "deploy-check-1"}
        saved = httpx.post(f"{url}/v1/memories", headers=headers,
                           json={"project": "api", "title": "zebra runbook", "text": "private words"})
        assert saved.status_code == 201, saved.text
        metrics = httpx.get(f"{url}/metrics")
        assert metrics.status_code == 200
        assert 'memcairn_http_requests_total{method="POST",route="/v1/memories",status="201"} 1.0' in metrics.text
        assert "zebra" not in metrics.text
    finally:
        server.terminate()
        server.wait(timeout=60)
    lines = [json.loads(line) for line in log.read_text(errors="replace").splitlines() if line.startswith("{")]
    mine = [line for line in lines if line["request_id"] == "deploy-check-1"]
    assert len(mine) == 1 and mine[0]["route"] == "/v1/memories" and mine[0]["status"] == 201
    assert mine[0]["tenant_id"] is not None and mine[0]["ms"] >= 0
    assert any(line["route"] == "/v1/ready" and line["status"] == 200 for line in lines)


def test_metrics_of_several_server_processes_count_every_process_requests(pg_database: str, tmp_path: Path) -> None:
    server, url, log, key = start(pg_database, tmp_path, 2)
    try:
        for _ in range(40):  # a new connection each: the kernel spreads them over the processes' sockets
            with httpx.Client() as client:
                assert client.get(f"{url}/v1/projects", headers={"Authorization": f"Bearer {key}"}).status_code == 200
        scrapes = []
        for _ in range(12):
            with httpx.Client() as client:
                page = client.get(f"{url}/metrics").text
            scrapes.append(page)
        for page in scrapes:  # whichever process answered, the count is all 40
            assert 'memcairn_http_requests_total{method="GET",route="/v1/projects",status="200"} 40.0' in page, page
            assert "memcairn_embedding_backlog" in page or "memcairn_database_up 1.0" in page
    finally:
        server.terminate()
        server.wait(timeout=60)
    lines = [json.loads(line) for line in log.read_text(errors="replace").splitlines() if line.startswith("{")]

    def processes(route: str) -> set[str]:  # a request id the server made starts with its process's prefix
        return {line["request_id"][:16] for line in lines if line["route"] == route}

    assert len(processes("/v1/projects")) == 2 and len(processes("/metrics")) == 2
