"""Saying a memory no longer holds (``store/supersede.py``): superseded by another or wrong, kept as an audit
trail, out of the SessionStart digest, ranked below the others, and taken back; through the store, the worker's
HTTP route, the command line and the MCP SDK's own client against a real worker."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp_helpers import MEMCAIRN, start_worker, text_of, worker_env
from starlette.testclient import TestClient
from worker_app import store_of

from memcairn.core.errors import NotFoundError, ValidationError
from memcairn.core.models import NewItem
from memcairn.store import Store, supersede
from memcairn.store.migrations import MIGRATIONS, migrate


def _note(store: Store, title: str, text: str, project: str = "shop", type_: str = "decision") -> int:
    return store.add_item(NewItem(project=project, kind="observation", type=type_, title=title,
                                  narrative=text)).id


def test_a_correction_is_kept_with_its_history_and_undone(store: Store) -> None:
    old = _note(store, "Port is 3000", "the server listens on port 3000")
    new = _note(store, "Port is 8080", "the server listens on port 8080")
    item = supersede.correct(store, old, by=new, why="the port moved")
    assert supersede.state_of(item) == "superseded"
    assert (item.correction["by"], item.correction["why"], item.correction["source"]) == (new, "the port moved",
                                                                                          "person")
    again = supersede.correct(store, old, why="there never was a port  3000\n")
    assert again.correction["state"] == "wrong" and again.correction["why"] == "there never was a port 3000"
    assert [c["state"] for c in again.correction["undone"]] == ["superseded"]
    back = supersede.undo(store, old)
    assert supersede.state_of(back) is None and [c["state"] for c in back.correction["undone"]] == [
        "superseded", "wrong"]
    assert store.get_item(old).narrative == "the server listens on port 3000"  # never deleted nor rewritten
    with pytest.raises(ValidationError, match="nothing to undo"):
        supersede.undo(store, old)


def test_a_correction_is_refused_when_it_cannot_hold(store: Store) -> None:
    old = _note(store, "Port is 3000", "the server listens on port 3000")
    new = _note(store, "Port is 8080", "the server listens on port 8080")
    elsewhere = _note(store, "Port elsewhere", "another project's port", project="other")
    with pytest.raises(ValidationError, match="say why"):
        supersede.correct(store, old)
    with pytest.raises(ValidationError, match="itself"):
        supersede.correct(store, old, by=old)
    with pytest.raises(NotFoundError, match="#999"):
        supersede.correct(store, old, by=999)
    with pytest.raises(ValidationError, match="one of its own project"):
        supersede.correct(store, old, by=elsewhere)
    supersede.correct(store, old, by=new)
    with pytest.raises(ValidationError, match="undo that first"):
        supersede.correct(store, new, by=old)
    leaked = supersede.correct(store, new, why="key sk-ant-api03-" + "a" * 90 + " <private>mine</private>")
    assert "sk-ant" not in leaked.correction["why"] and "mine" not in leaked.correction["why"]


def test_a_memory_stored_before_corrections_reads_back_without_one(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    migrate(conn, path, [m for m in MIGRATIONS if m.version < 18])
    conn.execute("INSERT INTO projects(id, name, created_at_epoch) VALUES (1, 'demo', 0)")
    conn.execute("INSERT INTO memory_items(uuid, project_id, kind, type, text, content_hash, created_at_epoch, "
                 "updated_at_epoch) VALUES ('u1', 1, 'manual', 'note', 'older memory', 'h1', 0, 0)")
    conn.close()
    with Store(path) as store:
        assert [(i.text, i.correction) for i in store.list_items()] == [("older memory", {})]


def test_the_worker_marks_a_corrected_memory_everywhere_and_takes_it_back(client: TestClient, app: Any) -> None:
    store = store_of(app)
    old = _note(store, "Quokka cache lives in redis", "quokka quokka cache entries are kept in redis")
    new = _note(store, "Quokka cache lives in memory", "quokka cache entries are kept in process memory")
    wrong = _note(store, "Quokka tests need docker", "quokka quokka quokka tests need a docker daemon")
    first = client.get("/api/search", params={"query": "quokka", "projects": "shop", "format": "json"}).json()
    assert [r["id"] for r in first["results"]][0] in (old, wrong)

    answer = client.post(f"/api/memory/{old}/correct", json={"by": new, "why": "moved off redis"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["freshness"]["state"] == "superseded"
    assert client.post(f"/api/memory/{wrong}/correct", json={"why": "they run on sqlite"}).status_code == 200

    record = client.get(f"/api/memory/{old}").json()
    assert record["narrative"] == "quokka quokka cache entries are kept in redis"
    assert record["correction"]["by"] == new
    assert record["freshness"]["reasons"] == [f"superseded by #{new}: moved off redis"]
    agent = client.post("/api/observations/batch", json={"ids": [wrong], "format": "agent"}).json()
    assert agent["items"][0]["freshness"]["state"] == "wrong"
    assert agent["items"][0]["freshness"]["reasons"] == ["wrong: they run on sqlite"]

    found = client.get("/api/search", params={"query": "quokka", "projects": "shop", "format": "json"}).json()
    assert [r["id"] for r in found["results"]][0] == new  # the corrected ones ranked below, still there
    assert {old, wrong} <= {r["id"] for r in found["results"]}
    index = client.get("/api/search", params={"query": "quokka", "projects": "shop"}).json()["text"]
    assert f"Quokka cache lives in redis [superseded by #{new}: moved off redis]" in index
    assert "Quokka tests need docker [wrong: they run on sqlite]" in index

    digest = client.get("/api/context/inject", params={"projects": "shop"}).text
    assert "Quokka cache lives in memory" in digest
    assert "redis" not in digest and "docker" not in digest

    assert client.post(f"/api/memory/{old}/correct", json={"undo": True}).status_code == 200
    assert "Quokka cache lives in redis" in client.get("/api/context/inject", params={"projects": "shop"}).text
    for body, status in (({}, 400), ({"undo": True, "why": "x"}, 400), ({"by": "twelve"}, 400),
                         ({"by": 10**6}, 404), ({"undo": True}, 400)):
        assert client.post(f"/api/memory/{old}/correct", json=body).status_code == status, body
    assert client.post("/api/memory/999999/correct", json={"why": "x"}).status_code == 404


def test_the_command_line_corrects_shows_and_undoes(isolated_home: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from memcairn.cli.app import run
    from memcairn.wire.config import load_settings

    with Store(load_settings().db_path) as home_store:
        old = _note(home_store, "Builds run with make", "run make to build")
        new = _note(home_store, "Builds run with just", "run just build to build")
    assert run(["correct", f"#{old}", "--by", str(new), "--why", "make is gone"]) == 0
    assert f"#{old} superseded by #{new}: make is gone" in capsys.readouterr().out
    assert run(["show", str(old)]) == 0
    assert f"correction: superseded by #{new}: make is gone" in capsys.readouterr().out
    assert run(["correct", str(old), "--undo", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["correction"]["undone"][0]["by"] == new
    assert run(["correct", str(old)]) == 2
    assert "--why" in capsys.readouterr().err


@pytest.fixture
def env(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    yield from worker_env(isolated_home, monkeypatch)


def test_an_agent_corrects_a_memory_over_mcp(env: dict[str, str], tmp_path: Path) -> None:
    worker = start_worker(env)

    async def flow() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        params = StdioServerParameters(command=MEMCAIRN, args=["mcp"], env=env, cwd=str(tmp_path))
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()

            async def call(name: str, arguments: dict[str, Any]) -> tuple[bool, str]:
                result = await session.call_tool(name, arguments)
                return result.is_error, text_of(result)

            saved = await call("save_memory", {"text": "Wombat jobs retry three times", "type": "decision"})
            seen["id"] = int(re.search(r"#(\d+)", saved[1]).group(1))
            seen["correct"] = await call("correct", {"id": f"#{seen['id']}", "why": "they retry five times"})
            seen["context"] = await call("session_start_context", {})
            seen["full"] = await call("get_observations", {"ids": [seen["id"]]})
            seen["undo"] = await call("correct", {"id": seen["id"], "undo": True})
            seen["neither"] = await call("correct", {"id": seen["id"]})
        return seen

    seen = anyio.run(flow)
    item_id = seen["id"]
    assert seen["correct"] == (False, f"#{item_id} wrong: they retry five times: it stays readable by id, leaves "
                                      "the session context and ranks below others.")
    assert "Wombat" not in seen["context"][1]
    assert "wrong: they retry five times" in seen["full"][1]
    assert seen["undo"] == (False, f"#{item_id} holds again.")
    assert seen["neither"][0] and "say why" in seen["neither"][1]
    assert worker.get_json(f"/api/memory/{item_id}")["correction"]["undone"][0]["state"] == "wrong"

    # the command line goes through the running worker too (its answer carries the freshness the worker read)
    said = subprocess.run([MEMCAIRN, "correct", str(item_id), "--why", "five, not three", "--json"],
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=60)
    assert said.returncode == 0, said.stderr
    assert json.loads(said.stdout)["freshness"]["reasons"] == ["wrong: five, not three"]
