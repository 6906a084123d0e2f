"""Remote mode against a real team server: ``memcairn server`` on a database of the session's PostgreSQL, a
local worker's settings, and reading both sides (what was forwarded, what is still missing)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from processes import free_port

from memcairn.wire import lifecycle
from memcairn.wire.config import Settings, load_settings

MEMCAIRN = str(Path(sys.executable).parent / "memcairn")
PROJECT = "teamproj"


def wait_for(predicate: Any, what: str, timeout: float = 60.0, seen: Any = None) -> Any:
    """Wait for a state (never a timed assertion: the deadline only ends a hang); ``seen()`` tells what was."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"gave up waiting for {what}; {seen() if seen else value!r}"
        time.sleep(0.1)


class TeamServer:
    """`memcairn server --database` on a database of the session's PostgreSQL, stopped and started at will."""

    def __init__(self, home: Path, dsn: str, log: Path) -> None:
        self.home, self.dsn, self.log = home, dsn, log
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as sink:
            self.proc = subprocess.Popen([MEMCAIRN, "server", "--database", self.dsn, "--port", str(self.port)],
                                         env={**os.environ, "MEMCAIRN_HOME": str(self.home)}, stdout=sink,
                                         stderr=sink)
        wait_for(self._healthy, "the team server's health")

    def _healthy(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, self.log.read_text(errors="replace")
        try:
            return request(self.port, "GET", "/v1/health")[0] == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)
        self.proc = None


def request(port: int, method: str, path: str, body: Any = None,
            headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body),
                     headers={"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        raw = resp.read()
    finally:
        conn.close()
    kind = resp.getheader("Content-Type") or ""
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, json.loads(raw) if "json" in kind else \
        raw.decode()


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([MEMCAIRN, *args], env={**os.environ, "MEMCAIRN_HOME": str(home)}, capture_output=True,
                          text=True, timeout=60)


def hook_events(port: int, session: str, first: int, count: int, project: str = PROJECT, *,
                prompt: bool = True) -> None:
    """A prompt (unless not ``prompt``: the turn goes on), then ``count`` edits of distinct files, as the hooks
    post them."""
    base = {"session_id": session, "cwd": f"/work/{project}", "project": project, "projects": [project],
            "platform_source": "claude-code"}
    if prompt:
        status, _, _ = request(port, "POST", "/api/sessions/init",
                               {**base, "event": "user_prompt", "prompt": f"wire the retry queue, part {first}",
                                "prompt_number": first})
        assert status == 202
    for i in range(first, first + count):
        path = f"/work/{project}/retry_module_{i}.py"
        status, _, _ = request(port, "POST", "/api/sessions/observations", {
            **base, "event": "tool_use", "tool_name": "Write", "tool_use_id": f"toolu_{session}_{i}",
            "tool_input": {"file_path": path, "content": f"RETRY_LIMIT_{i} = {i}\n"},
            "tool_response": {"type": "create", "filePath": path}})
        assert status == 202


def local_items(cfg: Settings) -> int:
    with sqlite3.connect(cfg.db_path) as db:
        return int(db.execute("SELECT COUNT(*) FROM memory_items").fetchone()[0])


def watermark(cfg: Settings, url: str) -> int:
    with sqlite3.connect(cfg.db_path) as db:
        row = db.execute("SELECT watermark FROM remote_sync_state WHERE server = ?", (url,)).fetchone()
    return int(row[0]) if row else 0


def last_item(cfg: Settings) -> int:
    with sqlite3.connect(cfg.db_path) as db:
        return int(db.execute("SELECT MAX(id) FROM memory_items").fetchone()[0] or 0)


def server_items(dsn: str) -> tuple[int, int]:
    """(rows, distinct contents) of the server's items, read as the superuser (past row-level security)."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT COUNT(*), COUNT(DISTINCT (project_id, content_hash)) FROM items").fetchone()


def missing_on_server(cfg: Settings, dsn: str) -> list[int]:
    """The local memories whose forwarded content the server does not hold (by project, title and text)."""
    import psycopg

    from memcairn.store import Store

    with psycopg.connect(dsn) as conn:
        held = {(p, t or "", x.strip()) for p, t, x in conn.execute(
            "SELECT p.name, i.title, i.text FROM items i JOIN projects p ON p.id = i.project_id")}
    store = Store(cfg.db_path)
    try:
        return [i["id"] for i in store.items_to_forward(0, 10_000)
                if (i["project"], i["title"] or "", i["text"].strip()) not in held]
    finally:
        store.close()


def in_sync(cfg: Settings, url: str, dsn: str) -> bool:
    """The forwarder caught up: its watermark is the newest local memory, and every local memory is on the
    server (the server may hold more: a version of a memory that capture replaced locally later)."""
    return remote_status(cfg).get("state") == "synced" and watermark(cfg, url) == last_item(cfg) \
        and not missing_on_server(cfg, dsn)


def remote_status(cfg: Settings) -> dict[str, Any]:
    return request(cfg.port, "GET", "/api/stats")[2]["remote"]


def team_server(pg_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TeamServer, str, str]]:
    """A team server on a new database of the session's cluster, for a module's ``team`` fixture: (server, a
    read/write key, the superuser's DSN of its database)."""
    from postgres_server import TEST_SECRET
    from psycopg.conninfo import make_conninfo

    root = tmp_path_factory.mktemp("team")
    home = root / "server-home"
    (home / "server").mkdir(parents=True, mode=0o700)
    (home / "server" / "secret").write_text(TEST_SECRET.hex() + "\n")  # memcairn_app is one role per cluster
    name = pg_cluster.create_database()
    dsn = pg_cluster.owner_dsn(name)
    made = subprocess.run([MEMCAIRN, "server", "keys", "create", "--tenant", "acme", "--database", dsn, "--json"],
                          env={**os.environ, "MEMCAIRN_HOME": str(home)}, capture_output=True, text=True,
                          timeout=120)
    assert made.returncode == 0, made.stderr
    server = TeamServer(home, dsn, root / "server.log")
    server.start()
    try:
        yield server, json.loads(made.stdout)["key"], make_conninfo(pg_cluster.dsn, dbname=name)
    finally:
        server.stop()
        pg_cluster.drop_database(name)


def worker_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    """The local worker's settings for a module's ``cfg`` fixture (a free port, no vectors); stopped after."""
    monkeypatch.setenv("MEMCAIRN_PORT", str(free_port()))
    monkeypatch.setenv("MEMCAIRN_VECTOR_BACKEND", "none")
    monkeypatch.setenv("MEMCAIRN_CAPTURE_BATCH_WAIT_SECONDS", "0")
    # long enough for a loaded machine to answer; the hung server below shows the fallback at this bound
    monkeypatch.setenv("MEMCAIRN_REMOTE_TIMEOUT_MS", "2000")
    settings = load_settings()
    yield settings
    lifecycle.stop(settings, timeout=10)
