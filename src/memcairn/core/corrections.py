"""What a memory's ``correction`` field says (written by ``store/supersede.py``): whether it still holds.

- ``superseded``: a newer memory (``by``) says the same matter anew;
- ``wrong``: it was never true (``why``);
- ``reverted``: a fix whose change was undone later (``why``).

No state (or an ``undone_at``): it holds.
"""

from __future__ import annotations

from typing import Any

from memcairn.core.models import MemoryItem

SUPERSEDED, WRONG, REVERTED = "superseded", "wrong", "reverted"
STATES = (SUPERSEDED, WRONG, REVERTED)
PERSON, CAPTURE = "person", "capture"  # who said so
SOURCES = (PERSON, CAPTURE)
MAX_UNDONE = 20  # earlier corrections kept at most (the newest)


def state_of(item: MemoryItem) -> str | None:
    """The correction in effect (one of ``STATES``), or None."""
    state = (item.correction or {}).get("state")
    return state if state in STATES else None


def reason(item: MemoryItem) -> str | None:
    """``superseded by #12: why``, ``wrong: why``, ``reverted: why``; None when the memory holds."""
    state = state_of(item)
    if state is None:
        return None
    why = item.correction.get("why")
    if state == SUPERSEDED:
        return f"superseded by #{item.correction.get('by')}" + (f": {why}" if why else "")
    return f"{state}: {why}" if why else state


def marked(item: MemoryItem, state: str, at: int, *, by: int | None = None, why: str | None = None,
           source: str = PERSON) -> dict[str, Any]:
    """``item``'s correction field saying ``state`` (the one it replaces kept under ``undone``)."""
    correction: dict[str, Any] = {"state": state, "source": source, "at": at}
    if by is not None:
        correction["by"] = by
    if why:
        correction["why"] = why
    return _with_history(item, correction)


def unmarked(item: MemoryItem, at: int) -> dict[str, Any]:
    """``item``'s correction field once the correction in effect is taken back (kept under ``undone``)."""
    return _with_history(item, {"undone_at": at})


def _with_history(item: MemoryItem, new: dict[str, Any]) -> dict[str, Any]:
    old = dict(item.correction or {})
    undone = list(old.pop("undone", None) or [])
    old.pop("undone_at", None)
    if old.get("state") in STATES:
        undone.append(old)
    return {**new, "undone": undone[-MAX_UNDONE:]} if undone else new
