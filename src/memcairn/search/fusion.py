"""Pure functions that merge the ranked legs of a search into one order, keyed by item id.

A *leg* is a list of ``(item_id, score)`` pairs, best first, where a higher score is better (the keyword
leg's bm25 as the store returns it; the semantic leg's ``1 - cosine distance``).

- ``rrf``: reciprocal-rank fusion, ``sum(weight / (k + rank))`` over the legs that found the item (rank
  from 1, ``k = 60``). Uses only ranks, so the two legs' incomparable scores never meet.
- ``minmax``: each leg's scores are min-max normalised to 0..1 (a leg whose scores are all equal gives
  1.0 to each), then summed with the leg weights; an item missing from a leg gets 0 from it.

Ties are broken by newer ``created_at_epoch`` first, then by higher id, so an order is always total.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

RRF_K = 60
DAY_MS = 86_400_000

Leg = Sequence[tuple[int, float]]


def rrf(legs: Mapping[str, Leg], *, k: int = RRF_K, weights: Mapping[str, float] | None = None) -> dict[int, float]:
    """Reciprocal-rank fusion of the legs: ``{item_id: score}``."""
    fused: dict[int, float] = {}
    for name, leg in legs.items():
        weight = 1.0 if weights is None else weights.get(name, 1.0)
        seen: set[int] = set()
        rank = 0
        for item_id, _score in leg:
            if item_id in seen:
                continue
            seen.add(item_id)
            rank += 1
            fused[item_id] = fused.get(item_id, 0.0) + weight / (k + rank)
    return fused


def min_max(values: Sequence[float]) -> list[float]:
    """Values scaled to 0..1 (all 1.0 when they are all equal)."""
    if not values:
        return []
    low, high = min(values), max(values)
    if high == low:
        return [1.0 for _ in values]
    return [(v - low) / (high - low) for v in values]


def minmax(legs: Mapping[str, Leg], *, weights: Mapping[str, float] | None = None) -> dict[int, float]:
    """Normalised score fusion: per-leg min-max, then a weighted sum (equal weights by default)."""
    fused: dict[int, float] = {}
    for name, leg in legs.items():
        weight = 1.0 / max(1, len(legs)) if weights is None else weights.get(name, 0.0)
        best: dict[int, float] = {}
        for item_id, score in leg:
            if item_id not in best:
                best[item_id] = score
        for item_id, norm in zip(best, min_max(list(best.values())), strict=True):
            fused[item_id] = fused.get(item_id, 0.0) + weight * norm
    for leg in legs.values():  # an item found by any leg is in the result, even with score 0
        for item_id, _ in leg:
            fused.setdefault(item_id, 0.0)
    return fused


def fuse(method: str, legs: Mapping[str, Leg], *, weights: Mapping[str, float] | None = None,
         k: int = RRF_K) -> dict[int, float]:
    """Fuse with ``method`` (``rrf`` or ``minmax``)."""
    if method == "rrf":
        return rrf(legs, k=k, weights=weights)
    if method == "minmax":
        return minmax(legs, weights=weights)
    raise ValueError(f"unknown fusion method {method!r}")


def recency_decay(age_ms: float, half_life_days: float) -> float:
    """``0.5 ** (age / half_life)``: 1.0 for now (and the future), 0.5 one half-life ago."""
    if half_life_days <= 0:
        return 1.0
    return 0.5 ** (max(0.0, age_ms) / (half_life_days * DAY_MS))


def boost_recent(scores: Mapping[int, float], created: Mapping[int, int], *, now: int,
                 half_life_days: float | None) -> dict[int, float]:
    """Each score multiplied by the recency decay of its item (unchanged when half-life is None or 0)."""
    if not half_life_days:
        return dict(scores)
    return {i: s * recency_decay(now - created[i], half_life_days) for i, s in scores.items()}


def order_ids(scores: Mapping[int, float], created: Mapping[int, int], order: str = "relevance") -> list[int]:
    """Item ids in ``order``: relevance (score, then newer, then higher id), newest or oldest."""
    ids = list(scores)
    if order == "newest":
        return sorted(ids, key=lambda i: (created[i], i), reverse=True)
    if order == "oldest":
        return sorted(ids, key=lambda i: (created[i], i))
    return sorted(ids, key=lambda i: (scores[i], created[i], i), reverse=True)
