"""A key pinned to one project that names another project in a read is refused with 403 (docs/TEAM_SERVER.md),
not answered 200 with nothing: /v1/search, /v1/context and /v1/stream, in process on a real PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from postgres_server import TEST_SECRET, hold
from starlette.testclient import TestClient

from memcairn.core.models import NewItem
from memcairn.pgstore import db, keys
from memcairn.pgstore.items import TeamStore
from memcairn.server.app import ServerState, make_app
from memcairn.vectors.embedder import load_embedder

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


@pytest.fixture
def client_and_keys(pg_database: str) -> Iterator[tuple[TestClient, dict[str, str]]]:
    pool = db.Pool(db.app_conninfo(pg_database, TEST_SECRET), size=4)
    team = TeamStore(pool, load_embedder())
    with db.connect(pg_database) as conn:
        pinned = keys.create_key(conn, TEST_SECRET, "acme", scopes=["memories:read", "memories:write"],
                                 project="api")
        free = keys.create_key(conn, TEST_SECRET, "acme", scopes=["memories:read"])
        tenant_id = conn.execute("SELECT id FROM tenants WHERE name = 'acme'").fetchone()[0]
    hold(tenant_id, free["key"])
    for project in ("api", "web"):
        team.add(tenant_id, NewItem(project=project, kind="manual", title=f"zebra {project} deployment notes",
                                    text=f"how {project} is deployed"))
    with TestClient(make_app(ServerState(pool=pool, team=team, secret=TEST_SECRET))) as client:
        yield client, {"pinned": pinned["key"], "free": free["key"]}
    pool.close()


def test_a_pinned_key_naming_another_project_in_a_read_gets_403(client_and_keys) -> None:
    client, secrets = client_and_keys
    pinned = {"Authorization": f"Bearer {secrets['pinned']}"}
    reads = [("/v1/search", {"query": "zebra deployment", "project": "web"}),
             ("/v1/search", {"query": "zebra deployment", "projects": "api,web"}),
             ("/v1/search", {"query": "zebra deployment", "project": "nowhere"}),
             ("/v1/context", {"project": "web"}),
             ("/v1/stream", {"project": "web", "after": 0})]
    for path, params in reads:
        answer = client.get(path, params=params, headers=pinned)
        assert answer.status_code == 403, (path, params, answer.text)
        assert answer.json()["error"] == "forbidden" and "pinned to one project" in answer.json()["detail"]

    # its own project, or none named, is read as before
    own = client.get("/v1/search", params={"query": "zebra deployment", "project": "api"}, headers=pinned)
    assert own.status_code == 200 and [h["project"] for h in own.json()["results"]] == ["api"]
    unnamed = client.get("/v1/search", params={"query": "zebra deployment"}, headers=pinned)
    assert unnamed.status_code == 200 and [h["project"] for h in unnamed.json()["results"]] == ["api"]
    context = client.get("/v1/context", params={"project": "api"}, headers=pinned)
    assert context.status_code == 200 and "zebra api" in context.json()["context"]
    # a key without a pin reads any project of its tenant
    free = {"Authorization": f"Bearer {secrets['free']}"}
    web = client.get("/v1/search", params={"query": "zebra deployment", "project": "web"}, headers=free)
    assert web.status_code == 200 and [h["project"] for h in web.json()["results"]] == ["web"]
