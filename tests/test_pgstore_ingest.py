"""The ingest queue on a real PostgreSQL 18: events are queued scrubbed and stored once by consumers that claim
jobs with FOR UPDATE SKIP LOCKED, also racing, also after a consumer died mid-batch."""

from __future__ import annotations

import contextvars
import threading
import time

import pytest
from postgres_server import TEST_SECRET, count, event, search, tenant
from psycopg.types.json import Jsonb

from memcairn.capture.single_event import HookEvent
from memcairn.core.errors import NotFoundError, ValidationError
from memcairn.core.models import NewItem
from memcairn.pgstore import db
from memcairn.pgstore.audit import Actor
from memcairn.pgstore.items import Saved, TeamStore
from memcairn.server import queue as ingest
from memcairn.server.queue import IdempotencyConflict

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_events_are_queued_scrubbed_and_stored_once_by_a_consumer(pg_database: str, team: TeamStore) -> None:
    acme, other = tenant(pg_database, "acme"), tenant(pg_database, "other")
    batch = [event("api", "deploy", "token AKIAIOSFODNN7EXAMPLE and <private>the PIN is 4711</private>", "s1"),
             event("api", "Use WAL", "SQLite runs in WAL mode", "s1")]
    queued = ingest.enqueue(team.pool, acme, batch, actor=Actor("key-1", "req-1"))
    ingest.enqueue(team.pool, other, [event("api", "other's plan")])
    assert not queued.replayed and len(queued.ids) == 2
    with db.connect(pg_database) as conn:  # what the queue holds is already scrubbed
        held = " ".join(str(p) for (p,) in conn.execute("SELECT payload FROM ingest_queue"))
        assert "AKIAIOSFODNN7EXAMPLE" not in held and "4711" not in held
    with db.connect(db.app_conninfo(pg_database, TEST_SECRET)) as conn:  # row-level security holds on the queue
        with db.tenant_transaction(conn, other) as cur:
            assert cur.execute("SELECT count(*) FROM ingest_queue").fetchone() == (1,)
        with conn.transaction():
            assert conn.execute("SELECT count(*) FROM ingest_queue").fetchone() == (0,)
        assert ingest.lag(conn).pending == 3
    assert count(pg_database, "SELECT count(*) FROM items") == 0  # accepted, not yet stored

    assert ingest.drain(team) == 3
    assert count(pg_database, "SELECT count(*) FROM items") == 3
    assert count(pg_database, "SELECT count(*) FROM ingest_queue") == 0
    assert count(pg_database, "SELECT count(*) FROM embedding_backlog") == 3
    assert count(pg_database, "SELECT count(*) FROM audit_log WHERE key_id = 'key-1' AND request_id = 'req-1'"
                              " AND action = 'memories.create'") == 2
    assert count(pg_database, "SELECT count(*) FROM sessions") == 1
    stored = search(team, acme, "WAL mode", ["api"], mode="keyword")
    assert [r["title"] for r in stored] == ["Use WAL"]

    # the same content again is stored once, also twice in one batch; forgotten content is not brought back by
    # a queued event
    assert team.forget(acme, stored[0]["id"])
    ingest.enqueue(team.pool, acme, [*batch, event("web", "twice"), event("web", "twice")])
    again = ingest.consume(team).stored
    assert [(s.created, s.forgotten) for s in again] == [(False, False), (False, True), (True, False), (False, False)]
    assert again[3].id == again[2].id
    assert count(pg_database, "SELECT count(*) FROM items") == 3
    with db.connect(db.app_conninfo(pg_database, TEST_SECRET)) as conn:
        assert ingest.lag(conn).as_dict() == {"pending": 0, "oldest_pending_seconds": 0, "failed": 0}


def test_invalid_and_pinned_batches_are_refused_whole_before_anything_is_queued(pg_database: str,
                                                                                team: TeamStore) -> None:
    acme = tenant(pg_database, "acme")
    with pytest.raises(ValidationError):
        ingest.enqueue(team.pool, acme, [event("api", "fine"), NewItem(project="api", kind="bogus", title="x")])
    team.start_session(acme, "api", "s0", "codex")  # makes the project a key may be pinned to
    pin = team.project_ids(acme, ["api"])[0]
    with pytest.raises(NotFoundError):
        ingest.enqueue(team.pool, acme, [event("api", "mine"), event("web", "not mine")], pin=pin)
    assert count(pg_database, "SELECT count(*) FROM ingest_queue") == 0
    ingest.enqueue(team.pool, acme, [event("api", "mine")], pin=pin)
    assert ingest.drain(team) == 1


def test_concurrent_retries_of_one_idempotency_key_queue_the_batch_once(pg_database: str, team: TeamStore) -> None:
    acme = tenant(pg_database, "acme")
    batch = [event("api", f"event {n}") for n in range(4)]
    answers: list[ingest.Queued] = []

    def send() -> None:
        answers.append(ingest.enqueue(team.pool, acme, batch, idempotency_key="k-1"))

    threads = [threading.Thread(target=contextvars.copy_context().run, args=(send,)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(a.replayed for a in answers) == [False, True, True]
    assert all(a.ids == answers[0].ids for a in answers)
    assert count(pg_database, "SELECT count(*) FROM ingest_queue") == 4
    with pytest.raises(IdempotencyConflict):
        ingest.enqueue(team.pool, acme, batch[:1], idempotency_key="k-1")
    other = tenant(pg_database, "other")
    assert ingest.enqueue(team.pool, other, batch, idempotency_key="k-1").replayed is False  # keys are per tenant


def test_consumers_skip_each_others_claims_and_a_dead_consumers_batch_is_stored_once(pg_database: str,
                                                                                     team: TeamStore) -> None:
    acme, other = tenant(pg_database, "acme"), tenant(pg_database, "other")
    for n in range(4):
        ingest.enqueue(team.pool, acme, [event(f"p{n % 2}", f"acme {n}.{k}", session=f"s{n}") for k in range(5)])
        ingest.enqueue(team.pool, other, [event("p0", f"other {n}.{k}") for k in range(5)])
    # a consumer in the middle of its batch (in another process, say) holds its claim on the oldest 15 jobs
    held = db.connect(db.app_conninfo(pg_database, TEST_SECRET))
    held.autocommit = False
    claimed = [r[0] for r in held.execute("SELECT queue_id FROM memcairn_claim_ingest_jobs(15)").fetchall()]
    assert len(claimed) == 15
    assert ingest.drain(team, limit=4) == 25  # the others, never the claimed ones
    assert count(pg_database, "SELECT count(*) FROM items") == 25
    held.rollback()  # that consumer died before its commit: its jobs wait again
    held.close()

    # two consumers race for the rest and for 300 more events, in batches of 7
    for n in range(30):
        ingest.enqueue(team.pool, acme if n % 2 else other, [event(f"p{n % 3}", f"race {n}.{k}") for k in range(10)])
    settled: list[list[Saved]] = [[], []]

    def consumer(slot: int) -> None:
        while (done := ingest.consume(team, 7)).jobs:
            settled[slot] += done.stored

    threads = [threading.Thread(target=consumer, args=(slot,)) for slot in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stored = settled[0] + settled[1]
    assert len(stored) == 15 + 300 and all(s.created for s in stored)
    assert len({s.id for s in stored}) == len(stored)  # no event stored twice
    assert count(pg_database, "SELECT count(*) FROM items") == 340
    assert count(pg_database, "SELECT count(*) FROM ingest_jobs") == 0


def test_a_job_that_cannot_be_stored_is_set_aside_and_the_rest_of_its_batch_is_stored(pg_database: str,
                                                                                      team: TeamStore) -> None:
    acme = tenant(pg_database, "acme")
    ingest.enqueue(team.pool, acme, [event("api", "before")])
    with db.connect(pg_database) as conn:  # a row no consumer can read (written by hand, not by enqueue)
        row = conn.execute("INSERT INTO ingest_queue (tenant_id, payload) VALUES (%s, %s) RETURNING id",
                           (acme, Jsonb({"memory": {"title": "no project"}}))).fetchone()
        assert row is not None
        conn.execute("INSERT INTO ingest_jobs (queue_id, tenant_id) VALUES (%s, %s)", (row[0], acme))
    ingest.enqueue(team.pool, acme, [event("api", "after")])
    done = ingest.consume(team)
    assert (done.jobs, done.failed, len(done.stored)) == (3, 1, 2)
    assert count(pg_database, "SELECT count(*) FROM items") == 2
    with db.connect(pg_database) as conn:
        assert conn.execute("SELECT error FROM ingest_jobs").fetchone()[0].startswith("KeyError")
        assert ingest.lag(conn).as_dict() == {"pending": 0, "oldest_pending_seconds": 0, "failed": 1}
    assert ingest.consume(team).jobs == 0  # set aside, not retried for ever


def test_raw_hook_events_are_scrubbed_when_queued_and_compressed_by_the_consumer(pg_database: str,
                                                                                team: TeamStore) -> None:
    acme = tenant(pg_database, "acme")

    def hook(kind: str, **body: object) -> HookEvent:
        return HookEvent(kind, "api", "s1", "claude-code", dict(body))

    batch = [hook("user_prompt", prompt="Fix the token expiry bug <private>the PIN is 4711</private>"),
             hook("tool_use", tool_name="Bash", tool_input={"command": "AWS_KEY=AKIAIOSFODNN7EXAMPLE pytest -q"},
                  tool_response={"stdout": "1 failed, 3 passed", "stderr": ""}, cwd="/repo"),
             hook("tool_use", tool_name="mcp__memcairn__search", tool_input={"query": "x"}),  # memcairn's own
             hook("user_prompt", prompt="<private>all of it</private>"),
             event("api", "a memory made by the client")]
    queued = ingest.enqueue(team.pool, acme, batch, idempotency_key="hooks-1")
    assert [i is None for i in queued.ids] == [False, False, True, False, False]
    assert ingest.enqueue(team.pool, acme, batch, idempotency_key="hooks-1") == ingest.Queued(queued.ids, True)
    with db.connect(pg_database) as conn:
        held = " ".join(str(p) for (p,) in conn.execute("SELECT payload FROM ingest_queue"))
        assert "AKIAIOSFODNN7EXAMPLE" not in held and "4711" not in held and "all of it" not in held
    with pytest.raises(ValidationError):
        ingest.enqueue(team.pool, acme, [hook("tool_use", tool_input={})])  # no tool named
    with pytest.raises(ValidationError):
        ingest.enqueue(team.pool, acme, [hook("stop")])

    assert ingest.drain(team) == 4
    with db.connect(pg_database) as conn:
        stored = conn.execute("SELECT kind, type, title, text FROM items ORDER BY id").fetchall()
    assert [k for k, *_ in stored] == ["prompt", "observation", "observation"]
    prompt, ran, made = stored
    assert made[2] == "a memory made by the client"
    assert prompt[2] == "Fix the token expiry bug" and "4711" not in prompt[3]
    assert "pytest" in ran[2] and "AKIAIOSFODNN7EXAMPLE" not in ran[2] + ran[3]


def test_the_servers_consumer_threads_store_what_is_queued_and_stop(pg_database: str, team: TeamStore) -> None:
    from memcairn.server.ingest import IngestConsumers

    acme = tenant(pg_database, "acme")
    wake = threading.Event()
    consumers = IngestConsumers(team, wake, threads=2, claim=7)
    consumers.start()
    try:
        for n in range(10):
            ingest.enqueue(team.pool, acme, [event(f"p{n % 3}", f"threaded {n}.{k}") for k in range(5)])
            wake.set()
        for _ in range(600):  # a wait for the threads, not a timed assertion
            with team.pool.connection() as conn:
                if ingest.lag(conn).pending == 0:
                    break
            time.sleep(0.05)
    finally:
        consumers.stop()
    assert count(pg_database, "SELECT count(*) FROM items") == 50
    assert (consumers.stored, consumers.failed) == (50, 0)
    assert not any(t.is_alive() for t in consumers._threads)
