"""The team store on a real PostgreSQL 18 + pgvector: migrations, dedupe, forgotten marks, integrity, row-level
security, the two search legs and API keys."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from postgres_server import TEST_SECRET, search, tenant

from memcairn.core.errors import NotFoundError, SchemaTooNewError, ValidationError
from memcairn.core.models import ItemFilter, NewItem
from memcairn.pgstore import backlog, db, keys
from memcairn.pgstore.adapter import TenantStore
from memcairn.pgstore.items import TeamStore, nearest_sql
from memcairn.pgstore.migrations import migrate
from memcairn.pgstore.schema import LATEST
from memcairn.search.request import SearchRequest
from memcairn.search.team import TenantSearch

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def note(project: str, title: str, text: str = "body") -> NewItem:
    return NewItem(project=project, kind="manual", title=title, text=text)


def test_migrations_are_idempotent_and_serialised(pg_cluster) -> None:
    name = pg_cluster.create_database(template=None)
    dsn = pg_cluster.owner_dsn(name)
    try:
        results: list[list[int]] = []
        errors: list[BaseException] = []

        def run() -> None:
            try:
                with db.connect(dsn, autocommit=True) as conn:
                    results.append(migrate(conn))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=run) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert sorted(results) == [[], [], [], list(range(1, LATEST + 1))]
        assert db.prepare(dsn, TEST_SECRET) == []
        with db.connect(dsn, autocommit=True) as conn:
            assert conn.execute("SELECT count(*) FROM schema_migrations").fetchone() == (LATEST,)
            conn.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, 'from the future')", (LATEST + 1,))
            with pytest.raises(SchemaTooNewError):
                migrate(conn)
    finally:
        pg_cluster.drop_database(name)


def test_dedupe_by_project_and_content(pg_database: str, team: TeamStore) -> None:
    acme = tenant(pg_database, "acme")
    first = team.add(acme, note("api", "Use WAL", "SQLite runs in WAL mode"))
    again = team.add(acme, note("api", "Use WAL", "SQLite runs in WAL mode"))
    elsewhere = team.add(acme, note("web", "Use WAL", "SQLite runs in WAL mode"))
    assert first.created and not again.created and again.id == first.id
    assert elsewhere.created and elsewhere.id != first.id
    assert [p["items"] for p in team.projects(acme)] == [1, 1]


def test_secrets_and_private_parts_never_reach_the_database(pg_database: str, team: TeamStore) -> None:
    acme = tenant(pg_database, "acme")
    saved = team.add(acme, note("api", "deploy", "token AKIAIOSFODNN7EXAMPLE and <private>the PIN is 4711</private>"))
    text = team.get(acme, saved.id)["text"]
    assert "AKIAIOSFODNN7EXAMPLE" not in text and "4711" not in text


def test_forgotten_content_stays_forgotten_unless_saved_again(pg_database: str, team: TeamStore) -> None:
    acme = tenant(pg_database, "acme")
    saved = team.add(acme, note("api", "Old decision"))
    assert team.forget(acme, saved.id)
    assert not team.forget(acme, saved.id)
    with pytest.raises(NotFoundError):
        team.get(acme, saved.id)
    assert team.add(acme, note("api", "Old decision"), revive=False).forgotten
    revived = team.add(acme, note("api", "Old decision"))
    assert revived.created and revived.id != saved.id


def test_composite_keys_refuse_a_session_of_another_project_or_tenant(pg_database: str, team: TeamStore) -> None:
    acme, other = tenant(pg_database, "acme"), tenant(pg_database, "other")
    team.add(acme, NewItem(project="api", kind="manual", title="t", session="s1", platform_source="codex"))
    with db.connect(pg_database, autocommit=True) as conn:
        session_id, project_id = conn.execute("SELECT id, project_id FROM sessions").fetchone()
        web = conn.execute("INSERT INTO projects (tenant_id, name) VALUES (%s, 'web') RETURNING id",
                           (acme,)).fetchone()[0]
        theirs = conn.execute("INSERT INTO projects (tenant_id, name) VALUES (%s, 'x') RETURNING id",
                              (other,)).fetchone()[0]
        insert = ("INSERT INTO items (tenant_id, project_id, session_id, title, content_hash, created_at_epoch)"
                  " VALUES (%s, %s, %s, 'x', %s, 0)")
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            conn.execute(insert, (acme, web, session_id, "h1"))  # the session is api's
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            conn.execute(insert, (acme, theirs, None, "h2"))  # the project is another tenant's
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            conn.execute(insert, (other, project_id, None, "h3"))


def test_row_level_security_blocks_other_tenants_even_without_a_filter(pg_database: str, team: TeamStore) -> None:
    acme, other = tenant(pg_database, "acme"), tenant(pg_database, "other")
    mine = team.add(acme, note("api", "acme's secret plan"))
    team.add(other, note("api", "other's secret plan"))
    with db.connect(db.app_conninfo(pg_database, TEST_SECRET)) as conn:
        assert conn.execute("SELECT current_user").fetchone() == ("memcairn_app_memcairn_template",)  # the template's
        with db.tenant_transaction(conn, acme) as cur:
            assert cur.execute("SELECT id FROM items").fetchall() == [(mine.id,)]
            assert cur.execute("SELECT count(*) FROM projects").fetchone() == (1,)
            assert cur.execute("SELECT item_id FROM changes").fetchall() == [(mine.id,)]
            assert cur.execute("SELECT count(*) FROM items WHERE tenant_id = %s", (other,)).fetchone() == (0,)
            updated = cur.execute("UPDATE items SET title = 'x' WHERE tenant_id = %s", (other,))
            assert updated.rowcount == 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege):  # WITH CHECK: no row written for another
            with db.tenant_transaction(conn, acme) as cur:
                cur.execute("INSERT INTO projects (tenant_id, name) VALUES (%s, 'planted')", (other,))
        with conn.transaction():  # no tenant set: nothing at all
            assert conn.execute("SELECT count(*) FROM items").fetchone() == (0,)
            assert conn.execute("SELECT count(*) FROM api_keys").fetchone() == (0,)
            assert conn.execute("SELECT count(*) FROM changes").fetchone() == (0,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.transaction():
            conn.execute("SELECT count(*) FROM tenants")


def test_search_fuses_keyword_and_semantic_legs_within_the_tenant(pg_database: str, team: TeamStore) -> None:
    acme, other = tenant(pg_database, "acme"), tenant(pg_database, "other")
    retry = team.add(acme, note("api", "Retry uploads with exponential backoff",
                                "The S3 client now retries failed uploads, doubling the wait each time"))
    team.add(acme, note("api", "Release checklist", "Tag, build the wheel, publish to the index"))
    team.add(other, note("api", "Retry uploads with exponential backoff", "the other tenant's copy"))
    backlog.drain(team.pool, team.embedder)
    hits = search(team, acme, "retry backoff", ["api"])
    assert [h["id"] for h in hits][:1] == [retry.id] and set(hits[0]["legs"]) == {"keyword", "semantic"}
    assert all(h["project"] == "api" for h in hits) and len({h["id"] for h in hits}) == len(hits)
    semantic = search(team, acme, "exponentially backing off on upload retry", ["api"], mode="semantic")
    assert [h["id"] for h in semantic] == [retry.id]
    assert search(team, acme, "banana bread recipe", ["api"]) == []  # under the similarity floor, no word shared
    assert search(team, acme, "retry", ["nope"]) == []


def test_the_search_path_never_brings_back_a_forgotten_memory_another_tenants_or_one_outside_the_pin(
        pg_database: str, team: TeamStore) -> None:
    acme, other = tenant(pg_database, "acme"), tenant(pg_database, "other")
    kept = team.add(acme, note("api", "Retry uploads with exponential backoff", "doubling the wait each time")).id
    gone = team.add(acme, note("api", "Retry uploads with linear backoff", "one more second each time")).id
    web = team.add(acme, note("web", "Retry browser uploads with backoff", "fetch retries the upload")).id
    theirs = team.add(other, note("api", "Retry uploads with exponential backoff", "the other tenant's copy")).id
    backlog.drain(team.pool, team.embedder)
    assert team.forget(acme, gone)
    pin = team.project_ids(acme, ["api"])[0]
    query = "retry uploads with backoff"
    for mode in ("auto", "keyword", "semantic"):
        assert {h["id"] for h in search(team, acme, query, mode=mode)} == {kept, web}, mode
        assert {h["id"] for h in search(team, acme, query, ["api", "web"], mode=mode, pin=pin)} == {kept}, mode
        assert search(team, acme, query, ["web"], mode=mode, pin=pin) == [], mode
        assert {h["id"] for h in search(team, other, query, mode=mode)} == {theirs}, mode
    with team.pool.connection() as conn, db.tenant_transaction(conn, acme) as cur:
        pinned = TenantSearch(TenantStore(team, acme, pin=pin, cur=cur))
        with pytest.raises(NotFoundError):
            pinned.timeline(web)
        assert [i.id for i in pinned.timeline(kept, depth_before=5, depth_after=5).items] == [kept]


@pytest.mark.parametrize("copies", [True, False])
def test_a_fused_search_reads_the_candidates_times_and_evidence_once(pg_database: str, pool: db.Pool, embedder,
                                                                    copies: bool) -> None:
    """The search service asks for the times of the semantic leg's hits, of the keyword leg's others, then for
    the evidence of all: one read of the candidates answers the three (one statement when the projects are not
    copied in this process; none when they are)."""
    team = TeamStore(pool, embedder, copies=copies)
    acme = tenant(pg_database)
    ids = [team.add(acme, note("api", f"Retry uploads, attempt {n}", f"backoff step {n}")).id for n in range(8)]
    backlog.drain(team.pool, team.embedder)
    reads = []
    candidates = team.keyword.candidates

    def counted(*args: object, **kwargs: object) -> object:
        reads.append(args[-1])
        return candidates(*args, **kwargs)  # type: ignore[arg-type]

    team.keyword.candidates = counted  # type: ignore[method-assign]

    class Counting:  # the request's cursor, counting what it runs
        def __init__(self, cur: psycopg.Cursor) -> None:
            self.cur, self.statements = cur, []

        def execute(self, sql: str, params: object = None, **options: object) -> psycopg.Cursor:
            self.statements.append(sql)
            return self.cur.execute(sql, params, **options)  # type: ignore[arg-type]

    for _ in range(2):  # the second time the team store's caches (statistics, plan, project ids) are warm
        reads.clear()
        with team.pool.connection() as conn, db.tenant_transaction(conn, acme) as cur:
            counting = Counting(cur)
            store = TenantStore(team, acme, cur=counting)  # type: ignore[arg-type]
            found = TenantSearch(store).search(SearchRequest(query="retry uploads backoff", projects=("api",)))
    assert {h.item.id for h in found.hits} == set(ids) and found.strategy == "hybrid"
    assert all(set(h.legs) == {"keyword", "semantic"} for h in found.hits)
    assert len(reads) == 1 and set(reads[0]) == set(ids)  # every candidate, once
    assert not [s for s in counting.statements if s.startswith("SELECT i.id, i.created_at_epoch")]
    # SQL: the keyword leg, the vectors, the candidates, the page's rows; copies: bring them up to date, the phrase's
    # rows, the page's rows
    assert len(counting.statements) == (3 if copies else 4), counting.statements


def test_keys_lifecycle(pg_database: str, pool: db.Pool) -> None:
    with db.connect(pg_database) as conn:
        made = keys.create_key(conn, TEST_SECRET, "acme", scopes=["memories:read"], project="api")
        assert made["key"].startswith(f"mck_{made['id']}_")
        with conn.transaction():
            stored = conn.execute("SELECT digest FROM api_keys WHERE id = %s", (made["id"],)).fetchone()[0]
        assert made["key"] not in stored and stored == keys.digest(TEST_SECRET, made["key"])
    with pool.connection() as conn:
        info = keys.authenticate(conn, TEST_SECRET, made["key"])
        assert info.scopes == ("memories:read",) and info.project_id is not None
        assert info.allows("memories:read") and not info.allows("memories:write")
        for bad in (None, "", "mck_nothex_x", made["key"][:-1] + ("A" if made["key"][-1] != "A" else "B")):
            with pytest.raises(keys.Unauthorized):
                keys.authenticate(conn, TEST_SECRET, bad)
        with pytest.raises(keys.Unauthorized):  # the right key under another server's secret
            keys.authenticate(conn, bytes(32), made["key"])
    db.forget_keys()  # the owner acts for the tenant without a key (the command line)
    with db.connect(pg_database) as conn:
        rotated = keys.rotate_key(conn, TEST_SECRET, made["id"])
        listed = {k["id"]: k for k in keys.list_keys(conn, "acme")}
        assert listed[made["id"]]["status"] == "revoked" and listed[made["id"]]["replaced_by"] == rotated["id"]
        assert listed[made["id"]]["last_used_at"] is not None and listed[rotated["id"]]["project"] == "api"
        with pytest.raises(ValidationError):
            keys.rotate_key(conn, TEST_SECRET, made["id"])
    with pool.connection() as conn:
        with pytest.raises(keys.Unauthorized, match="revoked"):
            keys.authenticate(conn, TEST_SECRET, made["key"])
        assert keys.authenticate(conn, TEST_SECRET, rotated["key"]).id == rotated["id"]
    db.forget_keys()
    with db.connect(pg_database) as conn:
        keys.revoke_key(conn, rotated["id"])
        later = keys.create_key(conn, TEST_SECRET, "acme", expires_at=keys.parse_expiry("1h"))
        with conn.transaction():
            conn.execute("UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE id = %s", (later["id"],))
        with pytest.raises(NotFoundError):
            keys.revoke_key(conn, "000000000000")
        with conn.transaction():
            actions = [r[0] for r in conn.execute("SELECT action FROM audit_log ORDER BY id")]
    assert actions == ["keys.create", "keys.rotate", "keys.revoke", "keys.create"]
    with pool.connection() as conn:
        with pytest.raises(keys.Unauthorized, match="revoked"):
            keys.authenticate(conn, TEST_SECRET, rotated["key"])
        with pytest.raises(keys.Unauthorized, match="expired"):
            keys.authenticate(conn, TEST_SECRET, later["key"])


def test_scopes_and_expiry_are_checked_with_actionable_messages() -> None:
    assert keys.parse_scopes("memories:read, admin") == ("memories:read", "admin")
    with pytest.raises(ValidationError, match="memories:read"):
        keys.parse_scopes("memories:delete")
    now = datetime(2027, 1, 1, tzinfo=UTC)
    assert keys.parse_expiry("30d", now=now) == now + timedelta(days=30)
    assert keys.parse_expiry("2027-02-01", now=now) == datetime(2027, 2, 1, tzinfo=UTC)
    for bad in ("soon", "2026-01-01"):
        with pytest.raises(ValidationError):
            keys.parse_expiry(bad, now=now)


def _random_vectors(conn: psycopg.Connection, tenant_id: int, project: str, count: int, start: int) -> int:
    """``count`` items with random vectors in ``project`` (made here), written in SQL: no model needed."""
    project_id = conn.execute("INSERT INTO projects (tenant_id, name) VALUES (%s, %s) RETURNING id",
                              (tenant_id, project)).fetchone()[0]
    conn.execute(
        "WITH new AS (INSERT INTO items (tenant_id, project_id, title, content_hash, created_at_epoch)"
        "  SELECT %s, %s, 'row ' || g, md5(g::text), g FROM generate_series(%s::int, %s::int) AS g"
        "  RETURNING id, tenant_id, project_id)"
        " INSERT INTO item_vectors (item_id, chunk, tenant_id, project_id, embedding)"
        " SELECT id, 0, tenant_id, project_id,"
        "  (SELECT array_agg(random() - 0.5)::vector FROM generate_series(1, 384) WHERE id > 0) FROM new",
        (tenant_id, project_id, start, start + count - 1))
    return int(project_id)


def test_the_vector_plan_scans_small_projects_and_walks_the_index_for_large_ones(pg_database: str,
                                                                                pool: db.Pool) -> None:
    acme = tenant(pg_database, "acme")
    with db.connect(pg_database) as conn:
        big = _random_vectors(conn, acme, "big", 2000, 1)
        tiny = _random_vectors(conn, acme, "tiny", 20, 10_000)  # 1% of the rows
        conn.execute("ANALYZE item_vectors")
        probe = conn.execute("SELECT item_id, embedding::text FROM item_vectors WHERE project_id = %s"
                             " ORDER BY item_id LIMIT 1", (tiny,)).fetchone()
    probe_id, literal = probe[0], [float(v) for v in probe[1].strip("[]").split(",")]
    team = TeamStore(pool, None, exact_below=100)
    with pool.connection() as conn, db.tenant_transaction(conn, acme) as cur:
        def plan(exact: bool, projects: list[int]) -> str:
            rows = cur.execute("EXPLAIN " + nearest_sql(exact=exact),
                               {"q": probe[1], "t": acme, "p": projects, "n": 10}).fetchall()
            return "\n".join(r[0] for r in rows)

        assert "item_vectors_embedding" in plan(False, [big])
        assert "item_vectors_embedding" not in plan(True, [big, tiny])
        assert team.vector_count(cur, acme, [tiny]) == 20 and team.vector_count(cur, acme, [big]) == 100
        assert team.nearest(cur, acme, [tiny], literal, 5)[0][0] == probe_id  # through the index
    exact = TeamStore(pool, None, exact_below=5000)
    with pool.connection() as conn, db.tenant_transaction(conn, acme) as cur:
        assert exact.nearest(cur, acme, [tiny], literal, 5)[0] == (probe_id, pytest.approx(1.0))


def test_a_request_checks_its_key_and_reads_as_its_tenant_in_one_transaction(pg_database: str, pool: db.Pool,
                                                                          team: TeamStore) -> None:
    """``authenticate_in`` leaves the transaction acting for the key's tenant, whatever tenant the transaction
    named in ``app.tenant_id`` before, and a bad key sees nothing."""
    with db.connect(pg_database) as conn:
        acme_key = keys.create_key(conn, TEST_SECRET, "acme")
        other_key = keys.create_key(conn, TEST_SECRET, "other")
    with pool.connection() as conn:
        other = keys.authenticate(conn, TEST_SECRET, other_key["key"]).tenant_id
        team.add(other, note("api", "other's memory"))
        acme = keys.authenticate(conn, TEST_SECRET, acme_key["key"]).tenant_id
    team.add(acme, note("api", "acme's memory"))
    for setting in ("", str(other)):
        with pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            cur.execute("SELECT set_config('app.tenant_id', %s, true)", (setting,))
            info = keys.authenticate_in(cur, TEST_SECRET, acme_key["key"])
            titles = [r[0] for r in cur.execute("SELECT title FROM items")]
        assert info.tenant_id == acme and titles == ["acme's memory"]
    with pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
        with pytest.raises(keys.Unauthorized):
            keys.authenticate_in(cur, TEST_SECRET, acme_key["key"][:-1] + ("A" if acme_key["key"][-1] != "A" else "B"))


def test_a_key_check_never_waits_for_another_request_recording_the_same_key_s_use(pg_database: str,
                                                                                    pool: db.Pool) -> None:
    """A request's key check records the key's last use in its transaction, which goes on with the reads: a
    concurrent request of the same key must not wait for that row (under load, both also took a lock of the
    server process, and each waited for the other)."""
    with db.connect(pg_database) as conn:
        made = keys.create_key(conn, TEST_SECRET, "acme")
    with pool.connection() as first, first.transaction(), first.cursor() as one:
        keys.authenticate_in(one, TEST_SECRET, made["key"])  # never used: records it, holding the key's row
        with pool.connection() as second, second.transaction(), second.cursor() as two:
            two.execute("SET LOCAL lock_timeout = '10s'")  # a wait fails this test instead of hanging it
            assert keys.authenticate_in(two, TEST_SECRET, made["key"]).id == made["id"]
            assert two.execute("SELECT 1").fetchone() == (1,)
    with db.connect(pg_database) as conn:
        assert conn.execute("SELECT last_used_at FROM api_keys").fetchone()[0] is not None


def test_sessions_and_the_timeline_around_a_memory(pg_database: str, team: TeamStore) -> None:
    acme, other = tenant(pg_database, "acme"), tenant(pg_database, "other")
    assert team.start_session(acme, "api", "s1", "codex") == team.start_session(acme, "api", "s1", "codex")
    ids = [team.add(acme, NewItem(project="api", kind="manual", title=f"step {n}", created_at_epoch=1000 + n)).id
           for n in range(6)]
    team.add(acme, NewItem(project="web", kind="manual", title="elsewhere", created_at_epoch=1003))
    with team.pool.connection() as conn, db.tenant_transaction(conn, acme) as cur:  # as /v1/timeline reads it
        around = TenantSearch(TenantStore(team, acme, cur=cur)).timeline(ids[3], depth_before=2, depth_after=1,
                                                                          projects=["api"])
    assert [i.id for i in around.items] == ids[1:5] and around.anchor_id == ids[3]
    with pytest.raises(NotFoundError):
        TenantSearch(TenantStore(team, other)).timeline(ids[3], depth_before=2, depth_after=2)
    assert team.end_session(other, "s1", "codex") == 0  # another tenant's session of the same name is not touched
    assert team.end_session(acme, "s1", "codex") == 1
    with db.connect(pg_database) as conn:
        assert conn.execute("SELECT status FROM sessions").fetchall() == [("completed",)]


def test_a_repeated_query_is_embedded_once_per_tenant_within_the_cache(pool: db.Pool, embedder) -> None:
    asked: list[str] = []

    class Counting:
        def embed_query(self, text: str) -> list[float]:
            asked.append(text)
            return embedder.embed_query(text)

    team = TeamStore(pool, Counting(), query_cache=2)  # type: ignore[arg-type]
    first = team.query_vector(1, "retry uploads")
    assert team.query_vector(1, "retry uploads") == first and asked == ["retry uploads"]
    team.query_vector(2, "retry uploads")  # another tenant's search is its own
    team.query_vector(1, "cache keys")  # the cache holds two: tenant 1's first query is the oldest and goes
    team.query_vector(1, "retry uploads")
    assert asked == ["retry uploads", "retry uploads", "cache keys", "retry uploads"]


def test_forgetting_by_content_reaches_a_stored_item_and_a_queued_one(pg_database: str, team: TeamStore) -> None:
    from memcairn.pgstore.items import prepare
    from memcairn.server import queue as ingest

    acme, other = tenant(pg_database, "acme"), tenant(pg_database, "other")
    stored = NewItem(project="api", kind="observation", title="Retry uploads", text="with backoff", session="s1")
    queued = NewItem(project="api", kind="observation", title="Old turn", text="first version", session="s1")
    saved = team.add(acme, stored)
    assert team.forget_content(other, prepare(stored)) == (None, None)  # another tenant's: nothing of acme's
    assert team.get(acme, saved.id)["title"] == "Retry uploads"
    ingest.enqueue(team.pool, acme, [queued])
    assert team.forget_content(acme, prepare(stored)) == (saved.id, None)
    assert team.forget_content(acme, prepare(queued)) == (None, None)  # not stored yet: marked, so the queued copy
    # is refused
    ingest.drain(team)
    assert TenantStore(team, acme).list_items(ItemFilter(projects=["api"])) == []
    pinned = team.project_ids(acme, ["api"])[0]
    with pytest.raises(NotFoundError):
        team.forget_content(acme, prepare(NewItem(project="web", kind="manual", title="x")), pin=pinned)
    # an edited memory: its old version goes, its new one comes, in one transaction, even when the new version's
    # content is the old one's hash (a summary's text is not part of it) and so was just marked forgotten
    old = NewItem(project="api", kind="summary", title="Turn 3", text="did A", session="s1")
    new = replace(old, text="did A, then B")
    assert prepare(old).digest == prepare(new).digest
    first = team.add(acme, old, revive=False).id
    gone, made = team.forget_content(acme, prepare(old), replacement=prepare(new))
    assert gone == first and made is not None and team.get(acme, made)["text"] == "did A, then B"
