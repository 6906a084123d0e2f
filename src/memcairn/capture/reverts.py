"""Reverted changes: an edit a later edit of the same session undid, text for text.

Whatever the language, an edit that replaced ``a`` by ``b`` in a file is undone by a later edit of that file
replacing ``b`` by ``a``; it holds again when a still later edit makes ``b`` of ``a`` once more. An observation
whose every edit is undone is marked ``reverted`` (``core/corrections.py``): it stays readable, leaves the digest
and ranks below the others; one that still has an edit standing says what it says. A revert taken back (the
change made again) takes the mark back.

After the memories are committed and on its own, like ``capture.supersession``: a failure costs a mark.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from memcairn.capture.offline.patches import patch_text
from memcairn.capture.turns import call_id
from memcairn.core.clock import now_ms
from memcairn.core.corrections import CAPTURE, REVERTED, marked, state_of, unmarked
from memcairn.core.models import ItemFilter, MemoryItem
from memcairn.store.protocols import CaptureStore
from memcairn.store.records import IngestEvent

log = logging.getLogger("memcairn.capture")

SCAN = 500  # observations of the session looked at, newest first
SESSIONS_KEPT = 64  # sessions whose edits are kept between batches
_PATCH_FILE = re.compile(r"\*\*\* (Add|Update|Delete) File:\s*(.+?)\s*$")
# `git revert [options] <sha>...`: the commits a successful run undid (a sha, not HEAD~n: that moves with time)
_GIT_REVERT = re.compile(r"\bgit\s+revert\b([^;&|\n]*)")
_SHA = re.compile(r"(?<![\w-])([0-9a-f]{7,40})(?![\w-])")
_COMMITTED_SHA = re.compile(r"\(([0-9a-f]{7,40})\)\s*$")  # the extractor's "committed: <subject> (<sha>)" fact
_FAILED = re.compile(r"\s*(?:<tool_use_error>|Error\b|Failed\b)", re.IGNORECASE)  # a call's answer when it failed


@dataclass(frozen=True)
class Edit:
    """One replacement, its texts kept as digests (a session's edits are held between batches)."""

    call: str
    path: str
    old: str
    new: str


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()


def _patch_edits(cid: str, text: str) -> list[Edit]:
    """The replacements of an ``apply_patch`` envelope (Codex): each run of removed lines followed by added
    lines in a file it updates, context left out (a patch undoing another rarely quotes the same context)."""
    out: list[Edit] = []
    path: str | None = None
    old: list[str] = []
    new: list[str] = []

    def close() -> None:
        if path and "\n".join(old).strip() and "\n".join(new).strip() and old != new:
            out.append(Edit(cid, path, _digest("\n".join(old)), _digest("\n".join(new))))
        old.clear()
        new.clear()

    for line in text[:200_000].splitlines():
        header = _PATCH_FILE.match(line)
        if header or line.startswith("*** "):
            close()
            path = header.group(2) if header and header.group(1) == "Update" else None
        elif line.startswith("-") and not new:
            old.append(line[1:])
        elif line.startswith("+"):
            new.append(line[1:])
        else:  # context, a hunk header, or removed lines after added ones: a run ends
            close()
            if line.startswith("-"):
                old.append(line[1:])
    close()
    return out


def _failed(response: object) -> bool:
    if isinstance(response, dict):
        code = response.get("exit_code", response.get("exitCode"))
        return (response.get("is_error") is True or response.get("success") is False
                or isinstance(code, int) and not isinstance(code, bool) and code != 0)
    return isinstance(response, str) and _FAILED.match(response) is not None


def reverted_commits(event: IngestEvent) -> list[str]:
    """The commits (sha prefixes, lower case) a shell call's successful ``git revert`` undid."""
    data = event.payload.get("tool_input")
    command = (data.get("command") or data.get("cmd")) if isinstance(data, dict) else None
    if isinstance(command, list):
        command = " ".join(part for part in command if isinstance(part, str))
    if not isinstance(command, str) or "revert" not in command or _failed(event.payload.get("tool_response")):
        return []
    return [sha for found in _GIT_REVERT.finditer(command) for sha in _SHA.findall(found.group(1).lower())]


def mark_reverted_commits(store: CaptureStore, shas: Sequence[str], observations: Sequence[MemoryItem]
                          ) -> list[int]:
    """Mark ``reverted`` the observations that made one of these commits (their ``committed: … (sha)`` fact)."""
    marked_now = []
    for item in observations:
        made = {m.group(1) for fact in item.facts if fact.startswith("committed: ")
                and (m := _COMMITTED_SHA.search(fact))}
        gone = sorted({sha for sha in shas for own in made if own.startswith(sha) or sha.startswith(own)})
        if gone and state_of(item) is None:
            why = f"its commit {gone[0][:12]} was undone by git revert"
            store.update_item(item.id, correction=marked(item, REVERTED, now_ms(), why=why, source=CAPTURE))
            marked_now.append(item.id)
    return marked_now


def edits_of(event: IngestEvent) -> list[Edit]:
    """The text replacements a tool call made (Claude Code's Edit and MultiEdit, Gemini CLI's replace, Codex's
    ``apply_patch``): ``old`` and ``new`` both non-blank and different; an empty list for anything else or a call
    that failed."""
    payload = event.payload
    data = payload.get("tool_input")
    cid = call_id(event)
    response = payload.get("tool_response")
    if cid is None or _failed(response):
        return []
    patch = patch_text(data)
    if "*** Begin Patch" in patch or re.search(r"^\*\*\* Update File:", patch, re.MULTILINE):
        return _patch_edits(cid, patch)
    if not isinstance(data, dict):
        return []
    path = data.get("file_path") or data.get("path")
    if not isinstance(path, str) or not path:
        return []
    pairs = [(e.get("old_string"), e.get("new_string")) for e in data.get("edits") or () if isinstance(e, dict)]
    pairs = pairs or [(data.get("old_string"), data.get("new_string"))]
    return [Edit(cid, path, _digest(old), _digest(new)) for old, new in pairs
            if isinstance(old, str) and isinstance(new, str) and old.strip() and new.strip() and old != new]


def undone_calls(edits: Iterable[Sequence[Edit]]) -> tuple[set[str], set[str]]:
    """(calls whose every edit a later edit undid and none redid, calls that made at least one edit), over the
    edits of a session's calls in order."""
    standing: dict[tuple[str, str, str], list[Edit]] = {}  # (path, old, new) -> edits of it standing
    made: dict[str, list[Edit]] = {}
    undone: set[tuple[str, int]] = set()  # (call, index of its edit)
    for call_edits in edits:
        for edit in call_edits:
            made.setdefault(edit.call, []).append(edit)
            back = standing.get((edit.path, edit.new, edit.old))
            if back:
                first = back.pop()
                undone.add((first.call, made[first.call].index(first)))
                continue  # the undoing edit restores what was: nothing of its own stands
            for earlier_call, earlier_edits in made.items():  # the change made again: its revert no longer holds
                for i, earlier in enumerate(earlier_edits):
                    if (earlier.path, earlier.old, earlier.new) == (edit.path, edit.old, edit.new):
                        undone.discard((earlier_call, i))
            standing.setdefault((edit.path, edit.old, edit.new), []).append(edit)
    whole = {call for call, call_edits in made.items() if all((call, i) in undone for i in range(len(call_edits)))}
    return whole, set(made)


def mark_reverts(store: CaptureStore, edits: Sequence[Sequence[Edit]], observations: Sequence[MemoryItem]
                 ) -> list[int]:
    """Mark ``reverted`` the observations whose every edit the session's ``edits`` (per call, in order) show
    undone; take the mark back from those with one standing again. Returns the ids marked now."""
    undone, edited = undone_calls(edits)
    marked_now = []
    for item in observations:
        steps = [s for s in (item.metadata or {}).get("steps") or () if s in edited]
        if not steps:
            continue
        state = state_of(item)
        gone = all(s in undone for s in steps)
        if gone and state is None:
            paths = sorted({e.path.rsplit("/", 1)[-1] for call in edits for e in call if e.call in steps})
            why = f"its change to {', '.join(paths)} was undone by a later edit"
            store.update_item(item.id, correction=marked(item, REVERTED, now_ms(), why=why, source=CAPTURE))
            marked_now.append(item.id)
        elif not gone and state == REVERTED and item.correction.get("source") == CAPTURE:
            store.update_item(item.id, correction=unmarked(item, now_ms()))
    return marked_now


class RevertWatch:
    """The edits of the sessions capture saw lately, read once each (a session's new events only, after the last
    one read), so a batch costs its own events rather than its whole session's."""

    def __init__(self, sessions: int = SESSIONS_KEPT) -> None:
        self._kept: OrderedDict[tuple[str, str], tuple[int, list[list[Edit]], frozenset[str]]] = OrderedDict()
        self._sessions = sessions

    def mark(self, store: CaptureStore, batch: Sequence[IngestEvent]) -> list[int]:
        """``mark_reverts`` for a session after a batch of its tool events committed, when the batch edits
        anything and what is undone changed, and ``mark_reverted_commits`` when it ran ``git revert``; never
        raises."""
        first = batch[0]
        commits = self._mark_commits(store, batch)
        if not any(edits_of(e) for e in batch):
            return commits
        key = (first.platform_source, first.session_id)
        try:
            last, edits, was = self._kept.pop(key, (0, [], frozenset()))
            events = store.session_events(*key, after_id=last, event_type=first.event_type)
            edits += [made for made in map(edits_of, events) if made]
            last = events[-1].id if events else last
            undone = frozenset(undone_calls(edits)[0])
            self._kept[key] = (last, edits, undone)
            while len(self._kept) > self._sessions:
                self._kept.popitem(last=False)
            if not undone and not was:  # nothing undone, now or before: no mark to set or take back
                return commits
            observations = store.list_items(ItemFilter(session=first.session_id, kinds=["observation"]), limit=SCAN)
            return commits + mark_reverts(store, edits, observations)
        except Exception:
            log.warning("could not mark the reverted changes of session %s", first.session_id, exc_info=True)
            return commits

    @staticmethod
    def _mark_commits(store: CaptureStore, batch: Sequence[IngestEvent]) -> list[int]:
        """``mark_reverted_commits`` for the commits the batch's ``git revert`` runs undid; never raises."""
        shas = [sha for e in batch for sha in reverted_commits(e)]
        if not shas:
            return []
        session = batch[0].session_id
        try:
            return mark_reverted_commits(store, shas, store.list_items(
                ItemFilter(session=session, kinds=["observation"]), limit=SCAN))
        except Exception:
            log.warning("could not mark the commits reverted in session %s", session, exc_info=True)
            return []
