"""BM25 as FTS5 computes it (``fts5_aux.c``), for every score memcairn computes itself: the local keyword index's
copy (``store.keyword_index``) and the team store's keyword leg (``pgstore.keyword``). SQLite's own ``bm25()``
stays FTS5's; these give the same numbers bit for bit, so each user must keep this order of operations:

    idf(p)  = ln((N - n(p) + 0.5) / (n(p) + 0.5)), at least 1e-6
    norm(D) = k1 * (1 - b + b * D / avgdl)
    score   = sum over the query's phrases p of idf(p) * (f(p) * (k1 + 1)) / (f(p) + norm(D))

with ``N`` the rows, ``n(p)`` the rows holding ``p``, ``f`` its weighted occurrences in the row and ``D`` the row's
length. Lives in the store layer (the lowest of its users) so both stores can import it.
"""

from __future__ import annotations

import math
from typing import TypeVar

import numpy as np

K1 = 1.2
B = 0.75
MIN_IDF = 1e-6  # FTS5's floor: a word in more than half of the rows still counts a little

Number = TypeVar("Number", float, np.ndarray)


def idf(rows: int, holding: int) -> float:
    """FTS5's idf, at least ``MIN_IDF`` (also for counts of different ages that say more rows hold a word than
    exist)."""
    ratio = (rows - holding + 0.5) / (holding + 0.5)
    value = math.log(ratio) if ratio > 0.0 else 0.0
    return value if value > 0.0 else MIN_IDF


def length_norm(length: Number, mean: float) -> Number:
    """A row's length term, ``k1 * (1 - b + b * D / avgdl)``; of one row or an array of them."""
    return K1 * (1.0 - B + B * length / mean)


def saturation(f: Number, norm: Number) -> Number:
    """A word's part of the score before its idf, for ``f`` > 0 (one row or an array of them)."""
    return (f * (K1 + 1.0)) / (f + norm)


def term(f: float, norm: float) -> float:
    """``saturation``, 0 when the row does not hold the word."""
    return saturation(f, norm) if f > 0 else 0.0


def terms(f: np.ndarray, norm: np.ndarray) -> np.ndarray:
    """``term`` of each row."""
    return np.where(f > 0, saturation(f, norm), 0.0)
