"""The memory items a LongMemEval haystack session becomes, at each granularity.

How a session becomes memory items is the ``granularity`` (several, comma-separated, store the items of each):

- ``turn`` (default): one item per message, as memcairn stores an agent's session: user messages as ``prompt``
  items, assistant messages as observations. It measured best of the four on the LongMemEval_S subset
  (hybrid, per-question stores, and pooled);
- ``round``: one observation per round, i.e. a user message and the assistant replies that follow it; the
  user message is the ``narrative`` and the replies the ``text``, so the mirror embeds them separately;
- ``session``: one observation per session whose ``facts`` are its messages: the keyword index sees the
  whole conversation as one document, the mirror embeds every message as a document of its own (``fact_<i>``);
- ``user``: user messages only, as ``prompt`` items (assistant text is not stored at all).

The four embed the same texts (each message, chunked by the mirror), so one filled cache serves them all.

Every item carries the haystack session id as its ``session`` (and in ``metadata``), ``platform_source``
``longmemeval`` and one project.
"""

from __future__ import annotations

import json

from memcairn.bench.longmemeval_data import Session
from memcairn.core.errors import ValidationError
from memcairn.core.models import NewItem
from memcairn.store.validation import MAX_FIELD_BYTES

GRANULARITIES = ("round", "session", "turn", "user")
DEFAULT_GRANULARITY = "turn"
_FIELD_BUDGET = MAX_FIELD_BYTES - 64  # bytes of a stored field (JSON-encoded for facts), with some room
_PIECE_CHARS = MAX_FIELD_BYTES // 8  # a piece of an oversized message: at most 6 bytes a character as JSON
PROJECT = "longmemeval"
PLATFORM = "longmemeval"
ITEM_TYPE = "conversation"


def check_granularity(granularity: str) -> str:
    """``granularity`` normalised (``session, turn`` -> ``session,turn``).

    Raises:
        ValidationError: a part is not one of ``GRANULARITIES``.
    """
    parts = list(dict.fromkeys(g.strip().lower() for g in str(granularity).split(",") if g.strip()))
    if not parts or any(g not in GRANULARITIES for g in parts):
        raise ValidationError(f"unknown granularity {granularity!r}; use {', '.join(GRANULARITIES)} "
                              "(or several, comma-separated)")
    return ",".join(parts)


def _size(text: str) -> int:
    """Bytes of ``text`` as the store counts a list element (JSON, UTF-8), which is never less than as text."""
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8", errors="surrogatepass"))


def _pieces(text: str) -> list[str]:
    """``text``, cut into consecutive pieces only when it is over the store's limit for one field."""
    if _size(text) <= _FIELD_BUDGET:
        return [text]
    return [text[i:i + _PIECE_CHARS] for i in range(0, len(text), _PIECE_CHARS)]


def session_items(session: Session, granularity: str = DEFAULT_GRANULARITY) -> list[NewItem]:
    """The memory items one haystack session becomes (see the module docstring); several granularities
    separated by commas (``session,turn``) store the items of each.

    Nothing is dropped for its size: a message over the store's 256 KiB per field becomes consecutive pieces
    (as if several messages), and a session or a round of replies too long for one field continues in another
    item."""
    granularity = check_granularity(granularity)
    if "," in granularity:
        return [item for g in granularity.split(",") for item in session_items(session, g)]
    base = {"project": PROJECT, "session": session.id, "platform_source": PLATFORM}
    turns = [(role, piece) for role, text in session.turns if text.strip() for piece in _pieces(text.strip())]

    def at(n: int) -> int:  # keeps the order of a session's items in time (1 ms per turn)
        return session.epoch_ms + n

    if granularity == "session":
        groups: list[tuple[int, list[str]]] = []  # (first turn, messages), each group within one field
        size = 0
        for n, (_, text) in enumerate(turns):
            if not groups or size + _size(text) + 2 > _FIELD_BUDGET:
                groups.append((n, []))
                size = 2
            groups[-1][1].append(text)
            size += _size(text) + 2
        return [NewItem(**base, kind="observation", type=ITEM_TYPE, facts=facts, created_at_epoch=at(n),
                        metadata={"session_id": session.id} if n == 0 else {"session_id": session.id, "turn": n})
                for n, facts in groups]
    if granularity in ("turn", "user"):
        items = []
        for n, (role, text) in enumerate(turns):
            meta = {"session_id": session.id, "turn": n}
            if role == "user":
                items.append(NewItem(**base, kind="prompt", text=text, prompt_number=n, created_at_epoch=at(n),
                                     metadata=meta))
            elif granularity == "turn":
                items.append(NewItem(**base, kind="observation", type=ITEM_TYPE, text=text, created_at_epoch=at(n),
                                     metadata=meta))
        return items
    rounds: list[tuple[int, str | None, list[str]]] = []  # (first turn, user message, replies)
    size = 0  # bytes of the last round's replies, joined
    for n, (role, text) in enumerate(turns):
        if role == "user" or not rounds or size + _size(text) + 2 > _FIELD_BUDGET:
            rounds.append((n, text if role == "user" else None, [] if role == "user" else [text]))
            size = 0 if role == "user" else _size(text)
        else:
            rounds[-1][2].append(text)
            size += _size(text) + 2
    items = []
    for n, user, replies in rounds:
        reply = "\n\n".join(replies) or None
        items.append(NewItem(**base, kind="observation", type=ITEM_TYPE, narrative=user, text=reply,
                             created_at_epoch=at(n), metadata={"session_id": session.id, "turn": n}))
    return items
