"""Memories that stay true on the team server: a real worker in remote mode, a real `memcairn server` on the tests'
PostgreSQL and a real git checkout. A memory captured here travels to the server with its anchors; the server
keeps them and says nothing of freshness (it has no working directory); once the file is deleted, the worker's
search, get_observations and SessionStart digest of that team memory say ``stale`` and why, checked against the
files on this machine."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pg0")
pytest.importorskip("psycopg")

from git_repo import committed_repo  # noqa: E402
from remote_team import (  # noqa: E402
    TeamServer,
    cli,
    in_sync,
    last_item,
    request,
    team_server,
    wait_for,
    worker_settings,
)

from memcairn.capture.anchors import AnchorReader  # noqa: E402
from memcairn.wire import lifecycle  # noqa: E402
from memcairn.wire.config import Settings  # noqa: E402

PROJECT = "ledger"
SOURCE = "def settle_invoice_batch(invoices):\n    return [i for i in invoices if i.due]\n"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(240),
              pytest.mark.skipif(shutil.which("git") is None, reason="needs git"),
              pytest.mark.skipif(not Path("/proc/self").exists(), reason="process checks read /proc")]


@pytest.fixture(scope="module")
def team(pg_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TeamServer, str, str]]:
    yield from team_server(pg_cluster, tmp_path_factory)


@pytest.fixture
def cfg(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    yield from worker_settings(monkeypatch)


def capture_edit(port: int, repo: Path, path: str) -> None:
    """A prompt and a Write of ``path`` in ``repo``, as the hooks post them (the file is on disk already)."""
    base = {"session_id": "s-ledger", "cwd": str(repo), "project": PROJECT, "projects": [PROJECT],
            "platform_source": "claude-code"}
    status, _, _ = request(port, "POST", "/api/sessions/init", {
        **base, "event": "user_prompt", "prompt": "write settle_invoice_batch in billing.py", "prompt_number": 1})
    assert status == 202
    full = str(repo / path)
    status, _, _ = request(port, "POST", "/api/sessions/observations", {
        **base, "event": "tool_use", "tool_name": "Write", "tool_use_id": "toolu_ledger_1",
        "tool_input": {"file_path": full, "content": SOURCE}, "tool_response": {"type": "create", "filePath": full}})
    assert status == 202


def server_anchors(dsn: str) -> list[dict[str, Any]]:
    """Every stored row's anchors, read as the superuser (past row-level security)."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        return [row[0] for row in conn.execute("SELECT anchors FROM items ORDER BY id")]


def test_a_team_memory_keeps_its_anchors_and_is_checked_where_the_code_is(
        team: tuple[TeamServer, str, str], cfg: Settings, tmp_path: Path) -> None:
    server, key, superuser_dsn = team
    repo = committed_repo(tmp_path / PROJECT, {"billing.py": SOURCE, "README.md": "ledger\n"})
    assert cli(cfg.home, "connect", server.url, "--key", key).returncode == 0
    lifecycle.start(cfg)
    capture_edit(cfg.port, repo, "billing.py")
    wait_for(lambda: last_item(cfg) > 0 and in_sync(cfg, server.url, superuser_dsn), "the memory on the server")

    # the server's row holds the anchors as captured: the file with its git blob id
    anchored = [a for a in server_anchors(superuser_dsn) if a.get("files")]
    assert anchored, server_anchors(superuser_dsn)
    assert any(f["path"] == "billing.py" and f.get("id") for a in anchored for f in a["files"])
    # its API gives them back and claims no freshness of its own
    auth = {"Authorization": f"Bearer {key}"}
    status, _, found = request(server.port, "GET", "/v1/search?query=settle_invoice_batch&mode=keyword",
                               headers=auth)
    assert status == 200 and found["results"], found
    hit = found["results"][0]
    assert hit["anchors"]["files"] and "freshness" not in hit
    status, _, record = request(server.port, "GET", f"/v1/memories/{hit['id']}", headers=auth)
    assert status == 200 and record["anchors"] == hit["anchors"] and "freshness" not in record
    ref = f"team#{hit['id']}"
    # a teammate's memory of the same project, made in their checkout: read where this machine keeps the project
    theirs = AnchorReader().anchors(str(repo), ["billing.py"], ["settle_invoice_batch"])
    status, _, posted = request(server.port, "POST", "/v1/memories", {
        "project": PROJECT, "kind": "observation", "type": "decision", "title": "Invoices settle nightly",
        "text": "The nightly job calls settle_invoice_batch.", "anchors": {**theirs, "root": "/home/ana/ledger"}},
        headers=auth)
    assert status == 201, posted
    teammate = f"team#{posted['id']}"

    def worker_search(wanted: str = ref) -> dict[str, Any]:
        query = urllib.parse.urlencode({"query": "settle_invoice_batch", "project": PROJECT, "mode": "keyword",
                                        "format": "json"})
        status, _, body = request(cfg.port, "GET", f"/api/search?{query}")
        assert status == 200 and body["source"] == "team", body
        return next(r for r in body["results"] if r["id"] == wanted)

    def batch(fmt: str) -> dict[str, Any]:
        status, _, body = request(cfg.port, "POST", "/api/observations/batch", {"ids": [ref], "format": fmt})
        assert status == 200 and body["items"], body
        return body["items"][0]

    def digest() -> str:
        status, headers, text = request(cfg.port, "GET", f"/api/context/inject?project={PROJECT}")
        assert status == 200 and headers.get("x-memcairn-remote") == "team", headers
        return str(text)

    assert worker_search()["freshness"]["state"] == "current"
    assert worker_search(teammate)["freshness"]["state"] == "current"
    assert batch("raw")["freshness"]["state"] == "current"
    assert "No longer true" not in digest()

    (repo / "billing.py").unlink()
    subprocess.run(["git", "-C", str(repo), "commit", "-qam", "billing moved out"], check=True)
    row = worker_search()
    assert row["freshness"]["state"] == "stale", row
    assert any("billing.py" in r and "deleted" in r for r in row["freshness"]["reasons"]), row
    assert worker_search(teammate)["freshness"]["state"] == "stale"
    agent = batch("agent")  # what MCP get_observations hands an agent
    assert agent["freshness"]["state"] == "stale" and "billing.py" in json.dumps(agent["freshness"]["reasons"])
    status, _, index = request(cfg.port, "GET", "/api/search?" + urllib.parse.urlencode(
        {"query": "settle_invoice_batch", "project": PROJECT, "mode": "keyword"}))
    assert status == 200 and "[stale: billing.py deleted" in index["text"], index["text"]
    # the SessionStart digest the server renders for this worker names it as no longer true (the worker's check)
    shown = digest()
    assert "## No longer true" in shown and "billing.py deleted" in shown, shown
    # the server's own answer is unchanged: it never says how true a memory is
    status, _, plain = request(server.port, "GET", f"/v1/context?project={PROJECT}", headers=auth)
    assert status == 200 and "No longer true" not in plain["context"] and "anchored" not in plain
    status, _, again = request(server.port, "GET", f"/v1/memories/{hit['id']}", headers=auth)
    assert status == 200 and "freshness" not in again and again["anchors"] == hit["anchors"]


def test_a_team_memory_corrected_in_remote_mode_is_marked_on_the_server_and_kept(
        team: tuple[TeamServer, str, str], cfg: Settings, tmp_path: Path) -> None:
    server, key, superuser_dsn = team
    repo = committed_repo(tmp_path / PROJECT, {"billing.py": SOURCE})
    assert cli(cfg.home, "connect", server.url, "--key", key).returncode == 0
    lifecycle.start(cfg)
    capture_edit(cfg.port, repo, "billing.py")
    wait_for(lambda: last_item(cfg) > 0 and in_sync(cfg, server.url, superuser_dsn), "the memory on the server")
    auth = {"Authorization": f"Bearer {key}"}
    found = request(server.port, "GET", "/v1/search?query=settle_invoice_batch&mode=keyword", headers=auth)[2]
    number = found["results"][0]["id"]
    in_digest = request(server.port, "GET", f"/v1/context?project={PROJECT}", headers=auth)[2]["context"]
    assert f"#{number}" in in_digest

    said = cli(cfg.home, "correct", f"team#{number}", "--why", "invoices settle one at a time now")
    assert said.returncode == 0, said.stderr
    assert f"team#{number} marked wrong: invoices settle one at a time now" in said.stdout
    status, _, record = request(server.port, "GET", f"/v1/memories/{number}", headers=auth)
    assert status == 200 and record["correction"]["state"] == "wrong"  # kept, marked on the server
    digest = request(server.port, "GET", f"/v1/context?project={PROJECT}", headers=auth)[2]["context"]
    assert f"#{number}" not in digest  # it left the team's digest
    query = urllib.parse.urlencode({"query": "settle_invoice_batch", "project": PROJECT, "mode": "keyword",
                                    "format": "json"})
    row = next(r for r in request(cfg.port, "GET", f"/api/search?{query}")[2]["results"]
               if r["id"] == f"team#{number}")
    assert row["freshness"]["state"] == "wrong" and "invoices settle" in row["freshness"]["reasons"][0]

    back = cli(cfg.home, "correct", f"team#{number}", "--undo")
    assert back.returncode == 0 and f"team#{number} holds again" in back.stdout, back.stderr
    record = request(server.port, "GET", f"/v1/memories/{number}", headers=auth)[2]
    assert "state" not in record["correction"] and record["correction"]["undone"][0]["state"] == "wrong"
    assert cli(cfg.home, "correct", f"team#{number}", "--by", "12").returncode != 0  # by a team id, not a local
