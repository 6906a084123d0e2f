"""The team server's context (``/v1/context``) is the local SessionStart context: the same memories written to a
local SQLite store and to a tenant on a real PostgreSQL give the same text (the same rows, ranked and cut to the
budget the same way), ids aside."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC
from pathlib import Path

import pytest
from postgres_server import TEST_SECRET, hold
from starlette.testclient import TestClient

from memcairn.context.build import render_context, render_shown
from memcairn.core.models import NewItem
from memcairn.pgstore import db, keys
from memcairn.pgstore.adapter import TenantStore
from memcairn.pgstore.items import TeamStore
from memcairn.server import app
from memcairn.server.app import ServerState, make_app
from memcairn.store import Store
from memcairn.wire.config import Settings

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

DAY = 86_400_000
START = 1_790_000_000_000
TYPES = ("discovery", "change", "bugfix", "decision", "feature", "refactor")


def memories() -> list[NewItem]:
    """Three sessions' work, more than a 2,000-token context holds: observations of every type (the context keeps
    the most useful, not the newest), each session's summaries and a note saved by hand, oldest first."""
    out = []
    for n in range(72):
        session = f"s{n // 24}"
        kind_type = TYPES[n % len(TYPES)]
        title = f"{kind_type} {n}: the upload worker's step {n} retries each chunk with backoff"
        out.append(NewItem(project="api", kind="observation", type=kind_type, session=session,
                           platform_source="claude-code", title=title,
                           text=f"Step {n} changed how uploads retry; the queue keeps {n} jobs " + "and more. " * 12,
                           created_at_epoch=START + n * DAY // 10))
        if n % 24 in (11, 23):
            out.append(NewItem(project="api", kind="summary", session=session, platform_source="claude-code",
                               title=f"Session {session} turn {n}: make uploads resumable",
                               text=f"Uploads resume after a dropped connection (turn {n})",
                               created_at_epoch=START + n * DAY // 10 + 1))
    out.append(NewItem(project="api", kind="manual", title="Deploys go out on Tuesdays", text="Release train.",
                       created_at_epoch=START + 80 * DAY // 10))
    out.append(NewItem(project="web", kind="manual", title="Another project's note", created_at_epoch=START))
    return out


@pytest.fixture
def server(pg_database: str) -> Iterator[tuple[TestClient, TenantStore, str]]:
    pool = db.Pool(db.app_conninfo(pg_database, TEST_SECRET), size=2)
    team = TeamStore(pool, None)
    with db.connect(pg_database) as conn:
        made = keys.create_key(conn, TEST_SECRET, "acme", scopes=["memories:read", "memories:write"])
        tenant_id = conn.execute("SELECT id FROM tenants WHERE name = 'acme'").fetchone()[0]  # type: ignore[index]
    hold(tenant_id, made["key"])
    with TestClient(make_app(ServerState(pool=pool, team=team, secret=TEST_SECRET))) as client:
        yield client, TenantStore(team, tenant_id), made["key"]
    pool.close()


def by_content(text: str, items: dict[int, str]) -> str:
    """``text`` with each ``#id`` as its memory's content hash, and the header's clock left out."""
    text = re.sub(r"#(\d+)", lambda m: f"#{items.get(int(m.group(1)), m.group(1))}", text)
    return re.sub(r"(# memcairn memory · .*) · \d{4}-\d\d-\d\d \d\d:\d\d UTC", r"\1", text)


@pytest.mark.parametrize("budget", [2_000, 600])
def test_the_team_context_is_the_local_one_over_the_same_memories(
        server: tuple[TestClient, TenantStore, str], tmp_path: Path, budget: int) -> None:
    client, tenant, key = server
    written = memories()
    assert all(r.created for r in tenant.add_items(written))
    answer = client.get("/v1/context", params={"project": "api", "max_tokens": budget},
                        headers={"Authorization": f"Bearer {key}"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    with Store(tmp_path / "local.db") as local:
        local.add_items(written)
        settings = replace(Settings(home=tmp_path), context_token_budget=budget)
        expected = render_context(local, settings, projects=["api"], now_ms=int(time.time() * 1000), tz=UTC)
        local_ids = {i.id: i.content_hash for i in local.list_items(limit=1_000)}
    team_ids = {i.id: i.content_hash for i in tenant.list_items(limit=1_000)}
    assert sorted(local_ids.values()) == sorted(team_ids.values())  # the same memories, hashed alike
    assert by_content(body["context"], team_ids) == by_content(expected, local_ids)
    rows = re.findall(r"^#\d+ \d\d:\d\d (\w+) ", body["context"], re.M)
    sessions = re.findall(r"^### \d{4}-\d\d-\d\d \d\d:\d\d · ", body["context"], re.M)
    assert body == {"projects": ["api"], "items": len(rows) + len(sessions), "tokens": body["tokens"],
                    "context": body["context"]} and body["tokens"] <= budget
    assert "decision" in rows and len(rows) < 72 and "Another project" not in body["context"]
    if budget < 1_000:  # cut to the budget: the most useful rows stay, lookups go first
        assert "discovery" not in rows and len(sessions) == 1


def test_a_context_is_rendered_once_for_the_same_memories_and_again_for_a_new_one(
        server: tuple[TestClient, TenantStore, str], monkeypatch: pytest.MonkeyPatch) -> None:
    client, tenant, key = server
    tenant.add_items(memories()[:10])
    renders = []

    def counted(*args: object, **kwargs: object) -> object:
        renders.append(1)
        return render_shown(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(app, "render_shown", counted)
    monkeypatch.setattr(app, "clock", lambda now_ms, tz=None: "a minute")  # no new minute between the requests

    def context() -> str:
        answer = client.get("/v1/context", params={"project": "api"}, headers={"Authorization": f"Bearer {key}"})
        assert answer.status_code == 200, answer.text
        return str(answer.json()["context"])

    first = context()
    assert context() == first and len(renders) == 1
    tenant.add_item(NewItem(project="api", kind="manual", title="Pin the SDK to 4.2", created_at_epoch=START + DAY))
    assert "Pin the SDK to 4.2" in context() and len(renders) == 2
