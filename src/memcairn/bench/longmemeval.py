"""``memcairn bench longmemeval``: session retrieval on LongMemEval-format data, through the real store,
vector mirror and search service.

For each question a fresh store (a temp directory holding the SQLite file and, by default, the sqlite-vec
mirror) receives that question's haystack sessions, timestamped with their ``haystack_dates``; the mirror is
filled with ``MirrorSync.backfill()``; the question is then searched at ``now = question_date``. Hits (items)
map to distinct haystack session ids in rank order, and the metrics compare those with
``answer_session_ids``. ``--pooled`` puts every question's haystack (sessions deduplicated by id) into one
store and searches each question against all of it. Questions whose id ends in ``_abs`` are not scored.

The data: ``bench/longmemeval_data.py``; how a session becomes memory items (the ``granularity``):
``bench/longmemeval_items.py``; the metrics: ``bench/longmemeval_scores.py``.

Document vectors go through an ``EmbeddingCache`` (by default
``MEMCAIRN_HOME/bench-cache/embeddings.sqlite``), so a re-run, or ``--pooled`` after a per-question run,
embeds nothing twice.
"""

from __future__ import annotations

import inspect
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memcairn.bench import longmemeval_bm25 as bm25
from memcairn.bench.longmemeval_data import Question, Session
from memcairn.bench.longmemeval_items import DEFAULT_GRANULARITY, PROJECT, check_granularity, session_items
from memcairn.bench.longmemeval_scores import TABLE_METRICS, aggregate, distinct_sessions, score_ranking
from memcairn.bench.timing import percentile
from memcairn.core.errors import ValidationError
from memcairn.search import SearchRequest, SearchService
from memcairn.store import Store

METHODS = ("keyword", "semantic", "hybrid")
INDEXES = ("sqlite-vec", "memory")
HITS_PER_QUERY = 100  # the service's most per page: enough to fill the top 10 distinct sessions

Progress = Callable[[str], None]


# -------------------------------------------------------------------------------------- the harness
class TimedEmbedder:
    """Counts the texts an embedder really embeds and the seconds it spends (wrapped by the cache)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.dimension = inner.dimension
        self.seconds = 0.0
        self.texts = 0
        self.chars = 0

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        started = time.perf_counter()
        try:
            return self.inner.embed_documents(texts)
        finally:
            self.seconds += time.perf_counter() - started
            self.texts += len(texts)
            self.chars += sum(len(t) for t in texts)

    def embed_query(self, text: str) -> list[float]:
        started = time.perf_counter()
        try:
            return self.inner.embed_query(text)
        finally:
            self.seconds += time.perf_counter() - started
            self.texts += 1
            self.chars += len(text)


@dataclass
class Options:
    methods: tuple[str, ...] = ("hybrid",)
    pooled: bool = False
    granularity: str = DEFAULT_GRANULARITY
    fusion: str | None = None  # None: the service's default
    recency_window_days: float = 0  # as the CLI's default (the recency_window_days setting): off
    recency_boost_half_life_days: float | None = None
    index: str = "sqlite-vec"
    model: str | None = None  # None: the embedding_model setting
    cache_path: Path | None = None  # None: no cache (tests)
    keyword_index: bool = False  # rank keyword hits from the in-memory copy, as the worker does
    anchor: bool = True  # also rank with plain BM25 over turns (``bench.longmemeval_bm25``), in the same run

    @property
    def needs_vectors(self) -> bool:
        return any(m != "keyword" for m in self.methods)


@dataclass
class _Clock:
    build_s: float = 0.0
    insert_s: float = 0.0
    backfill_s: float = 0.0
    items: int = 0
    documents: int = 0
    stores: int = 0
    query_ms: dict[str, list[float]] = field(default_factory=dict)


def _search(service: SearchService, question: Question, opts: Options) -> tuple[list[str], float]:
    # Scoped as an agent's search is (a project, no other filter): a filter takes another keyword path.
    req = SearchRequest(query=question.text, projects=[PROJECT], limit=HITS_PER_QUERY,
                        now=question.now_ms, fusion=opts.fusion,
                        recency_boost_half_life_days=opts.recency_boost_half_life_days)
    started = time.perf_counter()
    result = service.search(req)
    elapsed = (time.perf_counter() - started) * 1000
    return distinct_sessions(h.item.session for h in result.hits), elapsed


class _Bench:
    def __init__(self, opts: Options, progress: Progress | None) -> None:
        self.opts = opts
        self.progress = progress or (lambda _msg: None)
        self.clock = _Clock()
        self.timed: TimedEmbedder | None = None
        self.embedder: Any = None
        self.stack = ExitStack()

    def __enter__(self) -> _Bench:
        if self.opts.needs_vectors:
            from memcairn.vectors.embedder import load_embedder
            from memcairn.vectors.embedding_cache import EmbeddingCache

            self.timed = TimedEmbedder(load_embedder(self.opts.model))
            self.embedder = self.timed
            if self.opts.cache_path is not None:
                self.embedder = self.stack.enter_context(EmbeddingCache(self.timed, self.opts.cache_path))
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.close()

    def build(self, sessions: Sequence[Session], workdir: Path) -> tuple[Store, Any]:
        """A store holding these sessions and, when vectors are needed, its filled mirror."""
        started = time.perf_counter()
        store = Store(workdir / "memcairn.db")
        items = [item for s in sessions for item in session_items(s, self.opts.granularity)]
        for start in range(0, len(items), 2000):
            store.add_items(items[start:start + 2000])
        if self.opts.keyword_index:
            copy = store.start_keyword_index()
            if copy is None or not copy.wait(600):
                raise RuntimeError(f"the keyword index copy was not built: {copy.status if copy else 'no file'}")
        inserted = time.perf_counter()
        mirror = None
        if self.embedder is not None:
            from memcairn.mirror.sync import MirrorSync
            from memcairn.vectors.factory import open_index

            index = open_index(self.opts.index, home=workdir, dimension=self.embedder.dimension)
            mirror = MirrorSync(store, index, self.embedder, index_key=f"bench-{self.opts.index}", concurrency=1)
            result = mirror.backfill()
            if result.failed_batches or not mirror.available:
                raise RuntimeError(f"mirror backfill failed: {result.sample_errors or mirror.last_error}")
            self.clock.documents += result.documents
        done = time.perf_counter()
        self.clock.insert_s += inserted - started
        self.clock.backfill_s += done - inserted
        self.clock.build_s += done - started
        self.clock.items += len(items)
        self.clock.stores += 1
        return store, mirror

    def services(self, store: Store, mirror: Any) -> dict[str, SearchService]:
        o = self.opts
        common = {"recency_window_days": o.recency_window_days,
                  "recency_boost_half_life_days": o.recency_boost_half_life_days}
        if o.fusion:
            common["fusion"] = o.fusion
        make = {
            "keyword": lambda: SearchService(store, mirror, legs=("keyword",), **common),
            "semantic": lambda: SearchService(store, mirror, legs=("semantic",), **common),
            "hybrid": lambda: SearchService(store, mirror, **common),
        }
        return {m: make[m]() for m in o.methods}

    def ask(self, services: dict[str, SearchService], n: int, question: Question,
            ranked: dict[str, dict[int, list[str]]], anchor: bm25.TurnIndex | None = None) -> None:
        """Rankings are kept by the question's index: ids may repeat in a file."""
        for method, service in services.items():
            sessions, ms = _search(service, question, self.opts)
            ranked[method][n] = sessions
            self.clock.query_ms.setdefault(method, []).append(ms)
        if anchor is not None:
            started = time.perf_counter()
            ranked[bm25.METHOD][n] = anchor.rank(question.text)
            self.clock.query_ms.setdefault(bm25.METHOD, []).append((time.perf_counter() - started) * 1000)

    def ask_all(self, sessions: Sequence[Session], numbered: Sequence[tuple[int, Question]], workdir: Path,
                ranked: dict[str, dict[int, list[str]]]) -> None:
        """One store of ``sessions`` asked each of the ``numbered`` questions (and the anchor over the same)."""
        store, mirror = self.build(sessions, workdir)
        anchor = bm25.TurnIndex(sessions) if self.opts.anchor else None
        try:
            services = self.services(store, mirror)
            for n, q in numbered:
                self.ask(services, n, q, ranked, anchor)
        finally:
            if anchor is not None:
                anchor.close()
            _close(store, mirror)


def run(questions: Sequence[Question], opts: Options, progress: Progress | None = None) -> dict[str, Any]:
    """Build the stores, ask every question with every method, score; the JSON-ready result."""
    for method in opts.methods:
        if method not in METHODS:
            raise ValidationError(f"unknown method {method!r}; use {', '.join(METHODS)}")
    if opts.index not in INDEXES:
        raise ValidationError(f"unknown index {opts.index!r}; use {', '.join(INDEXES)}")
    opts.granularity = check_granularity(opts.granularity)
    methods = (*opts.methods, bm25.METHOD) if opts.anchor else tuple(opts.methods)
    ranked: dict[str, dict[int, list[str]]] = {m: {} for m in methods}
    unreachable = [f"{q.id} ({', '.join(missing)})" for q in questions if q.scored
                   and (missing := _missing_gold(q, questions if opts.pooled else (q,)))]
    if unreachable and progress is not None:
        progress(f"warning: {len(unreachable)} question(s) name answer sessions that no haystack holds, so they "
                 f"count as misses: {'; '.join(unreachable[:5])}{' ...' if len(unreachable) > 5 else ''}")
    started = time.perf_counter()
    with _Bench(opts, progress) as bench, tempfile.TemporaryDirectory(prefix="memcairn-lme-") as tmp:
        if opts.pooled:
            # Sessions are deduplicated by id and content: a session id whose contents differ between questions
            # keeps every version (their items share the id, so a hit on either counts for it).
            pool = list(dict.fromkeys(s for q in questions for s in q.sessions))
            variants = len(pool) - len({s.id for s in pool})
            bench.progress(f"pooled store: {len(pool)} sessions" + (
                f" ({variants} more version(s) of a session id whose contents differ between questions)"
                if variants else ""))
            try:
                bench.ask_all(pool, list(enumerate(questions)), Path(tmp), ranked)
            except ValidationError as exc:
                raise ValidationError(f"pooled store: {exc}") from None
        else:
            # Questions over the very same haystack (LoCoMo's, of one conversation) share its store: searching
            # changes nothing in it, so each is ranked as in a store of its own.
            groups: dict[tuple[Session, ...], list[tuple[int, Question]]] = {}
            for n, q in enumerate(questions):
                groups.setdefault(q.sessions, []).append((n, q))
            for g, numbered in enumerate(groups.values(), 1):
                n, q = numbered[0]
                workdir = Path(tmp) / f"q{n + 1}"
                t0 = time.perf_counter()
                try:
                    bench.ask_all(q.sessions, numbered, workdir, ranked)
                except ValidationError as exc:
                    raise ValidationError(f"record {n}, question {q.id}: {exc}") from None
                finally:
                    shutil.rmtree(workdir, ignore_errors=True)
                embedded = bench.timed.texts if bench.timed else 0
                asked = f"{q.id}" if len(numbered) == 1 else f"{q.id} and {len(numbered) - 1} more on its haystack"
                bench.progress(f"[{g}/{len(groups)}] {asked} ({len(q.sessions)} sessions) "
                               f"{time.perf_counter() - t0:.1f}s, texts embedded so far: {embedded}")
        total_s = time.perf_counter() - started
        cache = bench.embedder if opts.cache_path is not None and bench.embedder is not None else None
        timing = _timing(bench, total_s, cache)
    settings = _settings(opts, questions)
    out: dict[str, Any] = {}
    for method in methods:
        pairs = [(q.type, score_ranking(ranked[method][n], q.answer_ids))
                 for n, q in enumerate(questions) if q.scored]
        result = aggregate(pairs)
        lat = bench.clock.query_ms.get(method, [])
        result["timing"] = {**timing,
                            "query_median_ms": round(statistics.median(lat), 2) if lat else None,
                            "query_p95_ms": round(percentile(lat, 95), 2) if lat else None,
                            "queries": len(lat)}
        result["settings"] = settings
        result["questions"] = [_detail(q, ranked[method][n]) for n, q in enumerate(questions)]
        out[method] = result
    return out


def _missing_gold(question: Question, searched: Sequence[Question]) -> list[str]:
    """The answer session ids of ``question`` that none of the ``searched`` questions' haystacks holds."""
    held = {s.id for q in searched for s in q.sessions}
    return [sid for sid in question.answer_ids if sid not in held]


def _detail(question: Question, ranked: list[str]) -> dict[str, Any]:
    gold = set(question.answer_ids)
    return {"id": question.id, "type": question.type, "scored": question.scored, "gold": list(question.answer_ids),
            "gold_ranks": [n for n, sid in enumerate(ranked, 1) if sid in gold], "top": ranked}


def _close(store: Store, mirror: Any) -> None:
    if mirror is not None:
        mirror.index.close()
    store.close()


def _timing(bench: _Bench, total_s: float, cache: Any) -> dict[str, Any]:
    c = bench.clock
    timed = bench.timed
    return {
        "total_s": round(total_s, 2),
        "index_s": round(c.build_s, 2),
        "insert_s": round(c.insert_s, 2),
        "mirror_backfill_s": round(c.backfill_s, 2),
        "embedding_s": round(timed.seconds, 2) if timed else 0.0,
        "texts_embedded": timed.texts if timed else 0,
        "chars_embedded": timed.chars if timed else 0,
        "cache_hits": getattr(cache, "hits", None),
        "cache_misses": getattr(cache, "misses", None),
        "stores": c.stores,
        "items": c.items,
        "documents": c.documents,
        "peak_rss_mb": round(peak_rss_mb(), 1),
    }


def _settings(opts: Options, questions: Sequence[Question]) -> dict[str, Any]:
    return {
        "mode": "pooled" if opts.pooled else "per-question",
        "granularity": opts.granularity,
        "fusion": opts.fusion or inspect.signature(SearchService).parameters["fusion"].default,
        "recency_window_days": opts.recency_window_days,
        "recency_boost_half_life_days": opts.recency_boost_half_life_days,
        "index": opts.index if opts.needs_vectors else None,
        "model": opts.model,
        "keyword_ranking": "in-memory copy" if opts.keyword_index else "sqlite",
        "anchor": bm25.METHOD if opts.anchor else None,
        "questions": len(questions),
        "scored": sum(q.scored for q in questions),
    }


def peak_rss_mb() -> float:
    """Peak resident memory of this process (``ru_maxrss``: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


# ----------------------------------------------------------------------------------------- rendering
def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += ["| " + " | ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(
        zip(row, widths, strict=True))) + " |" for row in rows]
    return "\n".join(lines)


def _cells(metrics: dict[str, Any]) -> list[str]:
    return [f"{metrics[m]:.3f}" if m in metrics else "-" for m in TABLE_METRICS]


def render(result: dict[str, Any]) -> str:
    """Markdown: the metrics of every method overall and per question type, then timings."""
    methods = list(result)
    if not methods:
        return "(no methods)"
    first = result[methods[0]]
    s = first["settings"]
    lines = [
        f"LongMemEval session retrieval: {s['mode']} stores, granularity {s['granularity']}, fusion {s['fusion']}, "
        f"recency window {s['recency_window_days']:g} d, recency boost half-life "
        f"{s['recency_boost_half_life_days'] or 'off'}, index {s['index'] or '-'}, keyword ranking "
        f"{s.get('keyword_ranking', 'sqlite')}; {s['scored']} of {s['questions']} questions scored"
        + (f"; {s['anchor']}: plain BM25 over turns, a session scored by its best turn" if s.get("anchor") else ""),
        "",
        "Overall:",
        "",
        _table(["method", "n", *TABLE_METRICS],
               [[m, str(result[m]["overall"].get("n", 0)), *_cells(result[m]["overall"])] for m in methods]),
        "",
        "By question type:",
        "",
    ]
    types = sorted({t for m in methods for t in result[m]["by_type"]})
    rows = []
    for t in types:
        for m in methods:
            metrics = result[m]["by_type"].get(t)
            if metrics:
                rows.append([t, m, str(metrics["n"]), *_cells(metrics)])
    lines.append(_table(["question type", "method", "n", *TABLE_METRICS], rows))
    t = first["timing"]
    lines += [
        "",
        "Timing:",
        "",
        _table(["method", "queries", "query median ms", "query p95 ms"],
               [[m, str(result[m]["timing"]["queries"]), _num(result[m]["timing"]["query_median_ms"]),
                 _num(result[m]["timing"]["query_p95_ms"])] for m in methods]),
        "",
        f"index time {t['index_s']:.1f} s for {t['stores']} store(s), {t['items']:,} items, {t['documents']:,} "
        f"mirror documents (insert {t['insert_s']:.1f} s, mirror backfill {t['mirror_backfill_s']:.1f} s); "
        f"embedding time {t['embedding_s']:.1f} s for {t['texts_embedded']:,} texts "
        f"({t['chars_embedded']:,} chars; cache hits {_num(t['cache_hits'])}, misses {_num(t['cache_misses'])}); "
        f"total {t['total_s']:.1f} s; peak memory (ru_maxrss) {t['peak_rss_mb']:.0f} MB",
    ]
    return "\n".join(lines)


def _num(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    return f"{value:,}" if isinstance(value, int) else str(value)
