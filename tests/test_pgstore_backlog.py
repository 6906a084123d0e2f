"""The embedding backlog on a real PostgreSQL 18 + pgvector: a write commits without its vector, the backlog
fills vectors in batches, an interrupted batch is embedded again and nothing twice, one embedding task leads,
and row-level security binds the task as it binds requests."""

from __future__ import annotations

import time
from collections.abc import Sequence

import pytest
from postgres_server import TEST_SECRET, search, tenant

from memcairn.core.models import NewItem
from memcairn.pgstore import backlog, db
from memcairn.pgstore.items import TeamStore
from memcairn.server.embedding import EmbeddingTask

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


class Recording:
    """The real model, recording every document it is given; ``fail_on`` makes that call raise (a crash)."""

    def __init__(self, model, fail_on: int | None = None) -> None:
        self.model, self.fail_on, self.calls, self.documents = model, fail_on, 0, []

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        if self.calls == self.fail_on:
            raise RuntimeError("killed while embedding")
        self.documents += list(texts)
        return self.model.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.model.embed_query(text)


def wait_for_an_empty_backlog(pool: db.Pool) -> None:
    for _ in range(600):  # a wait, not a timed assertion
        with pool.connection() as conn:
            if backlog.lag(conn).pending == 0:
                return
        time.sleep(0.05)


def vectors(owner_dsn: str) -> dict[int, bool]:
    with db.connect(owner_dsn, autocommit=True) as conn:
        return {i: has for i, has in conn.execute(
            "SELECT id, EXISTS (SELECT 1 FROM item_vectors v WHERE v.item_id = items.id) FROM items ORDER BY id")}


def test_a_write_commits_before_its_vector_and_the_backlog_fills_it_in(pg_database: str, team: TeamStore) -> None:
    acme = tenant(pg_database, "acme")
    saved = team.add(acme, NewItem(project="api", kind="manual", title="Retry uploads with exponential backoff",
                                   text="The S3 client retries failed uploads, doubling the wait each time"))
    assert vectors(pg_database) == {saved.id: False}
    question = "exponentially backing off on upload retry"
    assert search(team, acme, question, ["api"], mode="semantic") == []  # not embedded yet: the leg cannot see it
    assert [h["id"] for h in search(team, acme, "retry backoff", ["api"], mode="keyword")] == [saved.id]
    with team.pool.connection() as conn:
        assert backlog.lag(conn).pending == 1
    assert backlog.drain(team.pool, team.embedder) == 1
    assert vectors(pg_database) == {saved.id: True}
    with team.pool.connection() as conn:
        assert backlog.lag(conn) == backlog.Lag(0, 0.0)
    assert [h["id"] for h in search(team, acme, question, ["api"], mode="semantic")] == [saved.id]


def test_an_interrupted_batch_is_embedded_again_and_nothing_twice(pg_database: str, pool: db.Pool,
                                                                    embedder) -> None:
    acme, other = tenant(pg_database, "acme"), tenant(pg_database, "other")
    writer = TeamStore(pool, None)
    ids = [writer.add(t, NewItem(project="api", kind="manual", title=f"note {n}")).id
           for n, t in enumerate([acme, other, acme, other, acme, acme])]
    forgotten = ids[3]
    assert writer.forget(other, forgotten)  # its backlog row goes with it
    crashing = Recording(embedder, fail_on=2)
    assert backlog.embed_batch(pool, crashing, limit=2) == 2
    with pytest.raises(RuntimeError):
        backlog.embed_batch(pool, crashing, limit=2)  # dies with the model's answer not yet stored
    resumed = Recording(embedder)
    assert backlog.drain(pool, resumed, limit=2) == 3
    assert crashing.documents == ["note 0", "note 1"]  # one per tenant: each read in its own tenant transaction
    assert sorted(resumed.documents) == ["note 2", "note 4", "note 5"]  # the rest, each once
    assert vectors(pg_database) == {i: True for i in ids if i != forgotten}


def test_the_task_acts_for_the_tenant_its_backlog_row_names_and_nothing_else(pg_database: str, pool: db.Pool,
                                                                              embedder) -> None:
    acme, other = tenant(pg_database, "acme"), tenant(pg_database, "other")
    mine = TeamStore(pool, None).add(acme, NewItem(project="api", kind="manual", title="acme's plan")).id
    with db.connect(db.app_conninfo(pg_database, TEST_SECRET), autocommit=True) as conn:
        # a backlog row naming the wrong tenant: refused since migration 8 (its foreign key includes the tenant)
        with db.tenant_transaction(conn, acme) as cur:
            cur.execute("DELETE FROM embedding_backlog")
        with pytest.raises(Exception, match="violates foreign key constraint"), \
                db.tenant_transaction(conn, other) as cur:
            cur.execute("INSERT INTO embedding_backlog (item_id, tenant_id) VALUES (%s, %s)", (mine, other))
    recording = Recording(embedder)
    assert backlog.drain(pool, recording) == 0
    assert recording.documents == [] and vectors(pg_database) == {mine: False}


def test_one_embedding_task_leads_and_drains_what_every_process_writes(pg_database: str, pool: db.Pool,
                                                                        embedder) -> None:
    acme = tenant(pg_database, "acme")
    team = TeamStore(pool, embedder)
    first, second = EmbeddingTask(team, embedder, nice=0), EmbeddingTask(team, embedder, nice=0)
    first.start()
    second.start()
    try:
        saved = [team.add(acme, NewItem(project="api", kind="manual", title=f"event {n}")).id for n in range(10)]
        wait_for_an_empty_backlog(pool)
    finally:
        first.stop()
        second.stop()
    assert vectors(pg_database) == dict.fromkeys(saved, True)
    assert sorted([first.embedded, second.embedded]) == [0, 10]  # one leader; the other never embedded


def test_a_failed_batch_stays_in_the_backlog_and_the_task_goes_on(pg_database: str, pool: db.Pool, embedder,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from memcairn.server import embedding

    monkeypatch.setattr(embedding, "LEADER_RETRY_SECONDS", 0.1)
    acme = tenant(pg_database, "acme")
    team = TeamStore(pool, embedder)
    saved = [team.add(acme, NewItem(project="api", kind="manual", title=f"event {n}")).id for n in range(3)]
    failing_once = Recording(embedder, fail_on=1)
    task = EmbeddingTask(team, failing_once, nice=0)
    task.start()
    try:
        wait_for_an_empty_backlog(pool)
    finally:
        task.stop()
    assert failing_once.calls == 2 and sorted(failing_once.documents) == ["event 0", "event 1", "event 2"]
    assert vectors(pg_database) == dict.fromkeys(saved, True) and task.embedded == 3
