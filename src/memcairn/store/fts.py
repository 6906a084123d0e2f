"""Turning user text into a safe FTS5 query, and the bm25 weights.

Every token is quoted, so FTS5 syntax typed by a person or an agent (``"``, ``*``, ``NEAR``, ``col:``,
``AND``, parentheses, ``-``) is always just text and can never surface as an SQLite error. Tokens are
OR-ed and ranked by bm25, so a three-word query finds documents holding any of the words, best first;
the whole query is OR-ed in once more as a phrase so an exact phrase match ranks higher.

Ranking cost grows with the number of matching rows (bm25 runs once per row). On a large store a query
of common words would rank tens of thousands of rows, so ``plan_match`` looks up each term's document
frequency (FTS5's own vocabulary, stemmed by FTS5 itself) and, when the terms together match more than
``RANK_BUDGET`` rows, keeps the rarest terms as alternatives and requires the common ones together:
``rare1 OR rare2 OR (common1 AND common2)``. Rare terms carry almost all of bm25's weight, so the top
results barely move while the rows ranked stay bounded. Stores smaller than the budget are never pruned.

The plan bounds the rare terms' rows but not the common terms' intersection, which on a large store of
similar notes can still hold tens of thousands of rows (35 ms of bm25 for one query at 100k items). So an unfiltered
search ranks at most ``RANK_CAP`` matching rows, the newest: a query's cost has a ceiling whatever its
words, and when more rows match than that, recent memory wins. The cap is a safety bound, not a filter:
it must stay well above what real queries match, or old memories stop being found at all. (Filtered
searches join every match to its item and are not capped; their plan gets half the budget instead.)
"""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from memcairn.store.records import MAX_QUERY_TOKENS, STOPWORDS, QueryTerms  # noqa: F401 - re-exported
from memcairn.store.schema import FTS_COLUMNS, SCOPE_PREFIX

_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)

# bm25 weights, one per FTS column in declaration order (the two UNINDEXED columns and fts_scope first).
_WEIGHTS = {"title": 4.0, "subtitle": 2.0, "concepts": 2.0, "facts": 1.5, "request": 1.5}
BM25_WEIGHTS: tuple[float, ...] = (0.0, 0.0, 0.0, *(_WEIGHTS.get(c, 1.0) for c in FTS_COLUMNS))


def scope_match(match: str, project_ids: list[int]) -> str:
    """``match`` narrowed to the rows of these projects (``schema.SCOPE_PREFIX``)."""
    scopes = " OR ".join(_quote(f"{SCOPE_PREFIX}{int(pid)}") for pid in project_ids)
    return f"({match}) AND fts_scope: ({scopes})"


def query_tokens(text: str) -> list[str]:
    """The tokens a query searches for: words minus stopwords (unless nothing else is left)."""
    words = [w.lower() for w in _TOKEN.findall(text or "")]
    kept = [w for w in words if w not in STOPWORDS]
    chosen = kept or words
    seen: dict[str, None] = {}
    for word in chosen:
        seen.setdefault(word, None)
    return list(seen)[:MAX_QUERY_TOKENS]


def _quote(token: str) -> str:
    return '"' + token.replace('"', '""') + '"'


@dataclass(frozen=True)
class MatchPlan:
    """What a query matches: rows holding any of ``any_of``, rows holding every word of ``all_of`` (empty, or
    two words or more), and, ranked in, the whole query as a ``phrase`` (None when pruned or one word).
    ``match`` is its FTS5 text; bm25 sums its phrases in this order (``keyword_index`` relies on that)."""

    any_of: tuple[str, ...]
    all_of: tuple[str, ...] = ()
    phrase: str | None = None

    @property
    def match(self) -> str:
        terms = [_quote(t) for t in self.any_of]
        if self.all_of:
            terms.append("(" + " AND ".join(_quote(t) for t in self.all_of) + ")")
        if self.phrase is not None:
            terms.append(_quote(self.phrase))
        return " OR ".join(terms)


def _whole(tokens: list[str]) -> MatchPlan:
    return MatchPlan(tuple(tokens), phrase=" ".join(tokens) if len(tokens) > 1 else None)


def build_match(text: str) -> str | None:
    """An FTS5 MATCH expression for free text, or None when the text holds no searchable word."""
    tokens = query_tokens(text)
    return _whole(tokens).match if tokens else None


def bm25_expression(table: str = "memory_items_fts") -> str:
    return f"bm25({table}, {', '.join(repr(w) for w in BM25_WEIGHTS)})"


RANK_BUDGET = 8000
# Rows an unfiltered search ranks at most: the newest matches (module doc). bm25 costs about 1-2 us a row.
# Searched as agents search (a project, no other filter), pooled LongMemEval (25k items) keyword recall_any@5
# was 0.19 with a cap of 1,000, 0.69 with 5,000 and 0.71 with 10,000, 20,000 or none. At 100k synthetic
# items, 10,000 keeps a query of common words over every project at 14 ms p95 (22 ms uncapped, 35 ms max).
RANK_CAP = 10_000


def _ensure_vocab_tables(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.query_terms USING fts5(x, tokenize='porter unicode61')")
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.query_terms_v USING fts5vocab(temp, query_terms, 'instance')")
    conn.execute(
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.memory_items_fts_v USING fts5vocab(main, memory_items_fts, 'row')"
    )


class FrequencyCache:
    """Document frequencies of query tokens, each kept for ``ttl`` seconds (one per store).

    Counting a term's documents walks its whole posting list (~0.2 ms for a common term at 100k items: most
    of the time `plan_match` takes), while a count a minute old plans a query just as well: it only decides
    which terms are required together, never what a term matches."""

    def __init__(self, ttl: float = 60.0, size: int = 20_000) -> None:
        self.ttl = ttl
        self.size = size
        self._lock = threading.Lock()
        self._counts: dict[str, tuple[float, int]] = {}

    def known(self, tokens: Sequence[str]) -> dict[str, int]:
        now = time.monotonic()
        with self._lock:
            hits = {t: self._counts.get(t) for t in tokens}
        return {t: hit[1] for t, hit in hits.items() if hit is not None and now - hit[0] < self.ttl}

    def remember(self, counts: dict[str, int]) -> None:
        now = time.monotonic()
        with self._lock:
            if len(self._counts) + len(counts) > self.size:
                self._counts.clear()
            self._counts.update((t, (now, n)) for t, n in counts.items())


def _document_frequencies(conn: sqlite3.Connection, tokens: list[str], cache: FrequencyCache | None = None
                          ) -> list[int]:
    """For each token, the number of documents holding its stem (0 = nowhere)."""
    known = cache.known(tokens) if cache is not None else {}
    missing = [t for t in tokens if t not in known]
    if missing:
        counted = dict(zip(missing, _count_documents(conn, missing), strict=True))
        if cache is not None:
            cache.remember(counted)
        known = {**known, **counted}
    return [known[t] for t in tokens]


def token_terms(conn: sqlite3.Connection, tokens: Sequence[str]) -> list[list[str]]:
    """The terms FTS5's tokenizer makes of each token (porter stems; usually one, none for a symbol)."""
    rows = list(enumerate(tokens, 1))
    try:
        conn.executemany("INSERT INTO temp.query_terms(rowid, x) VALUES (?, ?)", rows)
    except sqlite3.OperationalError:  # this connection's first query: create its temp tables (they cost
        _ensure_vocab_tables(conn)  # more than the lookups to re-check on every query)
        conn.executemany("INSERT INTO temp.query_terms(rowid, x) VALUES (?, ?)", rows)
    found: dict[int, list[str]] = {}
    try:
        for term, doc in conn.execute("SELECT term, doc FROM temp.query_terms_v"):
            found.setdefault(doc, []).append(term)
    finally:
        conn.execute("DELETE FROM temp.query_terms")
    return [found.get(i, []) for i in range(1, len(tokens) + 1)]


def _count_documents(conn: sqlite3.Connection, tokens: list[str]) -> list[int]:
    stems = dict(enumerate(token_terms(conn, tokens), 1))
    wanted = sorted({t for terms in stems.values() for t in terms})
    found: dict[str, int] = {}
    if wanted:
        marks = ", ".join("?" for _ in wanted)
        found = dict(conn.execute(f"SELECT term, doc FROM temp.memory_items_fts_v WHERE term IN ({marks})", wanted))
    return [max((found.get(t, 0) for t in stems.get(i, [])), default=0) for i in range(1, len(tokens) + 1)]


def plan_match(conn: sqlite3.Connection, text: str, total_docs: int, budget: int = RANK_BUDGET,
               cache: FrequencyCache | None = None) -> str | None:
    """The MATCH expression to run for ``text`` on this store (see the module docstring); ``cache``
    remembers document frequencies between queries."""
    plan = plan_terms(text, total_docs, lambda tokens: _document_frequencies(conn, tokens, cache), budget)
    return plan.match if plan is not None else None


def plan_terms(text: str, total_docs: int, frequencies: Callable[[list[str]], list[int]],
               budget: int = RANK_BUDGET) -> MatchPlan | None:
    """``plan_match`` as a structure; ``frequencies`` gives each token's document frequency."""
    tokens = query_tokens(text)
    if not tokens:
        return None
    if total_docs <= budget:
        return _whole(tokens)
    dfs = frequencies(tokens)
    present = sorted((df, i, tok) for i, (tok, df) in enumerate(zip(tokens, dfs, strict=True)) if df > 0)
    if not present or sum(df for df, _, _ in present) <= budget:
        return _whole(tokens)
    core: list[str] = []
    total = 0
    for df, _, tok in present:
        if core and total + df > budget:
            break
        core.append(tok)
        total += df
    rest = [tok for _, _, tok in present if tok not in core]
    return MatchPlan(tuple(core), tuple(rest) if len(rest) >= 2 else ())


HOLDING_IN_LIST = 16  # ids rows_holding asks FTS5 about by rowid; over it, it reads each word's doclist


def rows_holding(conn: sqlite3.Connection, tokens: Sequence[str], ids: Sequence[int]) -> dict[str, set[int]]:
    """For each token, which of ``ids`` hold it as FTS5 matches it (its porter stem, in any indexed column)."""
    if not ids:
        return {t: set() for t in tokens}
    unique = list(dict.fromkeys(int(i) for i in ids))
    found: dict[str, set[int]] = {}
    if len(unique) > HOLDING_IN_LIST:
        # FTS5 answers `rowid IN (...)` by evaluating the MATCH once per listed id: for many ids, reading the
        # word's whole doclist and keeping the asked ids costs a fraction of that
        asked = set(unique)
        for token in tokens:
            rows = conn.execute("SELECT rowid FROM memory_items_fts WHERE memory_items_fts MATCH ?", (_quote(token),))
            found[token] = {r for (r,) in rows if r in asked}
        return found
    wanted = ",".join(str(i) for i in unique)
    for token in tokens:
        rows = conn.execute(f"SELECT rowid FROM memory_items_fts WHERE memory_items_fts MATCH ? "
                            f"AND rowid IN ({wanted})", (_quote(token),)).fetchall()
        found[token] = {r[0] for r in rows}
    return found
