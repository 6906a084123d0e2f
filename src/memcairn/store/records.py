"""The plain values the store's callers speak in: records a store hands back and the limits it enforces.

No SQL and no connection here, so search, context and capture may import this module (and
``store.protocols``) without depending on the SQLite store itself (tests/test_layering.py holds that).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from memcairn.core.errors import NotFoundError
from memcairn.core.models import MemoryItem
from memcairn.wire.protocol import ROUTE_KINDS

MAX_FIELD_BYTES = 256 * 1024  # one stored text field at most (``validation.validate_item`` refuses more)
# 9999-12-31 00:00 UTC: the last day ``datetime`` can render in every time zone (renderings print dates).
MAX_EPOCH_MS = 253_402_214_400_000

# A query longer than this many tokens is cut (documented in the README): bm25 over more terms costs time
# and a wall of pasted text carries no more intent than its first sentences.
MAX_QUERY_TOKENS = 32

STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just me more most my
    myself no nor not now of off on once only or other our ours ourselves out over own same she should so
    some such than that the their theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom why will with would you your
    yours yourself yourselves""".split()
)


@dataclass(frozen=True)
class ProjectInfo:
    name: str
    merged_into_project: str | None
    items: int
    last_epoch: int | None


@dataclass(frozen=True)
class QueryTerms:
    """The words a query searches for (``fts.query_tokens``), each one's document frequency over ``total``
    indexed rows (0 = no row holds it), and which of the rows asked about hold each (``holding[token]``)."""

    tokens: tuple[str, ...]
    frequencies: tuple[int, ...]
    total: int
    holding: dict[str, set[int]]


class SessionWindow(NamedTuple):
    """An item with its neighbours in its session (``Store.session_windows``): the session's row id (None for an
    item without one), the window's item ids in time order (the item among them) and the item's characters."""

    session: int | None
    ids: tuple[int, ...]
    chars: int


@dataclass(frozen=True)
class OutboxEntry:
    id: int
    item_id: int
    project: str
    op: str


@dataclass(frozen=True)
class IngestEvent:
    """A hook event the worker accepted, as the ingest queue holds it."""

    id: int
    session_id: str
    platform_source: str
    event_type: str
    tool_use_id: str | None
    payload: dict[str, Any]
    status: str
    attempts: int
    created_at_epoch: int
    updated_at_epoch: int
    source_key: str | None = None
    error: str | None = None

    @property
    def kind(self) -> str:
        return event_kind(self.event_type, self.payload)

    @property
    def at_epoch(self) -> int:
        """When it happened: the original time of a replayed event, else when the worker accepted it."""
        given = self.payload.get("timestamp_ms")
        if isinstance(given, int) and not isinstance(given, bool) and given > 0:
            return given
        return self.created_at_epoch


def event_kind(event_type: str, payload: dict[str, Any]) -> str:
    """What the hook sent: session_start, user_prompt, tool_use, stop or session_end. The body's ``event``
    says so; a body without it (a claude-mem style client) is taken by its route."""
    given = payload.get("event")
    if isinstance(given, str) and given:
        return given
    return ROUTE_KINDS.get(event_type, event_type)


def only_item(found: Sequence[MemoryItem], item_id: int) -> MemoryItem:
    """The one item ``get_items([item_id])`` found (every store's ``get_item``); NotFoundError when none."""
    if not found:
        raise NotFoundError(f"no memory with id {item_id}")
    return found[0]


@dataclass(frozen=True)
class NewEvidence:
    """One step of a session to keep as evidence (``schema.EVIDENCE_TABLES``). ``item_id`` is the memory it fed,
    when one was made; ``step`` names the step within its session (a tool_use_id, ``reply:3``)."""

    project: str
    platform_source: str
    session: str
    step: str
    text: str
    created_at_epoch: int
    item_id: int | None = None


@dataclass(frozen=True)
class EvidenceHit:
    """A stored step that matched a search, best first: the memory it fed (None when none was made)."""

    id: int
    item_id: int | None
    text: str
    created_at_epoch: int
    score: float
