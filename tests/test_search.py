from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone

import pytest

from memcairn.cli.app import run
from memcairn.core.errors import ValidationError, VectorIndexUnavailableError
from memcairn.core.models import NewItem
from memcairn.mirror.sync import MirrorSync, VectorHit
from memcairn.search import MAX_SEMANTIC_QUERY_CHARS, SearchRequest, SearchService, fusion, parse_kinds, parse_time
from memcairn.store import Store
from memcairn.vectors.fake import HashEmbedder
from memcairn.vectors.memory import InMemoryIndex

DAY = 86_400_000
NOW = 1_800_000_000_000  # 2027-01-15T08:00:00Z


class FixedMirror:
    """A mirror whose nearest items are fixed in advance: ``{item_id: distance}``, best first."""

    def __init__(self, distances: dict[int, float], *, fail: bool = False) -> None:
        self.distances = distances
        self.fail = fail
        self.available = True
        self.queries: list[str] = []
        self.limits: list[int] = []

    def query(self, text: str, *, projects: Sequence[str] | None = None, limit: int = 50) -> list[VectorHit]:
        self.queries.append(text)
        self.limits.append(limit)
        if self.fail:
            raise VectorIndexUnavailableError("index is down")
        ranked = sorted(self.distances.items(), key=lambda kv: kv[1])[:limit]
        return [VectorHit(i, "observation", d, f"obs_{i}_narrative") for i, d in ranked]


class BrokenIndex(InMemoryIndex):
    def query(self, vector, *, projects, limit, metadata=True):  # noqa: ANN001, ANN201
        raise VectorIndexUnavailableError("vector index unreachable")


def add(store: Store, *, days_ago: float = 1, project: str = "p", kind: str = "observation", **fields: object) -> int:
    fields.setdefault("title", f"item {days_ago} {kind}")
    created = NOW - int(days_ago * DAY)
    return store.add_item(NewItem(project=project, kind=kind, created_at_epoch=created, **fields)).id  # type: ignore[arg-type]


def ids(result) -> list[int]:  # noqa: ANN001
    return [h.item.id for h in result.hits]


# -- fusion: pure functions, hand-computed -------------------------------------------------------------
def test_rrf_adds_reciprocal_ranks_across_legs() -> None:
    legs = {"keyword": [(1, 9.0), (2, 5.0), (4, 1.0)], "semantic": [(3, 0.9), (1, 0.7), (2, 0.4)]}
    scores = fusion.rrf(legs)
    assert scores[1] == pytest.approx(1 / 61 + 1 / 62)
    assert scores[2] == pytest.approx(1 / 62 + 1 / 63)
    assert scores[3] == pytest.approx(1 / 61)
    assert scores[4] == pytest.approx(1 / 63)
    created = {1: 0, 2: 0, 3: 0, 4: 0}
    assert fusion.order_ids(scores, created) == [1, 2, 3, 4]


def test_minmax_normalises_each_leg_and_weighs_them_equally() -> None:
    legs = {"keyword": [(1, 9.0), (2, 5.0), (4, 1.0)], "semantic": [(3, 0.9), (1, 0.7), (2, 0.4)]}
    scores = fusion.minmax(legs)
    assert scores[1] == pytest.approx(0.5 * 1.0 + 0.5 * 0.6)
    assert scores[2] == pytest.approx(0.5 * 0.5 + 0.0)
    assert scores[3] == pytest.approx(0.5)
    assert scores[4] == pytest.approx(0.0)
    assert fusion.order_ids(scores, {1: 0, 2: 0, 3: 0, 4: 0}) == [1, 3, 2, 4]


def test_fusion_ties_break_by_newer_then_higher_id() -> None:
    scores = {1: 0.5, 2: 0.5, 3: 0.5}
    assert fusion.order_ids(scores, {1: 10, 2: 20, 3: 20}) == [3, 2, 1]
    assert fusion.order_ids(scores, {1: 10, 2: 20, 3: 30}, "oldest") == [1, 2, 3]
    assert fusion.min_max([2.0, 2.0]) == [1.0, 1.0] and fusion.min_max([]) == []


def test_recency_decay_halves_each_half_life() -> None:
    assert fusion.recency_decay(0, 30) == 1.0
    assert fusion.recency_decay(30 * DAY, 30) == pytest.approx(0.5)
    assert fusion.recency_decay(-5 * DAY, 30) == 1.0
    assert fusion.boost_recent({1: 1.0}, {1: NOW - 60 * DAY}, now=NOW, half_life_days=None) == {1: 1.0}
    assert fusion.boost_recent({1: 1.0}, {1: NOW - 60 * DAY}, now=NOW, half_life_days=30)[1] == pytest.approx(0.25)


# -- a tiny fixed corpus for end-to-end order ---------------------------------------------------------
@pytest.fixture
def corpus(mem_store: Store) -> dict[str, int]:
    a = add(mem_store, days_ago=5, title="Zebra crossing fix", narrative="the zebra crossing handler was wrong")
    b = add(mem_store, days_ago=4, title="Traffic lights",
            narrative="the lights near the zebra stayed red too long because the timer drifted over hours")
    c = add(mem_store, days_ago=3, title="Pedestrian safety review", narrative="walk signals and curb ramps")
    d = add(mem_store, days_ago=2, title="Intersection survey",
            narrative="counted cars, bikes, buses, trucks, vans and scooters at every corner of the city",
            facts=["one zebra was painted over years ago and nobody repainted it since then at all"])
    return {"a": a, "b": b, "c": c, "d": d}


def test_keyword_leg_of_the_fixed_corpus_ranks_title_matches_first(mem_store: Store, corpus: dict[str, int]) -> None:
    ranked = [item.id for item, _ in mem_store.keyword_search("zebra")]
    assert ranked == [corpus["a"], corpus["b"], corpus["d"]]


@pytest.mark.parametrize(("method", "expected"), [("rrf", "abcd"), ("minmax", "acbd")])
def test_hybrid_order_on_the_fixed_corpus(mem_store: Store, corpus: dict[str, int], method: str,
                                          expected: str) -> None:
    mirror = FixedMirror({corpus["c"]: 0.1, corpus["a"]: 0.3, corpus["b"]: 0.6})
    service = SearchService(mem_store, mirror, fusion=method)
    result = service.search(SearchRequest(query="zebra", now=NOW))
    assert result.strategy == "hybrid" and result.fallback_reason is None and result.mirror_available
    assert ids(result) == [corpus[k] for k in expected]
    top = result.hits[0]
    assert top.legs["keyword"].rank == 1 and top.legs["semantic"].rank == 2
    assert "semantic" not in next(h for h in result.hits if h.item.id == corpus["d"]).legs
    assert result.counts["observation"] == 4


def test_fusion_method_can_be_chosen_per_request(mem_store: Store, corpus: dict[str, int]) -> None:
    mirror = FixedMirror({corpus["c"]: 0.1, corpus["a"]: 0.3, corpus["b"]: 0.6})
    service = SearchService(mem_store, mirror)
    assert ids(service.search(query="zebra", now=NOW, fusion="minmax"))[:2] == [corpus["a"], corpus["c"]]
    with pytest.raises(ValidationError, match="rrf or minmax"):
        service.search(query="zebra", fusion="borda")


def test_order_newest_and_oldest_apply_after_fusion(mem_store: Store, corpus: dict[str, int]) -> None:
    mirror = FixedMirror({corpus["c"]: 0.1, corpus["a"]: 0.3})
    service = SearchService(mem_store, mirror)
    assert ids(service.search(query="zebra", order="newest", now=NOW)) == [corpus[k] for k in "dcba"]
    assert ids(service.search(query="zebra", order="oldest", now=NOW)) == [corpus[k] for k in "abcd"]


def test_offset_pages_through_the_fused_order(mem_store: Store, corpus: dict[str, int]) -> None:
    mirror = FixedMirror({corpus["c"]: 0.1, corpus["a"]: 0.3, corpus["b"]: 0.6})
    service = SearchService(mem_store, mirror, fusion="rrf")
    first = ids(service.search(query="zebra", limit=2, now=NOW))
    second = ids(service.search(query="zebra", limit=2, offset=2, now=NOW))
    assert first + second == [corpus[k] for k in "abcd"]


def test_a_soft_recency_boost_lifts_newer_matches(mem_store: Store) -> None:
    old = add(mem_store, days_ago=300, title="Zebra zebra", narrative="zebra stripes")
    new = add(mem_store, days_ago=1, title="Notes", narrative="a zebra once")
    # rrf: under min-max the weaker of two hits scores 0, which no multiplicative boost can lift
    service = SearchService(mem_store, None, fusion="rrf")
    assert ids(service.search(query="zebra", now=NOW)) == [old, new]
    assert ids(service.search(query="zebra", now=NOW, recency_boost_half_life_days=30)) == [new, old]
    boosted = SearchService(mem_store, None, fusion="rrf", recency_boost_half_life_days=30)
    assert ids(boosted.search(query="zebra", now=NOW)) == [new, old]


# -- paths and fallbacks ----------------------------------------------------------------------------------
def test_no_query_text_is_filter_only_newest_first(mem_store: Store, corpus: dict[str, int]) -> None:
    service = SearchService(mem_store, FixedMirror({}))
    result = service.search(SearchRequest(query="   "))
    assert result.strategy == "filter_only" and result.fallback_reason is None
    assert ids(result) == [corpus[k] for k in "dcba"]
    assert ids(service.search(order="oldest", limit=2)) == [corpus["a"], corpus["b"]]
    assert all(h.score == 0.0 and h.legs == {} for h in result.hits)


def test_filters_apply_to_filter_only_search(mem_store: Store) -> None:
    bug = add(mem_store, days_ago=3, type="bugfix", title="Fix", narrative="n", concepts=["gotcha"],
              files_modified=["src/auth.py"], platform_source="codex", session="s1")
    add(mem_store, days_ago=2, kind="summary", title="Wrap up", learned="x")
    add(mem_store, days_ago=1, kind="prompt", text="please fix", title=None)
    service = SearchService(mem_store)
    assert ids(service.search(types=["bugfix"])) == [bug]
    assert ids(service.search(concepts="gotcha")) == [bug]
    assert ids(service.search(files="auth.py")) == [bug]
    assert ids(service.search(platform_source="codex")) == [bug]
    assert ids(service.search(session="s1")) == [bug]
    assert [h.item.kind for h in service.search(kinds="summaries,prompt").hits] == ["prompt", "summary"]
    assert ids(service.search(date_end=NOW - 2 * DAY - 1)) == [bug]
    assert service.search(kinds="all").counts == {"observation": 1, "summary": 1, "prompt": 1, "manual": 0}


def test_a_type_memcairn_never_writes_is_named_when_nothing_matches(mem_store: Store, corpus: dict[str, int]) -> None:
    """`--type nonsense` (a typo, or a kind given as a type) said nothing; an empty answer now says why."""
    service = SearchService(mem_store)
    for request in ({"types": ["nonsense"]}, {"types": ["bugfx"], "query": "zebra"}):
        result = service.search(**request)
        assert not result.hits and any("no memory has type" in n and "bugfix" in n for n in result.notes), request
    assert not any("type" in n for n in service.search(types=["bugfix"]).notes)  # a known type: no note
    add(mem_store, kind="manual", type="checklist", title="Release steps", text="tag, build, publish")
    assert ids(service.search(types=["checklist"])) and not service.search(types=["checklist"]).notes


def test_without_a_mirror_search_is_keyword_and_says_why(mem_store: Store, corpus: dict[str, int]) -> None:
    result = SearchService(mem_store, None).search(query="zebra")
    assert result.strategy == "keyword" and result.fallback_reason == "vector_unavailable"
    assert not result.mirror_available
    assert ids(result) == [corpus["a"], corpus["b"], corpus["d"]]
    assert any("semantic search unavailable" in n for n in result.notes)
    assert all(set(h.legs) == {"keyword"} for h in result.hits)


def test_a_mirror_that_cannot_be_opened_is_named_in_the_note(mem_store: Store, corpus: dict[str, int]) -> None:
    result = SearchService(mem_store, None, mirror_error="model file missing").search(query="zebra")
    assert result.fallback_reason == "vector_unavailable"
    assert "model file missing" in " ".join(result.notes)


def test_a_failing_vector_leg_falls_back_to_keyword(mem_store: Store, corpus: dict[str, int]) -> None:
    result = SearchService(mem_store, FixedMirror({}, fail=True)).search(query="zebra")
    assert result.strategy == "keyword" and result.fallback_reason == "vector_error"
    assert ids(result) == [corpus["a"], corpus["b"], corpus["d"]]
    assert any("index is down" in n for n in result.notes)


def test_a_broken_real_mirror_gives_vector_error_then_unavailable(mem_store: Store, corpus: dict[str, int]) -> None:
    mirror = MirrorSync(mem_store, BrokenIndex(64), HashEmbedder(64), index_key="t")
    service = SearchService(mem_store, mirror)
    first = service.search(query="zebra")
    assert (first.strategy, first.fallback_reason) == ("keyword", "vector_error")
    assert ids(first) == [corpus["a"], corpus["b"], corpus["d"]]
    second = service.search(query="zebra")  # the mirror marked itself degraded
    assert (second.strategy, second.fallback_reason) == ("keyword", "vector_unavailable")
    assert "vector index unreachable" in " ".join(second.notes)


def test_hybrid_with_a_real_in_memory_mirror(mem_store: Store) -> None:
    login = add(mem_store, title="Login expiry", narrative="session tokens expired early because of the clock")
    other = add(mem_store, title="Chart colours", narrative="the dashboard palette was changed")
    mirror = MirrorSync(mem_store, InMemoryIndex(384), HashEmbedder(), index_key="t")
    mirror.sync_pending()
    service = SearchService(mem_store, mirror)
    result = service.search(query="tokens expired", now=NOW)
    assert result.strategy == "hybrid" and ids(result)[0] == login
    assert result.hits[0].legs.keys() == {"keyword", "semantic"}
    semantic_only = service.search(query="palette dashboards", now=NOW)
    assert other in ids(semantic_only)


def test_merged_projects_answer_to_the_new_name(mem_store: Store) -> None:
    old = add(mem_store, project="old-name", title="Zebra from before the rename", narrative="zebra")
    new = add(mem_store, project="new-name", title="Zebra after the rename", narrative="zebra")
    add(mem_store, project="elsewhere", title="Zebra unrelated", narrative="zebra")
    mem_store.merge_project("old-name", "new-name")
    mirror = MirrorSync(mem_store, InMemoryIndex(384), HashEmbedder(), index_key="t")
    mirror.sync_pending()
    service = SearchService(mem_store, mirror)
    assert set(ids(service.search(projects=["new-name"]))) == {old, new}
    result = service.search(query="zebra", projects="new-name", now=NOW)
    assert result.strategy == "hybrid" and set(ids(result)) == {old, new}
    assert all("semantic" in h.legs for h in result.hits)
    assert ids(service.search(query="zebra", projects=["old-name"], now=NOW)) == [old]


def test_platform_scoped_search_with_no_semantic_hit_falls_back_to_scoped_keyword(mem_store: Store) -> None:
    claude = add(mem_store, title="Zebra in claude", narrative="zebra", platform_source="claude-code", session="a")
    codex = add(mem_store, title="Zebra in codex", narrative="zebra", platform_source="codex", session="b")
    mirror = FixedMirror({codex: 0.1})  # e.g. vectors written before platform_source was recorded
    result = SearchService(mem_store, mirror).search(query="zebra", platform_source="claude-code", now=NOW)
    assert (result.strategy, result.fallback_reason) == ("keyword", "platform_scoped_zero")
    assert ids(result) == [claude]
    assert any("platform 'claude-code'" in n for n in result.notes)
    scoped = SearchService(mem_store, mirror).search(query="zebra", platform_source="codex", now=NOW)
    assert scoped.strategy == "hybrid" and ids(scoped) == [codex]


def test_an_unscoped_empty_semantic_leg_stays_hybrid(mem_store: Store, corpus: dict[str, int]) -> None:
    result = SearchService(mem_store, FixedMirror({})).search(query="zebra", now=NOW)
    assert result.strategy == "hybrid" and result.fallback_reason is None and len(result.hits) == 3


# -- mode: the legs per request ------------------------------------------------------------------------------
def test_mode_keyword_never_consults_the_mirror_and_is_no_fallback(mem_store: Store, corpus: dict[str, int]) -> None:
    mirror = FixedMirror({corpus["c"]: 0.1, corpus["a"]: 0.3})
    result = SearchService(mem_store, mirror).search(query="zebra", mode="keyword", now=NOW)
    assert (result.strategy, result.fallback_reason) == ("keyword", None) and result.mirror_available
    assert ids(result) == [corpus["a"], corpus["b"], corpus["d"]]
    assert all(set(h.legs) == {"keyword"} for h in result.hits)
    assert "keyword only, as asked" in result.notes and mirror.queries == []
    without_mirror = SearchService(mem_store, None).search(query="zebra", mode="keyword")
    assert (without_mirror.strategy, without_mirror.fallback_reason) == ("keyword", None)
    assert not any("unavailable" in n for n in without_mirror.notes)


def test_mode_semantic_runs_the_semantic_leg_alone(mem_store: Store, corpus: dict[str, int]) -> None:
    mirror = FixedMirror({corpus["c"]: 0.1, corpus["a"]: 0.3, corpus["b"]: 0.6})
    result = SearchService(mem_store, mirror).search(query="zebra", mode="semantic", now=NOW)
    assert (result.strategy, result.fallback_reason) == ("semantic", None)
    assert ids(result) == [corpus["c"], corpus["a"], corpus["b"]]  # d matches the keyword leg only
    assert all(set(h.legs) == {"semantic"} for h in result.hits)
    assert "semantic only, as asked" in result.notes


def test_mode_semantic_without_a_usable_mirror_falls_back_to_keyword(mem_store: Store,
                                                                     corpus: dict[str, int]) -> None:
    down = SearchService(mem_store, None).search(query="zebra", mode="semantic")
    assert (down.strategy, down.fallback_reason) == ("keyword", "vector_unavailable")
    assert ids(down) == [corpus["a"], corpus["b"], corpus["d"]]
    assert not any("as asked" in n for n in down.notes)
    failing = SearchService(mem_store, FixedMirror({}, fail=True)).search(query="zebra", mode="semantic")
    assert (failing.strategy, failing.fallback_reason) == ("keyword", "vector_error")
    assert ids(failing) == [corpus["a"], corpus["b"], corpus["d"]]


def test_mode_auto_is_the_default_and_an_explicit_mode_wins_over_the_service_legs(mem_store: Store,
                                                                                  corpus: dict[str, int]) -> None:
    mirror = FixedMirror({corpus["c"]: 0.1})
    assert SearchRequest(query="zebra", mode=" AUTO ") == SearchRequest(query="zebra", mode="") == \
        SearchRequest(query="zebra")
    assert SearchRequest(mode="Keyword").mode == "keyword"
    assert SearchService(mem_store, mirror).search(query="zebra", mode="auto").strategy == "hybrid"
    keyword_only = SearchService(mem_store, mirror, legs=("keyword",))
    assert keyword_only.search(query="zebra").strategy == "keyword"
    assert keyword_only.search(query="zebra", mode="semantic").strategy == "semantic"
    assert SearchService(mem_store, mirror, legs=("semantic",)).search(query="zebra", mode="keyword").strategy \
        == "keyword"
    assert SearchRequest(query="zebra", mode="semantic").mode == "semantic"


def test_mode_without_query_text_is_filter_only_and_says_so(mem_store: Store, corpus: dict[str, int]) -> None:
    mirror = FixedMirror({corpus["c"]: 0.1})
    result = SearchService(mem_store, mirror).search(mode="semantic")
    assert result.strategy == "filter_only" and len(result.hits) == 4 and mirror.queries == []
    assert any("mode semantic needs a query" in n for n in result.notes)


def test_mode_with_an_unknown_project_plans_the_strategy_of_that_mode(mem_store: Store,
                                                                      corpus: dict[str, int]) -> None:
    result = SearchService(mem_store, FixedMirror({})).search(query="zebra", projects="nowhere", mode="semantic")
    assert (result.strategy, result.hits) == ("semantic", [])
    assert SearchService(mem_store, None).search(query="zebra", projects="nowhere", mode="keyword").fallback_reason \
        is None


@pytest.mark.parametrize("value", ["hybrid", "fuzzy", 3, ["keyword"]])
def test_an_unknown_mode_is_refused_listing_the_accepted_ones(mem_store: Store, value: object) -> None:
    with pytest.raises(ValidationError, match="auto, keyword, semantic"):
        SearchService(mem_store).search(query="zebra", mode=value)


# -- recency window ----------------------------------------------------------------------------------------
@pytest.fixture
def aged(mem_store: Store) -> tuple[int, int, FixedMirror]:
    old = add(mem_store, days_ago=200, title="Old decision", narrative="alpha")
    recent = add(mem_store, days_ago=10, title="Recent decision", narrative="beta")
    return old, recent, FixedMirror({old: 0.1, recent: 0.2})


def test_semantic_hits_older_than_the_window_are_dropped(mem_store: Store, aged: tuple[int, int, FixedMirror]) -> None:
    old, recent, mirror = aged
    service = SearchService(mem_store, mirror, recency_window_days=90)
    assert ids(service.search(query="unrelated words", now=NOW)) == [recent]


def test_an_explicit_date_range_replaces_the_window(mem_store: Store, aged: tuple[int, int, FixedMirror]) -> None:
    old, recent, mirror = aged
    service = SearchService(mem_store, mirror, recency_window_days=90)
    result = service.search(query="unrelated", date_start=NOW - 300 * DAY, date_end=NOW - 100 * DAY, now=NOW)
    assert ids(result) == [old]
    assert ids(service.search(query="unrelated", date_start=NOW - 300 * DAY, now=NOW)) == [old, recent]


def test_window_zero_is_off_and_now_moves_the_window(mem_store: Store, aged: tuple[int, int, FixedMirror]) -> None:
    old, recent, mirror = aged
    assert ids(SearchService(mem_store, mirror, recency_window_days=0).search(query="x", now=NOW)) == [old, recent]
    assert old in ids(SearchService(mem_store, mirror, recency_window_days=90).search(query="x", now=NOW - 150 * DAY))
    assert ids(SearchService(mem_store, mirror, recency_window_days=5).search(query="x", now=NOW)) == []


def test_the_window_never_drops_keyword_hits(mem_store: Store, aged: tuple[int, int, FixedMirror]) -> None:
    old, _recent, mirror = aged
    result = SearchService(mem_store, mirror, recency_window_days=90).search(query="alpha", now=NOW)
    assert old in ids(result) and set(result.hits[ids(result).index(old)].legs) == {"keyword"}


# -- bad input ----------------------------------------------------------------------------------------------
def test_unknown_project_gives_an_empty_result_listing_known_projects(mem_store: Store,
                                                                      corpus: dict[str, int]) -> None:
    add(mem_store, project="other", title="x")
    service = SearchService(mem_store, FixedMirror({corpus["a"]: 0.1}))
    result = service.search(query="zebra", projects=["nope"])
    assert result.hits == [] and result.strategy == "hybrid"
    assert result.notes == ["unknown project 'nope'; known projects: other, p"]
    mixed = service.search(projects=["nope", "p"])
    assert len(mixed.hits) == 4 and "unknown project 'nope'" in mixed.notes[0]


def test_malformed_dates_list_the_accepted_formats(mem_store: Store) -> None:
    service = SearchService(mem_store)
    for bad in ("yesterday", "2026-13-01", "12/01/2026", "7 days"):
        with pytest.raises(ValidationError, match=r"2026-12-01.*epoch seconds or milliseconds.*7d"):
            service.search(date_start=bad)
    with pytest.raises(ValidationError, match="after the end date"):
        service.search(date_start="2026-12-02", date_end="2026-12-01")


def test_time_zones_a_caller_may_name() -> None:
    from zoneinfo import ZoneInfo

    from memcairn.search import local_tz_name, parse_tz

    assert parse_tz("Asia/Tokyo") == ZoneInfo("Asia/Tokyo") and parse_tz(None) is None and parse_tz(" ") is None
    assert parse_tz("utc") == UTC and parse_tz("Z") == UTC
    assert parse_tz("+09:00") == timezone(timedelta(hours=9))
    assert parse_tz("-0530") == timezone(-timedelta(hours=5, minutes=30))
    for bad in ("Mars/Base", "../../etc/passwd", "+24:00", "+09:60", "9", "nine"):
        with pytest.raises(ValidationError, match=r"IANA zone name .*UTC.*\+09:00"):
            parse_tz(bad)
    assert parse_tz(local_tz_name()) is not None


def test_dates_in_every_accepted_form() -> None:
    day = int(datetime(2026, 12, 1, tzinfo=UTC).timestamp() * 1000)
    assert parse_time("2026-12-01", tz=UTC) == day
    assert parse_time("2026-12-01", tz=UTC, end_of_day=True) == day + DAY - 1
    assert parse_time("2026-12-01T02:30", tz=UTC) == day + 150 * 60_000
    assert parse_time("2026-12-01T02:30Z") == day + 150 * 60_000
    assert parse_time("2026-12-01T02:30:00+02:00") == day + 30 * 60_000
    assert parse_time("2026-12-01T02:30", tz=timezone(timedelta(hours=-1))) == day + 210 * 60_000
    assert parse_time(day // 1000) == day and parse_time(str(day)) == day and parse_time(day) == day
    assert parse_time("7d", now=NOW) == NOW - 7 * DAY and parse_time("24h", now=NOW) == NOW - DAY
    assert parse_time("30m", now=NOW) == NOW - 30 * 60_000 and parse_time("2w", now=NOW) == NOW - 14 * DAY
    assert parse_time(None) is None and parse_time("  ") is None
    req = SearchRequest(date_start="2026-12-01", date_end="2026-12-01", tz=UTC)
    assert (req.date_start, req.date_end) == (day, day + DAY - 1)
    for bad in (True, -5, [1]):
        with pytest.raises(ValidationError):
            parse_time(bad)


def test_limit_and_offset_are_clamped_and_said(mem_store: Store, corpus: dict[str, int]) -> None:
    service = SearchService(mem_store)
    result = service.search(query="zebra", limit=500)
    assert "limit 500 clamped to 100" in result.notes
    assert "limit 0 clamped to 1" in service.search(limit=0).notes
    assert len(service.search(limit=-3).hits) == 1
    assert "offset -1 clamped to 0" in service.search(offset=-1).notes
    assert SearchRequest(limit="7").limit == 7
    with pytest.raises(ValidationError, match="limit must be a whole number"):
        SearchRequest(limit="abc")


def test_kinds_accept_singular_plural_and_all() -> None:
    assert parse_kinds("observations") == ("observation",)
    assert parse_kinds(["summaries", "prompt", "manual"]) == ("summary", "prompt", "manual")
    assert parse_kinds("summary, summaries") == ("summary",)
    assert parse_kinds("all") is None and parse_kinds(None) is None and parse_kinds("") is None
    with pytest.raises(ValidationError, match=r"unknown kind 'widgets'; use observation\(s\)"):
        parse_kinds("widgets")


def test_unknown_order_is_refused_and_relevance_without_query_is_newest(mem_store: Store,
                                                                        corpus: dict[str, int]) -> None:
    with pytest.raises(ValidationError, match="relevance, newest, oldest"):
        SearchRequest(order="best")
    result = SearchService(mem_store).search(order="relevance")
    assert ids(result)[0] == corpus["d"] and "no query text: ordered newest first" in result.notes


@pytest.mark.parametrize(("field", "value"), [("order", 5), ("order", ["newest"]), ("fusion", 2), ("fusion", True)])
def test_an_order_or_fusion_that_is_not_text_is_refused_not_dropped(field: str, value: object) -> None:
    with pytest.raises(ValidationError, match=f"unknown {field} "):
        SearchRequest(query="zebra", **{field: value})  # type: ignore[arg-type]


def test_several_platforms_or_sessions_are_refused_not_cut_to_the_first(mem_store: Store) -> None:
    add(mem_store, platform_source="codex", title="from codex")
    add(mem_store, platform_source="cursor", title="from cursor")
    with pytest.raises(ValidationError, match="give one platform, not 2: 'cursor', 'codex'"):
        SearchService(mem_store).search(platform_source=["cursor", "codex"])
    with pytest.raises(ValidationError, match="give one session"):
        SearchRequest(session=("a", "b"))
    assert SearchRequest(platform_source=["codex", " codex "]).platform_source == "codex"


def test_a_very_long_query_is_cut_for_the_semantic_leg_and_said(mem_store: Store, corpus: dict[str, int]) -> None:
    mirror = FixedMirror({corpus["a"]: 0.2})
    words = " ".join(f"word{i}" for i in range(1000)) + " zebra"
    result = SearchService(mem_store, mirror).search(query=words, now=NOW)
    assert len(mirror.queries[0]) == MAX_SEMANTIC_QUERY_CHARS
    assert f"query cut to its first {MAX_SEMANTIC_QUERY_CHARS} characters for semantic search" in result.notes
    assert any("first 32 distinct words" in n for n in result.notes)
    assert result.strategy == "hybrid" and ids(result) == [corpus["a"]]


@pytest.mark.parametrize("text", ['"NEAR(zebra* AND', "zebra) OR (", "title:zebra -x", "'; DROP TABLE x; --"])
def test_fts_syntax_in_the_query_is_just_text(mem_store: Store, corpus: dict[str, int], text: str) -> None:
    result = SearchService(mem_store, None).search(query=text, min_score=0)  # the words, not their relevance
    assert result.strategy == "keyword"
    if "zebra" in text:
        assert corpus["a"] in ids(result)


def test_a_query_that_is_not_text_is_refused(mem_store: Store) -> None:
    with pytest.raises(ValidationError, match="query must be text"):
        SearchService(mem_store).search(query=42)
    with pytest.raises(ValidationError, match="recency_boost_half_life_days"):
        SearchRequest(query="x", recency_boost_half_life_days=-1)


# -- telemetry -----------------------------------------------------------------------------------------------
def test_telemetry_counts_strategies_and_never_keeps_the_query(mem_store: Store, corpus: dict[str, int],
                                                               caplog: pytest.LogCaptureFixture) -> None:
    service = SearchService(mem_store, FixedMirror({corpus["c"]: 0.1}))
    caplog.set_level(logging.INFO, logger="memcairn.telemetry")
    service.search(query="secret zebra words", now=NOW, projects=["p"])
    service.search()
    service.mirror = FixedMirror({}, fail=True)
    service.search(query="secret zebra words")
    snap = service.telemetry_snapshot()
    assert snap["searches"] == 3
    assert snap["strategies"] == {"hybrid": 1, "filter_only": 1, "keyword": 1}
    assert snap["fallbacks"] == {"vector_error": 1}
    assert set(snap["latency_ms"]) == {"p50", "p95", "p99", "max"} and snap["latency_ms"]["p50"] >= 0
    lines = [r.getMessage() for r in caplog.records if r.name == "memcairn.telemetry"]
    assert len(lines) == 3
    first = json.loads(lines[0])
    assert first["strategy"] == "hybrid" and first["filters"] == ["projects"] and first["semantic_count"] == 1
    everything = json.dumps(snap) + "".join(lines)
    assert "secret" not in everything and "zebra" not in everything and "Zebra" not in everything


def test_an_empty_snapshot_has_no_percentiles(mem_store: Store) -> None:
    snap = SearchService(mem_store).telemetry_snapshot()
    assert snap["searches"] == 0 and snap["latency_ms"]["p50"] is None


# -- the CLI door ------------------------------------------------------------------------------------------
def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = run(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_search_without_a_mirror_reports_the_fallback(capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMCAIRN_VECTOR_BACKEND", "none")
    _cli(capsys, "add", "--project", "demo", "--kind", "observation", "--title", "Zebra crossing",
         "--narrative", "the handler was wrong", "--file-modified", "src/cross.py")
    code, out, _ = _cli(capsys, "search", "zebra", "--project", "demo", "--kind", "observations",
                        "--file", "cross.py", "--since", "30d", "--limit", "500", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["strategy"] == "keyword" and data["fallback_reason"] == "vector_unavailable"
    assert "limit 500 clamped to 100" in data["notes"]
    assert set(data["results"][0]) == {"id", "kind", "type", "title", "project", "created_at_epoch", "score",
                                       "relevance", "weak"}
    code, out, _ = _cli(capsys, "search", "zebra")
    assert code == 0 and "strategy: keyword (fallback: vector_unavailable)" in out and "Zebra crossing" in out
    code, out, _ = _cli(capsys, "search", "--order", "oldest", "--json")
    assert json.loads(out)["strategy"] == "filter_only"


def test_cli_search_is_hybrid_with_a_mirror(capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMCAIRN_VECTOR_BACKEND", "sqlite-vec")
    monkeypatch.setenv("MEMCAIRN_EMBEDDING_MODEL", "hash")
    _cli(capsys, "add", "--project", "demo", "--title", "Zebra crossing")
    code, out, _ = _cli(capsys, "search", "zebra", "--json")
    assert code == 0 and json.loads(out)["strategy"] == "hybrid"


def test_cli_search_survives_a_mirror_that_cannot_open(capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMCAIRN_EMBEDDING_MODEL", "no-such-model")
    _cli(capsys, "add", "--project", "demo", "--title", "Zebra crossing")
    code, out, _ = _cli(capsys, "search", "zebra", "--json")
    data = json.loads(out)
    assert code == 0 and data["fallback_reason"] == "vector_unavailable"
    assert "no-such-model" in " ".join(data["notes"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["search", "x", "--since", "last tuesday"], "2026-12-01"),
        (["search", "x", "--kind", "widgets"], "unknown kind"),
        (["search", "x", "--order", "best"], "order"),
    ],
)
def test_cli_search_user_errors_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch, args: list[str],
                                                        message: str) -> None:
    monkeypatch.setenv("MEMCAIRN_VECTOR_BACKEND", "none")
    code, _, err = _cli(capsys, *args)
    assert code == 2 and message in err and "Traceback" not in err


@pytest.mark.parametrize("value", ["99999999999999999999999", 10**30, "999999999999d"])
def test_absurd_dates_are_clear_errors_or_clamped_never_overflows(value) -> None:  # noqa: ANN001
    from memcairn.core.errors import ValidationError
    from memcairn.search.request import parse_time

    try:
        result = parse_time(value, now=1_000)
    except ValidationError as exc:
        assert "not a date" in str(exc)
    else:
        assert result == 0


def test_scoped_keyword_search_ranks_only_the_projects_rows(store: Store) -> None:
    from memcairn.core.models import ItemFilter

    ids = {name: [add(store, project=name, title=f"cache eviction note {w}") for w in ("red", "green", "blue")]
           for name in ("one", "two", "three")}
    store.merge_project("three", "two")
    two_ids = store.resolve_project_ids(["two"])
    assert sorted(i for i, _ in store.keyword_ids("eviction", ItemFilter(projects=["two"]))) == sorted(
        ids["two"] + ids["three"])
    assert sorted(i for i, _ in store.keyword_ids("eviction", ItemFilter(projects=["one"], kinds=["observation"]))
                  ) == ids["one"]
    # a number in the query is text, never the project's own scope token
    for pid in two_ids:
        assert store.keyword_ids(str(pid), ItemFilter(projects=["two"])) == []
        assert store.keyword_ids(f"{pid}", None) == []
    assert store.keyword_ids("eviction", ItemFilter(projects=["nowhere"])) == []


def test_the_semantic_leg_asks_twice_its_pool_and_twice_again_when_filters_may_drop_hits(mem_store: Store) -> None:
    ids = [add(mem_store, days_ago=1 + n, title=f"queue note {n}") for n in range(3)]
    mirror = FixedMirror({i: 0.1 for i in ids})
    service = SearchService(mem_store, mirror)
    service.search(query="queue", projects=["p"], limit=20)
    service.search(query="queue", projects=["p"], limit=80)
    service.search(query="queue", projects=["p"], types=["bugfix"], limit=20)
    SearchService(mem_store, mirror, recency_window_days=30).search(query="queue", limit=20, now=NOW)
    # a hybrid search ordered by relevance ranks windows of 200 candidates a leg (search.windows)
    assert mirror.limits == [400, 400, 800, 800]
    SearchService(mem_store, mirror, windows=False).search(query="queue", projects=["p"], limit=80)
    assert mirror.limits[-1] == 160


def test_the_file_filter_matches_paths_with_backslashes_and_quotes(mem_store: Store) -> None:
    windows = add(mem_store, days_ago=2, title="Windows fix", files_modified=["C:\\proj\\src\\main.py"])
    quoted = add(mem_store, days_ago=1, title="Quoted name", files_read=['docs/"draft".md'])
    service = SearchService(mem_store)
    assert ids(service.search(files="C:\\proj\\src\\main.py")) == [windows]
    assert ids(service.search(files="src\\main.py")) == [windows]
    assert ids(service.search(query="fix", files="proj\\src")) == [windows]
    assert ids(service.search(files='"draft".md')) == [quoted]
    assert ids(service.search(files="main.py")) == [windows]
    assert ids(service.search(files="%")) == []


def test_a_long_query_of_stopwords_only_is_cut_and_said(mem_store: Store) -> None:
    from memcairn.store import fts

    words = sorted(fts.STOPWORDS)[: fts.MAX_QUERY_TOKENS + 8]
    result = SearchService(mem_store).search(query=" ".join(words))
    assert f"keyword search uses the first {fts.MAX_QUERY_TOKENS} distinct words of the query" in result.notes
    short = SearchService(mem_store).search(query=" ".join(words[:5]))
    assert not any("distinct words" in n for n in short.notes)


@pytest.mark.parametrize("text", ["!!!???", "*", "🎉", '"" ()'])
def test_a_query_without_a_word_says_the_keyword_leg_had_nothing_to_match(mem_store: Store, text: str) -> None:
    add(mem_store, title="Emoji 🎉 support")
    result = SearchService(mem_store).search(query=text)
    assert result.hits == [] and result.strategy == "keyword"
    assert any(n.startswith("the query holds no word to match") for n in result.notes)
    assert not any("no word" in n for n in SearchService(mem_store).search(query="emoji").notes)


def test_local_dates_follow_the_local_rules_of_that_date_not_todays_offset(monkeypatch: pytest.MonkeyPatch) -> None:
    import time
    from zoneinfo import ZoneInfo

    if not hasattr(time, "tzset"):
        pytest.skip("needs time.tzset")
    monkeypatch.setenv("TZ", "Europe/Paris")
    time.tzset()
    try:
        def utc(*args: int) -> int:
            return int(datetime(*args, tzinfo=UTC).timestamp() * 1000)

        # Summer (+02:00) and winter (+01:00) both hold, whichever half of the year the test runs in.
        assert parse_time("2026-07-01") == utc(2026, 6, 30, 22)
        assert parse_time("2026-12-01") == utc(2026, 11, 30, 23)
        assert parse_time("2026-07-01T12:00") == utc(2026, 7, 1, 10)
        assert parse_time("2026-03-29", end_of_day=True) == utc(2026, 3, 29, 22) - 1  # a 23-hour day
        # ... and the same as the zone named (what a worker is sent), so both doors filter alike.
        paris = ZoneInfo("Europe/Paris")
        assert parse_time("2026-07-01", end_of_day=True) == parse_time("2026-07-01", end_of_day=True, tz=paris)
    finally:
        monkeypatch.undo()
        time.tzset()
