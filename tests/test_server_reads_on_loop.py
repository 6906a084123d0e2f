"""Reads answered on the server's event loop (``pgstore/waits.py``), on a real PostgreSQL: a read runs there
only while none of its steps would wait, and one that would (a project not yet in this process's copies, a
query never embedded, every pooled connection taken, a project's lock held) is run again on a thread with the
same answer; nothing that would wait is turned into a different answer on the way (the semantic leg does not
fall back to keyword)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from postgres_server import TEST_SECRET, hold
from starlette.testclient import TestClient

from memcairn.core.errors import WouldWait
from memcairn.core.models import NewItem
from memcairn.pgstore import backlog, db, keys, project_copies
from memcairn.pgstore.items import TeamStore
from memcairn.pgstore.project_copies import QUICK_CATCH_UP
from memcairn.pgstore.waits import may_wait, no_waiting
from memcairn.search.request import SearchRequest
from memcairn.search.team import search_tenant
from memcairn.server.app import ServerState, make_app

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


@dataclass
class Server:
    client: TestClient
    state: ServerState
    tenant_id: int
    headers: dict[str, str]

    def search(self, query: str, project: str = "api", mode: str = "auto") -> list[tuple[int, float]]:
        r = self.client.get("/v1/search", params={"query": query, "project": project, "mode": mode},
                            headers=self.headers)
        assert r.status_code == 200, r.text
        return [(hit["id"], hit["score"]) for hit in r.json()["results"]]

    def moved(self, call: object) -> tuple[int, int]:
        """How many reads ``call()`` added on the loop and on threads."""
        before = dict(self.state.reads)
        call()  # type: ignore[operator]
        return (self.state.reads["on_loop"] - before.get("on_loop", 0),
                self.state.reads["in_threads"] - before.get("in_threads", 0))


@pytest.fixture
def server(pg_database: str, embedder: object) -> Iterator[Server]:
    pool = db.Pool(db.app_conninfo(pg_database, TEST_SECRET), size=3)
    team = TeamStore(pool, embedder)  # type: ignore[arg-type]
    with db.connect(pg_database) as conn:
        made = keys.create_key(conn, TEST_SECRET, "acme", scopes=["memories:read", "memories:write"])
        tenant_id = conn.execute("SELECT id FROM tenants WHERE name = 'acme'").fetchone()[0]  # type: ignore[index]
    hold(tenant_id, made["key"])
    for n, (title, text) in enumerate([("cache eviction", "the LRU cache evicts the oldest entry"),
                                       ("deploy", "the deploy runs after the tests pass"),
                                       ("retry queue", "the queue retries a job three times on timeout")]):
        for project in ("api", "web"):
            team.add(tenant_id, NewItem(project=project, kind="manual", title=f"{title} {n}", text=text))
    state = ServerState(pool=pool, team=team, secret=TEST_SECRET)
    with TestClient(make_app(state)) as client:
        yield Server(client, state, tenant_id, {"Authorization": f"Bearer {made['key']}"})
    pool.close()


def test_a_read_that_would_wait_runs_on_a_thread_then_on_the_loop_with_the_same_answer(
        server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(project_copies, "QUICK_LOAD_ROWS", 2)  # the projects here hold 3: each read on a thread
    # keyword alone needs no model: the project is read on a thread the first time
    assert server.moved(lambda: server.search("deploy", project="web", mode="keyword")) == (0, 1)
    assert server.moved(lambda: server.search("deploy", project="web", mode="keyword")) == (1, 0)
    # a query never embedded: on a thread, then on the loop with the same answer
    answers = []
    assert server.moved(lambda: answers.append(server.search("cache eviction policy"))) == (0, 1)
    assert server.moved(lambda: answers.append(server.search("cache eviction policy"))) == (1, 0)
    assert answers[0] == answers[1] and answers[0]
    # context reads SQL only
    context = server.client.get("/v1/context", params={"project": "api"}, headers=server.headers)
    assert context.status_code == 200 and "cache eviction" in context.text
    assert server.state.reads["on_loop"] == 3 and server.state.reads["in_threads"] == 2


def test_a_small_project_is_read_on_the_loop_and_a_larger_one_on_a_thread(server: Server,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    backlog.drain(server.state.pool, server.state.team.embedder)  # type: ignore[arg-type]
    server.state.team.query_vector(server.tenant_id, "deploy")  # only the project's vectors are left to read
    assert server.moved(lambda: server.search("deploy", project="web", mode="keyword")) == (1, 0)  # 3 memories
    monkeypatch.setattr(project_copies, "QUICK_LOAD_VECTORS", 2)  # its 3 vectors (or more) are over it
    answers = []
    assert server.moved(lambda: answers.append(server.search("deploy", project="web"))) == (0, 1)
    monkeypatch.undo()
    assert server.moved(lambda: answers.append(server.search("deploy", project="api"))) == (1, 0)  # within both
    assert server.moved(lambda: answers.append(server.search("deploy", project="web"))) == (1, 0)
    assert answers[0] == answers[2] and answers[0][0][0] != answers[1][0][0]  # web's best, then api's


def test_a_read_while_every_connection_is_taken_waits_on_a_thread(server: Server) -> None:
    server.search("cache eviction")  # the copies and the query vector are ready
    pool = server.state.pool
    taken = threading.Event()
    release = threading.Event()

    def hold_every_connection(n: int = 3) -> None:
        if n == 0:
            taken.set()
            release.wait(10)
            return
        with pool.connection():
            hold_every_connection(n - 1)

    holder = threading.Thread(target=hold_every_connection)
    holder.start()
    assert taken.wait(10)
    threading.Timer(0.5, release.set).start()
    started = time.monotonic()
    assert server.moved(lambda: server.search("cache eviction")) == (0, 1)
    assert time.monotonic() - started >= 0.4  # it waited for a connection, on a thread
    holder.join(10)


def test_a_project_lock_held_elsewhere_sends_the_read_to_a_thread(server: Server) -> None:
    server.search("cache eviction")
    copies = server.state.team.copies
    assert copies is not None
    api = server.state.team.project_ids(server.tenant_id, ["api"])[0]
    lock = copies._project_locks[api]
    lock.acquire()
    threading.Timer(0.3, lock.release).start()
    assert server.moved(lambda: server.search("cache eviction")) == (0, 1)


def test_many_changes_behind_a_copy_are_caught_up_on_a_thread(server: Server) -> None:
    server.search("cache eviction")
    for n in range(QUICK_CATCH_UP + 5):
        server.state.team.add(server.tenant_id, NewItem(project="api", kind="manual", title=f"imported note {n}",
                                                        text=f"cache warmed by import {n}"))
    assert server.moved(lambda: server.search("cache eviction")) == (0, 1)
    # caught up: on the loop again, and the imported notes are found
    assert server.moved(lambda: server.search("imported note 7", mode="keyword")) == (1, 0)
    r = server.client.get("/v1/search", params={"query": "imported note 7", "project": "api", "mode": "keyword"},
                          headers=server.headers)
    assert r.json()["results"][0]["title"] == "imported note 7"


def test_where_waiting_is_not_allowed_the_semantic_leg_does_not_fall_back_to_keyword(server: Server) -> None:
    team = server.state.team
    search_tenant(team, server.tenant_id, SearchRequest(query="warm the copies", projects=("api",)))
    with no_waiting(), pytest.raises(WouldWait, match="embedding the query"):
        search_tenant(team, server.tenant_id, SearchRequest(query="a question never embedded", projects=("api",)))
    assert may_wait()  # the block ended: waiting is allowed again
    found = search_tenant(team, server.tenant_id, SearchRequest(query="a question never embedded",
                                                                projects=("api",)))
    assert found.strategy != "keyword"


def test_without_an_idle_connection_the_pool_refuses_at_once_and_keeps_its_slots(pg_database: str) -> None:
    pool = db.Pool(db.app_conninfo(pg_database, TEST_SECRET), size=1)
    try:
        with no_waiting(), pytest.raises(WouldWait, match="opening a connection"):
            with pool.connection():
                pass
        with pool.connection() as conn:  # the slot came back; this one may open a connection
            conn.execute("SELECT 1")
            with no_waiting(), pytest.raises(WouldWait, match="in use"):
                with pool.connection():
                    pass
        with no_waiting(), pool.connection() as conn:  # idle now: taken without waiting
            assert conn.execute("SELECT 2").fetchone() == (2,)
    finally:
        pool.close()
