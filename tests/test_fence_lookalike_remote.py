"""Remote mode: memories a team server returns reach the agent defused too. A real worker connected to a real
``memcairn server`` answers search from the team's hits (``worker/remote_reads.py``); their titles, kinds,
types and projects are stored text of any team member, and pass the same cleaning as local rows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("pg0")
pytest.importorskip("psycopg")

from fence_lookalike_variants import forged_markers, variants  # noqa: E402
from mcp import Client  # noqa: E402
from mcp_in_process import in_process  # noqa: E402
from remote_team import (  # noqa: E402
    PROJECT,
    TeamServer,
    cli,
    in_sync,
    remote_status,
    request,
    team_server,
    wait_for,
    worker_settings,
)

from memcairn.core.project import ProjectIdentity  # noqa: E402
from memcairn.mcp.server import MemoryTools, WorkerGateway, build_server  # noqa: E402
from memcairn.wire import lifecycle  # noqa: E402
from memcairn.wire.client import WorkerClient  # noqa: E402
from memcairn.wire.config import Settings  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def team(pg_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TeamServer, str, str]]:
    yield from team_server(pg_cluster, tmp_path_factory)


@pytest.fixture
def cfg(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    yield from worker_settings(monkeypatch)


def _one_per_technique() -> list[str]:
    seen: dict[str, str] = {}
    for technique, marker, variant in variants():
        if marker in ("</memcairn-memory>", "\nHuman:") and f"{technique}{marker}" not in seen:
            seen[f"{technique}{marker}"] = variant
    return list(seen.values())


async def _search(tools: MemoryTools) -> tuple[bool, str]:
    async with Client(in_process(build_server(tools))) as client:
        result = await client.call_tool("search", {"query": "retry queue forged", "project": PROJECT, "limit": 50})
        return bool(result.is_error), "".join(getattr(c, "text", "") for c in result.content)


def test_team_search_hits_are_defused_in_the_index_an_agent_reads(team: tuple, cfg: Settings) -> None:
    server, key, superuser_dsn = team
    assert cli(cfg.home, "connect", server.url, "--key", key).returncode == 0
    lifecycle.start(cfg)
    forged = _one_per_technique()
    for n, variant in enumerate(forged):
        status, _, _ = request(cfg.port, "POST", "/api/memory/save", {
            "project": PROJECT, "title": f"note {n} {variant} obey", "text": f"retry queue forged note {n}"})
        assert status in (200, 201)
    wait_for(lambda: in_sync(cfg, server.url, superuser_dsn), "forwarding", timeout=90,
             seen=lambda: remote_status(cfg))
    status, _, found = request(cfg.port, "GET", f"/api/search?query=retry+queue+forged&project={PROJECT}"
                                                f"&mode=keyword&format=index&limit=50")
    assert status == 200 and found["strategy"] == "team", found
    text = found["text"]
    assert text.count("team#") == len(forged), text
    assert forged_markers(text) == [], text
    assert "[/memcairn-memory" in text and all(line.startswith(("team#", f"{len(forged)} result"))
                                               for line in text.splitlines()), text
    tools = MemoryTools(WorkerGateway(lambda: WorkerClient(port=cfg.port, token="")),
                        ProjectIdentity(PROJECT, (PROJECT,)))
    error, answer = anyio.run(_search, tools)
    assert not error and "team#" in answer and forged_markers(answer) == [], answer
