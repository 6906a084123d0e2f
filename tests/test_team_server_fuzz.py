"""Cross-tenant fuzzing of the /v1 API (in process, on a real PostgreSQL): Hypothesis draws a key, a route
and an id or project, and no answer ever shows or changes a memory outside the key's tenant and project pin."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from postgres_server import TEST_SECRET, hold
from starlette.testclient import TestClient

from memcairn.core.models import NewItem
from memcairn.pgstore import db, keys
from memcairn.pgstore.items import TeamStore
from memcairn.server import queue as ingest
from memcairn.server.app import ServerState, make_app
from memcairn.vectors.embedder import load_embedder

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
TENANTS = ("acme", "other")
PROJECTS = ("api", "web")


@dataclass(frozen=True)
class Key:
    name: str
    tenant: str
    secret: str
    pin: str | None
    writes: bool
    id: str = ""
    admin: bool = False


@dataclass
class World:
    client: TestClient
    owner: str
    team: TeamStore
    keys: list[Key]
    # (tenant, id: the memory's number within its tenant) -> (tenant, project, title)
    items: dict[tuple[str, int], tuple[str, str, str]]

    def visible(self, key: Key, item_id: int) -> bool:
        found = self.items.get((key.tenant, item_id))
        return found is not None and key.pin in (None, found[1])

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
                for scopes in (["memories:read", "memories:write"], ["memories:read"], ["admin"]):
                    k = keys.create_key(conn, TEST_SECRET, tenant, scopes=scopes, project=pin)
                    made.append(Key(f"{tenant}/{pin}/{scopes[-1]}", tenant, k["key"], pin,
                                    scopes != ["memories:read"], k["id"], scopes == ["admin"]))
        tenant_ids = {t: conn.execute("SELECT id FROM tenants WHERE name = %s", (t,)).fetchone()[0] for t in TENANTS}
    for key in made:
        if key.name.endswith("/None/memories:write"):
            hold(tenant_ids[key.tenant], key.secret)
    items = {}
    for tenant in TENANTS:
        for project in PROJECTS:
            title = f"zebra{tenant}{project} deployment notes"
            saved = team.add(tenant_ids[tenant], NewItem(project=project, kind="manual", title=title,
                                                         text=f"how {project} of {tenant} is deployed"))
            items[(tenant, saved.number)] = (tenant, project, title)
    with TestClient(make_app(ServerState(pool=pool, team=team, secret=TEST_SECRET))) as client:
        yield World(client, pg_database, team, made, items)
    pool.close()


def test_no_request_crosses_a_tenant_or_a_project_pin(world: World) -> None:
    ids = sorted({number for _, number in world.items})
    routes = ("get", "delete", "search", "search_all", "projects", "context", "post", "keys", "revoke",
              "timeline")

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(key=st.sampled_from(world.keys), route=st.sampled_from(routes),
           item_id=st.one_of(st.sampled_from(ids), st.integers(min_value=-3, max_value=10**20)),
           project=st.sampled_from(PROJECTS))
    def check(key: Key, route: str, item_id: int, project: str) -> None:
        headers = {"Authorization": f"Bearer {key.secret}"}
        c = world.client
        visible = {n for _, n in world.items if world.visible(key, n)}  # the posts below add to world.items
        if route == "get":
            r = c.get(f"/v1/memories/{item_id}", headers=headers)
            assert r.status_code == (200 if item_id in visible else 404), r.text
            if r.status_code == 200:
                assert r.json()["title"] == world.items[(key.tenant, item_id)][2]
        elif route == "delete":
            if item_id in visible:
                return  # deleting what the key may delete is no crossing; the world stays as it is
            before = world.item_count()
            r = c.delete(f"/v1/memories/{item_id}", headers=headers)
            assert r.status_code in (403, 404) and world.item_count() == before, r.text
        elif route in ("search", "search_all"):
            params = {"query": "zebra deployment notes"} | ({"project": project} if route == "search" else {})
            r = c.get("/v1/search", params=params, headers=headers)
            off_pin = route == "search" and key.pin not in (None, project)
            assert r.status_code == (403 if off_pin else 200), r.text
            assert off_pin or {hit["id"] for hit in r.json()["results"]} <= visible
        elif route == "projects":
            names = {p["name"] for p in c.get("/v1/projects", headers=headers).json()["projects"]}
            assert names <= {world.items[(key.tenant, i)][1] for i in visible}
        elif route == "context":
            r = c.get("/v1/context", params={"project": project}, headers=headers)
            assert r.status_code == (200 if key.pin in (None, project) else 403), r.text
            text = r.json().get("context", "")
            for (tenant, i), (_, _, title) in world.items.items():
                assert (title in text) <= (tenant == key.tenant and i in visible)
        elif route == "timeline":
            r = c.get("/v1/timeline", params={"anchor": item_id, "before": 5, "after": 5}, headers=headers)
            if item_id in visible:
                assert r.status_code == 200 and {i["id"] for i in r.json()["items"]} <= visible, r.text
            else:
                assert r.status_code in (400, 404), r.text
        elif route == "keys":
            r = c.get("/v1/keys", headers=headers)
            assert r.status_code == (200 if key.admin else 403), r.text
            if key.admin:
                assert {k["id"] for k in r.json()["keys"]} <= {k.id for k in world.keys if k.tenant == key.tenant}
        elif route == "revoke":
            target = next(k for k in world.keys if k.tenant != key.tenant)
            assert c.delete(f"/v1/keys/{target.id}", headers=headers).status_code == (404 if key.admin else 403)
            auth = {"Authorization": f"Bearer {target.secret}"}
            assert c.get("/v1/projects", headers=auth).status_code == 200  # still valid
        else:
            before = world.item_count()
            title = f"new {key.name} in {project} #{len(world.items)}"  # unique: a title is how the digest is read
            r = c.post("/v1/memories", json={"project": project, "title": title}, headers=headers)
            allowed = key.writes and key.pin in (None, project)
            assert r.status_code in ((200, 201) if allowed else (403,)), r.text
            if not allowed:
                assert world.item_count() == before
            else:
                world.items[(key.tenant, r.json()["id"])] = (key.tenant, project, title)

    check()


def test_an_admin_key_manages_its_own_tenants_keys_over_http(world: World) -> None:
    c = world.client
    admin = next(k for k in world.keys if k.admin and k.pin is None and k.tenant == "acme")
    pinned_admin = next(k for k in world.keys if k.admin and k.pin == "api" and k.tenant == "acme")
    as_admin = {"Authorization": f"Bearer {admin.secret}"}
    made = c.post("/v1/keys", json={"scopes": ["memories:read"], "project": "web", "label": "ci"}, headers=as_admin)
    assert made.status_code == 201 and made.json()["project"] == "web"
    new = {"Authorization": f"Bearer {made.json()['key']}"}
    assert [p["name"] for p in c.get("/v1/projects", headers=new).json()["projects"]] == ["web"]
    rotated = c.post(f"/v1/keys/{made.json()['id']}/rotate", headers=as_admin)
    assert rotated.status_code == 200
    assert c.get("/v1/projects", headers=new).status_code == 401
    assert c.get("/v1/projects", headers={"Authorization": f"Bearer {rotated.json()['key']}"}).status_code == 200
    as_pinned = {"Authorization": f"Bearer {pinned_admin.secret}"}
    assert c.post("/v1/keys", json={"project": "web"}, headers=as_pinned).status_code == 403
    assert c.post("/v1/keys", json={}, headers=as_pinned).json()["project"] == "api"
    assert c.post("/v1/keys", json={"scopes": ["root"]}, headers=as_admin).status_code == 400
    other_admin = next(k for k in world.keys if k.admin and k.tenant == "other")
    assert c.post(f"/v1/keys/{admin.id}/rotate", headers={"Authorization": f"Bearer {other_admin.secret}"}
                  ).status_code == 404
    with db.connect(world.owner) as conn:
        rows = conn.execute("SELECT action, key_id, request_id IS NOT NULL FROM audit_log WHERE action LIKE 'keys.%'"
                            " AND key_id IS NOT NULL ORDER BY id").fetchall()
    assert [r[0] for r in rows] == ["keys.create", "keys.rotate", "keys.create"] and all(r[2] for r in rows)


def test_a_nul_character_or_a_deep_body_is_refused_with_a_400_not_stored_or_a_500(world: World) -> None:
    c = world.client
    admin = next(k for k in world.keys if k.admin and k.pin is None)
    headers = {"Authorization": f"Bearer {admin.secret}"}
    assert c.post("/v1/memories", json={"project": "a\x00b", "title": "t"}, headers=headers).status_code == 400
    assert c.get("/v1/search", params={"query": "x\x00"}, headers=headers).status_code == 400
    assert c.get("/v1/context", params={"project": "\x00"}, headers=headers).status_code == 400
    assert c.post("/v1/keys", json={"project": "\x00"}, headers=headers).status_code == 400
    assert c.post("/v1/keys", json={"label": "\x00"}, headers=headers).status_code == 400
    assert c.delete("/v1/keys/%00", headers=headers).status_code == 404
    deep = c.post("/v1/memories", content=b"[" * 100_000, headers={**headers, "Content-Type": "application/json"})
    assert deep.status_code == 400 and deep.json()["error"] == "invalid_json"
    saved = c.post("/v1/memories", json={"project": "api", "title": "nul\x00inside"}, headers=headers)
    assert saved.status_code == 201  # title and text: NUL becomes U+FFFD, as in the SQLite store
    assert c.get(f"/v1/memories/{saved.json()['id']}", headers=headers).json()["title"] == "nul\ufffdinside"


def test_a_batch_of_events_is_queued_and_stored_once_whatever_is_retried(world: World) -> None:
    c = world.client
    writer = next(k for k in world.keys if k.writes and not k.admin and k.pin is None and k.tenant == "acme")
    pinned = next(k for k in world.keys if k.writes and not k.admin and k.pin == "api" and k.tenant == "acme")
    headers = {"Authorization": f"Bearer {writer.secret}"}
    events = [{"project": "api", "session": "s9", "platform": "codex", "kind": "observation", "title": f"step {n}",
               "text": f"what step {n} did"} for n in range(3)]
    before = world.item_count()
    first = c.post("/v1/events", json={"events": events}, headers={**headers, "Idempotency-Key": "batch-1"})
    assert first.status_code == 202 and len(first.json()["queued"]) == 3 and first.json()["replayed"] is False
    again = c.post("/v1/events", json={"events": events}, headers={**headers, "Idempotency-Key": "batch-1"})
    assert again.status_code == 202 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["queued"] == first.json()["queued"]
    assert ingest.drain(world.team) == 3 and world.item_count() == before + 3
    other = c.post("/v1/events", json={"events": events[:1]}, headers={**headers, "Idempotency-Key": "batch-1"})
    assert other.status_code == 409
    plain = c.post("/v1/events", json={"events": events}, headers=headers)  # no key: dedupe still holds
    assert plain.status_code == 202 and ingest.drain(world.team) == 3 and world.item_count() == before + 3
    found = c.get("/v1/search", params={"query": "step 0", "project": "api", "mode": "keyword"}, headers=headers)
    gone = next(r["id"] for r in found.json()["results"] if r["title"] == "step 0")
    assert c.delete(f"/v1/memories/{gone}", headers=headers).status_code == 200
    assert c.post("/v1/events", json={"events": events[:1]}, headers=headers).status_code == 202
    assert ingest.drain(world.team) == 1 and world.item_count() == before + 2  # a capture does not bring it back
    mixed = [{**events[1], "title": "new"}, {**events[2], "project": "web"}]
    refused = c.post("/v1/events", json={"events": mixed}, headers={"Authorization": f"Bearer {pinned.secret}"})
    assert refused.status_code == 403 and ingest.drain(world.team) == 0  # all or nothing
    for bad in ({"events": []}, {"events": [1]}, {"events": [{"project": "api", "kind": "bogus", "title": "x"}]},
                {"nope": 1}):
        assert c.post("/v1/events", json=bad, headers=headers).status_code == 400
    assert c.post("/v1/events", json={"events": events}, headers={**headers, "Idempotency-Key": "a b"}
                  ).status_code == 400
    # raw hook events: queued (a tool memcairn never observes: null), compressed by the consumer
    hooks = [{"project": "api", "session": "s9", "platform": "codex", "event": "tool_use", "tool_name": "Bash",
              "tool_input": {"command": "make deploy-docs"}, "tool_response": {"stdout": "published 12 pages"}},
             {"project": "api", "session": "s9", "event": "tool_use", "tool_name": "mcp__memcairn__search"}]
    sent = c.post("/v1/events", json={"events": hooks}, headers=headers)
    assert sent.status_code == 202 and sent.json()["queued"][1] is None and sent.json()["queued"][0] > 0
    assert ingest.drain(world.team) == 1 and world.item_count() == before + 3
    for bad in ({**hooks[0], "session": None}, {**hooks[0], "event": "stop"}, {**hooks[0], "tool_name": None},
                {**hooks[0], "tool_input": {"command": "nul\x00"}}):
        assert c.post("/v1/events", json={"events": [bad]}, headers=headers).status_code == 400
    assert c.get("/v1/health").json()["ingest"] == {"pending": 0, "oldest_pending_seconds": 0, "failed": 0}
