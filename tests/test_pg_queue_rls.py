"""Row-level security on every tenant table, the queues included (migration 10): the application role, connected
directly, sees and writes only the rows of the tenant its transaction acts for in ``ingest_jobs`` and
``embedding_backlog``, and reaches every tenant's queue only through the owner's narrow functions (ids and counts)."""

from __future__ import annotations

import psycopg
import pytest
from postgres_server import TEST_SECRET, event, tenant
from psycopg.types.json import Jsonb

from memcairn.pgstore import backlog, db, migrations, schema
from memcairn.pgstore.items import TeamStore
from memcairn.server import queue

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

# the owner's functions the application role may call, and only it (never PUBLIC)
DEFINER_FUNCTIONS = {"memcairn_claim_ingest_jobs", "memcairn_claim_ingest_job", "memcairn_fail_ingest_job",
                     "memcairn_ingest_lag", "memcairn_backlog_pick", "memcairn_backlog_lag", "memcairn_enter_tenant",
                     "memcairn_enter_job_tenant", "memcairn_enter_backlog_tenant"}
# writes the tenant of a transaction (the enter functions call it); number a tenant's rows (triggers call them)
OWNER_ONLY = {"memcairn_record_entry", "memcairn_number_item", "memcairn_number_change", "memcairn_new_tenant",
              "memcairn_take_number", "memcairn_number_audit",
              "memcairn_tenant_sequences"}


def test_every_table_with_a_tenant_column_has_row_level_security_enabled_forced_and_a_policy(
        pg_database: str) -> None:
    with db.connect(pg_database) as conn:
        rows = conn.execute(
            "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity,"
            " EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid AND p.polname = 'tenant_rows')"
            " FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'tenant_id'"
            " AND NOT a.attisdropped WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r'").fetchall()
    tables = {name: (enabled, forced, policy) for name, enabled, forced, policy in rows}
    assert {"ingest_jobs", "embedding_backlog", "items", "api_keys"} <= set(tables)
    assert {name: state for name, state in tables.items() if state != (True, True, True)} == {}


def test_the_definer_functions_are_the_app_roles_alone(pg_database: str) -> None:
    with db.connect(pg_database) as conn:
        role = db.recorded_role(conn)
        rows = conn.execute("SELECT p.proname, has_function_privilege(%s, p.oid, 'EXECUTE'),"
                            " coalesce(array_to_string(p.proacl, ','), '') FROM pg_proc p"
                            " WHERE p.pronamespace = 'public'::regnamespace AND p.prosecdef", (role,)).fetchall()
    assert {name for name, *_ in rows} == DEFINER_FUNCTIONS | OWNER_ONLY
    for name, app_may, acl in rows:
        assert app_may == (name not in OWNER_ONLY), name
        assert not any(entry.startswith("=") for entry in acl.split(",")), (name, acl)  # no grant to PUBLIC


def test_the_app_role_sees_and_writes_only_its_own_tenants_queue_rows(pg_database: str, team: TeamStore) -> None:
    acme, globex = tenant(pg_database, "acme"), tenant(pg_database, "globex")
    mine = team.add(acme, event("api", "acme's plan")).id
    theirs = team.add(globex, event("api", "globex's plan")).id
    queued_mine = queue.enqueue(team.pool, acme, [event("api", "acme's event")]).ids[0]
    queued_theirs = queue.enqueue(team.pool, globex, [event("api", "globex's event")]).ids[0]
    with db.connect(pg_database) as owner:  # globex's work set aside, so an insert of its job could succeed
        owner.execute("DELETE FROM ingest_jobs WHERE queue_id = %s", (queued_theirs,))
        owner.execute("DELETE FROM embedding_backlog WHERE item_id = %s", (theirs,))
    app = db.app_conninfo(pg_database, TEST_SECRET)
    with db.connect(app) as conn:
        with conn.transaction():  # no tenant: nothing
            assert conn.execute("SELECT count(*) FROM ingest_jobs").fetchone() == (0,)
            assert conn.execute("SELECT count(*) FROM embedding_backlog").fetchone() == (0,)
        with db.tenant_transaction(conn, acme) as cur:
            assert cur.execute("SELECT queue_id, tenant_id FROM ingest_jobs").fetchall() == [(queued_mine, acme)]
            assert cur.execute("SELECT item_id, tenant_id FROM embedding_backlog").fetchall() == [(mine, acme)]
        for insert, row in (("INSERT INTO ingest_jobs (queue_id, tenant_id) VALUES (%s, %s)", queued_theirs),
                            ("INSERT INTO embedding_backlog (item_id, tenant_id) VALUES (%s, %s)", theirs)):
            with pytest.raises(psycopg.errors.InsufficientPrivilege), db.tenant_transaction(conn, acme) as cur:
                cur.execute(insert, (row, globex))
    with db.connect(pg_database) as owner:
        assert owner.execute("SELECT count(*) FROM ingest_jobs WHERE tenant_id = %s", (globex,)).fetchone() == (0,)
        assert owner.execute("SELECT count(*) FROM embedding_backlog WHERE tenant_id = %s",
                             (globex,)).fetchone() == (0,)


def test_a_tenant_cannot_settle_another_tenants_queue_rows(pg_database: str, team: TeamStore) -> None:
    acme, globex = tenant(pg_database, "acme"), tenant(pg_database, "globex")
    theirs = team.add(globex, event("api", "globex's plan")).id
    queued = queue.enqueue(team.pool, globex, [event("api", "globex's event")]).ids[0]
    with db.connect(db.app_conninfo(pg_database, TEST_SECRET)) as conn, db.tenant_transaction(conn, acme) as cur:
        assert cur.execute("DELETE FROM ingest_jobs WHERE queue_id = %s", (queued,)).rowcount == 0
        assert cur.execute("UPDATE ingest_jobs SET failed_at = now() WHERE queue_id = %s", (queued,)).rowcount == 0
        assert cur.execute("DELETE FROM embedding_backlog WHERE item_id = %s", (theirs,)).rowcount == 0
    with team.pool.connection() as conn:  # the owner's functions still see every tenant's work, ids and counts
        assert queue.lag(conn).pending == 1
        assert backlog.pick(conn) == [(theirs, globex)]
        assert [(t, x.pending) for t, x in backlog.lag_by_tenant(conn).items()] == [(globex, 1)]
    assert queue.drain(team) == 1


def test_migration_10_keeps_the_queues_of_a_version_9_database_and_they_drain(
        pg_cluster, embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    name = pg_cluster.create_database(template=None)
    owner = pg_cluster.owner_dsn(name)
    try:
        with monkeypatch.context() as patched, db.connect(owner) as conn:
            patched.setattr(migrations, "MIGRATIONS", schema.MIGRATIONS[:9])
            assert migrations.migrate(conn) == list(range(1, 10))  # as a release of migration 9 left it
            acme = conn.execute("INSERT INTO tenants (name) VALUES ('acme') RETURNING id").fetchone()[0]
            project = conn.execute("INSERT INTO projects (tenant_id, name) VALUES (%s, 'api') RETURNING id",
                                   (acme,)).fetchone()[0]
            item = conn.execute("INSERT INTO items (tenant_id, project_id, title, text, content_hash, created_at_epoch)"
                                " VALUES (%s, %s, 'waiting for its vector', 'body', 'h1', 1) RETURNING id",
                                (acme, project)).fetchone()[0]
            conn.execute("INSERT INTO embedding_backlog (item_id, tenant_id) VALUES (%s, %s)", (item, acme))
            queued = conn.execute("INSERT INTO ingest_queue (tenant_id, payload) VALUES (%s, %s) RETURNING id",
                                  (acme, Jsonb(queue.payload(event("api", "queued before the upgrade"))))).fetchone()[0]
            conn.execute("INSERT INTO ingest_jobs (queue_id, tenant_id) VALUES (%s, %s)", (queued, acme))
        assert db.prepare(owner, TEST_SECRET) == list(range(10, schema.LATEST + 1))
        pool = db.Pool(db.app_conninfo(owner, TEST_SECRET), size=2)
        try:
            with pool.connection() as conn:
                assert (queue.lag(conn).pending, backlog.lag(conn).pending) == (1, 1)
                hidden = "SELECT (SELECT count(*) FROM ingest_jobs), (SELECT count(*) FROM embedding_backlog)"
                assert conn.execute(hidden).fetchone() == (0, 0)  # no tenant acted for: the rows are not the role's
            assert queue.drain(TeamStore(pool, embedder)) == 1
            assert backlog.drain(pool, embedder) == 2  # the item waiting since before, and the one just stored
        finally:
            pool.close()
        with db.connect(owner) as conn:
            assert conn.execute("SELECT count(*) FROM items").fetchone() == (2,)
            assert conn.execute("SELECT count(*) FROM item_vectors").fetchone() == (2,)
    finally:
        pg_cluster.drop_database(name)
