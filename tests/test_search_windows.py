"""Windowed fusion: a memory ranked with its session neighbours and its session (search.windows), read from the
rows (Store.session_windows), never across sessions or projects."""

from __future__ import annotations

import pytest

from memcairn.core.models import NewItem
from memcairn.mirror.sync import MirrorSync
from memcairn.search import SearchService, windows
from memcairn.store import Store
from memcairn.store.records import QueryTerms, SessionWindow
from memcairn.vectors.fake import HashEmbedder
from memcairn.vectors.memory import InMemoryIndex

T0 = 1_700_000_000_000


def _turns(store: Store, project: str, session: str, texts: list[str], start: int = 0) -> list[int]:
    return [r.id for r in store.add_items([
        NewItem(project=project, session=session, kind="prompt", text=t, created_at_epoch=T0 + start + n)
        for n, t in enumerate(texts)])]


def test_windows_stay_in_their_session_and_project_in_time_order(mem_store: Store) -> None:
    a = _turns(mem_store, "p", "s1", ["a0", "a1", "a2"])
    b = _turns(mem_store, "p", "s2", ["b0", "b1"], start=10)
    other = _turns(mem_store, "q", "s3", ["c0"], start=1)  # another project, between them in time
    alone = mem_store.add_item(NewItem(project="p", kind="manual", text="no session")).id
    late = _turns(mem_store, "p", "s1", ["a-1"], start=-5)[0]  # stored last, said first
    got = mem_store.session_windows([a[0], a[2], b[0], other[0], alone, 999_999])
    assert got[a[0]].ids == (late, a[0], a[1]) and got[a[0]].chars == len("a0") + len("[]")
    assert got[a[2]][1] == (a[1], a[2])  # the last of its session
    assert got[b[0]][1] == (b[0], b[1])
    assert got[other[0]][1] == (other[0],) and got[other[0]][0] != got[a[0]][0]
    assert got[alone] == (None, (alone,), len("no session") + len("[]")) and 999_999 not in got
    assert mem_store.session_windows([a[1]], radius=2)[a[1]][1] == (late, a[0], a[1], a[2])
    assert mem_store.session_windows([]) == {}


def test_a_window_holding_the_query_outranks_a_memory_holding_a_word_of_it() -> None:
    """Item 2 holds nothing of the query but sits between the two halves of the answer; item 9 holds one word."""
    terms = QueryTerms(("pottery", "bowl"), (2, 2), 100, {"pottery": {1, 9}, "bowl": {3}})
    around = {2: SessionWindow(7, (1, 2, 3), 40), 9: SessionWindow(8, (9,), 40)}
    scores = windows.fuse([2, 9], around, terms, {2: 0.3, 9: 0.3})
    assert scores[2] > scores[9]
    # windows rank short memories (chat turns); long ones are left to the item fusion
    long = {i: w._replace(chars=windows.SHORT_CHARS + 1) for i, w in around.items()}
    assert not windows.short([2, 9], long) and windows.short([2, 9], around)
    # with no keyword evidence the semantic windows decide: a neighbour the leg did not return counts as its least
    # similar candidate
    only_meaning = windows.fuse([2, 9], around, None, {2: 0.3, 9: 0.4, 1: 0.9})
    assert only_meaning[2] > only_meaning[9]
    assert windows.fuse([], {}, None, {}) == {}


@pytest.fixture
def conversation(mem_store: Store):
    """Two sessions: in one the answer is a reply to the turn that named the subject; in the other the subject's
    words come up once, in passing."""
    answer = _turns(mem_store, "chat", "trip", [
        "Ana: Did you ever get to the pottery workshop in Leeds?",
        "Ben: Yes, last Saturday, I made a lopsided bowl.",
        "Ana: Ha, show me a photo sometime.",
    ])
    _turns(mem_store, "chat", "misc", [
        "Ben: The weather was awful all week.",
        "Ana: Leeds traffic is the worst on Saturday mornings.",
        "Ben: I need new running shoes.",
        "Ana: My sister fixed her bike.",
    ], start=100)
    mirror = MirrorSync(mem_store, InMemoryIndex(384), HashEmbedder(), index_key="memory")
    mirror.backfill()
    return mem_store, mirror, answer


def test_a_hybrid_search_ranks_memories_with_their_neighbours(conversation) -> None:
    store, mirror, answer = conversation
    query = "When did Ben go to the pottery workshop in Leeds on Saturday?"
    windowed = SearchService(store, mirror).search(query=query, min_score=0)
    assert [h.item.id for h in windowed.hits[:2]] == answer[:2]  # the reply follows the turn it answers
    # the item fusion (windows off) puts a turn sharing "Leeds" and "Saturday" before the reply
    plain = SearchService(store, mirror, windows=False).search(query=query, min_score=0)
    assert plain.hits[1].item.session == "misc" and answer[1] not in [h.item.id for h in plain.hits[:2]]
    # reciprocal-rank fusion, asked for by name, ranks items alone
    rrf = SearchService(store, mirror).search(query=query, min_score=0, fusion="rrf")
    assert [h.item.id for h in rrf.hits] == [
        h.item.id for h in SearchService(store, mirror, windows=False).search(query=query, min_score=0,
                                                                             fusion="rrf").hits]


def test_windows_leave_time_orders_and_a_single_leg_alone(conversation) -> None:
    store, mirror, _ = conversation
    query = "pottery workshop Leeds Saturday"
    on, off = SearchService(store, mirror), SearchService(store, mirror, windows=False)
    for fields in ({"order": "newest"}, {"mode": "keyword"}, {"mode": "semantic"}):
        assert [h.item.id for h in on.search(query=query, min_score=0, **fields).hits] == \
            [h.item.id for h in off.search(query=query, min_score=0, **fields).hits], fields


def test_long_memories_are_ranked_as_items(mem_store: Store) -> None:
    """Windows count a word once a memory: in page-long memories that loses what BM25 reads from how often and
    in how much text a word stands, so there the item fusion ranks as it did."""
    pad = " filler" * 60
    _turns(mem_store, "chat", "trip", [f"Ana: Did you ever get to the pottery workshop in Leeds?{pad}",
                                       f"Ben: Yes, last Saturday, I made a lopsided bowl.{pad}",
                                       f"Ana: Ha, show me a photo sometime.{pad}"])
    _turns(mem_store, "chat", "misc", [f"Ana: Leeds traffic is the worst on Saturday mornings.{pad}",
                                       f"Ben: I need new running shoes.{pad}"], start=100)
    mirror = MirrorSync(mem_store, InMemoryIndex(384), HashEmbedder(), index_key="memory")
    mirror.backfill()
    query = "When did Ben go to the pottery workshop in Leeds on Saturday?"
    on = SearchService(mem_store, mirror).search(query=query, min_score=0)
    off = SearchService(mem_store, mirror, windows=False).search(query=query, min_score=0)
    assert [(h.item.id, h.score) for h in on.hits] == [(h.item.id, h.score) for h in off.hits]


def test_which_rows_hold_a_word_reads_the_same_for_few_ids_and_many(mem_store: Store,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows ask which of hundreds of rows hold each query word: past HOLDING_IN_LIST ids the word's doclist is
    read whole instead of FTS5 matching once per listed id; the answer is the same."""
    from memcairn.store import fts

    ids = [r.id for r in mem_store.add_items([
        NewItem(project="p", kind="manual", text=f"note {n} " + ("pottery bowls" if n % 3 else "running shoes"))
        for n in range(3 * fts.HOLDING_IN_LIST)])]
    asked = ids[::2]
    many = mem_store.query_terms("pottery bowl shoes", asked)
    monkeypatch.setattr(fts, "HOLDING_IN_LIST", len(ids) + 1)
    few = mem_store.query_terms("pottery bowl shoes", asked)
    assert many == few and many is not None
    assert many.holding["bowl"] == {i for n, i in enumerate(ids) if n % 2 == 0 and n % 3}
