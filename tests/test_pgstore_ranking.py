"""Ranking on the team store, on a real PostgreSQL 18 + pgvector: words of identifiers and paths are found as the
local store finds them, the keyword leg ranks with BM25 from the project's statistics (idf, length), plans
common words as the local store does, and a long memory is embedded in chunks, found by a passage past its
first chunk."""

from __future__ import annotations

import pytest
from postgres_server import search, tenant

from memcairn.core.models import NewItem
from memcairn.pgstore import backlog, db
from memcairn.pgstore.items import TeamStore
from memcairn.pgstore.keyword import KeywordLeg, plan_tsquery
from memcairn.store import fts

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def keyword_ids(team: TeamStore, tenant_id: int, query: str, project: str = "api") -> list[int]:
    return [h["id"] for h in search(team, tenant_id, query, [project], mode="keyword")]


def test_an_underscored_identifier_is_found_wherever_it_is_written(pg_database: str, team: TeamStore) -> None:
    acme = tenant(pg_database)
    texts = ["Wrote src/launch_project_review.py for the release", "self.launch_project_review() runs it",
             "The tool launch_project_review, called at noon", "retry_module_3 waits on the queue",
             "see /work/teamproj/retry_module_3.py", "Unrelated notes about lunch"]
    ids = [team.add(acme, NewItem(project="api", kind="manual", title=f"note {n}", text=t)).id
           for n, t in enumerate(texts)]
    assert set(keyword_ids(team, acme, "launch_project_review")) == set(ids[:3])
    assert set(keyword_ids(team, acme, "retry_module_3")) == {ids[3], ids[4]}
    assert keyword_ids(team, acme, "src/launch_project_review.py")[0] == ids[0]  # the whole path: its row first


def test_keyword_ranking_is_bm25_over_the_projects_statistics(pg_database: str, team: TeamStore) -> None:
    acme = tenant(pg_database)
    # "deploy" is common in the project; "hamster" in one row. ts_rank (no idf) puts the row repeating the
    # common word first; BM25 puts the row holding the rare word first.
    filler = [team.add(acme, NewItem(project="api", kind="manual", title=f"deploy log {n}",
                                     text=f"deploy step {n} finished")).id for n in range(8)]
    for n in range(22):
        team.add(acme, NewItem(project="api", kind="manual", title=f"build log {n}", text=f"build step {n} done"))
    loud = team.add(acme, NewItem(project="api", kind="manual", title="deploy deploy",
                                  text="deploy deploy deploy deploy again")).id
    rare = team.add(acme, NewItem(project="api", kind="manual", title="Pets",
                                  text="the office hamster got a new wheel; nothing to deploy")).id
    team.add(acme, NewItem(project="web", kind="manual", title="hamster", text="hamster hamster elsewhere"))
    ranked = keyword_ids(team, acme, "deploy hamster")
    assert ranked[0] == rare and ranked[1] == loud and set(ranked) == {rare, loud, *filler}
    with team.pool.connection() as conn, db.tenant_transaction(conn, acme) as cur:
        api = team.project_ids(acme, ["api"])
        stats = team.keyword.stats(cur, acme, api, ["deploy", "hamster"])
        assert (stats.rows, stats.holding) == (32, {"deploy": 10, "hamster": 1})  # per project: "web" not counted
        terms = team.keyword.query_terms(cur, acme, api, "deploy hamster", [rare, loud])
        assert terms.holding == {"deploy": {rare, loud}, "hamster": {rare}} and terms.total == 32


def test_common_words_are_planned_as_the_local_store_plans_them(pg_database: str, team: TeamStore) -> None:
    acme = tenant(pg_database)
    for n in range(12):
        team.add(acme, NewItem(project="api", kind="manual", title=f"cache note {n}", text="cache server config"))
    lonely = team.add(acme, NewItem(project="api", kind="manual", title="server", text="a server alone")).id
    both = team.add(acme, NewItem(project="api", kind="manual", title="zebra", text="zebra cache server")).id
    leg = KeywordLeg(budget=10)  # 14 rows: over the budget, so the common words are required together
    with team.pool.connection() as conn, db.tenant_transaction(conn, acme) as cur:
        api = team.project_ids(acme, ["api"])
        stats = leg.stats(cur, acme, api, ["zebra", "cache", "server"])
        plan = fts.plan_terms("zebra cache server", stats.rows, lambda ws: [stats.holding[w] for w in ws], 10)
        assert plan == fts.MatchPlan(("zebra",), ("cache", "server"))
        assert plan_tsquery(plan) == "'zebra' | ('cache' & 'server')"
        ranked = [i for i, _ in leg.rank(cur, acme, api, "zebra cache server", 50)]
    assert ranked[0] == both and lonely not in ranked and len(ranked) == 13  # "server" alone no longer matches
    assert lonely in keyword_ids(team, acme, "zebra cache server")  # the store's own leg: under its budget


def test_a_long_memory_is_embedded_in_chunks_and_found_by_a_later_passage(pg_database: str,
                                                                         team: TeamStore) -> None:
    acme = tenant(pg_database)
    words = "The quarterly planning meeting covered hiring budgets and office moves in detail. " * 20
    passage = "The database migration failed because the disk on the replica filled up overnight."
    long = team.add(acme, NewItem(project="api", kind="manual", title="Meeting notes", text=words + passage)).id
    other = team.add(acme, NewItem(project="api", kind="manual", title="Lunch",
                                   text="We ordered pizza for the team on Friday.")).id
    backlog.drain(team.pool, team.embedder)
    with db.connect(pg_database, autocommit=True) as conn:
        chunks = dict(conn.execute("SELECT item_id, count(*) FROM item_vectors GROUP BY item_id").fetchall())
    assert chunks == {long: len(backlog.documents("Meeting notes", words + passage)), other: 1} and chunks[long] > 1
    hits = search(team, acme, "why did the replica disk fill up during the migration", ["api"], mode="semantic")
    assert hits and hits[0]["id"] == long
    assert team.forget(acme, long)
    with db.connect(pg_database, autocommit=True) as conn:  # its vectors go with it
        assert conn.execute("SELECT count(*) FROM item_vectors WHERE item_id = %s", (long,)).fetchone()[0] == 0


def test_migration_6_keeps_the_vectors_and_queues_long_items_for_their_other_chunks(pg_cluster, embedder) -> None:
    from postgres_server import TEST_SECRET, hold_new_key
    from psycopg.conninfo import make_conninfo

    from memcairn.pgstore.migrations import migrate
    from memcairn.pgstore.schema import MIGRATIONS

    name = pg_cluster.create_database(template=None)
    dsn = pg_cluster.owner_dsn(name)
    try:
        with db.connect(make_conninfo(pg_cluster.dsn, dbname=name), autocommit=True) as conn:  # a server at 5
            conn.execute("CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL,"
                         " applied_at timestamptz NOT NULL DEFAULT now())")
            for version, title, sql in MIGRATIONS[:5]:
                conn.execute(sql)
                conn.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (version, title))
            acme = conn.execute("INSERT INTO tenants (name) VALUES ('acme') RETURNING id").fetchone()[0]
            api = conn.execute("INSERT INTO projects (tenant_id, name) VALUES (%s, 'api') RETURNING id",
                               (acme,)).fetchone()[0]
            vector = "[" + ",".join(["0.05"] * 384) + "]"
            long_text = "The disk on the replica filled up overnight. " * 40
            ids = [conn.execute(
                "INSERT INTO items (tenant_id, project_id, title, text, content_hash, created_at_epoch, embedding)"
                " VALUES (%s, %s, %s, %s, %s, 1, %s::vector) RETURNING id",
                (acme, api, title, text, title, vector)).fetchone()[0]
                for title, text in (("short", "calls launch_project_review at noon"), ("long", long_text))]
            assert migrate(conn) == [version for version, *_ in MIGRATIONS[5:]]
            vectors = conn.execute("SELECT item_id, chunk FROM item_vectors ORDER BY item_id").fetchall()
            assert vectors == [(ids[0], 0), (ids[1], 0)]  # the one vector each kept, as chunk 0
            assert [r[0] for r in conn.execute("SELECT item_id FROM embedding_backlog")] == [ids[1]]
            words = conn.execute("SELECT doc_tokens FROM items WHERE id = %s", (ids[0],)).fetchone()[0]
            assert words == 1 + 6  # the title's and the text's (the identifier counts 3)
        db.prepare(dsn, TEST_SECRET)
        with db.connect(dsn, autocommit=True) as conn:  # the application role enters a tenant with one of its keys
            hold_new_key(conn, acme)
        pool = db.Pool(db.app_conninfo(dsn, TEST_SECRET), size=2)
        try:
            team = TeamStore(pool, embedder)
            assert keyword_ids(team, acme, "launch_project_review") == [ids[0]]  # old rows split anew
            assert backlog.drain(pool, embedder) == 1
            with db.connect(dsn, autocommit=True) as conn:
                chunks = conn.execute("SELECT count(*) FROM item_vectors WHERE item_id = %s", (ids[1],)).fetchone()[0]
            assert chunks == len(backlog.documents("long", long_text)) > 1
        finally:
            pool.close()
    finally:
        pg_cluster.drop_database(name)


def test_a_small_project_is_matched_row_by_row_and_a_large_one_through_the_gin_index(pg_database: str,
                                                                                   team: TeamStore) -> None:
    """A word's GIN posting list holds every project's rows: a project under ``scan_below`` rows is read through
    a btree and matched row by row (even when a sequential scan is ruled out); the same hits either way."""
    acme = tenant(pg_database)
    with db.connect(pg_database) as conn:  # 400 rows, 4 of them about the cache
        conn.execute("INSERT INTO projects (tenant_id, name) VALUES (%s, 'api')", (acme,))
        conn.execute("INSERT INTO items (tenant_id, project_id, kind, title, text, content_hash, created_at_epoch)"
                     " SELECT %s, p.id, 'manual', 'note ' || n, CASE WHEN n %% 100 = 0 THEN 'cache eviction'"
                     " ELSE 'router table ' || n END, 'h' || n, n FROM projects p, generate_series(1, 400) AS n",
                     (acme,))
        conn.execute("ANALYZE items")

    class Explaining:  # the rank statement's plan, as it runs
        def __init__(self, cur) -> None:
            self.cur, self.plans = cur, []

        def execute(self, query, params=None):
            if str(query).startswith("WITH q AS"):
                self.plans.append("\n".join(r[0] for r in self.cur.execute("EXPLAIN " + str(query), params)))
            return self.cur.execute(query, params)

    plans: dict[int, str] = {}
    hits: dict[int, list[tuple[int, float]]] = {}
    for below in (1_000, 10):
        with team.pool.connection() as conn, db.tenant_transaction(conn, acme) as cur:
            cur.execute("SET LOCAL enable_seqscan = off")
            explaining = Explaining(cur)
            hits[below] = KeywordLeg(scan_below=below).rank(explaining, acme, team.project_ids(acme, ["api"]),
                                                            "cache eviction", 50)
            plans[below] = explaining.plans[0]
    # under the threshold the match is an expression no index answers; over it, the GIN index may answer it
    assert "COALESCE((i.fts @@ q_" in plans[1_000] and "items_fts" not in plans[1_000]
    assert "COALESCE((i.fts @@ q_" not in plans[10] and "(i.fts @@ q_" in plans[10]
    assert hits[1_000] == hits[10] and len(hits[10]) == 4
