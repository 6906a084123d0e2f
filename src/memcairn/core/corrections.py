"""What a memory's ``correction`` field says (written by ``store/supersede.py``): whether it still holds.

- ``superseded``: a newer memory (``by``) says the same matter anew;
- ``wrong``: it was never true (``why``);
- ``reverted``: a fix whose change was undone later (``why``).

No state (or an ``undone_at``): it holds.
"""

from __future__ import annotations

from memcairn.core.models import MemoryItem

SUPERSEDED, WRONG, REVERTED = "superseded", "wrong", "reverted"
STATES = (SUPERSEDED, WRONG, REVERTED)


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
