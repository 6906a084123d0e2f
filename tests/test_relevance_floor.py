"""The relevance floor: a question nothing in memory answers gets "nothing relevant", not the nearest rows.

Real components: a SQLite store, the bundled embedding model and the sqlite-vec mirror for the semantic leg; the
store alone for the keyword leg; a real worker and the MCP server for what an agent reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memcairn.core.models import NewItem
from memcairn.search import SearchService, render_index
from memcairn.search.relevance import (
    AGREEMENT,
    DEFAULT_MIN_SCORE,
    KEYWORD_FLOOR,
    SEMANTIC_FLOORS,
    STRONG,
    relevance,
    unrelated_floor,
)
from memcairn.search.render import WEAK_ONLY
from memcairn.store import Store

MEMCAIRN = str(Path(sys.executable).with_name("memcairn"))

NOTES = [
    ("Deploy with fly.io", "The app deploys with `fly deploy` from main; the release command runs migrations."),
    ("Session cookie expiry", "Users were logged out early because the session cookie expired after 15 minutes; "
                              "raised it to 7 days and rotate the refresh token."),
    ("Flaky upload test", "test_upload_large_file timed out on CI: the fixture wrote 2 GB; it now writes 20 MB."),
    ("Postgres connection pool", "Raised the pool size to 20 after 'too many clients' errors under load."),
    ("My cat Luna", "The user's cat is called Luna; she is three years old and likes the balcony."),
]


def fill(store: Store) -> dict[str, int]:
    results = store.add_items([NewItem(project="app", kind="manual", title=t, text=x) for t, x in NOTES])
    return {t: r.id for (t, _), r in zip(NOTES, results, strict=True)}


@pytest.fixture(scope="module")
def bundled(tmp_path_factory: pytest.TempPathFactory):
    """A store of the notes with the bundled model's mirror (the model the semantic floor is calibrated for)."""
    from memcairn.mirror.sync import MirrorSync
    from memcairn.vectors.embedder import load_embedder
    from memcairn.vectors.factory import open_index

    home = tmp_path_factory.mktemp("floor")
    store = Store(home / "memcairn.db")
    ids = fill(store)
    model = load_embedder()
    assert model.model_id in SEMANTIC_FLOORS
    mirror = MirrorSync(store, open_index("sqlite-vec", home=home, dimension=model.dimension), model,
                        index_key="sqlite-vec")
    mirror.backfill()
    yield SearchService(store, mirror), ids
    mirror.index.close()
    store.close()


@pytest.mark.parametrize("query", ["xyzzy nothing", "sk-ant", "kubernetes helm chart values",
                                   "why did the GraphQL schema stitching break"])
def test_a_question_nothing_answers_gets_no_result_and_says_so(bundled, query: str) -> None:
    service, _ = bundled
    result = service.search(query=query, projects=["app"])
    assert result.hits == [] and result.hidden > 0 and result.min_score == DEFAULT_MIN_SCORE
    line = render_index(result)
    assert line.startswith(f"No memory matches the query (strategy: hybrid); {result.hidden} weaker")
    assert "(min_score=0; on the command line --min-score 0)" in line and len(line.splitlines()) == 1
    weaker = service.search(query=query, projects=["app"], min_score=0)
    assert len(weaker.hits) == result.hidden and weaker.hidden == 0


def test_a_near_miss_gets_only_weak_matches_and_the_index_says_so(bundled) -> None:
    """A hamster's name among notes that name a cat: close in meaning, not an answer. It is shown (a memory
    that only resembles the question is cheaper to judge than a missing one) but marked weak."""
    service, ids = bundled
    result = service.search(query="what is the name of my hamster", projects=["app"])
    assert [h.item.id for h in result.hits] == [ids["My cat Luna"]]
    assert all(DEFAULT_MIN_SCORE <= h.relevance < STRONG for h in result.hits if h.relevance is not None)
    index = render_index(result).splitlines()
    assert index[1] == WEAK_ONLY and index[-3].endswith(" · weak")
    strong = render_index(service.search(query="how do we deploy", projects=["app"]))
    assert WEAK_ONLY not in strong and not strong.splitlines()[3].endswith(" · weak")


@pytest.mark.parametrize(("query", "title"), [
    ("why were users logged out", "Session cookie expiry"),
    ("how do we deploy", "Deploy with fly.io"),
    ("upload test timeout on CI", "Flaky upload test"),
    ("too many clients postgres", "Postgres connection pool"),
    ("what is the name of my cat", "My cat Luna"),
])
def test_a_question_memory_answers_keeps_its_answer_first(bundled, query: str, title: str) -> None:
    service, ids = bundled
    result = service.search(query=query, projects=["app"])
    assert result.hits and result.hits[0].item.id == ids[title]
    assert result.hits[0].relevance is not None and result.hits[0].relevance >= STRONG  # a match, not weak
    # what shares next to nothing with the query is hidden, not padded in; what is shown is related
    assert len(result.hits) < len(NOTES)
    assert all(h.relevance is not None and h.relevance >= unrelated_floor(DEFAULT_MIN_SCORE) for h in result.hits)


def test_keyword_evidence_weighs_rare_words_and_ignores_ubiquitous_ones(store: Store) -> None:
    """Without a mirror, a hit needs enough of the query's informative words (weighted by rarity)."""
    store.add_items([NewItem(project="p", kind="manual", title=f"note {n}", text=f"name of thing {n}")
                     for n in range(30)])
    fill(store)
    service = SearchService(store, None)
    assert service.search(query="name of my hamster").hits == []  # "name" is everywhere, "hamster" nowhere
    luna = service.search(query="name of my cat")
    assert [h.item.title for h in luna.hits] == ["My cat Luna"]  # "name" says nothing here: it is in most rows
    assert service.search(query="fly deploy migrations").hits[0].item.title == "Deploy with fly.io"
    assert service.search(query="").hits  # no query: the filters alone, no floor


def test_relevance_is_one_at_either_floor() -> None:
    model = next(iter(SEMANTIC_FLOORS))
    assert relevance(SEMANTIC_FLOORS[model], 0.0, model) == pytest.approx(1.0)
    assert relevance(None, KEYWORD_FLOOR, model) == pytest.approx(1.0)
    assert relevance(0.99, 0.0, "a-model-without-a-floor") == 1.0  # no claim either way for it


def test_two_pieces_of_evidence_just_short_of_their_floors_confirm_each_other() -> None:
    model = next(iter(SEMANTIC_FLOORS))
    near, far = 0.95, 0.5
    both = relevance(SEMANTIC_FLOORS[model] * near, KEYWORD_FLOOR * near, model)
    assert both == pytest.approx(near * AGREEMENT) and both >= STRONG
    # one of them alone, or one near and the other weak, is not enough for a match
    assert relevance(SEMANTIC_FLOORS[model] * near, 0.0, model) < STRONG
    assert relevance(SEMANTIC_FLOORS[model] * near, KEYWORD_FLOOR * far, model) < STRONG


def test_min_score_is_checked() -> None:
    from memcairn.core.errors import ValidationError
    from memcairn.search import SearchRequest

    assert SearchRequest(query="x", min_score="0").min_score == 0.0
    for bad in (-1, "lots", True, float("inf")):
        with pytest.raises(ValidationError, match="min_score must be a number >= 0"):
            SearchRequest(query="x", min_score=bad)


def test_the_cli_passes_min_score_and_reports_what_it_hid(tmp_path: Path) -> None:
    env = {**os.environ, "MEMCAIRN_HOME": str(tmp_path / "h"), "MEMCAIRN_VECTOR_BACKEND": "none"}
    for title, text in NOTES:
        subprocess.run([MEMCAIRN, "add", "--project", "app", "--title", title, "--text", text], env=env,
                       check=True, capture_output=True, timeout=60)

    def search(*args: str) -> dict:
        done = subprocess.run([MEMCAIRN, "search", *args, "--project", "app", "--json", "--local"], env=env,
                              capture_output=True, text=True, timeout=60, check=True)
        return json.loads(done.stdout)

    # keyword evidence alone (no mirror): a note holding an informative word of the query is shown, marked weak
    # when it holds too few of them; one sharing only how the question is asked ("many") is hidden
    weak = search("hamster parrot cat")["results"]
    assert [r["title"] for r in weak] == ["My cat Luna"] and weak[0]["weak"] is True
    assert search("how many hamsters")["results"] == [] and search("how many hamsters")["hidden"] > 0
    assert search("how many hamsters", "--min-score", "0")["results"]


def test_how_a_question_is_asked_is_no_evidence(mem_store: Store) -> None:
    """In a store of a handful of rows every word weighs the same: "many" must not outweigh "guitars"."""
    mem_store.add_items([NewItem(project="p", kind="manual", text=t) for t in (
        "I bought a Fender guitar", "I sold my Gibson guitars", "Dinner with Ana", "The car needs new tyres")])
    hits = SearchService(mem_store, None).search(query="How many guitars do I own?").hits
    assert {h.item.text for h in hits} == {"I bought a Fender guitar", "I sold my Gibson guitars"}


def test_a_keyword_only_answer_holding_an_informative_word_is_shown_weak(store: Store, bundled) -> None:
    """Keyword evidence alone cannot tell a paraphrase from a question memory does not answer: a hit holding a
    rare word of the query is shown, marked weak, rather than emptying the answer (mirror off or mode=keyword)."""
    store.add_items([NewItem(project="app", kind="manual", title=f"note {n}", text=f"name of thing {n}")
                     for n in range(30)])
    fill(store)
    query = "which balcony plants did the tabby chew in spring"  # of five words only "balcony" is held, once
    without_mirror = SearchService(store, None).search(query=query, projects=["app"])
    assert [h.item.title for h in without_mirror.hits] == ["My cat Luna"] and without_mirror.hits[0].weak
    assert without_mirror.strategy == "keyword" and without_mirror.fallback_reason == "vector_unavailable"
    service, ids = bundled
    asked = service.search(query=query, projects=["app"], mode="keyword")
    assert [h.item.id for h in asked.hits] == [ids["My cat Luna"]] and asked.hits[0].weak
    # a hit sharing only an ubiquitous word is no answer: "name" is in most rows, "hamster" in none
    assert SearchService(store, None).search(query="name of my hamster", projects=["app"]).hits == []
