"""What a search and a timeline return: plain frozen records, shared by the service and the renderers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from memcairn.core.models import KINDS, MemoryItem
from memcairn.search.evidence import EvidenceSnippet
from memcairn.search.freshness import Freshness
from memcairn.search.records import freshness_json
from memcairn.search.relevance import STRONG
from memcairn.wire.fence import clean_line

TITLE_CHARS = 90
UNTITLED = "(untitled)"


def display_title(item: MemoryItem, limit: int = TITLE_CHARS, default: str = UNTITLED) -> str:
    """The item's title, or the first text it has, on one line and at most ``limit`` characters."""
    candidates = (item.title, item.subtitle, item.request, item.text, item.narrative, item.completed,
                  item.learned, *(item.facts or ()))
    return next((line for c in candidates if (line := clean_line(c, limit))), default)


def item_row(item: MemoryItem) -> dict[str, Any]:
    """The fields a list of items shows per row (``display_title`` labels a memory without a title)."""
    return {"id": item.id, "kind": item.kind, "type": item.type, "title": item.title,
            "display_title": display_title(item, default=""), "project": item.project,
            "created_at_epoch": item.created_at_epoch}



class LegRank(NamedTuple):
    """Where one leg placed an item: ``rank`` from 1, and the leg's own score (higher is better). A tuple: a search
    makes one for every candidate of each leg (a frozen dataclass cost a microsecond each)."""

    rank: int
    score: float


@dataclass(frozen=True)
class SearchHit:
    item: MemoryItem
    score: float  # the fused score (after any recency boost); 0.0 for filter_only
    legs: dict[str, LegRank] = field(default_factory=dict)  # "keyword" / "semantic"
    relevance: float | None = None  # 1.0 = at the relevance floor (search.relevance); None: no floor applied
    freshness: Freshness | None = None  # how true it still is (search.freshness); None: not checked

    @property
    def weak(self) -> bool:
        """Shown above the floor but short of a match (``search.relevance``): every door marks it so."""
        return self.relevance is not None and self.relevance < STRONG

    def to_dict(self) -> dict[str, Any]:
        i = self.item
        return {
            **item_row(i), "score": round(self.score, 6),
            "legs": {name: {"rank": leg.rank, "score": round(leg.score, 6)} for name, leg in self.legs.items()},
            "relevance": self.relevance, "weak": self.weak,
            **({"freshness": freshness_json(self.freshness)} if self.freshness is not None else {}),
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
    hidden: int = 0  # candidates left out for being below the relevance floor
    min_score: float | None = None  # the floor applied (None: no query, no floor)
    evidence: list[EvidenceSnippet] = field(default_factory=list)  # matching lines of stored steps

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
            "hidden": self.hidden, "min_score": self.min_score, "results": [h.to_dict() for h in self.hits],
            "evidence": [e.to_dict() for e in self.evidence],
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
                {**item_row(i), "anchor": i.id == self.anchor_id}
                for i in self.items
            ],
        }
