"""Cross-tenant fuzzing of the /v1 API (in process, on a real PostgreSQL): Hypothesis draws a key, a route
and an id or project, and no answer ever shows or changes a memory outside the key's tenant and project pin."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from postgres_server import TEST_SECRET
from starlette.testclient import TestClient

from memcairn.models import NewItem
from memcairn.pgstore import db, keys
from memcairn.pgstore.items import TeamStore
from memcairn.server.app import ServerState, make_app
from memcairn.vectors.embedder import load_embedder

pytestmark = pytest.mark.timeout(180)
TENANTS = ("acme", "other")
PROJECTS = ("api", "web")


@dataclass(frozen=True)
class Key:
    name: str
    tenant: str
    secret: str
    pin: str | None
    writes: bool


@dataclass
class World:
    client: TestClient
    owner: str
    keys: list[Key]
    items: dict[int, tuple[str, str, str]]  # id -> (tenant, project, title)

    def visible(self, key: Key, item_id: int) -> bool:
        tenant, project, _ = self.items[item_id]
        return tenant == key.tenant and key.pin in (None, project)

    def item_count(self) -> int:
        with db.connect(self.owner) as conn:
            row = conn.execute("SELECT count(*) FROM items").fetchone()
        assert row is not None
        return int(row[0])


@pytest.fixture
def world(pg_database: str) -> Iterator[World]:
    pool = db.Pool(db.app_conninfo(pg_database, TEST_SECRET), size=4)
    team = TeamStore(pool, load_embedder())
    made: list[Key] = []
    with db.connect(pg_database) as conn:
        for tenant in TENANTS:
            for pin in (None, "api"):
                for scopes in (["memories:read", "memories:write"], ["memories:read"]):
                    k = keys.create_key(conn, TEST_SECRET, tenant, scopes=scopes, project=pin)
                    made.append(Key(f"{tenant}/{pin}/{len(scopes)}", tenant, k["key"], pin, len(scopes) == 2))
        tenant_ids = {t: conn.execute("SELECT id FROM tenants WHERE name = %s", (t,)).fetchone()[0] for t in TENANTS}
    items = {}
    for tenant in TENANTS:
        for project in PROJECTS:
            title = f"zebra{tenant}{project} deployment notes"
            saved = team.add(tenant_ids[tenant], NewItem(project=project, kind="manual", title=title,
                                                         text=f"how {project} of {tenant} is deployed"))
            items[saved.id] = (tenant, project, title)
    with TestClient(make_app(ServerState(pool=pool, team=team, secret=TEST_SECRET))) as client:
        yield World(client, pg_database, made, items)
    pool.close()


def test_no_request_crosses_a_tenant_or_a_project_pin(world: World) -> None:
    ids = sorted(world.items)
    routes = ("get", "delete", "search", "search_all", "projects", "context", "post")

    @settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(key=st.sampled_from(world.keys), route=st.sampled_from(routes),
           item_id=st.one_of(st.sampled_from(ids), st.integers(min_value=-3, max_value=10**20)),
           project=st.sampled_from(PROJECTS))
    def check(key: Key, route: str, item_id: int, project: str) -> None:
        headers = {"Authorization": f"Bearer {key.secret}"}
        c = world.client
        visible = {i for i in ids if world.visible(key, i)}
        if route == "get":
            r = c.get(f"/v1/memories/{item_id}", headers=headers)
            assert r.status_code == (200 if item_id in visible else 404), r.text
            if r.status_code == 200:
                assert r.json()["title"] == world.items[item_id][2]
        elif route == "delete":
            if item_id in visible:
                return  # deleting what the key may delete is no crossing; the world stays as it is
            before = world.item_count()
            r = c.delete(f"/v1/memories/{item_id}", headers=headers)
            assert r.status_code in (403, 404) and world.item_count() == before, r.text
        elif route in ("search", "search_all"):
            params = {"query": "zebra deployment notes"} | ({"project": project} if route == "search" else {})
            r = c.get("/v1/search", params=params, headers=headers)
            assert r.status_code == 200, r.text
            assert {hit["id"] for hit in r.json()["results"]} <= visible
        elif route == "projects":
            names = {p["name"] for p in c.get("/v1/projects", headers=headers).json()["projects"]}
            assert names <= {world.items[i][1] for i in visible}
        elif route == "context":
            text = c.get("/v1/context", params={"project": project}, headers=headers).json()["context"]
            for i, (_, _, title) in world.items.items():
                assert (title in text) <= (i in visible)
        else:
            before = world.item_count()
            r = c.post("/v1/memories", json={"project": project, "title": f"new {key.name}"}, headers=headers)
            allowed = key.writes and key.pin in (None, project)
            assert r.status_code in ((200, 201) if allowed else (403,)), r.text
            if not allowed:
                assert world.item_count() == before

    check()
