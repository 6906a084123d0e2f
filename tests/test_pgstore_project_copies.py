"""The team store's keyword postings kept in memory, on a real PostgreSQL: they rank as the SQL leg ranks (the same
scores where SQL re-scores every match, every match where it re-scores only the best by ``ts_rank``), answer the
relevance floor's evidence, and stay current with writes of other connections, including a write that commits
after a later one (sequence numbers are not handed out in commit order)."""

from __future__ import annotations

import contextvars
import threading

import pytest
from postgres_server import tenant

from memcairn.core.models import NewItem
from memcairn.pgstore import backlog, db
from memcairn.pgstore.backlog import vector_literal
from memcairn.pgstore.items import TeamStore, prepare
from memcairn.pgstore.keyword import KeywordLeg
from memcairn.pgstore.project_copies import ProjectCopies

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

QUERIES = ["cache eviction", "deploy hamster", "retry queue timeout", "the cache", "hamster", "wheel office deploy",
           "eviction policy for the cache", "nothing matches this zzz"]


def note(title: str, text: str, project: str = "api") -> NewItem:
    return NewItem(project=project, kind="manual", title=title, text=text)


def corpus(team: TeamStore, acme: int) -> list[int]:
    texts = [("cache eviction", "the LRU cache evicts the oldest entry"), ("deploy log", "deploy step finished"),
             ("Pets", "the office hamster got a new wheel; nothing to deploy"),
             ("retry", "the queue retries on timeout"),
             ("cache cache", "cache cache cache warm"), ("eviction policy", "policy: evict by size, then by age"),
             ("deploy deploy", "deploy deploy deploy again"), ("timeout", "raise the queue timeout to 30 s")]
    ids = [team.add(acme, note(t, x)).id for t, x in texts]
    ids += [team.add(acme, note(f"build log {n}", f"build step {n} done, cache warm")).id for n in range(12)]
    team.add(acme, note("hamster", "hamster cache eviction elsewhere", project="web"))
    return ids


def ranked(team: TeamStore, leg: KeywordLeg, acme: int, query: str, project: str = "api") -> list[tuple[int, float]]:
    projects = team.project_ids(acme, [project])  # before this request's connection: the pool is small
    with team.pool.connection() as conn, db.tenant_transaction(conn, acme) as cur:
        return leg.rank(cur, acme, projects, query, 50)


@pytest.mark.parametrize("numpy_above", [0, 1_000_000], ids=["arrays", "rows"])
def test_the_copies_rank_as_the_sql_leg_where_it_rescores_every_match(pg_database: str, team: TeamStore,
                                                                      numpy_above: int) -> None:
    acme = tenant(pg_database)
    corpus(team, acme)
    sql, memo = KeywordLeg(), KeywordLeg(copies=ProjectCopies(), numpy_above=numpy_above)
    for query in QUERIES:
        expected, got = ranked(team, sql, acme, query), ranked(team, memo, acme, query)
        assert [i for i, _ in got] == [i for i, _ in expected], query
        assert [s for _, s in got] == pytest.approx([s for _, s in expected], rel=1e-9), query
    # the relevance floor's evidence: the same creation times, rows and holders, none of it read again in SQL
    with team.pool.connection() as conn, db.tenant_transaction(conn, acme) as cur:
        api = team.project_ids(acme, ["api"])
        ids = [i for i, _ in sql.rank(cur, acme, api, "cache eviction", 50)] + [999_999]
        assert memo.candidates(cur, acme, api, "cache eviction", ids) == sql.candidates(cur, acme, api,
                                                                                        "cache eviction", ids)


def test_the_copies_rank_every_match_where_sql_rescores_only_the_best_by_ts_rank(pg_database: str,
                                                                                 team: TeamStore) -> None:
    """``ts_rank`` has no idf: rows repeating a common word come first, and the one row holding the rare word
    falls outside the few SQL re-scores. BM25 over every match puts that row first."""
    acme = tenant(pg_database)
    loud = [team.add(acme, note(f"deploy {n}", "deploy deploy deploy " * 3)).id for n in range(6)]
    rare = team.add(acme, note("Pets", "the office hamster; nothing to deploy")).id
    for n in range(20):
        team.add(acme, note(f"build {n}", f"build step {n}"))
    few = ranked(team, KeywordLeg(rescore=3), acme, "deploy hamster")
    every = ranked(team, KeywordLeg(rescore=3, copies=ProjectCopies()), acme, "deploy hamster")
    assert rare not in [i for i, _ in few] and set(i for i, _ in few) <= set(loud)
    assert every[0][0] == rare and {i for i, _ in every} == {rare, *loud}


@pytest.mark.parametrize("numpy_above", [0, 1_000_000], ids=["arrays", "rows"])
def test_the_copies_follow_writes_and_forgets_of_other_connections(pg_database: str, team: TeamStore,
                                                                   numpy_above: int) -> None:
    acme = tenant(pg_database)
    ids = corpus(team, acme)
    leg = KeywordLeg(copies=ProjectCopies(), numpy_above=numpy_above)
    assert ranked(team, leg, acme, "cache eviction")  # the project's copy is read
    added = team.add(acme, note("cache eviction again", "a newer note on cache eviction")).id
    assert team.forget(acme, ids[0])
    got = [i for i, _ in ranked(team, leg, acme, "cache eviction")]
    assert got == [i for i, _ in ranked(team, KeywordLeg(), acme, "cache eviction")]
    assert added in got and ids[0] not in got
    with team.pool.connection() as conn, db.tenant_transaction(conn, acme) as cur:
        stats = leg.candidates(cur, acme, team.project_ids(acme, ["api"]), "cache", [added])[1]
        assert stats.holding == {"cache": {added}} and stats.total == len(ids)  # one stored, one forgotten
    assert leg.copies is not None and leg.copies.stats() == {"projects": 1, "rows": len(ids) + 1, "vectors": 0}


def test_a_write_that_commits_after_a_later_one_is_not_missed(pg_database: str, team: TeamStore) -> None:
    """The earlier write takes the lower change number but commits last: a reader that only asked for numbers
    above the highest it saw would never see it."""
    acme = tenant(pg_database)
    corpus(team, acme)
    leg = KeywordLeg(copies=ProjectCopies())
    assert ranked(team, leg, acme, "zebra") == []
    with team.pool.connection() as slow_conn, db.tenant_transaction(slow_conn, acme) as slow:
        early = team.insert(slow, acme, prepare(note("zebra early", "a zebra crossing")), pin=None, revive=False,
                            actor=None).id
        late = team.add(acme, note("zebra late", "another zebra")).id
        assert late > early
        assert [i for i, _ in ranked(team, leg, acme, "zebra")] == [late]  # the early one is not committed yet
    assert {i for i, _ in ranked(team, leg, acme, "zebra")} == {early, late}


def test_over_the_row_budget_the_sql_leg_answers_and_a_large_backlog_reads_the_project_again(
        pg_database: str, team: TeamStore) -> None:
    acme = tenant(pg_database)
    corpus(team, acme)
    small = KeywordLeg(copies=ProjectCopies(max_rows=5))
    assert ranked(team, small, acme, "cache eviction") == ranked(team, KeywordLeg(), acme, "cache eviction")
    assert small.copies is not None and small.copies.stats()["projects"] == 0
    leg = KeywordLeg(copies=ProjectCopies(max_applied=3))
    ranked(team, leg, acme, "cache")
    for n in range(5):
        team.add(acme, note(f"cache batch {n}", "cache import"))
    assert ranked(team, leg, acme, "cache import") == ranked(team, KeywordLeg(), acme, "cache import")


def test_a_tenant_copy_holds_only_its_own_rows(pg_database: str, team: TeamStore) -> None:
    acme, other = tenant(pg_database), tenant(pg_database, "other")
    mine = team.add(acme, note("hamster wheel", "the hamster runs")).id
    theirs = team.add(other, note("hamster wheel", "the hamster runs")).id
    leg = KeywordLeg(copies=ProjectCopies())
    assert [i for i, _ in ranked(team, leg, acme, "hamster")] == [mine]
    assert [i for i, _ in ranked(team, leg, other, "hamster")] == [theirs]


def nearest(team: TeamStore, acme: int, query: str, vector: object, project: str = "api") -> list[tuple[int, float]]:
    with team.pool.connection() as conn, db.tenant_transaction(conn, acme) as cur:
        return team.nearest(cur, acme, team.project_ids(acme, [project]), vector, 10)  # type: ignore[arg-type]


def test_the_copies_vectors_rank_as_the_exact_scan_and_follow_embeddings_and_forgets(pg_database: str,
                                                                                       team: TeamStore) -> None:
    acme = tenant(pg_database)
    ids = corpus(team, acme)
    long_one = team.add(acme, note("replica disk", "The disk on the replica filled up overnight. " * 40)).id
    backlog.drain(team.pool, team.embedder)
    probe = team.query_vector(acme, "the replica's disk is full")
    literal = vector_literal(probe)
    exact = nearest(team, acme, "", literal)  # a literal: the SQL scan
    got = nearest(team, acme, "", probe)  # numbers: the copy
    assert [i for i, _ in got] == [i for i, _ in exact] and got[0][0] == long_one
    assert [s for _, s in got] == pytest.approx([s for _, s in exact], abs=1e-5)
    assert team.copies is not None and team.copies.stats()["vectors"] > len(ids)  # the long one has chunks
    # a memory embedded after the copy was read is found; a forgotten one is not
    added = team.add(acme, note("replica disk again", "the replica's disk is full once more")).id
    assert added not in [i for i, _ in nearest(team, acme, "", probe)]  # no vector yet
    backlog.drain(team.pool, team.embedder)
    assert team.forget(acme, long_one)
    got = nearest(team, acme, "", probe)
    assert got[0][0] == added and long_one not in [i for i, _ in got]
    assert [i for i, _ in got] == [i for i, _ in nearest(team, acme, "", vector_literal(probe))]


def test_the_change_feed_shows_stored_and_forgotten_memories_not_vectors(pg_database: str, team: TeamStore) -> None:
    acme = tenant(pg_database)
    item = team.add(acme, note("feed", "a memory for the feed")).id
    backlog.drain(team.pool, team.embedder)
    assert team.forget(acme, item)
    assert [(c["op"], c["id"]) for c in team.changes(acme, 0, None)] == [("stored", item), ("forgotten", item)]


def test_concurrent_searches_and_writes_leave_the_copies_as_the_database(pg_database: str, team: TeamStore) -> None:
    """Searches of two projects in four threads while another thread stores and forgets memories in both: no
    search fails, and afterwards each copy ranks as SQL does."""
    acme = tenant(pg_database)
    corpus(team, acme)
    for n in range(10):
        team.add(acme, note(f"web cache {n}", "web cache eviction", project="web"))
    leg = KeywordLeg(copies=ProjectCopies())
    errors: list[BaseException] = []

    def search(n: int) -> None:
        try:
            for k in range(15):
                ranked(team, leg, acme, "cache eviction", project=("api", "web")[(n + k) % 2])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=contextvars.copy_context().run, args=(search, n)) for n in range(4)]
    for thread in threads:
        thread.start()
    for n in range(12):
        project = ("api", "web")[n % 2]
        item = team.add(acme, note(f"cache eviction {n}", f"eviction of cache entry {n}", project=project))
        if n % 3 == 0:
            team.forget(acme, item.id)
    for thread in threads:
        thread.join()
    assert errors == []
    for project in ("api", "web"):
        assert ranked(team, leg, acme, "cache eviction", project) == ranked(team, KeywordLeg(), acme, "cache eviction",
                                                                            project)
