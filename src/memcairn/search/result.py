"""What a search and a timeline return: plain frozen records, shared by the service and the renderers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memcairn.models import KINDS, MemoryItem

STRATEGIES = ("filter_only", "hybrid", "keyword", "semantic")
FALLBACK_REASONS = ("vector_unavailable", "vector_error", "platform_scoped_zero")


@dataclass(frozen=True)
class LegRank:
    """Where one leg placed an item: ``rank`` from 1, and the leg's own score (higher is better)."""

    rank: int
    score: float


@dataclass(frozen=True)
class SearchHit:
    item: MemoryItem
    score: float  # the fused score (after any recency boost); 0.0 for filter_only
    legs: dict[str, LegRank] = field(default_factory=dict)  # "keyword" / "semantic"

    def to_dict(self) -> dict[str, Any]:
        i = self.item
        return {
            "id": i.id, "kind": i.kind, "type": i.type, "title": i.title, "project": i.project,
            "created_at_epoch": i.created_at_epoch, "score": round(self.score, 6),
            "legs": {name: {"rank": leg.rank, "score": round(leg.score, 6)} for name, leg in self.legs.items()},
        }


@dataclass(frozen=True)
class SearchResult:
    strategy: str
    fallback_reason: str | None
    hits: list[SearchHit]
    counts: dict[str, int]
    notes: list[str]
    latency_ms: float
    mirror_available: bool

    @staticmethod
    def count_kinds(hits: list[SearchHit]) -> dict[str, int]:
        counts = {k: 0 for k in KINDS}
        for hit in hits:
            counts[hit.item.kind] = counts.get(hit.item.kind, 0) + 1
        return counts

    @property
    def items(self) -> list[MemoryItem]:
        return [h.item for h in self.hits]

    def to_dict(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy, "fallback_reason": self.fallback_reason, "notes": list(self.notes),
            "counts": dict(self.counts), "latency_ms": self.latency_ms, "mirror_available": self.mirror_available,
            "results": [h.to_dict() for h in self.hits],
        }


@dataclass(frozen=True)
class Timeline:
    """Items around an anchor, oldest first. ``anchor_id`` is None when nothing was found to anchor on."""

    anchor_id: int | None
    anchor_epoch: int | None
    items: list[MemoryItem]
    notes: list[str]
    anchor_label: str = ""
    strategy: str | None = None  # set when a query chose the anchor
    fallback_reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "anchor_id": self.anchor_id, "anchor_epoch": self.anchor_epoch, "anchor": self.anchor_label,
            "strategy": self.strategy, "fallback_reason": self.fallback_reason, "notes": list(self.notes),
            "results": [
                {"id": i.id, "kind": i.kind, "type": i.type, "title": i.title, "project": i.project,
                 "created_at_epoch": i.created_at_epoch, "anchor": i.id == self.anchor_id}
                for i in self.items
            ],
        }
