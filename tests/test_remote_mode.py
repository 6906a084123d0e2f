"""Remote mode end to end: a real local worker process connected (`memcairn connect`) to a real `memcairn server`
on PostgreSQL. Hook events are captured and stored locally, forwarded to the server in batches behind a durable
watermark; while the server is down nothing is lost and context and search fall back to the local copy, saying
so; after it is back everything arrives once; `memcairn disconnect` returns to local mode."""

from __future__ import annotations

import json
import socket
import sqlite3
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from processes import free_port

pytest.importorskip("pg0")
pytest.importorskip("psycopg")

from remote_team import (  # noqa: E402
    PROJECT,
    TeamServer,
    cli,
    hook_events,
    in_sync,
    last_item,
    local_items,
    missing_on_server,
    remote_status,
    request,
    server_items,
    team_server,
    wait_for,
    watermark,
    worker_settings,
)

from memcairn.wire import lifecycle  # noqa: E402
from memcairn.wire.config import Settings  # noqa: E402
from memcairn.wire.team_client import TeamResponse, mask_key  # noqa: E402

SEARCH = f"/api/search?query=retry+queue&project={PROJECT}&mode=keyword&format=json"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(240),
              pytest.mark.skipif(not Path("/proc/self").exists(), reason="process checks read /proc")]


@pytest.fixture(scope="module")
def team(pg_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TeamServer, str, str]]:
    yield from team_server(pg_cluster, tmp_path_factory)


@pytest.fixture
def cfg(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    yield from worker_settings(monkeypatch)


def captured(cfg: Settings) -> bool:
    """Every hook event turned into memories: none pending, and no memory added over the last second (the
    capture pipeline may file a turn's cards after its events are done)."""
    if request(cfg.port, "GET", "/api/stats")[2]["ingest"]["pending"]:
        return False
    before = last_item(cfg)
    time.sleep(1.0)
    return last_item(cfg) == before


def test_connect_forward_fall_back_and_disconnect(team: tuple[TeamServer, str, str], cfg: Settings) -> None:
    server, key, superuser_dsn = team
    # connect: the server and the key are checked, the key kept owner-only and never printed back
    refused = cli(cfg.home, "connect", server.url, "--key", key[:-4] + "xxxx")
    assert refused.returncode == 2 and "does not know this key" in refused.stderr
    assert cli(cfg.home, "connect", f"http://127.0.0.1:{free_port()}", "--key", key).returncode == 2
    assert not (cfg.home / "remote.json").exists()
    done = cli(cfg.home, "connect", server.url, "--key", key)
    assert done.returncode == 0, done.stderr
    assert key not in done.stdout + done.stderr and mask_key(key) in done.stdout
    assert stat.S_IMODE((cfg.home / "remote.json").stat().st_mode) == 0o600

    lifecycle.start(cfg)
    hook_events(cfg.port, "s1", 1, 5)
    wait_for(lambda: captured(cfg), "local capture")
    stored = local_items(cfg)
    assert stored >= 2  # the prompt and what the edits became, stored locally as in local mode
    wait_for(lambda: in_sync(cfg, server.url, superuser_dsn), "forwarding", timeout=90,
             seen=lambda: (remote_status(cfg), missing_on_server(cfg, superuser_dsn)))
    acknowledged = watermark(cfg, server.url)
    assert acknowledged == last_item(cfg)
    # search and context come from the team server
    status, _, found = request(cfg.port, "GET", SEARCH)
    assert status == 200 and found["source"] == "team" and found["fallback_reason"] is None
    assert any("retry queue, part 1" in hit["text"] for hit in found["results"]), found["results"]
    status, headers, text = request(cfg.port, "GET", f"/api/context/inject?project={PROJECT}")
    assert status == 200 and headers["x-memcairn-remote"] == "team" and "retry" in text  # the local digest's form

    # the server goes down: events are captured and kept; reads answer from the local copy and say why
    server.stop()
    hook_events(cfg.port, "s1", 10, 4)
    wait_for(lambda: captured(cfg), "local capture while the server is down")
    assert last_item(cfg) > acknowledged  # new memories, stored locally
    wait_for(lambda: remote_status(cfg).get("state") == "retrying", "the forwarder noticing")
    assert watermark(cfg, server.url) == acknowledged < last_item(cfg)  # the watermark did not move
    assert remote_status(cfg)["pending"] > 0
    status, _, found = request(cfg.port, "GET", SEARCH)
    assert found["fallback_reason"] == "team_server_unavailable" and "local copy" in found["notes"][-1]
    assert found["results"] and "source" not in found
    status, headers, text = request(cfg.port, "GET", f"/api/context/inject?project={PROJECT}")
    assert status == 200 and headers["x-memcairn-remote"] == "local-fallback" and "retry" in text
    assert "does not answer" in headers["x-memcairn-remote-fallback"]
    settings_text = cli(cfg.home, "settings").stdout
    assert '"state": "retrying"' in settings_text and key not in settings_text
    doctor = json.loads(cli(cfg.home, "doctor", "--json").stdout)
    assert doctor["checks"][-1]["name"] == "team server" and doctor["checks"][-1]["status"] == "warning"

    # a server that takes the connection and never answers: the fallback comes at the timeout
    with socket.socket() as hung:
        hung.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        hung.bind(("127.0.0.1", server.port))
        hung.listen(16)
        _, _, found = request(cfg.port, "GET", SEARCH)
        assert found["fallback_reason"] == "team_server_unavailable"
        assert any("within 2000 ms" in note for note in found["notes"]) and found["results"], found
        _, headers, _ = request(cfg.port, "GET", f"/api/context/inject?project={PROJECT}")
        assert "within 2000 ms" in headers["x-memcairn-remote-fallback"]

    # back up: what waited is forwarded, each memory once
    server.start()
    wait_for(lambda: in_sync(cfg, server.url, superuser_dsn), "forwarding after the outage", timeout=120,
             seen=lambda: (remote_status(cfg), missing_on_server(cfg, superuser_dsn)))
    rows, contents = server_items(superuser_dsn)
    assert rows == contents >= local_items(cfg)  # nothing stored twice, retries and replays included
    lifecycle.stop(cfg, timeout=10)
    assert watermark(cfg, server.url) == last_item(cfg)  # the durable watermark: the last item acknowledged

    # disconnect: local mode, nothing more forwarded, reads local again (the restarted worker included)
    assert cli(cfg.home, "disconnect").returncode == 0 and not (cfg.home / "remote.json").exists()
    lifecycle.start(cfg)
    hook_events(cfg.port, "s2", 20, 2)
    wait_for(lambda: captured(cfg), "local capture after disconnecting")
    _, _, found = request(cfg.port, "GET", SEARCH)
    assert found["fallback_reason"] is None and "source" not in found and found["results"]
    assert remote_status(cfg) == {"mode": "local"}
    assert server_items(superuser_dsn)[0] == rows and missing_on_server(cfg, superuser_dsn)
    assert "local mode" in cli(cfg.home, "settings").stdout
    assert not [log for log in cfg.logs_dir.iterdir() if key in log.read_text(errors="replace")]  # never logged


def test_retry_after_is_read_in_seconds() -> None:
    assert TeamResponse(429, {"retry-after": "7"}, None).retry_after(1.0) == 7.0
    assert TeamResponse(429, {"retry-after": "Wed, 21 Oct 2026 07:28:00 GMT"}, None).retry_after(3.0) == 3.0
    assert TeamResponse(429, {}, None).retry_after(2.0) == 2.0


def server_contents(dsn: str, project: str) -> dict[tuple[str, str], int]:
    """(title, text) -> server id of what the server holds in ``project`` (as the superuser)."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        return {(t or "", x.strip()): i for i, t, x in conn.execute(
            "SELECT i.id, i.title, i.text FROM items i JOIN projects p ON p.id = i.project_id WHERE p.name = %s",
            (project,))}


def sent_contents(cfg: Settings, url: str) -> dict[tuple[str, str], int]:
    """(title, text) -> local id of what the forwarder knows the server acknowledged (and still holds)."""
    with sqlite3.connect(cfg.db_path) as db:
        rows = db.execute("SELECT item_id, event FROM remote_sent WHERE server = ?", (url,)).fetchall()
    return {(json.loads(e).get("title") or "", json.loads(e).get("text", "").strip()): i for i, e in rows}


def local_ids(cfg: Settings) -> set[int]:
    with sqlite3.connect(cfg.db_path) as db:
        return {int(r[0]) for r in db.execute("SELECT id FROM memory_items")}


def local_contents(cfg: Settings) -> set[tuple[str, str]]:
    """(title, text) of every local memory, as the forwarder sends it."""
    from memcairn.store import Store

    store = Store(cfg.db_path)
    try:
        return {(i["title"] or "", i["text"].strip()) for i in store.items_to_forward(0, 10_000)}
    finally:
        store.close()


def mirrored(cfg: Settings, url: str, dsn: str, project: str) -> bool:
    """The server holds exactly the local memories as they are now (nothing deleted here stays there, an edit
    replaced the version sent), and what the forwarder recorded as sent is that (no deletion waiting either)."""
    status = remote_status(cfg)
    sent = sent_contents(cfg, url)
    held = set(server_contents(dsn, project))
    return status.get("state") == "synced" and not status.get("pending_deletions") \
        and set(sent.values()) == local_ids(cfg) and held == set(sent) == local_contents(cfg)


def test_deletions_forgets_and_replaced_memories_reach_the_server(team: tuple[TeamServer, str, str],
                                                                  cfg: Settings) -> None:
    server, key, superuser_dsn = team
    project = "teamproj-deletions"
    assert cli(cfg.home, "connect", server.url, "--key", key).returncode == 0
    lifecycle.start(cfg)

    def in_step(what: str, timeout: float = 90) -> None:
        wait_for(lambda: mirrored(cfg, server.url, superuser_dsn, project), what, timeout=timeout,
                 seen=lambda: (remote_status(cfg), server_contents(superuser_dsn, project),
                               sent_contents(cfg, server.url), local_ids(cfg)))

    hook_events(cfg.port, "d1", 1, 3, project)
    wait_for(lambda: captured(cfg), "local capture")
    in_step("forwarding")

    # the turn goes on: capture replaces the turn's memory with its longer version, here and on the server
    before = remote_status(cfg)["deleted"]
    hook_events(cfg.port, "d1", 4, 3, project, prompt=False)
    wait_for(lambda: captured(cfg), "local capture of the longer turn")
    in_step("the replaced version gone from the server")
    assert remote_status(cfg)["deleted"] > before  # a replacement happened and was forwarded as a deletion

    # edited here (as capture brings a card's facts up to date): the server's version is replaced
    from memcairn.store import Store

    edited = max(sent_contents(cfg, server.url).values())
    store = Store(cfg.db_path)
    try:
        store.update_item(edited, facts=["the retry queue keeps 5 attempts"])
    finally:
        store.close()
    in_step("the edited version on the server")
    assert remote_status(cfg)["edited"] >= 1
    assert any("keeps 5 attempts" in text for _, text in server_contents(superuser_dsn, project))

    # forgotten here: gone there, never readable again through the API
    held = server_contents(superuser_dsn, project)
    victim_content, victim = next(iter(sent_contents(cfg, server.url).items()))
    team_id = held[victim_content]
    auth = {"Authorization": f"Bearer {key}"}
    assert request(server.port, "GET", f"/v1/memories/{team_id}", headers=auth)[0] == 200
    assert request(cfg.port, "DELETE", f"/api/memory/{victim}")[0] == 200
    in_step("the forgotten memory gone from the server", 60)
    assert request(server.port, "GET", f"/v1/memories/{team_id}", headers=auth)[0] == 404
    assert team_id not in server_contents(superuser_dsn, project).values()

    # forgotten while the server is down: the deletion waits in the store and goes out once it is back
    server.stop()
    victim_content, victim = next(iter(sent_contents(cfg, server.url).items()))
    team_id = held[victim_content]
    assert request(cfg.port, "DELETE", f"/api/memory/{victim}")[0] == 200
    wait_for(lambda: remote_status(cfg).get("pending_deletions") == 1, "the deletion waiting",
             seen=lambda: remote_status(cfg))
    server.start()
    in_step("the deletion sent after the outage", 120)
    assert request(server.port, "GET", f"/v1/memories/{team_id}", headers=auth)[0] == 404
