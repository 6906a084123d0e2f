"""Automatic supersession at capture: a newer memory about the same anchor and the same matter marks the older
one ``superseded`` (``core/corrections.py``), which then leaves the digest and ranks below the others.

Only matters the memories state in a form of their own are compared, never their prose, so that a memory still
true is not hidden (a wrong supersession is worse than none):

- **a command's status**: an observation made of one failed command (the offline extractor's ``ran `cmd` →
  failed (exit 1)`` as its first and only run) is superseded by a later memory of the project in which the very
  same command ran well; when that command fails again later, the failure holds again (the supersession is
  taken back, kept under ``undone``);
- **what a file holds**: the card of a file written whole (``capture/offline/cards.py``) is superseded by the
  card of a later whole write of the same file;
- **a setting's value**: a file's card quoting a constant's value (``TIMEOUT_SECONDS = 30``) is superseded by a
  later memory of changes to that file alone that gives the constant another value (``MAX_RETRIES = 7``).

After the memories are committed and on its own: a failure here costs a mark, never capture.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

from memcairn.capture.offline.cards import WHOLE_WRITE
from memcairn.core.clock import now_ms
from memcairn.core.corrections import CAPTURE, SUPERSEDED, marked, state_of, unmarked
from memcairn.core.models import ItemFilter, MemoryItem
from memcairn.store.protocols import CaptureStore

log = logging.getLogger("memcairn.capture")

SCAN = 300  # older observations of the project looked at, newest first
_RAN = re.compile(r"^ran (`.+`) → (.+)$", re.DOTALL)
_FAILED = re.compile(r"^(?:failed|interrupted)\b|\b[1-9]\d* (?:failed|errors?)\b")
_PASSED = re.compile(r"^ok\b|^\d+ passed\b")
# a constant set to a value: ``TIMEOUT = 30``, ``export const MAX_RETRIES: number = 3``, ``@timeout 5_000``
_SETTING = re.compile(r"^(?:export\s+)?(?:(?:const|let|var|static|readonly|final|pub|private)\s+)*"
                      r"(?P<key>@?[A-Z][A-Z0-9_]{2,}|@[a-z_]\w*)\s*(?::[^=]+)?(?:=|(?<=\w)\s)\s*(?P<value>[^=\s].*?)[;,]?$")
_COMMENT = re.compile(r"\s+(?:#|//|--|/\*).*$")  # a comment after the value
_NEW_TEXT = "new text: "  # an edit's fact quoting the lines it added (``capture/offline/actions.py``)
_JOINED = " ⏎ "  # how an edit's fact joins its lines (``new text: a ⏎ b``)


@dataclass(frozen=True)
class Superseded:
    old: int
    new: int
    why: str


def runs(item: MemoryItem) -> list[tuple[str, bool | None]]:
    """The commands an observation says it ran, each with how it ended last (True well, False failed, None: not
    said); ``ran `x` → failed (exit 1) → ok`` ended well."""
    out = []
    for fact in item.facts:
        found = _RAN.match(fact)
        if found is None:
            continue
        last = found.group(2).split(" → ")[-1].strip()
        out.append((found.group(1), False if _FAILED.search(last) else True if _PASSED.search(last) else None))
    return out


def failure_of(item: MemoryItem) -> str | None:
    """The command an observation is made of when it is one failed run and nothing else, else None."""
    if item.kind != "observation" or item.type != "discovery":
        return None
    ran = runs(item)
    if len(ran) != 1 or ran[0][1] is not False or not _RAN.match(item.facts[0] if item.facts else ""):
        return None
    return ran[0][0]


def whole_card_of(item: MemoryItem) -> str | None:
    """The file of a whole-file card (``cards.WHOLE_WRITE``), else None."""
    if item.kind != "observation" or len(item.files_modified) != 1:
        return None
    found = WHOLE_WRITE.search(item.narrative or "")
    return found.group("path") if found and found.group("path") == item.files_modified[0] else None


def card_of(item: MemoryItem) -> str | None:
    """The file of a card (written whole, or ``name: added …`` of its edits), else None."""
    whole = whole_card_of(item)
    if whole is not None or item.kind != "observation" or len(item.files_modified) != 1:
        return whole
    path = item.files_modified[0]
    return path if (item.title or "").startswith(f"{path.rsplit('/', 1)[-1]}: added ") else None


def settings_in(item: MemoryItem) -> dict[str, str]:
    """The constants an item's code lines set, each to the last value they give it: a card's facts, another
    memory's ``new text:`` of an edit."""
    found: dict[str, str] = {}
    card = card_of(item) is not None
    for fact in item.facts:
        if not card and not fact.startswith(_NEW_TEXT):
            continue
        for line in fact.removeprefix(_NEW_TEXT).split(_JOINED):
            match = _SETTING.match(line.strip())
            if match and not match.group("value").endswith("…"):
                found[match.group("key")] = _COMMENT.sub("", match.group("value")).strip()
    return found


def supersede_older(store: CaptureStore, new: Sequence[MemoryItem]) -> list[Superseded]:
    """Mark what ``new`` (just committed, oldest first) supersedes; take back a command's supersession when it
    fails again. Returns the supersessions made."""
    made: list[Superseded] = _by_runs(store, new) if new else []
    for item in new:
        made += _by_card(store, item)
        made += _by_setting(store, item)
    return made


def _by_runs(store: CaptureStore, new: Sequence[MemoryItem]) -> list[Superseded]:
    """Each failure of a command ``new`` ran is superseded by the latest run of that command when it ended well
    after it, and holds when the latest ended badly: worked out from every run the project's newest
    observations hold, so the order batches are observed in (an episode observed again, a call answered late)
    does not change it."""
    commands = {command for item in new for command, ended in runs(item) if ended is not None}
    if not commands:
        return []
    recent = store.list_items(ItemFilter(projects=[new[0].project], kinds=["observation"]), limit=SCAN)
    latest: dict[str, tuple[tuple[int, int], MemoryItem, bool]] = {}  # command -> (when, item, ended well)
    for item in recent:
        for command, ended in runs(item):
            when = (item.created_at_epoch, item.id)
            if command in commands and ended is not None and (command not in latest or when > latest[command][0]):
                latest[command] = (when, item, ended)
    made = []
    for old in recent:
        command = failure_of(old)
        if command is None or command not in latest:
            continue
        when, last, ended = latest[command]
        state = state_of(old)
        if ended and last.id != old.id and when > (old.created_at_epoch, old.id) and state is None:
            why = f"{command} ran well later"
            store.update_item(old.id, correction=marked(old, SUPERSEDED, now_ms(), by=last.id, why=why,
                                                         source=CAPTURE))
            made.append(Superseded(old.id, last.id, why))
        elif not ended and state == SUPERSEDED and old.correction.get("source") == CAPTURE:
            store.update_item(old.id, correction=unmarked(old, now_ms()))  # it fails again: the failure holds
    return made


def _by_card(store: CaptureStore, item: MemoryItem) -> list[Superseded]:
    path = whole_card_of(item)
    if path is None:
        return []
    made = []
    for old in store.list_items(ItemFilter(projects=[item.project], kinds=["observation"], files=[path]),
                                limit=SCAN):
        if old.id >= item.id or state_of(old) is not None or whole_card_of(old) != path:
            continue
        why = f"{path} was written whole again"
        store.update_item(old.id, correction=marked(old, SUPERSEDED, now_ms(), by=item.id, why=why, source=CAPTURE))
        made.append(Superseded(old.id, item.id, why))
    return made


def _by_setting(store: CaptureStore, item: MemoryItem) -> list[Superseded]:
    if item.kind != "observation" or len(item.files_modified) != 1:
        return []
    now = settings_in(item)
    if not now:
        return []
    path = item.files_modified[0]
    made = []
    for old in store.list_items(ItemFilter(projects=[item.project], kinds=["observation"], files=[path]),
                                limit=SCAN):
        if old.id >= item.id or state_of(old) is not None or card_of(old) != path:
            continue
        before = settings_in(old)
        moved = sorted(k for k, v in now.items() if k in before and before[k] != v)
        if not moved:
            continue
        why = "; ".join(f"{k} = {now[k]} since" for k in moved)
        store.update_item(old.id, correction=marked(old, SUPERSEDED, now_ms(), by=item.id, why=why, source=CAPTURE))
        made.append(Superseded(old.id, item.id, why))
    return made


def supersede_safely(store: CaptureStore, ids: Sequence[int]) -> list[Superseded]:
    """``supersede_older`` for the memories just committed (their ids); never raises."""
    try:
        return supersede_older(store, sorted(store.get_items(list(ids)), key=lambda i: i.id))
    except Exception:
        log.warning("could not mark what %d new memories supersede", len(ids), exc_info=True)
        return []
