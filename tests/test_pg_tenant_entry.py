"""The tenant of a transaction is entered, never chosen (migration 11): the application role, connected directly,
reaches a tenant's rows only after the owner's ``memcairn_enter_tenant`` checked a valid key of that tenant by
its digest, in that transaction alone; ``app.tenant_id`` names nothing any more."""

from __future__ import annotations

import time

import psycopg
import pytest
from postgres_server import TEST_SECRET, event, tenant

from memcairn.pgstore import db, keys
from memcairn.pgstore.items import TeamStore

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _key(owner_dsn: str, tenant_name: str) -> tuple[str, str]:
    """A new key of the tenant (made as the command line makes one): its id and its digest."""
    with db.connect(owner_dsn) as conn:
        made = keys.create_key(conn, TEST_SECRET, tenant_name)
    return made["id"], keys.digest(TEST_SECRET, made["key"])


def _titles(cur: psycopg.Cursor) -> list[str]:
    return [r[0] for r in cur.execute("SELECT title FROM items ORDER BY title")]


@pytest.fixture
def two_tenants(pg_database: str, team: TeamStore) -> tuple[int, int]:
    acme, globex = tenant(pg_database, "acme"), tenant(pg_database, "globex")
    team.add(acme, event("api", "acme's plan"))
    team.add(globex, event("api", "globex's plan"))
    return acme, globex


def test_no_setting_the_app_role_may_set_opens_another_tenant(pg_database: str, two_tenants: tuple[int, int]) -> None:
    acme, globex = two_tenants
    _, acme_digest = _key(pg_database, "acme")
    with db.connect(db.app_conninfo(pg_database, TEST_SECRET)) as conn:
        with conn.transaction(), conn.cursor() as cur:
            cur.execute("SELECT set_config('app.tenant_id', %s, true), set_config('app.key_id', '', true)",
                        (str(globex),))
            assert _titles(cur) == []
        with conn.transaction(), conn.cursor() as cur:  # entered as acme, then naming globex: still acme
            assert cur.execute("SELECT tenant_id, entered FROM memcairn_enter_tenant(%s)",
                               (acme_digest,)).fetchone() == (acme, True)
            cur.execute("SELECT set_config('app.tenant_id', %s, true)", (str(globex),))
            assert _titles(cur) == ["acme's plan"]
        for attempt in ("SELECT memcairn_record_entry(%s, NULL, NULL)",
                        "INSERT INTO tenant_entries (pid, xid, tenant)"
                        " VALUES (pg_backend_pid(), pg_current_xact_id(), %s)"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.transaction():
                conn.execute(attempt, (globex,))


def test_an_earlier_transactions_entry_grants_nothing(pg_database: str, two_tenants: tuple[int, int]) -> None:
    acme, _ = two_tenants
    _, acme_digest = _key(pg_database, "acme")
    with db.connect(db.app_conninfo(pg_database, TEST_SECRET)) as conn:
        with conn.transaction(), conn.cursor() as cur:
            cur.execute("SELECT * FROM memcairn_enter_tenant(%s)", (acme_digest,))
            assert _titles(cur) == ["acme's plan"]
            pid = cur.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
        with conn.transaction(), conn.cursor() as cur:
            cur.execute("SELECT pg_current_xact_id()")  # a transaction id of its own, as a write would have
            assert cur.execute("SELECT count(*) FROM tenant_entries").fetchone() == (1,)  # the committed row
            assert _titles(cur) == []
        assert _titles(conn.cursor()) == []  # and in autocommit
    with db.connect(pg_database) as owner:
        assert owner.execute("SELECT tenant FROM tenant_entries WHERE pid = %s", (pid,)).fetchall() == [(acme,)]


def test_a_revoked_or_expired_key_enters_nothing(pg_database: str, two_tenants: tuple[int, int]) -> None:
    acme, _ = two_tenants
    revoked_id, revoked = _key(pg_database, "acme")
    expired_id, expired = _key(pg_database, "acme")
    with db.connect(pg_database) as owner:
        keys.revoke_key(owner, revoked_id)
        with owner.transaction():
            owner.execute("UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE id = %s", (expired_id,))
    with db.connect(db.app_conninfo(pg_database, TEST_SECRET)) as conn:
        for digest in (revoked, expired, "0" * 64):
            with conn.transaction(), conn.cursor() as cur:
                found = cur.execute("SELECT tenant_id, entered FROM memcairn_enter_tenant(%s)", (digest,)).fetchall()
                assert found in ([(acme, False)], [])
                assert _titles(cur) == []
    pool = db.Pool(db.app_conninfo(pg_database, TEST_SECRET), size=1)
    try:
        for digest in (revoked, expired):  # a request still holding such a key is refused, not served
            with db.holding_key(acme, digest), pytest.raises(keys.Unauthorized):
                db.read_as(pool, acme, _titles)
    finally:
        pool.close()


def test_the_app_role_reads_no_key_digest(pg_database: str, two_tenants: tuple[int, int]) -> None:
    acme, _ = two_tenants
    _, acme_digest = _key(pg_database, "acme")
    with db.connect(db.app_conninfo(pg_database, TEST_SECRET)) as conn, conn.transaction(), conn.cursor() as cur:
        cur.execute("SELECT * FROM memcairn_enter_tenant(%s)", (acme_digest,))
        assert cur.execute("SELECT count(*) FROM api_keys").fetchone()[0] >= 1  # type: ignore[index]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            cur.execute("SELECT digest FROM api_keys")


def test_the_consumer_enters_only_the_tenant_of_a_waiting_job(pg_database: str, two_tenants: tuple[int, int],
                                                              team: TeamStore) -> None:
    from memcairn.server import queue

    acme, globex = two_tenants
    job = queue.enqueue(team.pool, acme, [event("api", "acme's event")]).ids[0]
    with db.connect(db.app_conninfo(pg_database, TEST_SECRET)) as conn:
        with conn.transaction(), conn.cursor() as cur:
            assert cur.execute("SELECT memcairn_enter_job_tenant(%s)", (job,)).fetchone() == (acme,)
            assert _titles(cur) == ["acme's plan"]
        with conn.transaction():
            conn.execute("SELECT memcairn_fail_ingest_job(%s, 'set aside')", (job,))
        with conn.transaction(), conn.cursor() as cur:  # a failed job is no one's work: it enters nothing
            assert cur.execute("SELECT memcairn_enter_job_tenant(%s)", (job,)).fetchone() == (None,)
            assert _titles(cur) == []
            assert cur.execute("SELECT memcairn_enter_backlog_tenant(%s, ARRAY[0]::bigint[])",
                               (globex,)).fetchone() == (None,)
            assert _titles(cur) == []


def test_every_setup_forgets_the_entries_of_backends_that_are_gone(pg_database: str,
                                                                    two_tenants: tuple[int, int]) -> None:
    _, acme_digest = _key(pg_database, "acme")
    app = db.app_conninfo(pg_database, TEST_SECRET)

    def enter(conn: psycopg.Connection) -> int:
        with conn.transaction(), conn.cursor() as cur:
            cur.execute("SELECT * FROM memcairn_enter_tenant(%s)", (acme_digest,))
            return int(cur.execute("SELECT pg_backend_pid()").fetchone()[0])  # type: ignore[index]

    with db.connect(app) as gone:
        gone_pid = enter(gone)
    with db.connect(app) as alive, db.connect(pg_database, autocommit=True) as owner:
        alive_pid = enter(alive)
        for _ in range(100):  # a closed connection's backend ends soon after
            if not owner.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (gone_pid,)).fetchone():
                break
            time.sleep(0.05)
        entries = "SELECT pid FROM tenant_entries WHERE pid = ANY(%s) ORDER BY pid"
        assert [r[0] for r in owner.execute(entries, ([gone_pid, alive_pid],))] == sorted([gone_pid, alive_pid])
        db.prepare(pg_database, TEST_SECRET)
        assert [r[0] for r in owner.execute(entries, ([gone_pid, alive_pid],))] == [alive_pid]
