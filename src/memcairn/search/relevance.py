"""The relevance floor: a hit is shown only when the evidence says it answers the query.

Both legs of a search always have neighbours: the semantic leg ranks every memory by similarity, and the
keyword leg matches any memory holding any word of the query. Without a floor, a question nothing in memory
answers gets the newest or nearest rows anyway, which an agent pays to read and may believe. So each hit is
given a ``relevance``, the stronger of two pieces of evidence, each scaled so that 1.0 is its floor:

- **semantic**: the cosine similarity of the hit's best document to the query, over ``SEMANTIC_FLOORS`` for
  the model that embedded it. A model with no calibrated floor gives every hit of its leg 1.0 (no claim is
  made for it either way).
- **keyword**: the share of the query's informative words the hit holds (as FTS5 matches them: stemmed),
  each word weighted by its inverse document frequency, over ``KEYWORD_FLOOR``. A word held by more than
  ``UBIQUITOUS_SHARE`` of the indexed rows says nothing and is left out (once the store holds
  ``UBIQUITY_MIN_ROWS`` rows: in a handful, every word is common); a word no row holds counts in full
  against every hit (a question about a hamster is not answered by memories that only share "name").

A hit is kept when its relevance is at least the request's ``min_score`` (``DEFAULT_MIN_SCORE``; 0 keeps
every candidate). Filter-only searches have no query and no floor.

The floors were calibrated with ``memcairn bench floor`` (negatives: LongMemEval's abstention questions and
questions about real sessions that nothing in them answers; positives: the answerable questions' answer
hits), see ``docs/ARCHITECTURE.md``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from memcairn.store.fts import QueryTerms

# Cosine similarity a semantic hit needs, per embedding model id.
SEMANTIC_FLOORS: Mapping[str, float] = {"all-MiniLM-L6-v2-int8": 0.40}
KEYWORD_FLOOR = 0.5
UBIQUITOUS_SHARE = 0.5
UBIQUITY_MIN_ROWS = 20
DEFAULT_MIN_SCORE = 1.0


def informative_weights(terms: QueryTerms) -> dict[str, float]:
    """Each informative word of the query and its weight (module doc); every word at 1.0 when none is."""
    total = max(terms.total, 1)
    common = UBIQUITOUS_SHARE * total if total >= UBIQUITY_MIN_ROWS else total
    weights = {t: math.log(1 + total / (df + 1)) for t, df in zip(terms.tokens, terms.frequencies, strict=True)
               if df <= common}
    return weights or dict.fromkeys(terms.tokens, 1.0)


def keyword_coverage(terms: QueryTerms, weights: Mapping[str, float], item_id: int) -> float:
    """The weighted share of the informative words that ``item_id`` holds (0..1)."""
    whole = sum(weights.values())
    if whole <= 0:
        return 0.0
    held = sum(w for t, w in weights.items() if item_id in terms.holding.get(t, ()))
    return held / whole


def semantic_evidence(similarity: float | None, model_id: str | None) -> float:
    """``similarity`` over the model's floor; 0 for no similarity, 1.0 for a model with no calibrated floor."""
    if similarity is None:
        return 0.0
    floor = SEMANTIC_FLOORS.get(model_id or "")
    if floor is None:
        return 1.0
    return max(0.0, similarity) / floor


def relevance(similarity: float | None, coverage: float, model_id: str | None) -> float:
    """The hit's relevance: the stronger evidence, 1.0 at its floor (module doc)."""
    return max(semantic_evidence(similarity, model_id), coverage / KEYWORD_FLOOR)
