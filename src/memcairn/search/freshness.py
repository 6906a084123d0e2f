"""How true a memory still is, as the readers show it: its state, the reasons, and the short mark after a title.

The check itself reads the project's files (``context/freshness_check.py``, below capture, whose blob id it
shares); this module holds only what search, records and the digest need to show and rank by it, so a search
service is handed a ``FreshnessCheck`` rather than reading files itself.

- ``current``: every anchored file is byte-identical to what the memory saw;
- ``changed``: a file changed, the identifiers the memory names are still in its files;
- ``stale``: a file is gone from a root that is still there, or an identifier it names is in none of its files;
- ``unknown``: no anchors, no file ids, or the root is not on this machine: shown without a mark.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from memcairn.core.models import MemoryItem
from memcairn.wire.fence import clean_line

CURRENT, CHANGED, STALE, UNKNOWN = "current", "changed", "stale", "unknown"
STATES = (CURRENT, CHANGED, STALE, UNKNOWN)
MARK_CHARS = 80  # a stale mark's reason at most


@dataclass(frozen=True)
class Freshness:
    state: str
    reasons: tuple[str, ...] = ()
    checked_at: int = 0  # epoch ms


class FreshnessCheck(Protocol):
    def check(self, items: Iterable[MemoryItem]) -> dict[int, Freshness]:
        """Each item's freshness by id, as its files are now."""
        ...


def mark(freshness: Freshness | None) -> str:
    """``[stale: lib/x.ex deleted]``, ``[changed since]``, or nothing (current and unknown)."""
    if freshness is None:
        return ""
    if freshness.state == STALE:
        reason = freshness.reasons[0] if freshness.reasons else "no longer true"
        return f"[stale: {clean_line(reason.removesuffix(' since'), MARK_CHARS)}]"
    if freshness.state == CHANGED:
        return "[changed since]"
    return ""


def with_mark(title: str, freshness: Freshness | None) -> str:
    shown = mark(freshness)
    return f"{title} {shown}" if shown else title


def stale_last(ids: Sequence[int], states: Mapping[int, Freshness]) -> list[int]:
    """``ids`` in their order, the stale ones moved after the others (kept in their own order)."""
    stale = [i for i in ids if (f := states.get(i)) is not None and f.state == STALE]
    if not stale:
        return list(ids)
    moved = set(stale)
    return [i for i in ids if i not in moved] + stale
