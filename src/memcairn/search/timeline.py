"""A slice of time around one memory: what else happened just before and after it.

Exactly one of ``anchor`` and ``query`` is given:

- ``anchor`` as an item id: ``123``, ``"123"`` or ``"#123"``;
- ``anchor`` as ``S<id>``: the *summary item* with that id. Session row ids never appear in any output,
  so ``S`` names a summary item and nothing else: an id of another kind or an unknown id is a
  ``NotFoundError`` whose message says what the id is instead;
- ``anchor`` as an ISO date or datetime (no zone = ``tz``, else local time) or a relative time before
  ``now`` (``24h``, ``7d``): the first memory at or after that moment becomes the anchor; when there is
  none, the memories before it are shown without one;
- ``query``: the best hit of the search service (hybrid, or its keyword fallback) becomes the anchor.

Items of every kind are merged by time (ties by id). ``depth_before``/``depth_after`` are clamped to
0..``MAX_DEPTH`` and the slice stops at either end of the store. ``projects`` limits the slice (merged
projects included); an anchor item outside those projects is refused.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import tzinfo
from typing import TYPE_CHECKING

from memcairn.core.errors import NotFoundError, ValidationError
from memcairn.core.models import MAX_ITEM_ID, ItemFilter, MemoryItem
from memcairn.search.request import SearchRequest, clamp, parse_time
from memcairn.search.result import Timeline

if TYPE_CHECKING:
    from memcairn.search.service import SearchService

MAX_DEPTH = 50
ANCHOR_FORMS = ("an item id (123 or #123), S<id> for a summary (S123), an ISO date or datetime "
                "(2026-12-01T14:30) or a relative time (24h, 7d)")
_ID = re.compile(r"#?(\d+)")
_SUMMARY = re.compile(r"[Ss]#?(\d+)")


def build_timeline(service: SearchService, *, anchor: int | str | None = None, query: str | None = None,
                   depth_before: int = 10, depth_after: int = 10, projects: Sequence[str] | str | None = None,
                   now: int | None = None, tz: tzinfo | None = None) -> Timeline:
    """See the module docstring.

    Raises:
        ValidationError: both or neither of anchor and query; a malformed anchor or depth; an anchor item
            outside ``projects``.
        NotFoundError: the anchor names an item or a summary that does not exist.
    """
    has_anchor = anchor is not None and not (isinstance(anchor, str) and not anchor.strip())
    has_query = isinstance(query, str) and bool(query.strip())
    if query is not None and not isinstance(query, str):
        raise ValidationError("query must be text")
    if has_anchor and has_query:
        raise ValidationError("give either an anchor or a query, not both")
    if not has_anchor and not has_query:
        raise ValidationError(f"give an anchor ({ANCHOR_FORMS}) or a query")
    notes: list[str] = []
    before = clamp(depth_before, 0, MAX_DEPTH, "depth_before", notes)
    after = clamp(depth_after, 0, MAX_DEPTH, "depth_after", notes)
    names = SearchRequest(projects=projects).projects
    store = service.store
    if names:
        unknown, known = service.unknown_projects(names)
        if unknown:
            from memcairn.search.service import unknown_projects_note

            notes.append(unknown_projects_note(unknown, known))
            if len(unknown) == len(names):
                return Timeline(None, None, [], notes)
    flt = ItemFilter(projects=list(names)) if names else None

    strategy = reason = None
    label = ""
    if has_query:
        result = service.search(SearchRequest(query=query or "", projects=names, limit=1, now=now))
        strategy, reason = result.strategy, result.fallback_reason
        notes += [n for n in result.notes if n not in notes]
        if not result.hits:
            notes.append("nothing matched the query, so there is no anchor")
            return Timeline(None, None, [], notes, strategy=strategy, fallback_reason=reason)
        item: MemoryItem | None = result.hits[0].item
        label = "best match for the query"
    else:
        item, epoch, label = _resolve_anchor(store, anchor, tz, now)
        if item is None:
            earlier, later = store.neighbours(epoch, before=before, after=after + 1, flt=flt)
            if not later:
                if earlier:
                    notes.append(f"no memory at or after {anchor}; showing the ones before it")
                elif before:
                    notes.append(f"no memory at or after {anchor}, and none before it")
                else:
                    notes.append(f"no memory at or after {anchor}, and depth_before 0 shows none before it")
                return Timeline(None, epoch, earlier, notes, anchor_label=label)
            first = later[0]
            return Timeline(first.id, first.created_at_epoch, earlier + later, notes, anchor_label=label)

    assert item is not None
    if flt is not None and not store.filter_ids([item.id], flt):
        raise ValidationError(
            f"anchor #{item.id} belongs to project {item.project!r}, outside {', '.join(names or ())}; "
            "drop the project filter or pick another anchor"
        )
    earlier, later = store.neighbours(item.created_at_epoch, before=before, after=after + 1, flt=flt,
                                      anchor_id=item.id)
    return Timeline(item.id, item.created_at_epoch, earlier + later, notes, anchor_label=label, strategy=strategy,
                    fallback_reason=reason)


def _resolve_anchor(store, anchor: int | str | None, tz: tzinfo | None,  # noqa: ANN001
                    now: int | None) -> tuple[MemoryItem | None, int, str]:
    """(anchor item or None, epoch, label) for an id, ``S<id>`` or timestamp anchor."""
    if isinstance(anchor, bool) or not isinstance(anchor, int | str):
        raise ValidationError(f"anchor {anchor!r} is not understood; use {ANCHOR_FORMS}")
    if isinstance(anchor, int):
        item = _get(store, _item_id(anchor, anchor))
        return item, item.created_at_epoch, ""
    text = anchor.strip()
    match = _ID.fullmatch(text)
    if match:
        item = _get(store, _item_id(_digits(match.group(1)), anchor))
        return item, item.created_at_epoch, ""
    match = _SUMMARY.fullmatch(text)
    if match:
        item_id = _item_id(_digits(match.group(1)), anchor)
        found = store.get_items([item_id])
        if not found:
            raise NotFoundError(f"no summary with id {item_id}")
        if found[0].kind != "summary":
            raise NotFoundError(
                f"no summary with id {item_id}: #{item_id} is of kind {found[0].kind}; use {item_id} as the anchor"
            )
        return found[0], found[0].created_at_epoch, "summary"
    try:
        epoch = parse_time(text, tz=tz, now=now, what="anchor")
    except ValidationError:
        raise ValidationError(f"anchor {anchor!r} is not understood; use {ANCHOR_FORMS}") from None
    if epoch is None:
        raise ValidationError(f"anchor {anchor!r} is not understood; use {ANCHOR_FORMS}")
    return None, epoch, f"first memory at or after {text}"


def _digits(text: str) -> int:
    """The number ``text`` writes; one past any item id when it is too long for ``int`` to read (thousands of
    digits raise there) or for SQLite."""
    return int(text) if len(text) <= 20 else MAX_ITEM_ID + 1


def _item_id(number: int, anchor: int | str) -> int:
    """``number`` when it can be an item id (1..MAX_ITEM_ID: beyond it SQLite cannot even compare), else a
    ValidationError naming the anchor as given."""
    if 0 < number <= MAX_ITEM_ID:
        return number
    raise ValidationError(f"anchor {anchor!r} is not an item id; use {ANCHOR_FORMS}")


def _get(store, item_id: int) -> MemoryItem:  # noqa: ANN001
    found = store.get_items([item_id])
    if not found:
        raise NotFoundError(f"no memory with id {item_id}; search first to find an id")
    return found[0]

