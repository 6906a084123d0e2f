"""Reverted changes: an edit a later edit of the same session undid, text for text.

Whatever the language, an edit that replaced ``a`` by ``b`` in a file is undone by a later edit of that file
replacing ``b`` by ``a``; it holds again when a still later edit makes ``b`` of ``a`` once more. An observation
whose every edit is undone is marked ``reverted`` (``core/corrections.py``): it stays readable, leaves the digest
and ranks below the others; one that still has an edit standing says what it says. A revert taken back (the
change made again) takes the mark back.

After the memories are committed and on its own, like ``capture.supersession``: a failure costs a mark.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from memcairn.capture.turns import call_id
from memcairn.core.clock import now_ms
from memcairn.core.corrections import CAPTURE, REVERTED, marked, state_of, unmarked
from memcairn.core.models import ItemFilter, MemoryItem
from memcairn.store.protocols import CaptureStore
from memcairn.store.records import IngestEvent

log = logging.getLogger("memcairn.capture")

SCAN = 500  # observations of the session looked at, newest first
_FAILED = re.compile(r"\s*(?:<tool_use_error>|Error\b|Failed\b)", re.IGNORECASE)  # a call's answer when it failed


@dataclass(frozen=True)
class Edit:
    call: str
    path: str
    old: str
    new: str


def edits_of(event: IngestEvent) -> list[Edit]:
    """The text replacements a tool call made (Claude Code's Edit and MultiEdit, Gemini CLI's replace): ``old``
    and ``new`` both non-blank and different; an empty list for anything else or a call that failed."""
    payload = event.payload
    data = payload.get("tool_input")
    cid = call_id(event)
    response = payload.get("tool_response")
    failed = (isinstance(response, dict) and (response.get("is_error") is True or response.get("success") is False)
              or isinstance(response, str) and _FAILED.match(response) is not None)
    if not isinstance(data, dict) or cid is None or failed:
        return []
    path = data.get("file_path") or data.get("path")
    if not isinstance(path, str) or not path:
        return []
    pairs = [(e.get("old_string"), e.get("new_string")) for e in data.get("edits") or () if isinstance(e, dict)]
    pairs = pairs or [(data.get("old_string"), data.get("new_string"))]
    return [Edit(cid, path, old, new) for old, new in pairs
            if isinstance(old, str) and isinstance(new, str) and old.strip() and new.strip() and old != new]


def undone_calls(events: Iterable[IngestEvent]) -> tuple[set[str], set[str]]:
    """(calls whose every edit a later edit undid and none redid, calls that made at least one edit), over
    ``events`` in order."""
    standing: dict[tuple[str, str, str], list[Edit]] = {}  # (path, old, new) -> edits of it standing
    made: dict[str, list[Edit]] = {}
    undone: set[tuple[str, int]] = set()  # (call, index of its edit)
    for event in events:
        for edit in edits_of(event):
            made.setdefault(edit.call, []).append(edit)
            back = standing.get((edit.path, edit.new, edit.old))
            if back:
                first = back.pop()
                undone.add((first.call, made[first.call].index(first)))
                continue  # the undoing edit restores what was: nothing of its own stands
            for earlier_call, edits in made.items():  # the change made again: a revert of it no longer holds
                for i, earlier in enumerate(edits):
                    if (earlier.path, earlier.old, earlier.new) == (edit.path, edit.old, edit.new):
                        undone.discard((earlier_call, i))
            standing.setdefault((edit.path, edit.old, edit.new), []).append(edit)
    whole = {call for call, edits in made.items() if all((call, i) in undone for i in range(len(edits)))}
    return whole, set(made)


def mark_reverts(store: CaptureStore, session_events: Sequence[IngestEvent], observations: Sequence[MemoryItem]
                 ) -> list[int]:
    """Mark ``reverted`` the observations whose every edit ``session_events`` show undone; take the mark back
    from those with one standing again. Returns the ids marked now."""
    undone, edited = undone_calls(session_events)
    marked_now = []
    for item in observations:
        steps = [s for s in (item.metadata or {}).get("steps") or () if s in edited]
        if not steps:
            continue
        state = state_of(item)
        gone = all(s in undone for s in steps)
        if gone and state is None:
            paths = sorted({e.path.rsplit("/", 1)[-1] for e in session_edits(session_events, steps)})
            why = f"its change to {', '.join(paths)} was undone by a later edit"
            store.update_item(item.id, correction=marked(item, REVERTED, now_ms(), why=why, source=CAPTURE))
            marked_now.append(item.id)
        elif not gone and state == REVERTED and item.correction.get("source") == CAPTURE:
            store.update_item(item.id, correction=unmarked(item, now_ms()))
    return marked_now


def session_edits(events: Iterable[IngestEvent], calls: Iterable[str]) -> list[Edit]:
    wanted = set(calls)
    return [e for event in events for e in edits_of(event) if e.call in wanted]


def mark_reverts_safely(store: CaptureStore, batch: Sequence[IngestEvent]) -> list[int]:
    """``mark_reverts`` for a session after a batch of its tool events committed, when the batch edits anything;
    never raises."""
    if not any(edits_of(e) for e in batch):
        return []
    first = batch[0]
    try:
        events = store.session_events(first.platform_source, first.session_id, event_type=first.event_type)
        observations = store.list_items(ItemFilter(session=first.session_id, kinds=["observation"]), limit=SCAN)
        return mark_reverts(store, events, observations)
    except Exception:
        log.warning("could not mark the reverted changes of session %s", first.session_id, exc_info=True)
        return []
