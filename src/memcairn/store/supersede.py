"""Saying that a memory no longer holds, and taking it back: the ``correction`` field (``core/fields.py``,
read by ``core/corrections.py``).

A corrected memory is never deleted: it stays readable by id, shows why it no longer holds, leaves the
SessionStart digest and ranks below the others in a search (``search.freshness.corrected``). Its correction is
one of

- ``superseded``: a newer memory (``by``) says the same matter anew (a person, or capture: ``source``);
- ``wrong``: it was never true (``why``);
- ``reverted``: a fix whose change was undone later (``why``).

An undo keeps the correction it takes back under ``undone``, and so does a correction replacing another: the
field is the memory's audit trail.
"""

from __future__ import annotations

from typing import Any, Protocol

from memcairn.core.clock import now_ms
from memcairn.core.corrections import (
    PERSON,
    REVERTED,
    SOURCES,
    STATES,
    SUPERSEDED,
    WRONG,
    marked,
    state_of,
    unmarked,
)
from memcairn.core.errors import NotFoundError, ValidationError
from memcairn.core.models import MemoryItem
from memcairn.wire.privacy.scrubbing import scrub

__all__ = ["REVERTED", "STATES", "SUPERSEDED", "WRONG", "correct", "state_of", "undo"]
MAX_WHY_CHARS = 1000


class CorrectionStore(Protocol):
    def get_item(self, item_id: int) -> MemoryItem: ...

    def update_item(self, item_id: int, **changes: Any) -> MemoryItem: ...


def correct(store: CorrectionStore, item_id: int, *, why: str | None = None, by: int | None = None,
            state: str | None = None, source: str = PERSON) -> MemoryItem:
    """Mark ``item_id`` superseded by ``by``, or wrong (or ``reverted``) because of ``why``; return it.

    Raises:
        NotFoundError: no memory ``item_id`` or ``by``.
        ValidationError: neither ``why`` nor ``by``, ``by`` the memory itself or one it supersedes, an unknown
            state or source.
    """
    why = " ".join(scrub(why).split()) if why else None  # private parts out, secrets redacted, one line
    if why and len(why) > MAX_WHY_CHARS:
        raise ValidationError(f"why is at most {MAX_WHY_CHARS} characters")
    if not why and by is None:
        raise ValidationError("say why the memory is wrong (why), or which memory supersedes it (by), or both")
    if source not in SOURCES:
        raise ValidationError(f"source is one of {', '.join(SOURCES)}")
    state = state or (SUPERSEDED if by is not None else WRONG)
    if state not in STATES or (state == SUPERSEDED) != (by is not None):
        raise ValidationError(f"state is one of {', '.join(STATES)}; superseded, and only it, names the memory "
                              "that supersedes (by)")
    item = store.get_item(item_id)
    if by is not None:
        _check_successor(store, item, by)
    return store.update_item(item_id, correction=marked(item, state, now_ms(), by=by, why=why, source=source))


def undo(store: CorrectionStore, item_id: int) -> MemoryItem:
    """Take back the correction in effect on ``item_id``: it holds again (the correction stays under ``undone``).

    Raises:
        NotFoundError: no memory ``item_id``.
        ValidationError: it has no correction in effect.
    """
    item = store.get_item(item_id)
    if state_of(item) is None:
        raise ValidationError(f"#{item_id} is not marked superseded, wrong or reverted: nothing to undo")
    return store.update_item(item_id, correction=unmarked(item, now_ms()))


def _check_successor(store: CorrectionStore, item: MemoryItem, by: int) -> None:
    if by == item.id:
        raise ValidationError(f"#{item.id} cannot supersede itself")
    try:
        successor = store.get_item(by)
    except NotFoundError:
        raise NotFoundError(f"no memory #{by} to supersede #{item.id}") from None
    if successor.project != item.project:
        raise ValidationError(f"#{by} is in project {successor.project!r}, #{item.id} in {item.project!r}: a memory "
                              "supersedes one of its own project")
    if state_of(successor) == SUPERSEDED and (successor.correction or {}).get("by") == item.id:
        raise ValidationError(f"#{by} is superseded by #{item.id}: undo that first")
