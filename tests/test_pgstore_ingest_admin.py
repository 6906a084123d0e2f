"""`memcairn server queue status|retry|purge` on a real PostgreSQL 18: failed ingest jobs seen (errors, never
content), retried until stored once (or failed again), purged with an audit row, tenant by tenant; bad input
changes nothing."""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path

import pytest
from postgres_server import TEST_SECRET, count, event, tenant
from psycopg.types.json import Jsonb

from memcairn.cli.app import run
from memcairn.pgstore import db
from memcairn.pgstore.items import TeamStore
from memcairn.server import queue as ingest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

CONTENT = "PLUM-7731 the deploy notes"  # what a failed job holds, never shown


@pytest.fixture
def queue_cli(pg_database: str, isolated_home: Path, capsys: pytest.CaptureFixture[str]):
    """`memcairn server queue ...` in this process on the test's database: (exit code, stdout, stderr)."""
    # memcairn_app is one role of the whole cluster: this home derives the same password as the other tests'
    (isolated_home / "server").mkdir(parents=True, mode=0o700)
    (isolated_home / "server" / "secret").write_text(TEST_SECRET.hex() + "\n")

    def call(*args: str) -> tuple[int, str, str]:
        code = run(["server", "queue", *args, "--database", pg_database])
        out, err = capsys.readouterr()
        return code, out, err

    return call


def poison(owner_dsn: str, tenant_id: int) -> int:
    """A queued event no consumer can store (written by hand: a memory without a project)."""
    with db.connect(owner_dsn) as conn:
        row = conn.execute("INSERT INTO ingest_queue (tenant_id, payload) VALUES (%s, %s) RETURNING id",
                           (tenant_id, Jsonb({"memory": {"title": CONTENT}, "hash": "x", "epoch": 1}))).fetchone()
        assert row is not None
        conn.execute("INSERT INTO ingest_jobs (queue_id, tenant_id) VALUES (%s, %s)", (row[0], tenant_id))
    return int(row[0])


def block_titles(owner_dsn: str, prefix: str) -> None:
    """A cause outside the event: the items table refuses titles starting with ``prefix`` until unblocked."""
    with db.connect(owner_dsn) as conn:
        conn.execute(f"""CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
          IF NEW.title LIKE '{prefix}%' THEN RAISE EXCEPTION 'items are read-only during maintenance'; END IF;
          RETURN NEW; END $$;
          CREATE TRIGGER refuse BEFORE INSERT ON items FOR EACH ROW EXECUTE FUNCTION refuse()""")


def unblock(owner_dsn: str) -> None:
    with db.connect(owner_dsn) as conn:
        conn.execute("DROP TRIGGER refuse ON items")


def failed_ids(owner_dsn: str) -> list[int]:
    with db.connect(owner_dsn) as conn:
        return [r[0] for r in conn.execute("SELECT queue_id FROM ingest_jobs WHERE failed_at IS NOT NULL"
                                           " ORDER BY queue_id")]


def test_status_lists_failed_jobs_with_their_error_and_never_their_content(pg_database: str, team: TeamStore,
                                                                          queue_cli) -> None:
    acme, other = tenant(pg_database, "acme"), tenant(pg_database, "other")
    tenant(pg_database, "idle")
    bad_acme, bad_other = poison(pg_database, acme), poison(pg_database, other)
    ingest.enqueue(team.pool, acme, [event("api", "stored")])
    assert ingest.drain(team) == 3
    ingest.enqueue(team.pool, acme, [event("api", CONTENT), event("api", "second")])  # waiting

    code, out, err = queue_cli("status", "--json")
    assert code == 0, err
    assert CONTENT not in out and "PLUM" not in out
    shown = json.loads(out)
    assert [(t["tenant"], t["waiting"], t["failed"]) for t in shown["tenants"]] == [("acme", 2, 1), ("other", 0, 1)]
    assert shown["tenants"][0]["oldest_waiting_seconds"] >= 0
    assert [(f["id"], f["tenant"]) for f in shown["failed"]] == [(bad_acme, "acme"), (bad_other, "other")]
    assert all(f["error"] == "KeyError: 'project'" and f["failed_at"] for f in shown["failed"])

    code, out, _ = queue_cli("status", "--tenant", "other", "--json")
    assert code == 0
    assert json.loads(out) == {"tenants": [{"tenant": "other", "waiting": 0, "oldest_waiting_seconds": 0,
                                            "failed": 1}], "failed": [{**shown["failed"][1]}]}
    code, out, _ = queue_cli("status", "--tenant", "idle", "--json")
    assert json.loads(out)["tenants"] == [{"tenant": "idle", "waiting": 0, "oldest_waiting_seconds": 0,
                                           "failed": 0}]

    code, out, err = queue_cli("status", "--limit", "1")  # as an operator reads it
    assert code == 0 and "PLUM" not in out + err
    assert "acme" in out and "other" in out and "(the first 1 of 2)" in out
    listed = [line.split() for line in out.split("failed jobs (the first 1 of 2):\n")[1].splitlines()]
    assert [(int(f[0]), f[1], " ".join(f[3:])) for f in listed] == [(bad_acme, "acme", "KeyError: 'project'")]
    assert "memcairn server queue retry" in err

    code, _, err = queue_cli("status", "--tenant", "nobody")
    assert code == 2 and "no tenant 'nobody'" in err


def test_retry_makes_a_fixed_job_stored_once_by_the_servers_consumers_and_a_bad_one_failed_again(
        pg_database: str, team: TeamStore, queue_cli) -> None:
    from memcairn.server.ingest import IngestConsumers

    acme, other = tenant(pg_database, "acme"), tenant(pg_database, "other")
    block_titles(pg_database, "blocked")
    ingest.enqueue(team.pool, acme, [event("api", "blocked deploy"), event("api", "fine")])
    ingest.enqueue(team.pool, other, [event("api", "blocked too")])
    bad = poison(pg_database, acme)
    assert ingest.drain(team) == 4
    blocked_acme, blocked_other = [q for q in failed_ids(pg_database) if q != bad]
    waiting = ingest.enqueue(team.pool, acme, [event("api", "later")]).ids[0]
    assert waiting is not None
    code, out, _ = queue_cli("status", "--json")
    errors = {f["id"]: f["error"] for f in json.loads(out)["failed"]}
    assert sorted(errors) == [blocked_acme, blocked_other, bad] and errors[bad] == "KeyError: 'project'"
    assert all("items are read-only during maintenance" in errors[q] for q in (blocked_acme, blocked_other))

    # bad input changes nothing: an unknown id, another tenant's job, a waiting job, an unknown tenant
    before = failed_ids(pg_database)
    code, _, err = queue_cli("retry", "--id", str(bad), "--id", "999999")
    assert code == 2 and "no queued job with id 999999" in err
    code, _, err = queue_cli("retry", "--tenant", "acme", "--id", str(blocked_other))
    assert code == 2 and f"no queued job of tenant 'acme' with id {blocked_other}" in err
    code, _, err = queue_cli("retry", "--id", str(waiting))
    assert code == 2 and f"job {waiting} is waiting, not failed" in err
    code, _, err = queue_cli("retry", "--tenant", "nobody")
    assert code == 2 and "no tenant 'nobody'" in err
    assert failed_ids(pg_database) == before
    assert count(pg_database, "SELECT count(*) FROM audit_log WHERE action LIKE 'ingest.%'") == 0

    unblock(pg_database)  # the cause is fixed; the running server's consumers take what is retried
    wake = threading.Event()
    consumers = IngestConsumers(team, wake, threads=1)
    consumers.start()
    try:
        code, out, err = queue_cli("retry", "--tenant", "acme")
        assert (code, out) == (0, "retried 2 failed jobs\n"), err
        for _ in range(600):  # a wait for the consumer's poll, not a timed assertion
            with db.connect(pg_database) as conn:
                if ingest.lag(conn).pending == 0:
                    break
            time.sleep(0.05)
    finally:
        consumers.stop()
    assert (consumers.stored, consumers.failed) == (2, 1)  # the fixed job and the waiting one; the bad one again
    assert count(pg_database, "SELECT count(*) FROM items WHERE title = 'blocked deploy'") == 1
    assert count(pg_database, "SELECT count(*) FROM items WHERE title = 'blocked too'") == 0  # other's: not asked
    assert failed_ids(pg_database) == [blocked_other, bad]
    with db.connect(pg_database) as conn:
        assert conn.execute("SELECT error FROM ingest_jobs WHERE queue_id = %s", (bad,)).fetchone() == (
            "KeyError: 'project'",)
    assert ingest.consume(team).jobs == 0  # failed again, set aside again: no loop
    assert count(pg_database, "SELECT count(*) FROM audit_log WHERE action = 'ingest.retry' AND actor = 'cli'"
                              f" AND tenant_id = {acme}") == 2

    code, out, _ = queue_cli("retry", "--id", str(blocked_other), "--json")
    assert (code, json.loads(out)) == (0, {"retried": [blocked_other]})
    assert ingest.drain(team) == 1
    assert count(pg_database, "SELECT count(*) FROM items WHERE title = 'blocked too'") == 1


def test_purge_removes_failed_jobs_audits_each_and_keeps_the_idempotency_answer(
        pg_database: str, team: TeamStore, queue_cli, monkeypatch: pytest.MonkeyPatch) -> None:
    acme, other = tenant(pg_database, "acme"), tenant(pg_database, "other")
    block_titles(pg_database, "blocked")
    batch = [event("api", "blocked deploy", CONTENT)]
    first = ingest.enqueue(team.pool, acme, batch, idempotency_key="batch-1")
    bad_other = poison(pg_database, other)
    assert ingest.drain(team) == 2
    unblock(pg_database)
    (blocked,) = first.ids
    assert failed_ids(pg_database) == [blocked, bad_other]
    waiting = ingest.enqueue(team.pool, acme, [event("api", "later")]).ids[0]

    # refused or declined: nothing changes
    code, _, err = queue_cli("purge", "--yes")
    assert code == 2 and "--failed" in err
    code, _, err = queue_cli("purge", "--failed", "--tenant", "acme", "--id", str(bad_other), "--yes")
    assert code == 2 and f"no queued job of tenant 'acme' with id {bad_other}" in err
    code, _, err = queue_cli("purge", "--failed", "--id", str(waiting), "--yes")
    assert code == 2 and "waiting, not failed" in err
    monkeypatch.setattr("sys.stdin", io.StringIO("n\n"))
    code, _, err = queue_cli("purge", "--failed", "--tenant", "acme")
    assert code == 1 and "Delete 1 failed job of tenant 'acme' and its event for good?" in err
    assert failed_ids(pg_database) == [blocked, bad_other]

    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    code, out, err = queue_cli("purge", "--failed", "--tenant", "acme")
    assert (code, out) == (0, "purged 1 failed job\n"), err
    assert failed_ids(pg_database) == [bad_other]
    assert count(pg_database, f"SELECT count(*) FROM ingest_queue WHERE id = {blocked}") == 0
    with db.connect(pg_database) as conn:
        assert conn.execute("SELECT tenant_id, actor, key_id, action, target FROM audit_log"
                            " WHERE action LIKE 'ingest.%'").fetchall() == [
            (acme, "cli", None, "ingest.purge", f"queue {blocked}")]
    # the client retrying its request is answered as the first time; the purged event is not queued again
    assert ingest.enqueue(team.pool, acme, batch, idempotency_key="batch-1") == ingest.Queued([blocked], True)
    assert count(pg_database, "SELECT count(*) FROM ingest_queue") == 2  # the waiting one and other's

    code, out, _ = queue_cli("purge", "--failed", "--yes", "--json")
    assert (code, json.loads(out)) == (0, {"purged": [bad_other]})
    assert count(pg_database, "SELECT count(*) FROM audit_log WHERE action = 'ingest.purge'"
                              f" AND tenant_id = {other} AND target = 'queue {bad_other}'") == 1
    code, out, _ = queue_cli("purge", "--failed")  # nothing failed: nothing asked, nothing done
    assert (code, out) == (0, "purged 0 failed jobs\n")
    assert ingest.drain(team) == 1  # the waiting job was never touched
    code, out, _ = queue_cli("status", "--json")
    assert json.loads(out) == {"tenants": [], "failed": []}


def test_an_owner_bound_by_row_level_security_retries_and_purges_its_tenants_jobs(pg_database: str,
                                                                                  team: TeamStore) -> None:
    """`--database` with a role that owns the tables but is no superuser: FORCE ROW LEVEL SECURITY binds it, so
    the queue rows and audit rows are reached while acting for their tenant."""
    from psycopg.conninfo import make_conninfo

    from memcairn.pgstore import ingest_admin

    with db.connect(pg_database) as conn:  # the role is the cluster's; the tables are this test database's
        conn.execute("DO $$ BEGIN CREATE ROLE memcairn_owner_test LOGIN PASSWORD 'owner-test';"
                     " EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$")
        conn.execute("GRANT CONNECT ON DATABASE " + db.database_name(pg_database) + " TO memcairn_owner_test")
        for table in ("tenants", "ingest_queue", "ingest_jobs", "audit_log"):
            conn.execute(f"ALTER TABLE {table} OWNER TO memcairn_owner_test")
        conn.execute("ALTER TABLE tenant_entries OWNER TO memcairn_owner_test")  # it enters tenants
        conn.execute("ALTER FUNCTION memcairn_record_entry(bigint, bigint, text) OWNER TO memcairn_owner_test")
    acme, other = tenant(pg_database, "acme"), tenant(pg_database, "other")
    bad_acme, bad_other = poison(pg_database, acme), poison(pg_database, other)
    assert ingest.drain(team) == 2
    db.forget_keys()  # the command line holds no key: the owner enters a tenant itself
    owner = make_conninfo(pg_database, user="memcairn_owner_test", password="owner-test")
    with db.connect(owner) as conn:
        assert conn.execute("SELECT count(*) FROM ingest_queue").fetchone() == (0,)  # bound: sees no tenant's rows
        assert [f.id for f in ingest_admin.status(conn).failed] == [bad_acme, bad_other]
        assert ingest_admin.retry(conn, "other") == [bad_other]
        assert ingest_admin.purge(conn, ids=[bad_acme]) == [bad_acme]
    assert count(pg_database, "SELECT count(*) FROM ingest_queue") == 1
    assert count(pg_database, "SELECT count(*) FROM ingest_jobs WHERE failed_at IS NULL") == 1
    with db.connect(pg_database) as conn:
        assert conn.execute("SELECT tenant_id, action, target FROM audit_log ORDER BY id").fetchall() == [
            (other, "ingest.retry", f"queue {bad_other}"), (acme, "ingest.purge", f"queue {bad_acme}")]
