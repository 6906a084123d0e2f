"""How true a memory still is, as the readers show it: its state, the reasons, and the short mark after a title.

The check itself reads the project's files (``context/freshness_check.py``, below capture, whose blob id it
shares); this module holds only what search, records and the digest need to show and rank by it, so a search
service is handed a ``FreshnessCheck`` rather than reading files itself.

- ``current``: every anchored file is byte-identical to what the memory saw;
- ``changed``: a file changed, the identifiers the memory names are still in its files;
- ``stale``: a file is gone from a root that is still there, or an identifier it names is in none of its files;
- ``unknown``: no anchors, no file ids, or the root is not on this machine: shown without a mark.

A memory said not to hold (``core/corrections.py``: ``superseded``, ``wrong``, ``reverted``) has that state
whatever its files say (``corrected``), and ranks with the stale ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from memcairn.core.clock import now_ms
from memcairn.core.corrections import REVERTED, SUPERSEDED, WRONG, reason
from memcairn.core.models import MemoryItem
from memcairn.wire.fence import clean_line

CURRENT, CHANGED, STALE, UNKNOWN = "current", "changed", "stale", "unknown"
STATES = (CURRENT, CHANGED, STALE, UNKNOWN, SUPERSEDED, WRONG, REVERTED)
BELOW = frozenset((STALE, SUPERSEDED, WRONG, REVERTED))  # ranked after the others
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


def corrected(item: MemoryItem, now: int) -> Freshness | None:
    """The freshness of a memory said not to hold (``superseded by #12``, ``wrong: …``), else None."""
    said = reason(item)
    return None if said is None else Freshness(item.correction["state"], (said,), now)


def with_corrections(items: Iterable[MemoryItem], states: Mapping[int, Freshness]) -> dict[int, Freshness]:
    """``states`` with each corrected item's state in place of what its files say."""
    out = dict(states)
    now = now_ms()
    for item in items:
        found = corrected(item, now)
        if found is not None:
            out[item.id] = found
    return out


def mark(freshness: Freshness | None) -> str:
    """``[stale: lib/x.ex deleted]``, ``[changed since]``, ``[superseded by #12]``, ``[wrong: …]``, or nothing
    (current and unknown)."""
    if freshness is None:
        return ""
    if freshness.state in (SUPERSEDED, WRONG, REVERTED):
        reason = freshness.reasons[0] if freshness.reasons else freshness.state
        return f"[{clean_line(reason, MARK_CHARS)}]"
    if freshness.state == STALE:
        reason = freshness.reasons[0] if freshness.reasons else "no longer true"
        return f"[stale: {clean_line(reason.removesuffix(' since'), MARK_CHARS)}]"
    if freshness.state == CHANGED:
        return "[changed since]"
    return ""


def with_mark(title: str, freshness: Freshness | None) -> str:
    shown = mark(freshness)
    return f"{title} {shown}" if shown else title


def age(then_ms: int, now_ms: int) -> str:
    """How long ago, shortly: ``just now``, ``12 min ago``, ``5 h ago``, ``3 d ago``, ``6 w ago``, ``10 mo ago``,
    ``2 y ago``."""
    seconds = max(0, now_ms - then_ms) // 1000
    for unit, size, least in (("y", 365 * 86400, 2), ("mo", 30 * 86400, 3), ("w", 7 * 86400, 2), ("d", 86400, 1),
                              ("h", 3600, 1), ("min", 60, 1)):
        if seconds >= size * least:
            return f"{seconds // size} {unit} ago"
    return "just now"


def stale_last(ids: Sequence[int], states: Mapping[int, Freshness]) -> list[int]:
    """``ids`` in their order, the stale and corrected ones moved after the others (kept in their own order)."""
    stale = [i for i in ids if (f := states.get(i)) is not None and f.state in BELOW]
    if not stale:
        return list(ids)
    moved = set(stale)
    return [i for i in ids if i not in moved] + stale
