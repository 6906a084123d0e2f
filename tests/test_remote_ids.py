"""Remote mode's ids taken back: a real worker connected (`memcairn connect`) to a real `memcairn server` on the
tests' PostgreSQL. A team search shows the server's memories as ``team#N``; every door that takes ids back reads
them from the server: MCP ``get_observations`` and ``timeline`` (through the MCP SDK's client), ``memcairn show``
and ``memcairn timeline``, the worker's item route, and the prompt digest of the real hook process (built from
the search answer's structured rows, not from its Markdown). A local memory with the same number stays apart."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("pg0")
pytest.importorskip("psycopg")

from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402
from processes import wait_for  # noqa: E402

from memcairn.bench.hooks import hook_command  # noqa: E402
from memcairn.wire import lifecycle  # noqa: E402
from memcairn.wire.config import Settings, load_settings  # noqa: E402

MEMCAIRN = str(Path(sys.executable).parent / "memcairn")
PROJECT = "teamproj"
TEAM_NOTES = [("Retry queue backs off exponentially", "The retry queue doubles its wait after each failure, "
               "capped at sixty seconds."),
              ("Retry queue keeps a dead letter table", "Jobs the retry queue gave up on land in dead_letters."),
              ("Retry queue metrics exported", "The retry queue exports its depth as a gauge.")]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(240),
              pytest.mark.skipif(not Path("/proc/self").exists(), reason="process checks read /proc")]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url: str, method: str = "GET", body: Any = None, key: str | None = None) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    req = urllib.request.Request(url, method=method, headers=headers,
                                 data=None if body is None else json.dumps(body).encode())
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310 - loopback
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture
def team(pg_cluster: Any, tmp_path: Path) -> Iterator[tuple[str, str, subprocess.Popen[bytes]]]:
    """A team server on its own database: (its URL, a read/write key, its process)."""
    from postgres_server import TEST_SECRET

    home = tmp_path / "server-home"
    (home / "server").mkdir(parents=True, mode=0o700)
    (home / "server" / "secret").write_text(TEST_SECRET.hex() + "\n")  # memcairn_app is one role per cluster
    name = pg_cluster.create_database()
    dsn = pg_cluster.owner_dsn(name)
    env = {**os.environ, "MEMCAIRN_HOME": str(home)}
    made = subprocess.run([MEMCAIRN, "server", "keys", "create", "--tenant", "acme", "--database", dsn, "--json"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    port = _port()
    log = (tmp_path / "server.log").open("ab")
    proc = subprocess.Popen([MEMCAIRN, "server", "--database", dsn, "--port", str(port)], env=env, stdout=log,
                            stderr=log)
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert proc.poll() is None, (tmp_path / "server.log").read_text(errors="replace")
        try:
            return http(f"{url}/v1/health")[0] == 200
        except OSError:
            return False

    try:
        wait_for(healthy, 60, "the team server's health")
        yield url, json.loads(made.stdout)["key"], proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        log.close()
        pg_cluster.drop_database(name)


@pytest.fixture
def cfg(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    monkeypatch.setenv("MEMCAIRN_PORT", str(_port()))
    monkeypatch.setenv("MEMCAIRN_VECTOR_BACKEND", "none")
    monkeypatch.setenv("MEMCAIRN_WORKER_AUTOSTART", "0")
    monkeypatch.setenv("MEMCAIRN_REMOTE_TIMEOUT_MS", "3000")  # a loaded machine's server still answers within it
    settings = load_settings()
    yield settings
    lifecycle.stop(settings, timeout=10)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([MEMCAIRN, *args], env=dict(os.environ), capture_output=True, text=True, timeout=60)


async def mcp_calls(cwd: Path, calls: list[tuple[str, dict[str, Any]]]) -> list[tuple[bool, str]]:
    """Each (tool, arguments) through the SDK's stdio client and the real `memcairn mcp`: (is_error, text)."""
    params = StdioServerParameters(command=MEMCAIRN, args=["mcp"], env=dict(os.environ), cwd=str(cwd))
    out = []
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        for name, arguments in calls:
            result = await session.call_tool(name, arguments)
            assert len(result.content) == 1 and result.content[0].type == "text"
            out.append((bool(result.is_error), result.content[0].text))
    return out


def test_team_ids_work_in_every_door(team: tuple[str, str, subprocess.Popen[bytes]], cfg: Settings,
                                     tmp_path: Path) -> None:
    url, key, server = team
    team_ids = []
    for title, text in TEAM_NOTES:
        status, saved = http(f"{url}/v1/memories", "POST", {"project": PROJECT, "kind": "observation",
                                                           "type": "discovery", "title": title, "text": text}, key)
        assert status == 201, saved
        team_ids.append(saved["id"])
    done = cli("connect", url, "--key", key)
    assert done.returncode == 0, done.stderr
    lifecycle.start(cfg)
    worker = f"http://127.0.0.1:{cfg.port}"
    # a local memory whose number is a team memory's: a team id must never read it
    status, local = http(f"{worker}/api/memory/save", "POST", {"project": PROJECT, "title": "Local lunch order",
                                                               "text": "Sandwiches on Fridays."})
    assert status in (200, 201), local
    assert local["id"] in team_ids

    checkout = tmp_path / PROJECT
    (checkout / ".git").mkdir(parents=True)
    first = f"team#{team_ids[0]}"
    calls = [("search", {"query": "retry queue backs off exponentially"}),
             ("get_observations", {"ids": [first, local["id"]]}),
             ("get_observations", {"ids": f"{first}, team#{team_ids[2]}"}),  # ids as one text, as models send
             ("timeline", {"anchor": first, "before": 1, "after": 5}),
             ("get_observations", {"ids": ["team#987654"]}),
             ("forget", {"ids": [first]})]
    found, both, as_text, around, unknown, forget = anyio.run(mcp_calls, checkout, calls)

    assert not found[0] and first in found[1], found[1]  # the team answered, with ids the doors take back
    assert not both[0], both[1]
    records = json.loads(both[1])["items"]
    assert [r["id"] for r in records] == [first, local["id"]]
    assert records[0]["title"] == TEAM_NOTES[0][0] and "doubles its wait" in records[0]["text"]
    assert records[1]["title"] == "Local lunch order"
    assert [r["id"] for r in json.loads(as_text[1])["items"]] == [first, f"team#{team_ids[2]}"]
    assert not around[0], around[1]
    anchor_row = next(line for line in around[1].splitlines() if "<- ANCHOR" in line)
    assert first in anchor_row and TEAM_NOTES[0][0] in anchor_row
    assert all(f"team#{i}" in around[1] for i in team_ids[1:]), around[1]  # its neighbours on the server
    assert json.loads(unknown[1])["missing"] == ["team#987654"]
    assert forget[0] and "team server's memory" in forget[1]  # refused by name, nothing deleted

    # the worker's item route, and the CLI's show and timeline
    status, record = http(f"{worker}/api/memory/team/{team_ids[1]}")
    assert status == 200 and record["id"] == f"team#{team_ids[1]}" and record["title"] == TEAM_NOTES[1][0]
    shown = cli("show", f"team#{team_ids[1]}", str(local["id"]))
    assert shown.returncode == 0, shown.stderr
    assert f"team#{team_ids[1]} [observation/discovery] {PROJECT}: {TEAM_NOTES[1][0]}" in shown.stdout
    assert f"#{local['id']} [manual/" in shown.stdout and "Local lunch order" in shown.stdout
    shown = cli("show", "--json", f"team#{team_ids[1]}")
    assert [r["id"] for r in json.loads(shown.stdout)] == [f"team#{team_ids[1]}"]
    line = cli("timeline", "--anchor", f"team#{team_ids[1]}", "--before", "1", "--after", "1")
    assert line.returncode == 0 and f"team#{team_ids[1]}" in line.stdout and "<- ANCHOR" in line.stdout, line
    line = cli("timeline", "--anchor", f"team#{team_ids[1]}", "--json")
    assert line.returncode == 0 and json.loads(line.stdout)["anchor_id"] == f"team#{team_ids[1]}", line.stderr

    line = cli("timeline", "--anchor", first, "--local")  # in this process no team server is asked: say so
    assert line.returncode == 2 and "team server's memory" in line.stderr and "--local" in line.stderr, line

    # the prompt digest of the real hook process: the team's rows, each with its team id
    prompt = {"session_id": "s-remote-ids", "cwd": str(checkout), "hook_event_name": "UserPromptSubmit",
              "prompt": "why does the retry queue back off exponentially?"}
    ran = subprocess.run([*hook_command(), "hook", "user-prompt-submit"], input=json.dumps(prompt).encode(),
                         capture_output=True, env={**os.environ, "MEMCAIRN_PROMPT_CONTEXT": "1"}, timeout=60,
                         cwd=checkout)
    assert ran.returncode == 0, ran.stderr
    assert "hookSpecificOutput" in json.loads(ran.stdout), ran
    context = json.loads(ran.stdout)["hookSpecificOutput"]["additionalContext"]
    rows = re.findall(r"^(team#\d+) \d{4}-\d\d-\d\d \d\d:\d\d discovery · (.+?) · ~\d+ tok$", context, re.M)
    assert (first, TEAM_NOTES[0][0]) in rows, context

    # the server gone: a team id is refused with the reason, and local ids still read
    server.send_signal(signal.SIGTERM)
    server.wait(timeout=60)
    [(failed, said)] = anyio.run(mcp_calls, checkout, [("get_observations", {"ids": [first]})])
    assert failed and "the team server does not answer" in said and first in said, said
    assert "worker did not answer" not in said  # the worker is fine: not mistaken for one still starting
    shown = cli("show", first)
    assert shown.returncode == 2 and "the team server does not answer" in shown.stderr, shown
    status, answer = http(f"{worker}/api/observations/batch", "POST", {"ids": [first]})
    assert status == 502 and answer["error"] == "team_server_unavailable" and "team server" in answer["detail"]
    status, answer = http(f"{worker}/api/observations/batch", "POST", {"ids": [local["id"]]})
    assert status == 200 and answer["items"][0]["title"] == "Local lunch order"
    # not connected: the id is named as a team server's, and what to do
    assert cli("disconnect").returncode == 0
    status, answer = http(f"{worker}/api/timeline?anchor={first.replace('#', '%23')}")
    assert status == 400 and "not connected" in answer["detail"] and "memcairn connect" in answer["detail"]


def test_the_viewer_opens_a_team_memory_and_offers_no_delete(team: tuple[str, str, subprocess.Popen[bytes]],
                                                              cfg: Settings, tmp_path: Path) -> None:
    """In remote mode the viewer's feed and search show the team's memories as ``team#N``: opening one read
    ``/api/memory/team#N`` (404: "no longer exists", and the row vanished); it reads the team route, and a team
    memory, forgotten on the team server, has no delete button here."""
    from playwright.sync_api import expect
    from viewer_browser import browser_page, wait_until_loaded

    url, key, _ = team
    status, saved = http(f"{url}/v1/memories", "POST", {"project": PROJECT, "kind": "observation", "type": "discovery",
                                                       "title": TEAM_NOTES[0][0], "text": TEAM_NOTES[0][1]}, key)
    assert status == 201, saved
    assert cli("connect", url, "--key", key).returncode == 0
    lifecycle.start(cfg)
    team_id = f"team#{saved['id']}"
    with browser_page(tmp_path) as page:
        page.goto(f"http://127.0.0.1:{cfg.port}/")
        wait_until_loaded(page)
        page.fill("#search-input", "retry queue backs off exponentially")
        page.press("#search-input", "Enter")
        found = page.locator(f'#results [data-item-id="{team_id}"]')
        expect(found).to_have_count(1)
        found.first.click()
        expect(page.locator("#detail-body")).to_contain_text("doubles its wait")
        expect(page.locator("#delete-button")).to_be_hidden()
        expect(found).to_have_count(1)  # still listed: it was not taken for a deleted memory
        assert page.errors == []  # type: ignore[attr-defined]
