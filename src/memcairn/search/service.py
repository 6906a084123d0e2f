"""The one search path every door uses: HTTP, MCP, CLI and context injection.

Three strategies, chosen per request and always named in the result:

- ``filter_only``: no query text. Structured filters over SQLite, newest first unless asked otherwise.
- ``hybrid``: query text and an available mirror. Both legs run every time: keyword (FTS5/bm25 with the
  filters) and semantic (the mirror's nearest items, hydrated and filtered through SQLite with the same
  filters plus the recency window, if any). The legs are fused by item (``minmax`` by default, or ``rrf``),
  an optional recency boost is applied, then the order (relevance, newest or oldest) and the page.
- ``keyword``: query text without a usable semantic leg. ``fallback_reason`` says why: no mirror or a
  degraded one (``vector_unavailable``), the mirror failed during this search (``vector_error``), or a
  search scoped by platform found nothing semantically (``platform_scoped_zero``: vectors written before
  the platform was recorded cannot match, so the scoped keyword leg answers alone).
- ``semantic`` with ``fallback_reason`` ``keyword_index_damaged``: the keyword index could not be read (a
  damaged block, a dropped table) or a search found it disagreeing with the rows' text (``Store.keyword_ids``:
  a damaged block that reads as empty): the semantic leg answers alone while the index is rebuilt (the store's
  damage listeners hear of it; the worker repairs it). Without a mirror such a search finds nothing and says so.

A request's ``mode`` picks the legs per query: ``auto`` (None) runs the service's ``legs`` (both by default,
so hybrid when the mirror is up); ``semantic`` runs the semantic leg alone through the same hydration, filters
and window (strategy ``semantic``, falling back to keyword with a reason when it cannot run, as above);
``keyword`` never consults the mirror (strategy ``keyword``, no fallback reason: nothing fell back). An explicit
mode wins over the service's ``legs``, a setting for benchmarks and diagnostics that restricts every ``auto``
query the same way. The strategy names what ran.

The recency window (off by default: 0) drops *semantic* hits older than ``now - window`` unless the request
names a date range, which then applies instead. Both defaults were measured with ``memcairn bench
longmemeval``: min-max fusion matched reciprocal-rank fusion on every hybrid metric and beat it on recall@1
and nDCG; a 90-day window only dropped relevant older memories (knowledge updates, events months back), and a
soft recency boost gained nothing. Keyword hits are never windowed: an exact word match is evidence enough.
Time orders sort the best candidates of the legs (at least ``TIME_ORDER_POOL`` of each) by time rather than
every match.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import tzinfo
from typing import Any

from memcairn.core.clock import now_ms
from memcairn.core.errors import KeywordIndexDamagedError, ValidationError, WouldWait
from memcairn.core.models import DEFAULT_TYPES, MAX_ITEM_ID, OBSERVATION_TYPES, ItemFilter, MemoryItem
from memcairn.search import evidence, fusion, relevance, windows
from memcairn.search.freshness import Freshness, FreshnessCheck, stale_last, with_corrections
from memcairn.search.request import SearchRequest
from memcairn.search.result import LegRank, SearchHit, SearchResult, Timeline
from memcairn.search.telemetry import SearchEnvelope, Telemetry
from memcairn.store.protocols import SearchStore, SessionWindows, StepEvidence
from memcairn.store.records import MAX_QUERY_TOKENS, STOPWORDS, QueryTerms

log = logging.getLogger("memcairn.search")

# The semantic leg embeds at most this many characters of the query (a model reads ~256 tokens anyway);
# the keyword leg keeps its own cap of MAX_QUERY_TOKENS words.
MAX_SEMANTIC_QUERY_CHARS = 2000
POOL_MIN = 50  # candidates each leg contributes to a relevance-ordered fusion, at least
TIME_ORDER_POOL = 200  # ... and to a newest/oldest one
WINDOW_POOL = 200  # ... and to a windowed one (search.windows: neighbours' similarities, a stable min-max)
MAX_VECTOR_CANDIDATES = 1000
DAY_MS = 86_400_000
LEGS = ("keyword", "semantic")
MAX_PROJECTS_LISTED = 20
_WORD = re.compile(r"[^\W_]+", re.UNICODE)


class SearchService:
    """Search, timeline and full records over a store and an optional vector mirror.

    ``fusion`` and ``recency_boost_half_life_days`` are defaults a request may override;
    ``mirror_error`` (why the mirror could not be opened) is repeated in the notes of keyword fallbacks;
    ``freshness`` checks how true the hits still are (``search.freshness``): each hit carries its state, and a
    query ordered by relevance ranks the stale ones below the others (after the floor: demoted, not removed).
    """

    mirror_overfetch = 2  # the semantic leg asks the mirror for this many times its pool (see ``_semantic_leg``)

    def __init__(self, store: SearchStore, mirror: Any = None, *, recency_window_days: float = 0,
                 fusion: str = "minmax", recency_boost_half_life_days: float | None = None,
                 weights: dict[str, float] | None = None, mirror_error: str | None = None,
                 telemetry: Telemetry | None = None, legs: Sequence[str] = LEGS, evidence_snippets: int = 0,
                 freshness: FreshnessCheck | None = None, windows: bool = True) -> None:
        if fusion not in ("rrf", "minmax"):
            raise ValidationError(f"unknown fusion {fusion!r}; use rrf or minmax")
        legs = tuple(dict.fromkeys(legs))
        if not legs or any(leg not in LEGS for leg in legs):
            raise ValidationError(f"legs must name one or both of {', '.join(LEGS)}, got {legs!r}")
        if recency_window_days < 0:
            raise ValidationError("recency_window_days must be >= 0 (0 turns the window off)")
        self.store = store
        self.mirror = mirror
        self.recency_window_days = recency_window_days
        self.fusion = fusion
        self.recency_boost_half_life_days = recency_boost_half_life_days
        self.weights = weights
        self.mirror_error = mirror_error
        self.telemetry = telemetry or Telemetry()
        self.legs = legs
        self.evidence_snippets = evidence_snippets  # matching steps quoted beside the hits (search.evidence)
        self.freshness = freshness
        self.windows = windows and isinstance(store, SessionWindows)  # search.windows, for hybrid relevance order

    # -- public API -------------------------------------------------------------------------------
    @property
    def mirror_available(self) -> bool:
        return self.mirror is not None and bool(getattr(self.mirror, "available", True))

    def search(self, req: SearchRequest | None = None, /, **fields: Any) -> SearchResult:
        """Run one search. Pass a ``SearchRequest`` or its fields as keywords (or both: keywords win).

        Raises:
            ValidationError: a field of the request is malformed (see ``SearchRequest``).
        """
        if req is None:
            req = SearchRequest(**fields)
        elif fields:
            req = replace(req, **fields)
        started = time.perf_counter()
        run = _Run(req, now=req.now if req.now is not None else now_ms(), legs=self._legs_for(req))
        if req.projects and not self._check_projects(req.projects, run.notes):
            run.strategy, run.fallback_reason = self._planned_strategy(req, run.legs)
        elif not req.query:
            self._filter_only(run)
        else:
            self._query(run)
        if req.types and not run.hits:
            _note_unknown_types(req.types, run.notes)
        if run.hits and req.query and req.offset == 0:
            run.evidence = self._evidence(req, evidence.shown_text([h.item for h in run.hits]))
        return self._finish(run, started)

    def timeline(self, anchor: int | str | None = None, query: str | None = None, depth_before: int = 10,
                 depth_after: int = 10, projects: Sequence[str] | str | None = None, now: int | None = None,
                 *, tz: tzinfo | None = None) -> Timeline:
        """Items of every kind around an anchor, oldest first (see ``memcairn.search.timeline``).

        Raises:
            ValidationError: both or neither of anchor and query; a malformed anchor or depth.
            NotFoundError: the anchor names an item (or summary) that does not exist.
        """
        from memcairn.search.timeline import build_timeline

        return build_timeline(self, anchor=anchor, query=query, depth_before=depth_before,
                              depth_after=depth_after, projects=projects, now=now, tz=tz)

    def telemetry_snapshot(self) -> dict[str, Any]:
        return self.telemetry.snapshot()

    def unknown_projects(self, names: Sequence[str]) -> tuple[list[str], list[str]]:
        """(names that are no project, every project name) for a note about the former."""
        known = self.store.project_names()
        known_set = set(known)
        return [n for n in names if n not in known_set], known

    # -- paths ------------------------------------------------------------------------------------
    def _check_projects(self, names: Sequence[str], notes: list[str]) -> bool:
        """Note unknown projects; False when none of the names is a project (the result is then empty)."""
        unknown, known = self.unknown_projects(names)
        if unknown:
            notes.append(unknown_projects_note(unknown, known))
        return len(unknown) < len(names)

    def _legs_for(self, req: SearchRequest) -> tuple[str, ...]:
        """The legs a query runs: the one its mode names, else the service's ``legs``."""
        return (req.mode,) if req.mode is not None else self.legs

    def _planned_strategy(self, req: SearchRequest, legs: Sequence[str]) -> tuple[str, str | None]:
        if not req.query:
            return "filter_only", None
        if "semantic" not in legs:
            return "keyword", None
        if not self.mirror_available:
            return "keyword", "vector_unavailable"
        return ("hybrid" if "keyword" in legs else "semantic"), None

    def _filter(self, req: SearchRequest) -> ItemFilter:
        return ItemFilter(
            projects=list(req.projects) if req.projects else None, kinds=list(req.kinds) if req.kinds else None,
            types=list(req.types) if req.types else None, concepts=list(req.concepts) if req.concepts else None,
            files=list(req.files) if req.files else None, date_start=req.date_start, date_end=req.date_end,
            platform_source=req.platform_source, session=req.session,
        )

    def _filter_only(self, run: _Run) -> None:
        req = run.req
        run.strategy = "filter_only"
        if req.order == "relevance":
            run.notes.append("no query text: ordered newest first")
        if req.mode is not None:
            run.notes.append(f"no query text: filters only (mode {req.mode} needs a query)")
        items = self.store.list_items(self._filter(req), order=req.resolved_order, limit=req.limit,
                                      offset=req.offset)
        states = self._fresh(items)
        run.hits = [SearchHit(item, 0.0, {}, freshness=states.get(item.id)) for item in items]

    def _query(self, run: _Run) -> None:
        req = run.req
        order = req.resolved_order
        windowed = (self.windows and order == "relevance" and (req.fusion or self.fusion) == "minmax"
                    and "keyword" in run.legs and "semantic" in run.legs)
        item_pool = max(req.offset + req.limit, POOL_MIN if order == "relevance" else TIME_ORDER_POOL)
        pool = max(item_pool, WINDOW_POOL) if windowed else item_pool
        flt = self._filter(req)
        legs: dict[str, list[tuple[int, float]]] = {}

        def keyword_leg() -> None:
            self._note_long_query(req.query, run.notes)
            try:
                keyword = self.store.keyword_ids(req.query, flt, limit=pool, order="relevance")
            except KeywordIndexDamagedError as exc:
                run.keyword_damaged = True
                run.notes.append(f"keyword search unavailable: {exc}; semantic results only")
                return
            legs["keyword"] = keyword
            run.keyword_count = len(keyword)

        if "keyword" in run.legs:
            keyword_leg()
        run.strategy = "keyword"
        # A damaged keyword index leaves the semantic leg to answer, also for a keyword-only request.
        wants_semantic = "semantic" in run.legs or run.keyword_damaged
        semantic = self._semantic_leg(run, flt, pool) if wants_semantic else None
        if semantic is not None:
            run.semantic_count = len(semantic)
            if not semantic and req.platform_source:
                run.strategy, run.fallback_reason = "keyword", "platform_scoped_zero"
                run.notes.append(f"semantic search found nothing for platform {req.platform_source!r}; "
                                 "keyword results only")
            else:
                run.strategy = "hybrid" if "keyword" in legs else "semantic"
                legs["semantic"] = semantic
        if run.strategy == "keyword" and "keyword" not in legs and not run.keyword_damaged:
            keyword_leg()  # the semantic leg alone could not answer
        if run.keyword_damaged:
            run.fallback_reason = "keyword_index_damaged"
        if req.mode is not None and run.strategy == req.mode:
            run.notes.append(f"{req.mode} only, as asked")

        method = req.fusion or self.fusion
        scores = self._windowed(run, legs) if windowed and "keyword" in legs and "semantic" in legs else None
        if scores is None:
            legs = {name: leg[:item_pool] for name, leg in legs.items()}  # the items' pool, as without windows
            scores = fusion.fuse(method, legs, weights=self.weights)
        else:
            method = "windows"
        # Candidates are fused and ordered by id, score and time; only the page's rows are read whole. The
        # semantic leg read the times of its hits already; the keyword leg's others are read here.
        created = {i: run.created[i] for i in scores if i in run.created}
        created.update(self.store.created_epochs([i for i in scores if i not in run.created]))
        scores = {i: score for i, score in scores.items() if i in created}  # deleted since a leg saw it
        half_life = req.recency_boost_half_life_days
        if half_life is None:
            half_life = self.recency_boost_half_life_days
        scores = fusion.boost_recent(scores, created, now=run.now, half_life_days=half_life)
        ranks = {name: {item_id: LegRank(n, score) for n, (item_id, score) in enumerate(leg, 1)}
                 for name, leg in legs.items()}
        ordered = fusion.order_ids(scores, created, order)
        weight = self._relevance(run, ordered, ranks.get("semantic", {}))
        if weight is not None:
            # the floor judges the query by its best hit: nothing when that one is below it, else the ranking
            # (weak hits marked as such; search.relevance)
            best = max(weight.values(), default=0.0)
            floor = relevance.unrelated_floor(run.min_score)
            if "semantic" not in legs and run.min_score <= relevance.DEFAULT_MIN_SCORE:
                # keyword evidence alone: every hit holding an informative word of the query is shown (weak
                # when short of a match), the others are not (relevance module doc, "Keyword-only answers")
                kept = [i for i in ordered if i in run.keyword_matched]
            else:
                kept = [i for i in ordered if weight[i] >= floor] if best >= run.min_score else []
            run.hidden = len(ordered) - len(kept)
            ordered = kept
        states: dict[int, Freshness] = {}
        read: dict[int, MemoryItem] = {}
        if self.freshness is not None and order == "relevance" and ordered:
            # every candidate's state, so a stale one on this page gives its place to a current one after it
            read = {item.id: item for item in self.store.get_items(ordered)}
            states = self._fresh(list(read.values()))
            ordered = stale_last(ordered, states)
        ordered = ordered[req.offset:req.offset + req.limit]
        items = {i: read[i] for i in ordered if i in read} if read else {
            item.id: item for item in self.store.get_items(ordered)}
        if self.freshness is not None and not read:
            states = self._fresh(items.values())
        run.fusion = method
        run.hits = [
            SearchHit(items[i], scores[i], {name: r[i] for name, r in ranks.items() if i in r},
                      None if weight is None else round(weight[i], 4), states.get(i))
            for i in ordered if i in items
        ]

    def _windowed(self, run: _Run, legs: dict[str, list[tuple[int, float]]]) -> dict[int, float] | None:
        """The candidates of both legs ranked with their session neighbours (``search.windows``); None when no
        candidate has one or the memories are long (the item fusion then ranks them)."""
        candidates = list(dict.fromkeys(i for leg in legs.values() for i, _ in leg))
        assert isinstance(self.store, SessionWindows)
        around = self.store.session_windows(candidates)
        if all(len(w.ids) == 1 for w in around.values()) or not windows.short(candidates, around):
            return None
        held = list(dict.fromkeys(j for i in candidates for j in (around[i].ids if i in around else (i,))))
        run.terms = self.store.query_terms(run.req.query, held)
        return windows.fuse(candidates, around, run.terms, dict(legs["semantic"]))

    def _fresh(self, items: Iterable[MemoryItem]) -> dict[int, Freshness]:
        """The items' freshness by id, a corrected item's its correction (``store/supersede.py``); nothing
        without a checker, the corrections alone when checking fails (never fails a search)."""
        if self.freshness is None:
            return {}
        items = list(items)
        try:
            states = self.freshness.check(items)
        except Exception:
            log.warning("freshness check failed; hits without it", exc_info=True)
            states = {}
        return with_corrections(items, states)

    def _relevance(self, run: _Run, ordered: list[int], semantic: dict[int, LegRank]) -> dict[int, float] | None:
        """Each candidate's relevance (``search.relevance``); None when the request turned the floor off."""
        if run.min_score <= 0 or not ordered:
            return None
        terms = run.terms if run.terms is not None else self.store.query_terms(run.req.query, ordered)
        model = getattr(getattr(self.mirror, "embedder", None), "model_id", None)
        weights = relevance.informative_weights(terms) if terms is not None else {}
        out = {}
        for item_id in ordered:
            coverage = relevance.keyword_coverage(terms, weights, item_id) if terms is not None else 0.0
            if coverage > 0:
                run.keyword_matched.add(item_id)
            leg = semantic.get(item_id)
            out[item_id] = relevance.relevance(leg.score if leg else None, coverage, model)
        return out

    def _semantic_leg(self, run: _Run, flt: ItemFilter, pool: int) -> list[tuple[int, float]] | None:
        """(item id, 1 - distance) best first, filtered like the keyword leg plus the recency window;
        None when the leg could not run (the strategy and reason are set on ``run``)."""
        req = run.req
        if not self.mirror_available:
            run.strategy, run.fallback_reason = "keyword", "vector_unavailable"
            why = self.mirror_error or getattr(self.mirror, "last_error", None) or (
                "no vector mirror configured" if self.mirror is None else "the vector mirror is degraded")
            run.notes.append(f"semantic search unavailable ({why}); keyword results only")
            return None
        text = req.query
        if len(text) > MAX_SEMANTIC_QUERY_CHARS:
            text = text[:MAX_SEMANTIC_QUERY_CHARS]
            run.query_truncated = True
            run.notes.append(f"query cut to its first {MAX_SEMANTIC_QUERY_CHARS} characters for semantic search")
        semantic_filter = flt
        if not req.has_date_range and self.recency_window_days > 0:
            start = run.now - int(self.recency_window_days * DAY_MS)
            semantic_filter = replace(flt, date_start=start)
        # Filters the index does not apply (its partitions are the projects) drop hits after the query, so a
        # filtered request asks for twice as much. Every request asks for twice its pool again and keeps the
        # pool by exact similarity: an index that picks candidates approximately (the sqlite-vec scan) then
        # hands over the same pool as its exact path, so the worker and an in-process search rank alike (a mirror
        # that ranks its hits exactly itself is asked for its pool only: ``mirror_overfetch``).
        dropping = replace(semantic_filter, projects=None) != ItemFilter()
        want = pool * (2 if dropping else 1) * self.mirror_overfetch
        try:
            hits = self.mirror.query(text, projects=list(req.projects) if req.projects else None,
                                     limit=min(max(want, POOL_MIN), MAX_VECTOR_CANDIDATES))
        except WouldWait:  # not a failure: the caller runs the search again where the mirror may wait
            raise
        except Exception as exc:  # any failure of the mirror degrades to keyword, never fails the search
            log.warning("semantic leg failed, falling back to keyword: %s", exc)
            run.strategy, run.fallback_reason = "keyword", "vector_error"
            run.notes.append(f"semantic search failed ({exc}); keyword results only")
            return None
        allowed = self.store.created_epochs([h.item_id for h in hits], semantic_filter)
        run.created.update(allowed)
        return [(h.item_id, 1.0 - float(h.distance)) for h in hits if h.item_id in allowed][:pool]

    def _evidence(self, req: SearchRequest, shown: str) -> list[evidence.EvidenceSnippet]:
        """Lines of stored steps that match the query (``search.evidence``): on the first page of a search that
        found memories, of a store that keeps steps; a failure costs the snippets, never the search."""
        if self.evidence_snippets <= 0 or not isinstance(self.store, StepEvidence):
            return []
        try:
            hits = self.store.evidence_search(req.query, req.projects, self.evidence_snippets * 4)
        except Exception:
            log.warning("evidence search failed; hits without snippets", exc_info=True)
            return []
        return evidence.snippets(hits, req.query, self.evidence_snippets, shown)

    @staticmethod
    def _note_long_query(query: str, notes: list[str]) -> None:
        every = {w.lower() for w in _WORD.findall(query)}
        words = (every - STOPWORDS) or every  # as fts.query_tokens: stopwords count when nothing else is left
        if not words:  # only punctuation, symbols or emoji: the keyword leg has nothing to match
            notes.append("the query holds no word to match (only punctuation or symbols), so keyword search "
                         "found nothing")
        elif len(words) > MAX_QUERY_TOKENS:
            notes.append(f"keyword search uses the first {MAX_QUERY_TOKENS} distinct words of the query")

    def _finish(self, run: _Run, started: float) -> SearchResult:
        latency = round((time.perf_counter() - started) * 1000, 2)
        req = run.req
        result = SearchResult(
            strategy=run.strategy, fallback_reason=run.fallback_reason, hits=run.hits,
            counts=SearchResult.count_kinds(run.hits), notes=list(dict.fromkeys(run.notes)), latency_ms=latency,
            mirror_available=self.mirror_available, hidden=run.hidden,
            min_score=run.min_score if req.query else None, evidence=run.evidence,
        )
        self.telemetry.record(SearchEnvelope(
            at_epoch=now_ms(), strategy=result.strategy, fallback_reason=result.fallback_reason,
            mirror_available=result.mirror_available, has_query=bool(req.query), query_truncated=run.query_truncated,
            filters=tuple(req.filter_names()), order=req.resolved_order, fusion=run.fusion, limit=req.limit,
            offset=req.offset, keyword_count=run.keyword_count, semantic_count=run.semantic_count,
            result_count=len(result.hits), latency_ms=latency,
        ))
        return result


class _Run:
    """The mutable state of one search on its way to a ``SearchResult``."""

    def __init__(self, req: SearchRequest, now: int, legs: tuple[str, ...] = LEGS) -> None:
        self.req = req
        self.now = now
        self.legs = legs  # the legs this query may run (its mode, else the service's)
        self.notes: list[str] = list(req.notes)
        self.strategy = "filter_only"
        self.fallback_reason: str | None = None
        self.hits: list[SearchHit] = []
        self.fusion: str | None = None
        self.keyword_count = 0
        self.semantic_count = 0
        self.query_truncated = False
        self.keyword_damaged = False  # the keyword index could not be read (damaged or dropped)
        self.created: dict[int, int] = {}  # created_at_epoch of items already read, by id
        self.min_score = relevance.DEFAULT_MIN_SCORE if req.min_score is None else req.min_score
        self.hidden = 0  # candidates below the relevance floor
        self.keyword_matched: set[int] = set()  # candidates holding an informative word of the query
        self.terms: QueryTerms | None = None  # the query's words and which candidates hold them, once read
        self.evidence: list[evidence.EvidenceSnippet] = []


# The types memcairn writes itself (a person's `add --type` may use others).
KNOWN_TYPES = tuple(dict.fromkeys((*OBSERVATION_TYPES, *DEFAULT_TYPES.values())))


def _note_unknown_types(types: Sequence[str], notes: list[str]) -> None:
    """An empty result filtered by a type memcairn never writes (a typo, or a kind given as a type) says so."""
    unknown = [t for t in types if t not in KNOWN_TYPES]
    if unknown:
        names = ", ".join(repr(t) for t in unknown)
        notes.append(f"no memory has type {names}; the types memcairn writes: {', '.join(KNOWN_TYPES)}")


def unknown_projects_note(unknown: Sequence[str], known: Sequence[str]) -> str:
    names = ", ".join(repr(n) for n in unknown)
    listed = ", ".join(known[:MAX_PROJECTS_LISTED]) or "(none yet)"
    more = f" and {len(known) - MAX_PROJECTS_LISTED} more" if len(known) > MAX_PROJECTS_LISTED else ""
    return f"unknown project {names}; known projects: {listed}{more}"


def parse_item_id(value: int | str) -> int:
    """An item id from ``12``, ``"12"`` or ``"#12"``.

    Raises:
        ValidationError: anything else.
    """
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_ITEM_ID:
        return value
    if isinstance(value, str):
        match = re.fullmatch(r"\s*#?(\d+)\s*", value)
        if match and 0 < int(match.group(1)) <= MAX_ITEM_ID:  # beyond it SQLite cannot even compare
            return int(match.group(1))
    raise ValidationError(f"{value!r} is not an item id; use a number such as 12 or #12")
