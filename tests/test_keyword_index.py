"""The worker's in-memory copy of the keyword index ranks exactly as FTS5 does, and follows every write.

Each check compares ``Store.keyword_ids`` with the copy against a second ``Store`` on the same file that
ranks in SQL (a fresh one, so neither its row count nor its frequency cache is older than the copy).
Equality is exact: the same ids, the same order and the same float scores.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import worker_app as api
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from memcairn.bench.synthetic import synthetic_items, synthetic_queries
from memcairn.core.models import ItemFilter, NewItem
from memcairn.store import fts, keyword_index
from memcairn.store.items import Store
from memcairn.wire.config import Settings
from memcairn.worker.app import make_app

QUERIES = [*synthetic_queries(60, seed=3), "timeout", "race condition in cache", "deadlock deadlock",
           "a the of", "zanzibar", "Fixed a timeout", "caches the compiled regex", "ünïcödé café naïve",
           "", "!!!", "NEAR(auth billing)", 'title:"auth" OR *', "src/auth/service.py"]


def _wait(store: Store) -> keyword_index.KeywordIndex:
    index = store._keyword_index
    assert index is not None
    assert index.wait(60), index.status
    return index


def _sql(path: Path, query: str, flt: ItemFilter | None, limit: int = 20, order: str = "relevance") -> list:
    with Store(path, check_fts=False) as fresh:
        return fresh.keyword_ids(query, flt, limit=limit, order=order)


def _same_as_sql(store: Store, queries: list[str], filters: list[ItemFilter | None], *, limit: int = 30,
                 offset: int = 0) -> int:
    """Assert the copy answers every query like SQL; return how many answers were not empty."""
    assert store.path is not None
    index = _wait(store)
    answered = ranked_here = 0
    rank = index.rank

    def counted(*args: Any, **kwargs: Any) -> list:
        nonlocal ranked_here
        ranked_here += 1
        return rank(*args, **kwargs)

    index.rank = counted  # type: ignore[method-assign]
    try:
        with Store(store.path, check_fts=False) as fresh:
            for flt in filters:
                for query in queries:
                    before = ranked_here
                    ranked = store.keyword_ids(query, flt, limit=limit, offset=offset)
                    known = flt is None or flt.projects is None or store.resolve_project_ids(list(flt.projects))
                    wanted = bool(fts.query_tokens(query)) and bool(known)
                    assert ranked_here == before + wanted, "the copy must answer, not SQL"
                    assert ranked == fresh.keyword_ids(query, flt, limit=limit, offset=offset), (query, flt)
                    answered += bool(ranked)
    finally:
        del index.rank
    return answered


@pytest.fixture
def corpus(tmp_path: Path) -> Store:
    store = Store(tmp_path / "kw.db")
    store.add_items(list(synthetic_items(1500, projects=4)))
    store.add_items([
        NewItem(project="project-00", kind="observation", type="bugfix", title="Fixed a timeout in the cache",
                narrative="caches the compiled regex; fixed a timeout", facts=["ünïcödé café naïve"]),
        NewItem(project="project-01", kind="summary", request="race condition in cache", learned="deadlock"),
        NewItem(project="project-02", kind="prompt", text="race condition in cache race condition in cache"),
    ])
    store.start_keyword_index()
    yield store
    store.close()


@pytest.mark.slow
def test_the_copy_ranks_like_fts5_for_every_plan_shape(corpus: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    projects = corpus.project_names()
    start = 1_700_000_000_000 + 300 * 60_000
    filters = [None, ItemFilter(projects=[projects[0]]), ItemFilter(projects=projects[1:3]), ItemFilter(),
               # Filtered searches rank every match (no cap) for half the frequency budget.
               ItemFilter(types=["bugfix", "decision"]), ItemFilter(kinds=["summary", "prompt"]),
               ItemFilter(projects=[projects[1]], types=["feature"], date_start=start, date_end=start + 600 * 60_000),
               ItemFilter(platform_source="claude-code"), ItemFilter(kinds=["prompt"], platform_source="codex"),
               ItemFilter(platform_source="codex", platform_source_or_none=True), ItemFilter(types=["no-such-type"])]
    # The store is below the budget: whole-query plans, each word alone plus the phrase.
    assert _same_as_sql(corpus, QUERIES, filters) > 100
    # A small budget prunes: rare words alone, the common ones together; a small cap keeps the newest rows.
    monkeypatch.setattr(fts, "RANK_BUDGET", 300)
    assert _same_as_sql(corpus, QUERIES, filters) > 100
    monkeypatch.setattr(fts, "RANK_CAP", 50)
    assert _same_as_sql(corpus, QUERIES, filters, limit=20, offset=10) > 30


def test_the_copy_follows_writes_of_this_and_other_connections(corpus: Store) -> None:
    assert corpus.path is not None
    _wait(corpus)
    queries = ["race condition in cache", "timeout", "zanzibar quokka", "deadlock auth"]
    ids = [r.id for r in corpus.add_items([
        NewItem(project="project-03", kind="observation", title="zanzibar quokka timeout", narrative="deadlock"),
        NewItem(project="newproj", kind="observation", title="quokka zanzibar", narrative="race condition"),
    ])]
    assert _same_as_sql(corpus, queries, [None, ItemFilter(projects=["newproj"])]) == 6
    corpus.update_item(ids[0], title="nothing to see", narrative="quokka", type="decision")
    corpus.delete_items([ids[1]])
    assert [i for i, _ in corpus.keyword_ids("quokka", ItemFilter(types=["decision"]))] == [ids[0]]
    assert corpus.keyword_ids("quokka", ItemFilter(types=["bugfix"])) == []
    assert corpus.keyword_ids("zanzibar", None) == []
    assert [i for i, _ in corpus.keyword_ids("quokka", None)] == [ids[0]]
    corpus.merge_project("project-03", "project-00")
    assert [i for i, _ in corpus.keyword_ids("quokka", ItemFilter(projects=["project-00"]))] == [ids[0]]
    # Another process writes: the triggers log it, the next query applies it.
    script = ("import sys; from memcairn.store.items import Store; from memcairn.core.models import NewItem; "
              "s = Store(sys.argv[1]); s.add_item(NewItem(project='project-01', kind='observation', "
              "title='zanzibar from afar')); s.delete_items([int(sys.argv[2])]); s.close()")
    subprocess.run([sys.executable, "-c", script, str(corpus.path), "7"], check=True, timeout=60)
    assert _same_as_sql(corpus, [*queries, "afar", "Fixed"], [None, ItemFilter(projects=["project-01"])]) >= 6
    state = corpus._keyword_index._state
    assert state is not None and state.dead is not None and state.dead[7]


def test_a_rebuilt_fts_index_or_a_lost_log_builds_the_copy_again(corpus: Store,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    index = _wait(corpus)
    first = index._state
    corpus.rebuild_fts()
    # The NULL entry drops the copy: SQL answers (the same) while it is built again in the background.
    assert corpus.keyword_ids("timeout", None, limit=5) == _sql(corpus.path, "timeout", None, limit=5)
    assert _wait(corpus)._state is not first
    # Entries pruned past the copy's position (another process wrote more than the log keeps).
    second = index._state
    corpus.add_item(NewItem(project="project-00", kind="observation", title="pruned wombat"))
    with corpus._conn as conn:
        conn.execute("DELETE FROM keyword_changes")
    corpus.add_item(NewItem(project="project-00", kind="observation", title="after wombat"))
    corpus.keyword_ids("wombat", None)
    assert _wait(corpus)._state is not second
    assert len(corpus.keyword_ids("wombat", None)) == 2
    # A backlog longer than it applies is built again too.
    monkeypatch.setattr(keyword_index, "MAX_APPLIED_CHANGES", 3)
    third = index._state
    corpus.add_items([NewItem(project="project-00", kind="observation", title=f"numbat {i}") for i in range(5)])
    corpus.keyword_ids("numbat", None)
    assert _wait(corpus)._state is not third
    assert _same_as_sql(corpus, ["numbat", "wombat", "timeout"], [None]) == 3


def test_many_edits_fold_into_a_new_copy(corpus: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    index = _wait(corpus)
    monkeypatch.setattr(keyword_index, "REBUILD_AFTER_EXTRA_POSTINGS", 50)
    first = index._state
    for i in range(1, 40):
        corpus.update_item(i, narrative=f"edited wombat number {i}")
        assert sorted(r for r, _ in corpus.keyword_ids("wombat", None, limit=100)) == list(range(1, i + 1))
    assert _same_as_sql(corpus, ["wombat", "edited", "timeout", "auth"], [None]) == 4
    assert index.wait(60) and index._state is not first
    assert index._state.extra_postings < 50 * 4


def test_what_the_copy_cannot_answer_goes_to_sql(corpus: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    index = _wait(corpus)
    calls = []
    monkeypatch.setattr(index, "rank", lambda *a, **k: calls.append(a) or [])
    for flt in (ItemFilter(concepts=["gotcha"]), ItemFilter(files=["src/auth/service.py"]),
                ItemFilter(types=["bugfix"], session="project-00-session-3")):
        assert corpus.keyword_ids("timeout", flt) == _sql(corpus.path, "timeout", flt)
    assert corpus.keyword_ids("timeout", None, order="newest") == _sql(corpus.path, "timeout", None, order="newest")
    monkeypatch.setattr(index, "terms", lambda conn, tokens: [["two", "terms"] for _ in tokens])
    assert corpus.keyword_ids("timeout", None) == _sql(corpus.path, "timeout", None)
    assert calls == []


def test_a_store_over_the_size_limit_keeps_sql(tmp_path: Path) -> None:
    with Store(tmp_path / "big.db") as store:
        store.add_items(list(synthetic_items(30, projects=2)))
        index = store.start_keyword_index(max_rows=10)
        assert index is not None and not index.wait(60)
        assert index.stats()["status"].startswith("off: 30 rows")
        assert store.keyword_ids("timeout", None) == _sql(store.path, "timeout", None)
    with Store(":memory:") as memory:
        assert memory.start_keyword_index() is None


def test_stats_say_what_the_copy_holds(corpus: Store) -> None:
    _wait(corpus)
    stats = corpus.keyword_index_stats()
    assert stats is not None
    assert stats["status"] == "ready" and stats["rows"] == 1503
    assert stats["terms"] > 1500 and stats["postings"] > 20_000 and stats["bytes"] > 100_000


WORDS = ["alpha", "beta", "gamma", "delta", "cache", "caches", "caching", "race", "timeout", "deadlock",
         "zeta", "ünï", "naïve", "the", "of"]
texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=12).map(" ".join)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(docs=st.lists(st.tuples(texts, texts, st.integers(0, 2)), min_size=1, max_size=40),
       queries=st.lists(texts, min_size=1, max_size=6), budget=st.sampled_from([3, 10, 8000]),
       cap=st.sampled_from([2, 5, 10_000]))
def test_random_stores_rank_the_same(tmp_path_factory: pytest.TempPathFactory, docs, queries, budget, cap) -> None:
    path = tmp_path_factory.mktemp("kwprop") / "s.db"
    with Store(path) as store:
        store.add_items([NewItem(project=f"p{p}", kind="observation", title=t, narrative=n, facts=[t])
                         for t, n, p in docs])
        store.start_keyword_index()
        old = fts.RANK_BUDGET, fts.RANK_CAP
        fts.RANK_BUDGET, fts.RANK_CAP = budget, cap
        try:
            filters = [None, ItemFilter(projects=["p1"]), ItemFilter(projects=["p0", "p2"]),
                       ItemFilter(kinds=["observation"]), ItemFilter(projects=["p2"], types=["note", "bugfix"])]
            _same_as_sql(store, queries, filters)
        finally:
            fts.RANK_BUDGET, fts.RANK_CAP = old


def _index_stats(client: TestClient) -> dict:
    deadline = time.monotonic() + 30
    while True:
        stats = client.get("/api/stats").json()["keyword_index"]
        if stats is None or stats["status"] != "building" or time.monotonic() > deadline:
            return stats
        time.sleep(0.05)


def test_the_worker_builds_the_copy_and_searches_with_it(client: TestClient, app: Any) -> None:
    """On by default (``worker_keyword_index``); /api/stats reports it; a search uses it."""
    first = api.add(app, kind="observation", title="wombat burrow", narrative="dug under the fence")
    assert _index_stats(client)["status"] == "ready"
    second = api.add(app, kind="observation", title="wombat again", narrative="wombat wombat")
    body = client.get("/api/search", params={"query": "wombat", "mode": "keyword", "format": "json"}).json()
    assert [h["id"] for h in body["results"]] == [second, first]
    assert app.state.worker.runtime.store._keyword_index._state.rows == 2


def test_the_worker_can_rank_in_sqlite_only(cfg: Settings, tmp_path: Path) -> None:
    off = make_app(None, dataclasses.replace(cfg, worker_keyword_index=False), static_dir=tmp_path / "static")
    with TestClient(off, base_url=api.BASE) as c:
        api.wait_ready(off)
        assert _index_stats(c) is None


def test_queries_while_another_thread_writes(corpus: Store) -> None:
    """Two threads search (each on its own connection, as the worker's readers do) while a third adds, edits
    and deletes: no query fails, and afterwards every answer is SQL's."""
    import threading

    _wait(corpus)
    errors: list[BaseException] = []
    stop = threading.Event()

    def read() -> None:
        try:
            while not stop.is_set():
                for query in ("timeout", "quokka numbat", "race condition in cache"):
                    corpus.keyword_ids(query, None, limit=10)
                    corpus.keyword_ids(query, ItemFilter(projects=["project-01"], types=["bugfix"]), limit=10)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    readers = [threading.Thread(target=read) for _ in range(2)]
    for thread in readers:
        thread.start()
    try:
        for n in range(40):
            new = corpus.add_item(NewItem(project=f"project-0{n % 3}", kind="observation", type="bugfix",
                                          title=f"quokka numbat {n}", narrative="timeout in cache")).id
            if n % 3 == 0:
                corpus.update_item(new, narrative="race condition in cache")
            if n % 5 == 0:
                corpus.delete_items([new - 1])
    finally:
        stop.set()
        for thread in readers:
            thread.join(30)
    assert errors == []
    queries = ["timeout", "quokka numbat", "race condition in cache", "numbat 7"]
    assert _same_as_sql(corpus, queries, [None, ItemFilter(projects=["project-01"], types=["bugfix"])]) == 8
