"""The one BM25 memcairn computes itself (``store.bm25``): FTS5's own numbers, bit for bit, and the formula both
keyword scorers use (the local keyword index's copy, the team store's leg)."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from memcairn.pgstore import keyword
from memcairn.store import bm25, fts

DOCS = ["cache eviction of the oldest entry", "the deploy runs after the tests pass",
        "cache cache cache warmup before the deploy", "a retry queue retries a job three times on timeout"]


def fts5_scores(word: str) -> dict[int, float]:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(body, tokenize = 'unicode61')")
    conn.executemany("INSERT INTO t(rowid, body) VALUES (?, ?)", enumerate(DOCS, 1))
    return {row: -score for row, score in conn.execute("SELECT rowid, bm25(t) FROM t WHERE t MATCH ?", (word,))}


@pytest.mark.parametrize("word", ["cache", "deploy", "the", "timeout"])
def test_the_formula_gives_fts5s_own_scores(word: str) -> None:
    lengths = [len(d.split()) for d in DOCS]
    holding = [n for n, d in enumerate(DOCS, 1) if word in d.split()]
    ours = {n: bm25.idf(len(DOCS), len(holding)) * bm25.saturation(
        float(DOCS[n - 1].split().count(word)), bm25.length_norm(lengths[n - 1], sum(lengths) / len(DOCS)))
        for n in holding}
    assert ours == fts5_scores(word)


def test_the_team_leg_scores_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = fts.MatchPlan(("cache",))

    def score() -> float:
        return keyword._bm25_row(plan, {"cache": "cach"}, {"cache": bm25.idf(4, 2)}, 6.0, {"cach": 3.0}, 7, None)

    before = score()
    monkeypatch.setattr(bm25, "K1", 2.0)
    assert score() != before
    assert np.array_equal(bm25.terms(np.array([0.0, 3.0]), np.array([1.0, 1.0])), np.array([0.0, 9.0 / 4.0]))
