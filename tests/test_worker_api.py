"""The worker's HTTP API, in process: shapes and errors of every route, readiness, guards, events."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient
from worker_app import BASE, PORT, add, store_of, wait_ready

from memcairn.core.errors import ConfigError, StoreError, WorkerUnavailableError
from memcairn.core.models import NewItem
from memcairn.mirror.runtime import open_runtime
from memcairn.wire.config import Settings
from memcairn.worker.app import make_app
from memcairn.worker.openapi import OPERATIONS


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "detail"}
    assert isinstance(body["detail"], str) and body["detail"]
    assert "Traceback" not in response.text
    if code is not None:
        assert body["error"] == code
    return body


# -- readiness ----------------------------------------------------------------------------------------
def test_health_answers_at_once_and_store_routes_wait_for_startup(cfg: Settings) -> None:
    gate = threading.Event()
    app = make_app(None, cfg, startup_gate=gate)
    with TestClient(app, base_url=BASE) as c:
        health = c.get("/api/health").json()
        assert health["status"] == "ok" and health["ready"] is False and health["port"] == PORT
        assert isinstance(health["pid"], int) and health["version"]
        assert_error(c.get("/api/readiness"), 503, "not_ready")
        for path in ("/api/stats", "/api/projects", "/api/search?query=x", "/api/memory/1", "/api/context/inject"):
            assert_error(c.get(path), 503, "not_ready")
        assert_error(c.post("/api/memory/save", json={"text": "x"}), 503, "not_ready")
        gate.set()
        wait_ready(app)
        assert c.get("/api/readiness").json() == {"status": "ready"}
        assert c.get("/api/health").json()["ready"] is True


def test_failed_startup_is_reported_not_raised(cfg: Settings) -> None:
    def broken(_cfg: Settings) -> Any:
        raise StoreError("memcairn.db is not a readable memcairn database")

    app = make_app(broken, cfg)
    with TestClient(app, base_url=BASE) as c:
        deadline = time.monotonic() + 5
        while app.state.worker.phase == "starting" and time.monotonic() < deadline:
            time.sleep(0.01)
        body = assert_error(c.get("/api/readiness"), 503, "not_ready")
        assert "startup failed" in body["detail"] and "not a readable" in body["detail"]
        assert c.get("/api/health").json()["state"] == "failed"


def test_a_given_runtime_is_used_and_left_open(cfg: Settings) -> None:
    runtime = open_runtime(cfg, with_mirror=False)
    try:
        app = make_app(runtime, cfg)
        with TestClient(app, base_url=BASE) as c:
            wait_ready(app)
            saved = c.post("/api/memory/save", json={"text": "kept open", "project": "p"}).json()
            assert c.get("/api/stats").json()["mirror"]["state"] in ("disabled", "unavailable")
        assert runtime.store.get_item(saved["id"]).text == "kept open"  # still open after shutdown
    finally:
        runtime.close()


# -- memories -----------------------------------------------------------------------------------------
def test_save_get_and_dedupe(client: TestClient, app: Any) -> None:
    body = {"text": "SQLite runs in WAL mode", "title": "Use WAL", "project": "demo", "type": "decision",
            "facts": ["readers never block"], "concepts": ["storage"], "metadata": {"by": "test"}}
    first = client.post("/api/memory/save", json=body)
    assert first.status_code == 200 and first.json() == {"id": first.json()["id"], "created": True}
    again = client.post("/api/memory/save", json=body).json()
    assert again == {"id": first.json()["id"], "created": False}
    item = client.get(f"/api/memory/{again['id']}").json()
    assert item["kind"] == "manual" and item["type"] == "decision" and item["facts"] == ["readers never block"]
    assert item["metadata"] == {"by": "test"} and item["project"] == "demo"
    default = client.post("/api/memory/save", json={"text": "no project given"}).json()
    assert client.get(f"/api/memory/{default['id']}").json()["project"] == "default"


@pytest.mark.parametrize("body, fragment", [
    ({}, "text is required"),
    ({"text": "   "}, "text must not be blank"),
    ({"text": "x", "project": " "}, "project must not be blank"),
    ({"text": 5}, "text must be text"),
    ({"text": "x", "facts": "not a list"}, "facts must be a list"),
    ({"text": "x", "facts": [1, 2]}, "facts must be a list"),
    ({"text": "x", "metadata": [1]}, "metadata must be a JSON object"),
    ({"text": "x", "type": "Not A Type"}, "type"),
    ({"text": "x", "project": "p" * 300}, "project"),
])
def test_save_rejects_malformed_bodies(client: TestClient, body: dict[str, Any], fragment: str) -> None:
    detail = assert_error(client.post("/api/memory/save", json=body), 400, "invalid_request")["detail"]
    assert fragment in detail


def test_save_strips_private_parts_and_redacts_secrets(client: TestClient, app: Any) -> None:
    github = "ghp_" + "A1b2C3d4" * 5
    anthropic = "sk-ant-" + "api03-" + "Q" * 40
    body = {"project": "demo", "title": "Deploy notes <private>for Alice</private>",
            "text": f"Deploy with token {github}. <private>The vault PIN is 4711.</private> Then restart.",
            "facts": [f"key {anthropic}", "<private>home address</private>", "restart takes 30 s"],
            "concepts": ["deploy"], "metadata": {"note": "<private>salary</private> ok", "auth": f"{github}"}}
    saved = client.post("/api/memory/save", json=body)
    assert saved.status_code == 200, saved.text
    item = client.get(f"/api/memory/{saved.json()['id']}").json()
    stored = json.dumps(item)
    for secret in (github, anthropic, "Alice", "4711", "home address", "salary"):
        assert secret not in stored
    assert item["title"] == "Deploy notes"
    assert item["text"] == "Deploy with token [REDACTED:github_token]. Then restart."
    assert item["facts"] == ["key [REDACTED:anthropic_api_key]", "restart takes 30 s"]
    assert item["metadata"] == {"note": "ok", "auth": "[REDACTED:github_token]"}
    # nothing but private text: refused, nothing stored
    before = store_of(app).count_items()
    refused = client.post("/api/memory/save", json={"text": "<private>only for me</private>", "project": "demo"})
    assert "private" in assert_error(refused, 400, "invalid_request")["detail"]
    assert store_of(app).count_items() == before


@pytest.mark.parametrize("raw", [b"", b"not json", b"[1, 2]", b'{"text": NaN}', b"[" * 100_000, b'"\\ud800"',
                                 b'{"text": "\\ud800"}', b"\xff\xfe"])
def test_bodies_that_are_not_json_objects_are_400(client: TestClient, raw: bytes) -> None:
    response = client.post("/api/memory/save", content=raw, headers={"Content-Type": "application/json"})
    assert_error(response, 400, "invalid_request")


def test_items_by_kind(client: TestClient, app: Any) -> None:
    obs = add(app, kind="observation", title="Fixed login", narrative="token compared in local time")
    summ = add(app, kind="summary", request="fix login", completed="done")
    prompt = add(app, kind="prompt", text="please fix the login", prompt_number=1)
    manual = add(app, kind="manual", text="a note")
    for kind, item_id in (("observation", obs), ("summary", summ), ("prompt", prompt)):
        assert client.get(f"/api/{kind}/{item_id}").json()["id"] == item_id
        assert_error(client.get(f"/api/{kind}/{manual}"), 404, "not_found")
    for item_id in (obs, summ, prompt, manual):
        assert client.get(f"/api/memory/{item_id}").json()["id"] == item_id
    assert_error(client.get("/api/memory/999999"), 404, "not_found")
    assert_error(client.get(f"/api/memory/{2**63}"), 404, "not_found")
    assert_error(client.get("/api/memory/abc"), 404, "not_found")


def test_batch_answers_in_order_with_missing(client: TestClient, app: Any) -> None:
    a = add(app, kind="manual", text="first")
    b = add(app, kind="observation", title="second")
    body = client.post("/api/observations/batch", json={"ids": [b, 424242, a, b]}).json()
    assert [i["id"] for i in body["items"]] == [b, a]
    assert body["items"][0]["title"] == "second" and body["missing"] == [424242]
    for bad in ({}, {"ids": []}, {"ids": "1,2"}, {"ids": [1, "2"]}, {"ids": [True]}, {"ids": list(range(1, 502))},
                {"ids": [0]}, {"ids": [2**63]}):
        assert_error(client.post("/api/observations/batch", json=bad), 400, "invalid_request")


def test_delete_removes_from_store_and_mirror(client: TestClient, app: Any) -> None:
    manual = client.post("/api/memory/save", json={"text": "zebra crossing rules", "project": "demo"}).json()["id"]
    obs = add(app, kind="observation", title="zebra stripes", narrative="zebra pattern in the parser")
    runner = app.state.worker.runner
    runner.nudge()
    assert runner.wait_idle(10)
    index = app.state.worker.runtime.mirror.index
    assert index.count("demo") >= 2
    assert_error(client.delete(f"/api/observation/{manual}"), 404, "not_found")
    assert client.delete(f"/api/observation/{obs}").json() == {"id": obs, "deleted": True, "kind": "observation"}
    assert client.delete(f"/api/memory/{manual}").json()["deleted"] is True
    assert index.count("demo") == 0  # dropped at once, not at the runner's next pass
    assert_error(client.get(f"/api/memory/{manual}"), 404)
    assert_error(client.delete(f"/api/memory/{manual}"), 404, "not_found")
    found = client.get("/api/search", params={"query": "zebra", "format": "json"}).json()
    assert found["results"] == []



def test_a_deleted_memory_stays_deleted_until_saved_again(client: TestClient, app: Any) -> None:
    body = {"project": "demo", "title": "Deploys need VPN", "text": "the deploy host is VPN only"}
    saved = client.post("/api/memory/save", json=body).json()
    assert client.delete(f"/api/memory/{saved['id']}").json()["deleted"] is True
    replay = store_of(app).add_item(NewItem(project="demo", kind="manual", title="Deploys need VPN",
                                            text="the deploy host is VPN only"))
    assert replay.forgotten and store_of(app).count_items() == 0  # a replayed capture of the same content

    again = client.post("/api/memory/save", json=body)  # an explicit save is a person's or agent's intent
    assert again.status_code == 200 and again.json()["created"] is True
    assert client.get(f"/api/memory/{again.json()['id']}").json()["title"] == "Deploys need VPN"

# -- search, timeline, context ------------------------------------------------------------------------
def test_search_formats_and_filters(client: TestClient, app: Any) -> None:
    a = add(app, kind="observation", type="bugfix", title="Login token expiry", narrative="compared in UTC",
            concepts=["auth"], files_modified=["src/auth.py"])
    add(app, kind="observation", type="feature", title="Login page redesign", project="web")
    add(app, kind="summary", request="token work", completed="login fixed", project="other")
    index = client.get("/api/search", params={"query": "login token"}).json()
    assert index["format"] == "index" and f"#{a}" in index["text"] and index["strategy"] in ("hybrid", "keyword")
    full = client.get("/api/search", params={"query": "login", "format": "json", "projects": "demo,web"}).json()
    assert {r["project"] for r in full["results"]} == {"demo", "web"}
    whole = client.get("/api/search", params={"query": "login", "format": "json", "project": "demo,web"}).json()
    assert whole["results"] == [] and "unknown project 'demo,web'" in whole["notes"][0]  # one name, comma and all
    twice = client.get("/api/search?query=login&offset=true&offset=")
    assert_error(twice, 400)
    assert "offset was given 2 times" in twice.json()["detail"]
    repeated = client.get("/api/search?query=login&format=json&project=demo&project=web").json()
    assert {r["id"] for r in repeated["results"]} == {r["id"] for r in full["results"]}
    typed = client.get("/api/search", params={"obs_type": "bugfix", "format": "json", "concepts": "auth",
                                              "files": "auth.py", "kind": "observations"}).json()
    assert [r["id"] for r in typed["results"]] == [a] and typed["strategy"] == "filter_only"
    newest = client.get("/api/search", params={"format": "json", "limit": "2", "orderBy": "newest"}).json()
    assert len(newest["results"]) == 2
    assert_error(client.get("/api/search", params={"query": "login", "tz": "Mars/Base"}), 400)
    assert_error(client.get("/api/timeline", params={"anchor": str(a), "tz": "+25:00"}), 400)
    clamped = client.get("/api/search", params={"limit": "500"}).json()
    assert any("clamped" in n for n in clamped["notes"])
    dated = client.get("/api/search", params={"dateStart": "2000-01-01", "dateEnd": "7d", "format": "json"})
    assert dated.status_code == 200
    for params in ({"kind": "widgets"}, {"orderBy": "sideways"}, {"limit": "ten"}, {"format": "xml"},
                   {"dateStart": "yesterday-ish"}, {"dateStart": "2026-01-02", "dateEnd": "2026-01-01"},
                   {"dateStart": "9" * 40}):
        assert_error(client.get("/api/search", params=params), 400, "invalid_request")


def test_timeline(client: TestClient, app: Any) -> None:
    ids = [add(app, kind="observation", title=f"step {n}", created_at_epoch=1_700_000_000_000 + n * 1000)
           for n in range(5)]
    body = client.get("/api/timeline", params={"anchor": ids[2], "depth_before": 1, "depth_after": 1,
                                               "format": "json"}).json()
    assert body["anchor_id"] == ids[2] and [r["id"] for r in body["results"]] == ids[1:4]
    # the CLI's and the MCP tool's names are the API's too (depth_* stay as aliases)
    same = client.get("/api/timeline", params={"anchor": ids[2], "before": 1, "after": 1, "format": "json"}).json()
    assert [r["id"] for r in same["results"]] == ids[1:4]
    text = client.get("/api/timeline", params={"anchor": f"#{ids[2]}"}).json()
    assert text["format"] == "index" and "<- ANCHOR" in text["text"]
    by_query = client.get("/api/timeline", params={"query": "step", "format": "json"}).json()
    assert by_query["anchor_id"] in ids
    assert_error(client.get("/api/timeline"), 400, "invalid_request")
    assert_error(client.get("/api/timeline", params={"anchor": "1", "query": "x"}), 400)
    assert_error(client.get("/api/timeline", params={"anchor": "999999"}), 404, "not_found")
    assert_error(client.get("/api/timeline", params={"anchor": "5", "depth_before": "lots"}), 400)
    for anchor in ("\u00b2", "1" * 5000):  # isdigit passes a superscript two; int() refuses it, and 5,000 digits
        assert_error(client.get("/api/timeline", params={"anchor": anchor}), 400)
    assert_error(client.get("/api/search", params={"dateStart": "\u00b2"}), 400)


def test_context_inject_is_plain_text(client: TestClient, app: Any) -> None:
    add(app, kind="observation", title="Parser handles tabs", project="alpha")
    add(app, kind="summary", request="fix parser", completed="tabs handled", project="alpha")
    add(app, kind="observation", title="Unrelated", project="beta")
    response = client.get("/api/context/inject", params={"projects": "alpha", "colors": "true", "full": "0"})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    assert "Parser handles tabs" in response.text and "fix parser" in response.text
    assert "Unrelated" not in response.text
    assert "no memories yet" in client.get("/api/context/inject", params={"projects": "nothing"}).text
    assert_error(client.get("/api/context/inject", params={"colors": "maybe"}), 400, "invalid_request")



def test_a_resumed_session_gets_one_line_unless_something_new_was_stored(client: TestClient, app: Any) -> None:
    """Claude Code replays a resumed session's transcript, the context its start was given included."""
    add(app, kind="observation", title="Parser handles tabs", project="alpha", created_at_epoch=1_000)
    resume = {"project": "alpha", "source": "resume", "session": "s-9", "agent": "claude-code"}
    first = client.get("/api/context/inject", params=resume)  # no start recorded: the whole context
    assert "Parser handles tabs" in first.text and first.headers["x-memcairn-context"] != "resumed"

    start = {"session_id": "s-9", "project": "alpha", "platform_source": "claude-code", "event": "session_start"}
    assert client.post("/api/sessions/init", json=start).status_code == 202
    within_grace = client.get("/api/context/inject", params=resume)  # this resume's own start, just landed
    assert "Parser handles tabs" in within_grace.text

    store = store_of(app)
    store._conn.execute("UPDATE ingest_events SET created_at_epoch = created_at_epoch - 60000 WHERE session_id = 's-9'")
    store._conn.execute("UPDATE memory_items SET updated_at_epoch = updated_at_epoch - 120000")  # stored before it
    again = client.get("/api/context/inject", params=resume)
    assert again.headers["x-memcairn-context"] == "resumed"
    assert again.text.startswith("memcairn: no new memories since this session started")
    for other in ({**resume, "source": "startup"}, {**resume, "session": "s-other"}, {**resume, "agent": "codex"}):
        assert "Parser handles tabs" in client.get("/api/context/inject", params=other).text

    add(app, kind="observation", title="Beta only", project="beta")  # news of another project: not this context's
    assert client.get("/api/context/inject", params=resume).headers["x-memcairn-context"] == "resumed"
    add(app, kind="observation", title="Lexer keeps tabs", project="alpha")  # stored since that start
    news = client.get("/api/context/inject", params=resume)
    assert "Lexer keeps tabs" in news.text and news.headers["x-memcairn-context"] != "resumed"


def _started_a_while_ago(client: TestClient, app: Any, session: str, *, ago_ms: int = 600_000) -> dict[str, str]:
    """A SessionStart of ``session`` recorded ``ago_ms`` ago, with everything stored until now moved before it;
    the parameters of its resume."""
    start = {"session_id": session, "project": "alpha", "platform_source": "claude-code", "event": "session_start"}
    assert client.post("/api/sessions/init", json=start).status_code == 202
    store = store_of(app)
    store._conn.execute("UPDATE ingest_events SET created_at_epoch = created_at_epoch - ? WHERE session_id = ?",
                        (ago_ms, session))
    store._conn.execute("UPDATE memory_items SET updated_at_epoch = MIN(updated_at_epoch, ?)",
                        (int(time.time() * 1000) - ago_ms - 60_000,))
    return {"project": "alpha", "source": "resume", "session": session, "agent": "claude-code"}


def test_a_resume_counts_what_was_stored_since_its_start_not_only_what_happened_since(client: TestClient,
                                                                                      app: Any) -> None:
    """A transcript replay, a claude-mem import or a capture that waited in the queue stores items whose
    ``created_at_epoch`` is their event's time, before the session started: the start's context lacked them."""
    add(app, kind="observation", title="Parser handles tabs", project="alpha", created_at_epoch=1_000)
    resume = _started_a_while_ago(client, app, "s-late")
    assert client.get("/api/context/inject", params=resume).headers["x-memcairn-context"] == "resumed"

    hour_before_start = int(time.time() * 1000) - 3_600_000
    add(app, kind="observation", title="Imported lexer note", project="alpha", created_at_epoch=hour_before_start)
    news = client.get("/api/context/inject", params=resume)
    assert news.headers["x-memcairn-context"] != "resumed" and "Imported lexer note" in news.text


def test_a_resume_counts_what_was_stored_just_before_its_start_was_recorded(client: TestClient, app: Any) -> None:
    """The hook sends the context request and the start event together: the start's context can have been
    rendered before an item committed a moment before the event was recorded."""
    add(app, kind="observation", title="Parser handles tabs", project="alpha", created_at_epoch=1_000)
    resume = _started_a_while_ago(client, app, "s-race")
    store = store_of(app)
    started = store._conn.execute("SELECT created_at_epoch FROM ingest_events WHERE session_id = ?",
                                  ("s-race",)).fetchone()[0]
    add(app, kind="observation", title="Committed beside the start", project="alpha", created_at_epoch=started - 2_000)
    store._conn.execute("UPDATE memory_items SET updated_at_epoch = ? WHERE title = 'Committed beside the start'",
                        (started - 2_000,))
    news = client.get("/api/context/inject", params=resume)
    assert news.headers["x-memcairn-context"] != "resumed" and "Committed beside the start" in news.text


def test_an_edit_since_the_start_gives_the_context_again(client: TestClient, app: Any) -> None:
    item = add(app, kind="observation", title="Parser handles tabs", project="alpha", created_at_epoch=1_000)
    resume = _started_a_while_ago(client, app, "s-edit")
    assert client.get("/api/context/inject", params=resume).headers["x-memcairn-context"] == "resumed"
    store_of(app).update_item(item, title="Parser handles tabs and CR")
    news = client.get("/api/context/inject", params=resume)
    assert news.headers["x-memcairn-context"] != "resumed" and "tabs and CR" in news.text



def test_a_delete_since_the_start_gives_the_context_again(client: TestClient, app: Any) -> None:
    """The earlier context still shows a deleted memory: the resumed session must get the context anew."""
    add(app, kind="observation", title="Parser handles tabs", project="alpha", created_at_epoch=1_000)
    gone = add(app, kind="observation", title="Parser drops CR", project="alpha", created_at_epoch=2_000)
    other = add(app, kind="observation", title="Elsewhere", project="beta", created_at_epoch=2_000)
    resume = _started_a_while_ago(client, app, "s-delete")
    store_of(app).delete_items([other])  # another project's delete is no news here
    assert client.get("/api/context/inject", params=resume).headers["x-memcairn-context"] == "resumed"
    store_of(app).delete_items([gone])
    news = client.get("/api/context/inject", params=resume)
    assert news.headers["x-memcairn-context"] != "resumed" and "Parser drops CR" not in news.text


def test_stored_since_seeks_the_rows_written_since(app: Any, client: TestClient) -> None:
    """Both times are indexed and the project is checked on what they find (a seek, not the project's rows)."""
    store = store_of(app)
    add(app, kind="observation", title="Parser handles tabs", project="alpha")
    ran: list[str] = []
    store._conn.set_trace_callback(ran.append)  # the statements with their values
    try:
        assert not store.stored_since(["alpha"], 4_000_000_000_000, besides_session=("claude-code", "s"))
    finally:
        store._conn.set_trace_callback(None)
    query = next(sql for sql in ran if "FROM memory_items m" in sql)
    plan = " ".join(r[3] for r in store._conn.execute(f"EXPLAIN QUERY PLAN {query}"))
    assert "MULTI-INDEX OR" in plan and "ix_memory_items_updated" in plan and "ix_memory_items_time" in plan


def test_context_delivered_must_be_true_or_false(client: TestClient) -> None:
    body = {"session_id": "s-flag", "project": "alpha", "event": "session_start"}
    assert client.post("/api/sessions/init", json={**body, "context_delivered": False}).status_code == 202
    assert_error(client.post("/api/sessions/init", json={**body, "context_delivered": "false"}), 400)


def test_what_the_resumed_session_stored_itself_does_not_count(client: TestClient, app: Any) -> None:
    """Its own observations and summary are in its conversation already: only others' work is news."""
    add(app, kind="observation", title="Parser handles tabs", project="alpha", created_at_epoch=1_000)
    resume = _started_a_while_ago(client, app, "s-own")
    add(app, kind="observation", title="Own work", project="alpha", session="s-own", platform_source="claude-code")
    assert client.get("/api/context/inject", params=resume).headers["x-memcairn-context"] == "resumed"
    add(app, kind="observation", title="Other session's work", project="alpha", session="s-else",
        platform_source="claude-code")
    news = client.get("/api/context/inject", params=resume)
    assert news.headers["x-memcairn-context"] != "resumed" and "Other session's work" in news.text

def test_context_inject_narrows_to_the_platform_asked_for(client: TestClient, app: Any) -> None:
    add(app, kind="observation", title="Claude fixed the parser", project="alpha", platform_source="claude-code",
        session="c")
    add(app, kind="observation", title="Codex sped up the build", project="alpha", platform_source="codex",
        session="x")
    add(app, kind="manual", text="Release on Tuesdays", title="Release day", project="alpha")

    def context(**params: str) -> str:
        response = client.get("/api/context/inject", params={"projects": "alpha", **params})
        assert response.status_code == 200, response.text
        return response.text

    assert all(t in context() for t in ("Claude fixed the parser", "Codex sped up the build", "Release day"))
    codex = context(platformSource="codex")
    assert "Codex sped up the build" in codex and "Release day" in codex and "Claude fixed" not in codex
    claude = context(platformSource="claude-code", full="true")
    assert "Claude fixed the parser" in claude and "Release day" in claude and "Codex" not in claude


def test_context_inject_answers_from_the_memo_until_the_store_changes(
        cfg: Settings, tmp_path: Path) -> None:
    app = make_app(None, dataclasses.replace(cfg, vector_backend="none"), static_dir=tmp_path / "static")
    with TestClient(app, base_url=BASE) as client:
        wait_ready(app)
        add(app, kind="observation", title="Parser handles tabs", project="alpha")
        assert app.state.worker.capture.wait_idle(10)

        def answers(*params: dict[str, str]) -> list[httpx.Response]:
            """One answer per params, all within one minute (the memo's key holds the minute)."""
            for _ in range(3):
                minute = time.time() // 60
                out = [client.get("/api/context/inject", params={"projects": "alpha", **p}) for p in params]
                if time.time() // 60 == minute:
                    assert all(r.status_code == 200 for r in out)
                    return out
            raise AssertionError("the minute kept changing")

        first, second, fresh, third = answers({}, {}, {"fresh": "1"}, {})
        assert [r.headers["X-Memcairn-Context"] for r in (first, second, fresh, third)] == [
            "rendered", "memo", "rendered", "memo"]
        assert first.text == second.text == fresh.text == third.text and "Parser handles tabs" in first.text
        saved = client.post("/api/memory/save", json={"text": "Ship on Tuesdays", "title": "Release day",
                                                      "project": "alpha"})
        assert saved.status_code == 200
        after, again = answers({}, {})
        assert after.headers["X-Memcairn-Context"] == "rendered" and "Release day" in after.text
        assert again.headers["X-Memcairn-Context"] == "memo" and again.text == after.text
        coloured = answers({"colors": "true"})[0]
        assert coloured.headers["X-Memcairn-Context"] == "rendered" and "\x1b[" in coloured.text
        assert_error(client.get("/api/context/inject", params={"fresh": "maybe"}), 400, "invalid_request")
        store_of(app).add_capture_notice("llm_config", "memory capture: the model is unreachable")
        noticed = answers({})[0]
        assert noticed.headers["X-Memcairn-Context"] == "rendered"
        assert noticed.text.startswith("memcairn notice: memory capture: the model is unreachable")


def test_projects_and_stats(client: TestClient, app: Any) -> None:
    add(app, kind="manual", text="one", project="alpha")
    add(app, kind="manual", text="two", project="alpha")
    projects = client.get("/api/projects").json()["projects"]
    assert [(p["name"], p["items"]) for p in projects] == [("alpha", 2)]
    stats = client.get("/api/stats").json()
    assert stats["items"] == 2 and stats["by_kind"]["manual"] == 2
    assert stats["mirror"]["state"] in ("ok", "degraded") and stats["mirror"]["backend"] == "sqlite-vec"
    assert isinstance(stats["mirror"]["lag"], int) and isinstance(stats["mirror"]["outbox"], int)
    assert stats["ingest"] == {"pending": 0, "done": 0, "failed": 0, "oldest_pending_epoch": None}
    assert stats["llm_tokens_today"] == 0
    assert stats["worker"]["version"]


# -- ingest -------------------------------------------------------------------------------------------
def test_ingest_routes_accept_and_persist(client: TestClient, app: Any) -> None:
    init = client.post("/api/sessions/init", json={"session_id": "s1", "cwd": "/work/demo", "prompt": "hi",
                                                   "platform_source": "claude-code"})
    assert init.status_code == 202 and init.json()["status"] == "accepted" and init.json()["duplicate"] is False
    tool = {"contentSessionId": "s1", "project": "demo", "tool_name": "Edit", "tool_use_id": "tu-1",
            "tool_input": {"file": "a.py"}, "tool_response": "ok"}
    first = client.post("/api/sessions/observations", json=tool).json()
    again = client.post("/api/sessions/observations", json=tool).json()
    assert again == {"status": "accepted", "event_id": first["event_id"], "duplicate": True}
    assert client.post("/api/sessions/summarize", json={"session_id": "s1", "project": "demo"}).status_code == 202
    store = store_of(app)
    events = sorted(store.session_events("claude-code", "s1") + store.session_events("unknown", "s1"),
                    key=lambda e: e.id)  # pending or already processed by the capture thread
    assert [(e.event_type, e.session_id) for e in events] == [
        ("session_init", "s1"), ("observation", "s1"), ("summarize", "s1")]
    assert events[1].payload["tool_input"] == {"file": "a.py"} and events[1].tool_use_id == "tu-1"
    assert events[0].platform_source == "claude-code" and events[1].platform_source == "unknown"
    queue = client.get("/api/stats").json()["ingest"]
    assert queue["pending"] + queue["done"] == 3 and queue["failed"] == 0
    for path, body in (("/api/sessions/init", {"project": "demo"}),
                       ("/api/sessions/init", {"session_id": "s1"}),
                       ("/api/sessions/init", {"session_id": 7, "project": "demo"}),
                       ("/api/sessions/observations", {"session_id": "s1", "project": "demo"}),
                       ("/api/sessions/summarize", {"session_id": "s", "cwd": "/x", "prompt_number": -1}),
                       ("/api/sessions/summarize", {"session_id": "s", "cwd": "/x", "last_assistant_message": {}})):
        assert_error(client.post(path, json=body), 400, "invalid_request")


# -- errors and guards --------------------------------------------------------------------------------
def test_unknown_routes_methods_and_unexpected_errors(client: TestClient, app: Any,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    assert_error(client.get("/api/nothing"), 404, "not_found")
    wrong = client.put("/api/health")
    assert_error(wrong, 405, "method_not_allowed")
    assert "GET" in wrong.headers["allow"]

    def boom() -> None:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(store_of(app), "projects", boom)
    body = assert_error(client.get("/api/projects"), 500, "internal_error")
    assert "secret" not in body["detail"]


@pytest.mark.parametrize("headers, status", [
    ({"Host": "evil.example"}, 403),
    ({"Host": f"evil.example:{PORT}"}, 403),
    ({"Host": "127.0.0.1:9999"}, 403),
    ({"Host": f"localhost:{PORT}"}, 200),
    ({"Host": "localhost"}, 200),
    ({"Host": f"[::1]:{PORT}"}, 200),
    ({"Origin": "https://evil.example"}, 403),
    ({"Origin": "null"}, 403),
    ({"Origin": f"http://127.0.0.1:{PORT + 1}"}, 403),
    ({"Origin": f"http://127.0.0.1:{PORT}"}, 200),
    ({"Origin": f"http://localhost:{PORT}"}, 200),
])
def test_host_and_origin_guards(client: TestClient, headers: dict[str, str], status: int) -> None:
    response = client.get("/api/health", headers=headers)
    assert response.status_code == status
    if status == 403:
        assert response.json()["error"] in ("forbidden_host", "forbidden_origin")
    write = client.post("/api/memory/save", json={"text": "guarded"}, headers=headers)
    assert write.status_code == status


def test_non_loopback_bind_requires_a_token(cfg: Settings) -> None:
    exposed = Settings(**{**cfg.__dict__, "host": "0.0.0.0", "token": ""})
    with pytest.raises(ConfigError, match="MEMCAIRN_TOKEN"):
        make_app(None, exposed)
    secured = Settings(**{**cfg.__dict__, "host": "0.0.0.0", "token": "s3cret-token"})
    app = make_app(None, secured)
    with TestClient(app, base_url="http://192.168.1.20:37877") as c:
        assert_error(c.get("/api/health"), 401, "unauthorized")
        assert_error(c.get("/api/health", headers={"Authorization": "Bearer wrong"}), 401)
        assert_error(c.get("/api/health", headers={"Authorization": "Basic s3cret-token"}), 401)
        ok = c.get("/api/health", headers={"Authorization": "Bearer s3cret-token"})
        assert ok.status_code == 200 and ok.json()["status"] == "ok"
        assert c.get("/openapi.json", headers={"Authorization": "Bearer s3cret-token"}).json()["security"]


def test_body_limit(client: TestClient) -> None:
    big = {"text": "x" * (1024 * 1024 + 10)}
    assert_error(client.post("/api/memory/save", json=big), 413, "payload_too_large")

    def chunks() -> Iterator[bytes]:
        yield b'{"text": "'
        for _ in range(20):
            yield b"y" * 65536
        yield b'"}'

    chunked = client.post("/api/memory/save", content=chunks(), headers={"Content-Type": "application/json"})
    assert_error(chunked, 413, "payload_too_large")
    assert client.post("/api/memory/save", json={"text": "z" * 200_000}).status_code == 200


def test_writes_are_refused_once_draining(client: TestClient, app: Any) -> None:
    app.state.worker.begin_drain()
    assert_error(client.post("/api/memory/save", json={"text": "late"}), 503, "shutting_down")
    assert_error(client.get("/api/readiness"), 503, "shutting_down")
    assert client.get("/api/health").json()["state"] == "draining"


def test_reads_run_at_most_read_threads_at_once_and_writes_do_not_wait_for_them(client: TestClient,
                                                                                 app: Any) -> None:
    state = app.state.worker
    running, peak, lock = [0], [0], threading.Lock()
    release = threading.Event()

    def slow_read() -> str:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        release.wait(5)
        with lock:
            running[0] -= 1
        return "read"

    async def scenario() -> tuple[list[Any], Any]:
        reads = [asyncio.ensure_future(state.call(slow_read)) for _ in range(state.read_threads + 3)]
        await asyncio.sleep(0.3)
        write = await asyncio.wait_for(state.call(lambda: "written", write=True), 5)  # not behind the reads
        assert peak[0] == state.read_threads and not any(r.done() for r in reads)
        release.set()
        return await asyncio.gather(*reads), write

    reads, write = client.portal.call(scenario)
    assert write == "written" and reads == ["read"] * (state.read_threads + 3)
    assert peak[0] == state.read_threads


# -- openapi, viewer ----------------------------------------------------------------------------------
def test_openapi_describes_every_api_route(client: TestClient, app: Any) -> None:
    doc = client.get("/openapi.json").json()
    assert doc["openapi"].startswith("3.1") and "Error" in doc["components"]["schemas"]
    described = {(op.method.upper(), op.path) for op in OPERATIONS}
    for route in app.routes:
        path = getattr(route, "path", "").replace("{id:int}", "{id}")
        if path.startswith("/api/") or path == "/stream":
            for method in route.methods - {"HEAD"}:
                assert (method, path) in described
                assert "403" in doc["paths"][path][method.lower()]["responses"]
    assert "security" not in doc


def test_viewer_placeholder_and_static_files(cfg: Settings, tmp_path: Path) -> None:
    with TestClient(make_app(None, cfg, static_dir=tmp_path / "none"), base_url=BASE) as c:
        page = c.get("/")
        assert page.status_code == 200 and "viewer is not installed" in page.text
        assert_error(c.get("/static/app.js"), 404)
    static = tmp_path / "static"
    static.mkdir()
    (static / "index.html").write_text("<!doctype html><title>viewer</title>")
    (static / "app.js").write_text("console.log('hi')")
    with TestClient(make_app(None, cfg, static_dir=static), base_url=BASE) as c:
        assert "<title>viewer</title>" in c.get("/").text
        assert c.get("/static/app.js").text == "console.log('hi')"
        assert c.get("/static/../../etc/passwd").status_code == 404


# -- events -------------------------------------------------------------------------------------------
async def _sse_events(app: Any, want: int, during: Any,
                      until: Any = None) -> list[tuple[str, dict[str, Any]]]:
    """Drive GET /stream at the ASGI level until ``want`` events arrived (or, with ``until``, until
    ``until(events)`` is true), running ``during`` meanwhile."""
    done = until or (lambda got: len(got) >= want)
    received: asyncio.Queue[bytes] = asyncio.Queue()
    disconnect = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await disconnect.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            assert message["status"] == 200
        elif message["type"] == "http.response.body":
            await received.put(message.get("body", b""))

    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
             "method": "GET", "scheme": "http", "path": "/stream", "raw_path": b"/stream", "query_string": b"",
             "root_path": "", "headers": [(b"host", f"127.0.0.1:{PORT}".encode())], "client": ("127.0.0.1", 1),
             "server": ("127.0.0.1", PORT), "state": {}}
    task = asyncio.create_task(app(scope, receive, send))
    events: list[tuple[str, dict[str, Any]]] = []
    buffer = b""
    started = False
    try:
        while not done(events):
            buffer += await asyncio.wait_for(received.get(), timeout=10)
            while b"\n\n" in buffer:
                block, buffer = buffer.split(b"\n\n", 1)
                lines = dict(line.split(": ", 1) for line in block.decode().splitlines() if ": " in line
                             and not line.startswith(":"))
                if "event" in lines:
                    events.append((lines["event"], json.loads(lines["data"])))
                if not started and events:
                    started = True
                    await during()
    finally:
        disconnect.set()
        await asyncio.wait_for(task, timeout=5)
    return events


def _stream_while(app: Any, actions: Any, want: int = 0, until: Any = None) -> list[tuple[str, dict[str, Any]]]:
    """Start ``app``, read GET /stream and run ``actions(http)`` against the app once the stream is open;
    the events received (see ``_sse_events`` for ``want`` and ``until``)."""

    async def scenario() -> list[tuple[str, dict[str, Any]]]:
        async with app.router.lifespan_context(app):
            while app.state.worker.phase != "ready":
                await asyncio.sleep(0.01)
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as http:
                return await _sse_events(app, want, lambda: actions(http), until=until)

    return asyncio.run(scenario())


def test_stream_delivers_item_added_and_deleted(cfg: Settings) -> None:
    async def writes(http: httpx.AsyncClient) -> None:
        saved = (await http.post("/api/memory/save", json={"text": "streamed", "title": "Live",
                                                          "project": "demo"})).json()
        await http.delete(f"/api/memory/{saved['id']}")

    events = _stream_while(make_app(None, cfg), writes, want=3)
    assert events[0][0] == "status" and events[0][1]["ready"] is True
    assert events[1][0] == "item_added"
    added = events[1][1]
    assert added["title"] == "Live" and added["kind"] == "manual" and added["project"] == "demo"
    assert set(added) == {"id", "kind", "type", "title", "display_title", "project", "created_at_epoch"}
    assert added["display_title"] == "Live"
    assert events[2] == ("item_deleted", {"id": added["id"]})


def test_stream_reports_capture_processing(cfg: Settings) -> None:
    base = {"session_id": "s-stream", "cwd": "/work/demo", "project": "demo", "platform_source": "claude-code"}

    async def hook_events(http: httpx.AsyncClient) -> None:
        await http.post("/api/sessions/init", json={**base, "event": "user_prompt", "prompt": "Pin the compiler flags"})
        await http.post("/api/sessions/observations", json={
            **base, "event": "tool_use", "tool_name": "Edit", "tool_use_id": "st-1",
            "tool_input": {"file_path": "/work/demo/Makefile", "old_string": "cc", "new_string": "cc -O2"},
            "tool_response": {"filePath": "/work/demo/Makefile"}})
        await http.post("/api/sessions/summarize", json={**base, "event": "stop",
                                                         "last_assistant_message": "Pinned -O2."})

    def processed_all(got: list[tuple[str, dict[str, Any]]]) -> bool:
        return sum(data["events"] for name, data in got if name == "processing") >= 3

    events = _stream_while(make_app(None, cfg), hook_events, until=processed_all)
    assert events[0][0] == "status"
    passes = [data for name, data in events if name == "processing"]
    assert passes and all(set(p) == {"events", "observations", "summaries", "prompts", "fallbacks", "failed",
                                     "queue"} for p in passes)
    assert sum(p["events"] for p in passes) == 3 and sum(p["failed"] for p in passes) == 0
    assert sum(p["prompts"] for p in passes) == 1 and sum(p["summaries"] for p in passes) == 1
    assert sum(p["observations"] for p in passes) >= 1
    assert set(passes[-1]["queue"]) == {"pending", "done", "failed", "oldest_pending_epoch"}
    assert passes[-1]["queue"]["done"] == 3 and passes[-1]["queue"]["pending"] == 0
    # the items a pass made were announced too, before the pass itself (both come from the capture thread)
    assert {data["kind"] for name, data in events if name == "item_added"} == {"observation", "prompt", "summary"}


def test_broadcaster_disconnects_a_client_that_falls_behind() -> None:
    from memcairn.worker.events import Broadcaster

    async def scenario() -> list[str]:
        hub = Broadcaster(queue_size=3)
        hub.bind(asyncio.get_running_loop())
        stream = hub.stream(heartbeat=0.05)
        chunks = [await stream.__anext__()]  # retry line; the client is subscribed now
        for n in range(10):
            hub.publish("item_added", {"id": n})
        async for chunk in stream:
            chunks.append(chunk)
        assert hub.subscribers == 0
        return chunks

    chunks = asyncio.run(scenario())
    assert chunks[0].startswith("retry:") and len(chunks) == 1  # overflowed: ended without a backlog


def test_a_bulk_write_ends_streams_instead_of_dropping_events() -> None:
    """More changes in one commit than one notification carries: every client is told to reload (its stream
    ends, the viewer reconnects and reloads), not sent the first 200 and silently left without the rest."""
    from memcairn.worker.events import MAX_ITEMS_PER_NOTIFY, Broadcaster, StoreEventBridge

    class Items:
        def get_items(self, ids: list[int]) -> list[NewItem]:
            return []

    async def scenario() -> tuple[list[str], list[str]]:
        hub = Broadcaster(queue_size=10 * MAX_ITEMS_PER_NOTIFY)
        hub.bind(asyncio.get_running_loop())
        bridge = StoreEventBridge(Items(), hub)
        streams = [hub.stream(heartbeat=0.05) for _ in range(2)]
        firsts = [await s.__anext__() for s in streams]  # both subscribed
        bridge("deleted", [1, 2])
        bridge("deleted", list(range(10, 11 + MAX_ITEMS_PER_NOTIFY)))
        chunks: list[list[str]] = []
        for first, stream in zip(firsts, streams, strict=True):
            got = [first]
            async for chunk in stream:
                got.append(chunk)
                assert len(got) < 50, "the stream went on after a bulk write"
            chunks.append(got)
        assert hub.subscribers == 0
        return chunks[0], chunks[1]

    for chunks in asyncio.run(asyncio.wait_for(scenario(), timeout=10)):
        deleted = [c for c in chunks if c.startswith("event: item_deleted")]
        assert len(deleted) <= 2  # at most the small commit's events (a reload covers them too), then the end


# -- logs, client, imports ----------------------------------------------------------------------------
def test_log_rotation_caps_disk_use(tmp_path: Path) -> None:
    from memcairn.worker.logs import LOGGERS, setup_logging

    cfg = Settings(home=tmp_path, log_max_bytes=4000, log_backups=2)
    handler = setup_logging(cfg)
    try:
        log = logging.getLogger("memcairn.worker")
        for n in range(500):
            log.info("line %d %s", n, "x" * 50)
    finally:
        for name in LOGGERS:
            logging.getLogger(name).removeHandler(handler)
            logging.getLogger(name).propagate = True
        handler.close()
    files = sorted(p.name for p in cfg.logs_dir.iterdir())
    assert files == ["worker.log", "worker.log.1", "worker.log.2"]
    assert all(p.stat().st_size <= 4200 for p in cfg.logs_dir.iterdir())


def test_client_without_a_worker_says_what_to_do(tmp_path: Path) -> None:
    import socket

    from memcairn.wire.client import WorkerClient

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = WorkerClient(port=port, token="", timeout=1)
    with pytest.raises(WorkerUnavailableError, match="memcairn worker start"):
        client.health()
    assert client.ready(timeout=0.5) is False


def test_client_and_lifecycle_modules_import_nothing_heavy() -> None:
    code = ("import sys, memcairn.wire.client, memcairn.wire.lifecycle, memcairn.worker.daemon; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'starlette', 'uvicorn', 'click', 'httpx', "
            "'numpy', 'anyio', 'rich'})); print('memcairn.store' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True).stdout
    assert out.split("\n")[:2] == ["[]", "False"]


def test_hook_events_become_memories_in_the_background(client: TestClient, app: Any) -> None:
    base = {"session_id": "s2", "cwd": "/work/demo", "project": "demo", "platform_source": "claude-code"}
    client.post("/api/sessions/init", json={**base, "event": "user_prompt", "prompt": "Make the build reproducible"})
    client.post("/api/sessions/observations", json={
        **base, "event": "tool_use", "tool_name": "Edit", "tool_use_id": "e-1",
        "tool_input": {"file_path": "/work/demo/Makefile", "old_string": "cc", "new_string": "cc -O2"},
        "tool_response": {"filePath": "/work/demo/Makefile"}})
    client.post("/api/sessions/summarize", json={**base, "event": "stop", "last_assistant_message": "Pinned flags."})
    capture = app.state.worker.capture
    capture.nudge()
    deadline = time.monotonic() + 10
    while store_of(app).ingest_counts()["pending"] and time.monotonic() < deadline:
        time.sleep(0.05)
    kinds = sorted(i.kind for i in store_of(app).list_items(limit=10))
    assert kinds == ["observation", "prompt", "summary"]
    found = client.get("/api/search", params={"query": "Makefile", "format": "json", "project": "demo"}).json()
    assert "observation" in [r["kind"] for r in found["results"]]
    ids = [r["id"] for r in found["results"] if r["kind"] == "observation"]
    full = client.post("/api/observations/batch", json={"ids": ids}).json()
    assert any("Makefile" in " ".join(r["files_modified"]) for r in full["items"])


def test_private_prompts_and_excluded_projects_store_nothing(cfg: Settings, tmp_path: Path) -> None:
    from dataclasses import replace

    app = make_app(None, replace(cfg, exclude_projects="secret-*"), static_dir=tmp_path / "static")
    with TestClient(app, base_url=BASE) as c:
        wait_ready(app)
        skipped = c.post("/api/sessions/init", json={"session_id": "x", "project": "secret-lab", "prompt": "hi"})
        assert skipped.status_code == 202 and skipped.json() == {"status": "skipped", "reason": "excluded_project"}
        assert c.get("/api/context/inject", params={"projects": "secret-lab"}).text == ""
        private = c.post("/api/sessions/init", json={"session_id": "y", "project": "open", "event": "user_prompt",
                                                     "prompt": "<private>my salary is 10</private>"})
        assert private.json()["status"] == "accepted"
        payload = json.dumps([e.payload for e in store_of(app).session_events("unknown", "y")])
        assert "salary" not in payload and '"private": true' in payload


def test_search_mode_picks_the_legs_per_request(client: TestClient, app: Any) -> None:
    add(app, kind="observation", title="Zebra crossing fix", narrative="the zebra crossing handler was wrong")
    add(app, kind="observation", title="Chart colours", narrative="the dashboard palette was changed")
    runner = app.state.worker.runner
    runner.nudge()
    assert runner.wait_idle(10)

    def search(**params: str) -> dict[str, Any]:
        response = client.get("/api/search", params={"query": "zebra crossing", "format": "json", **params})
        assert response.status_code == 200, response.text
        return response.json()

    auto = search()
    assert auto["strategy"] == "hybrid" and search(mode="auto")["strategy"] == "hybrid"
    keyword = search(mode="keyword")
    assert (keyword["strategy"], keyword["fallback_reason"]) == ("keyword", None)
    assert "keyword only, as asked" in keyword["notes"]
    assert all(set(r["legs"]) == {"keyword"} for r in keyword["results"]) and keyword["results"]
    semantic = search(mode="Semantic")
    assert (semantic["strategy"], semantic["fallback_reason"]) == ("semantic", None)
    assert all(set(r["legs"]) == {"semantic"} for r in semantic["results"]) and semantic["results"]
    index = client.get("/api/search", params={"query": "zebra", "mode": "keyword"}).json()
    assert index["format"] == "index" and index["strategy"] == "keyword"
    body = assert_error(client.get("/api/search", params={"query": "zebra", "mode": "fuzzy"}), 400, "invalid_request")
    assert "auto, keyword, semantic" in body["detail"]


def test_search_mode_semantic_without_a_mirror_is_keyword_with_the_reason(cfg: Settings) -> None:
    runtime = open_runtime(cfg, with_mirror=False)
    try:
        runtime.store.add_item(NewItem(project="demo", kind="observation", title="Zebra crossing fix"))
        app = make_app(runtime, cfg)
        with TestClient(app, base_url=BASE) as c:
            wait_ready(app)
            found = c.get("/api/search", params={"query": "zebra", "mode": "semantic", "format": "json"}).json()
            assert (found["strategy"], found["fallback_reason"]) == ("keyword", "vector_unavailable")
            assert len(found["results"]) == 1
            asked = c.get("/api/search", params={"query": "zebra", "mode": "keyword", "format": "json"}).json()
            assert (asked["strategy"], asked["fallback_reason"]) == ("keyword", None)
            spec = c.get("/openapi.json").json()["paths"]["/api/search"]["get"]["parameters"]
            mode = next(p for p in spec if p["name"] == "mode")
            assert set(mode["schema"]["enum"]) == {"", "auto", "keyword", "semantic"}
    finally:
        runtime.close()


def test_the_workers_model_runs_the_configured_threads_per_call(tmp_path: Path) -> None:
    from memcairn.vectors.embedder import OnnxEmbedder, default_threads
    from memcairn.worker.state import worker_runtime as _worker_runtime

    for setting, expected in ((1, 1), (0, default_threads())):
        cfg = Settings(home=tmp_path / str(setting), embedding_model="all-MiniLM-L6-v2-int8",
                       worker_embedding_threads=setting)
        runtime = _worker_runtime(cfg)
        try:
            assert isinstance(runtime.mirror.embedder, OnnxEmbedder)
            assert runtime.mirror.embedder.threads == expected
        finally:
            runtime.close()


def test_a_token_is_compared_without_surrounding_whitespace(cfg: Settings) -> None:
    """A token read with a stray space or newline must still match the header, which arrives stripped."""
    secured = Settings(**{**cfg.__dict__, "host": "0.0.0.0", "token": " s3cret-token\n"})
    with TestClient(make_app(None, secured), base_url="http://192.168.1.20:37877") as c:
        assert c.get("/api/health", headers={"Authorization": "Bearer s3cret-token"}).status_code == 200
        assert_error(c.get("/api/health", headers={"Authorization": "Bearer wrong"}), 401, "unauthorized")


def test_the_viewers_own_origin_is_allowed_on_any_loopback_address(cfg: Settings) -> None:
    bound = Settings(**{**cfg.__dict__, "host": "127.0.0.5"})
    app = make_app(None, bound)
    with TestClient(app, base_url=f"http://127.0.0.5:{bound.port}") as c:
        wait_ready(app)
        own = c.post("/api/memory/save", json={"text": "saved from the viewer"},
                     headers={"Origin": f"http://127.0.0.5:{bound.port}"})
        assert own.status_code == 200 and own.json()["created"] is True, own.text
        assert_error(c.post("/api/memory/save", json={"text": "x"}, headers={"Origin": "http://evil.example"}),
                     403, "forbidden_origin")


def test_agent_batch_says_a_sentence_once(client: TestClient, app: Any) -> None:
    """A turn's summary retells its observation: the agent reads the retold sentence once, in the first record
    asked for; a raw batch keeps every row whole."""
    told = "The fetch failed because the origin URL resolves to a malformed host."
    obs = add(app, kind="observation", title="Fetch failed", narrative=f"{told} Fixed the remote.")
    summ = add(app, kind="summary", request="fix the fetch", learned=told, completed="Fixed the remote and pushed.")
    agent = client.post("/api/observations/batch", json={"ids": [obs, summ], "format": "agent"}).json()["items"]
    assert agent[0]["narrative"] == f"{told} Fixed the remote."
    assert "learned" not in agent[1] and agent[1]["completed"] == "Fixed the remote and pushed."
    raw = client.post("/api/observations/batch", json={"ids": [obs, summ]}).json()["items"]
    assert raw[1]["learned"] == told
