"""Turning user text into a safe FTS5 query, and the bm25 weights.

Every token is quoted, so FTS5 syntax typed by a person or an agent (``"``, ``*``, ``NEAR``, ``col:``,
``AND``, parentheses, ``-``) is always just text and can never surface as an SQLite error. Tokens are
OR-ed and ranked by bm25, so a three-word query finds documents holding any of the words, best first;
the whole query is OR-ed in once more as a phrase so an exact phrase match ranks higher.
"""

from __future__ import annotations

import re

from memcairn.store.schema import FTS_COLUMNS

# A query longer than this many tokens is cut (documented in the README): bm25 over more terms costs time
# and a wall of pasted text carries no more intent than its first sentences.
MAX_QUERY_TOKENS = 32

_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)

STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just me more most my
    myself no nor not now of off on once only or other our ours ourselves out over own same she should so
    some such than that the their theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom why will with would you your
    yours yourself yourselves""".split()
)

# bm25 weights, one per FTS column in declaration order (the two UNINDEXED columns first).
_WEIGHTS = {"title": 4.0, "subtitle": 2.0, "concepts": 2.0, "facts": 1.5, "request": 1.5}
BM25_WEIGHTS: tuple[float, ...] = (0.0, 0.0, *(_WEIGHTS.get(c, 1.0) for c in FTS_COLUMNS))


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


def build_match(text: str) -> str | None:
    """An FTS5 MATCH expression for free text, or None when the text holds no searchable word."""
    tokens = query_tokens(text)
    if not tokens:
        return None
    terms = [_quote(t) for t in tokens]
    if len(tokens) > 1:
        terms.append(_quote(" ".join(tokens)))
    return " OR ".join(terms)


def bm25_expression(table: str = "memory_items_fts") -> str:
    return f"bm25({table}, {', '.join(repr(w) for w in BM25_WEIGHTS)})"
