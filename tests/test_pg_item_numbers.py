"""Per-tenant ids in the team server's API (migrations 12 and 13): a memory's id is its number within its tenant,
so two of a tenant's ids no longer tell it how many memories other tenants stored between them; the change feed
and the audit log number their entries the same way. Every route that shows or takes an id uses the number; the
migrations number the rows already stored, keeping every row.
In process on a real PostgreSQL, as the other /v1 tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from postgres_server import TEST_SECRET, event, tenant
from starlette.testclient import TestClient

from memcairn.pgstore import db, keys, migrations, schema
from memcairn.pgstore.items import TeamStore
from memcairn.server.app import ServerState, make_app

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


@pytest.fixture
def api(pg_database: str, team: TeamStore) -> Iterator[tuple[TestClient, dict[str, dict[str, str]]]]:
    headers = {}
    with db.connect(pg_database) as conn:
        for name in ("acme", "globex"):
            made = keys.create_key(conn, TEST_SECRET, name, scopes=["memories:read", "memories:write", "admin"])
            headers[name] = {"Authorization": f"Bearer {made['key']}", "Content-Type": "application/json"}
    with TestClient(make_app(ServerState(pool=team.pool, team=team, secret=TEST_SECRET))) as client:
        yield client, headers


def save(client: TestClient, headers: dict[str, str], title: str, text: str) -> int:
    answer = client.post("/v1/memories", json={"project": "api", "title": title, "text": text}, headers=headers)
    assert answer.status_code == 201, answer.text
    return int(answer.json()["id"])


def test_each_tenant_numbers_its_memories_and_every_route_speaks_in_those_numbers(api: Any) -> None:
    client, headers = api
    acme, globex = headers["acme"], headers["globex"]
    ids: dict[str, list[int]] = {"acme": [], "globex": []}
    for n in range(3):  # interleaved: one global sequence would give acme 1, 3, 5 and globex 2, 4, 6, 7
        ids["acme"].append(save(client, acme, f"acme retry note {n}", f"the retry queue backs off, note {n}"))
        ids["globex"].append(save(client, globex, f"globex billing note {n}", f"invoices are batched, note {n}"))
    ids["globex"].append(save(client, globex, "globex billing note 3", "invoices are batched, note 3"))
    assert ids == {"acme": [1, 2, 3], "globex": [1, 2, 3, 4]}
    assert client.post("/v1/memories", json={"project": "api", "title": "acme retry note 1",
                                             "text": "the retry queue backs off, note 1"},
                       headers=acme).json() == {"id": 2, "created": False}

    assert client.get("/v1/memories/2", headers=acme).json()["title"] == "acme retry note 1"
    assert client.get("/v1/memories/4", headers=globex).json()["title"] == "globex billing note 3"
    assert client.get("/v1/memories/4", headers=acme).status_code == 404  # acme has no fourth
    found = client.get("/v1/search", params={"query": "retry queue", "project": "api", "mode": "keyword"},
                       headers=acme).json()["results"]
    assert sorted(hit["id"] for hit in found) == [1, 2, 3]
    around = client.get("/v1/timeline", params={"anchor": 2, "before": 1, "after": 1}, headers=acme).json()
    assert around["anchor"] == 2
    assert [(i["id"], i["anchor"]) for i in around["items"]] == [(1, False), (2, True), (3, False)]
    context = client.get("/v1/context", params={"project": "api"}, headers=globex).json()["context"]
    assert "#4" in context and "#7" not in context

    assert client.delete("/v1/memories/1", headers=acme).json() == {"id": 1, "forgotten": True}
    assert client.get("/v1/memories/1", headers=globex).status_code == 200  # globex's first is its own
    old = {"project": "api", "kind": "manual", "title": "acme retry note 2",
           "text": "the retry queue backs off, note 2"}
    new = {**old, "title": "acme retry note 2, edited", "text": "the retry queue backs off twice as long"}
    forgot = client.post("/v1/events/forget", json={"events": [old], "replacements": [new]}, headers=acme).json()
    # 4 went to the repeated save above, which stored nothing (a number is taken before the duplicate is known)
    assert forgot["results"] == [{"id": 3, "forgotten": True, "replaced_by": 5}]
    targets = [e["target"] for e in client.get("/v1/audit", params={"action": "memories.forget"},
                                               headers=acme).json()["entries"]]
    assert sorted(targets) == ["1", "3"]
    pages = {}
    for name in ("acme", "globex"):  # each tenant's audit entries are numbered from 1, newest first
        first = client.get("/v1/audit", params={"limit": 3}, headers=headers[name]).json()
        rest = client.get("/v1/audit", params={"before": first["next_before"]}, headers=headers[name]).json()
        pages[name] = [e["id"] for e in first["entries"] + rest["entries"]]
        assert pages[name] == sorted(pages[name], reverse=True) and pages[name][-1] == 1


def test_the_change_feed_numbers_each_tenants_changes_and_names_memories_by_their_number(pg_database: str,
                                                                                        team: TeamStore) -> None:
    acme, globex = tenant(pg_database, "acme"), tenant(pg_database, "globex")
    for n in range(3):
        team.add(globex, event("api", f"globex note {n}"))
        team.add(acme, event("api", f"acme note {n}"))
    second = team.get_many(acme, [i for i, in _ids(pg_database, acme)])[1]
    assert team.forget(acme, second["id"])
    feed = team.changes(acme, 0, None)
    assert [(c["seq"], c["op"], c["id"]) for c in feed] == [(1, "stored", 1), (2, "stored", 2), (3, "stored", 3),
                                                           (4, "forgotten", 2)]
    assert team.latest_change(acme) == 4 and team.latest_change(globex) == 3
    assert [c["seq"] for c in team.changes(acme, 2, None)] == [3, 4]


def _ids(owner: str, tenant_id: int) -> list[tuple[int]]:
    with db.connect(owner) as conn:
        return conn.execute("SELECT id FROM items WHERE tenant_id = %s ORDER BY id", (tenant_id,)).fetchall()


def test_the_migrations_number_every_stored_memory_change_and_audit_entry_per_tenant(
        pg_cluster: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    name = pg_cluster.create_database(template=None)
    owner = pg_cluster.owner_dsn(name)
    before = tuple(m for m in schema.MIGRATIONS if m[0] < 12)
    monkeypatch.setattr(migrations, "MIGRATIONS", before)
    monkeypatch.setattr(migrations, "LATEST", before[-1][0])
    with db.connect(owner) as conn:
        migrations.migrate(conn)
        tenants = [conn.execute("INSERT INTO tenants (name) VALUES (%s) RETURNING id", (name,)).fetchone()[0]
                   for name in ("acme", "globex")]
        projects = [conn.execute("INSERT INTO projects (tenant_id, name) VALUES (%s, 'api') RETURNING id",
                                 (t,)).fetchone()[0] for t in tenants]
        for n in range(7):  # acme, globex, acme, ... as one sequence handed them out
            conn.execute("INSERT INTO audit_log (tenant_id, actor, action, target) VALUES (%s, 'cli', 'test', %s)",
                         (tenants[n % 2], f"entry {n}"))
            t = n % 2
            conn.execute("INSERT INTO items (tenant_id, project_id, title, content_hash, created_at_epoch)"
                         " VALUES (%s, %s, %s, %s, %s)", (tenants[t], projects[t], f"memory {n}", f"h{n}", n))
            conn.execute("INSERT INTO changes (tenant_id, project_id, item_id, op) SELECT tenant_id, project_id, id,"
                         " unnest(ARRAY['stored', 'embedded']) FROM items WHERE title = %s", (f"memory {n}",))
    monkeypatch.undo()
    with db.connect(owner) as conn:
        assert migrations.migrate(conn)[:2] == [12, 13]  # and the later ones
        rows = conn.execute("SELECT tenant_id, title, number FROM items ORDER BY id").fetchall()
        assert rows == [(tenants[n % 2], f"memory {n}", n // 2 + 1) for n in range(7)]  # every row kept
        entries = conn.execute("SELECT tenant_id, target, number FROM audit_log ORDER BY id").fetchall()
        assert entries == [(tenants[n % 2], f"entry {n}", n // 2 + 1) for n in range(7)]
        changes = conn.execute("SELECT tenant_id, op, number, item_number FROM changes ORDER BY seq").fetchall()
        assert changes == [row for n in range(7) for row in ((tenants[n % 2], "stored", n // 2 + 1, n // 2 + 1),
                                                              (tenants[n % 2], "embedded", None, n // 2 + 1))]
        conn.execute("INSERT INTO items (tenant_id, project_id, title, content_hash, created_at_epoch)"
                     " VALUES (%s, %s, 'memory 7', 'h7', 7)", (tenants[1], projects[1]))
        assert conn.execute("SELECT number FROM items WHERE title = 'memory 7'").fetchone() == (4,)
        # a row put back from a dump keeps its number, and the tenant's next one comes after it
        conn.execute("INSERT INTO items (tenant_id, project_id, title, content_hash, created_at_epoch, number)"
                     " VALUES (%s, %s, 'restored', 'h8', 8, 10)", (tenants[1], projects[1]))
        conn.execute("INSERT INTO items (tenant_id, project_id, title, content_hash, created_at_epoch)"
                     " VALUES (%s, %s, 'after it', 'h9', 9)", (tenants[1], projects[1]))
        assert conn.execute("SELECT title, number FROM items WHERE number >= 10 ORDER BY number").fetchall() == [
            ("restored", 10), ("after it", 11)]
    pg_cluster.drop_database(name)
