"""File cards: each file the agent wrote whole (created, or rewritten) as a small observation of its own.

An episode of work (everything up to a commit) can create a dozen files; its facts give each file one line
within a budget, so what a file holds is cut: the lifetime a module attribute sets, the environment variables a
script reads and their defaults, the error a controller answers, the name a function gives a session. Those are
the questions a later session asks ("how long does a token stay valid?", "which port does the hook use by
default?"). A card keeps, for one written file, what it defines and its telling lines (settings first, then
lines with names, strings and keys; ``edits.gist``), with the agent's own words about it, within
``CARD_FACTS`` characters: a record of about a hundred tokens that a search can find by itself. The episode still
tells the story; the card is the file's reference entry.

Only whole-file writes get a card: an edit shows a few lines, which the episode's facts already quote. A file
that defines nothing and has no telling line (a blank file, generated CSS, a lock file) gets none.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from memcairn.capture.offline import narration
from memcairn.capture.offline.actions import _Action, _input_dict
from memcairn.capture.offline.edits import (
    _ANNOTATION,
    _COMMENT,
    _DEFINITION,
    _KEY,
    _SETTING,
    _salient,
    definitions,
    pick_lines,
)
from memcairn.capture.offline.text import FACTS_MAX, TITLE_MAX, _clip, _listing, _unique
from memcairn.capture.records import Observation

CARD_FACTS = 400  # characters of a card's telling lines
CARD_SAID = 200  # characters of the agent's words before the write
PURPOSE_MAX = 240  # characters of the file's own header comment or module doc
SHORT_LINE = 12  # a shorter line of code (``project =``) is part of a statement, not a telling line
LINE_MAX = 110
_GENERATED = (".lock", "-lock.json", ".min.js", ".min.css", ".map", ".svg", ".css")
_SCAN_LINES = 2_000
# a string of words (a message, a test's name, a label): ``"invalid or expired token"``, ``test "rejects ..."``
_MESSAGE = re.compile(r"[\"'`][^\"'`\n]*[A-Za-z]+ [A-Za-z]+[^\"'`\n]*[\"'`]")
_COMMENT_TEXT = re.compile(r"^\s*(?:#!.*|#+|//+|--|/\*\*?|\*/?|<!--)\s?")
_HEREDOC = ('"""', "'''")
# a test declared by its name (ExUnit/RSpec ``test "…" do``, Jest/Vitest/Mocha ``it("…", …)``): the behaviour it pins
# how a whole-file card's narrative names its file (``_card``'s lead): what a later card of the same file supersedes
WHOLE_WRITE = re.compile(r"\b(?:Created|Rewrote) (?P<path>\S+) \(\d+ lines\)")
_TEST = re.compile(r"""^\s*(?P<kind>test|it|describe|context|property|scenario)\s*\(?\s*(?P<q>["'])"""
                   r"""(?P<name>[^"'\n]{3,120})(?P=q)""")


def file_cards(actions: Sequence[_Action], subtitle: str | None, told: str = "") -> list[Observation]:
    """A card per whole-file write of ``actions`` that ended well (the last write of a file wins), and per file
    whose edits added definitions (``_edit_card``); but none for a file whose every telling line ``told`` (the
    episode's facts) already quotes: a small file says all in its episode."""
    latest: dict[str, _Action] = {}
    edits: dict[str, list[_Action]] = {}
    for action in actions:
        if action.outcome.failed or len(action.writes) != 1:
            continue
        if action.family == "write":
            latest[action.writes[0]] = action
            edits.pop(action.writes[0], None)
        elif action.family == "edit":
            edits.setdefault(action.writes[0], []).append(action)
    cards = [_card(path, action, subtitle, told) for path, action in latest.items()]
    cards += [_edit_card(path, steps, subtitle, told) for path, steps in edits.items()]
    return [card for card in cards if card is not None]


def _edit_card(path: str, steps: Sequence[_Action], subtitle: str | None, told: str) -> Observation | None:
    """The definitions a file's edits added and the telling lines around them: ``tmux.ex: added
    launch_project_review`` with the session name it builds. Edits that added no definition get none (the
    episode's facts say what they changed)."""
    if path.endswith(_GENERATED) or path.startswith(("/tmp/", "~")):
        return None
    added: list[str] = []
    names: list[str] = []
    tests: list[str] = []
    for action in steps:
        data = _input_dict(action.call.input)
        pairs = [(e.get("old_string"), e.get("new_string")) for e in data.get("edits") or [] if isinstance(e, dict)]
        pairs = pairs or [(data.get("old_string"), data.get("new_string"))]
        for old, new in pairs:
            before = {line.strip() for line in str(old or "").splitlines()}
            fresh = [line for line in str(new or "").splitlines()[:_SCAN_LINES] if line.strip() not in before]
            names += [n for n in definitions("\n".join(fresh)) if n not in definitions(str(old or ""))]
            tests += [f'{m["kind"]} "{m["name"]}"' for m in map(_TEST.match, fresh) if m]
            added += fresh
    names = _unique(names)
    tests = _unique(tests)
    if not names and not tests:
        return None
    shown = _telling(added, CARD_FACTS, names)
    if all(line in told for line in shown):
        return None
    # a module keeps its last part (Spotter.Services.TokenStore: TokenStore); a test its whole name
    short = _unique([*(name.rsplit(".", 1)[-1] for name in names), *tests])
    said = narration.joined(narration.decisive([a.call.narration for a in steps], CARD_SAID))
    lead = f"Edited {path}, adding {_listing([*names, *tests], 8)}."
    return Observation(
        type="change", title=_clip(f"{path.rsplit('/', 1)[-1]}: added {_listing(short, 3)}", TITLE_MAX),
        subtitle=subtitle, narrative=f"{said} {lead}".strip() if said else lead,
        facts=tuple(_unique(shown))[:FACTS_MAX], concepts=("how-it-works",), files_modified=(path,),
        steps=tuple(a.call.tool_use_id for a in steps if isinstance(a.call.tool_use_id, str)),
    )


def _card(path: str, action: _Action, subtitle: str | None, told: str) -> Observation | None:
    if path.endswith(_GENERATED) or path.startswith(("/tmp/", "~")):
        return None
    content = str(_input_dict(action.call.input).get("content") or "")
    lines = content.splitlines()[:_SCAN_LINES]
    names = definitions("\n".join(lines))
    purpose, rest = _purpose(lines)
    shown = _telling(rest, CARD_FACTS, names)
    if not names and not shown and not purpose:
        return None
    if all(line in told for line in shown) and (not purpose or purpose in told):
        return None  # the episode quotes it all
    verb = "Created" if action.created else "Rewrote"
    short = _unique(name.rsplit(".", 1)[-1] for name in names)  # Spotter.Services.TokenStore: TokenStore
    name = path.rsplit("/", 1)[-1]
    # a file is named by what it defines, else by what it says it is (a plan's "Plan: …" heading)
    head = f"{name}: {_listing(short, 3)}" if names else f"{name}: {purpose}" if purpose else f"{verb} {path}"
    said = narration.joined(narration.decisive([action.call.narration], CARD_SAID))
    lead = f"{verb} {path} ({len(lines)} lines)" + (f", defining {_listing(names, 8)}." if names else ".")
    lead += f" Its header: {purpose}" if purpose else ""
    return Observation(
        type="feature" if action.created else "change", title=_clip(head, TITLE_MAX), subtitle=subtitle,
        narrative=f"{said} {lead}".strip() if said else lead, facts=tuple(_unique(shown))[:FACTS_MAX],
        concepts=("how-it-works",), files_modified=(path,),
        steps=(action.call.tool_use_id,) if isinstance(action.call.tool_use_id, str) else (),
    )


def _purpose(lines: Sequence[str]) -> tuple[str, list[str]]:
    """The file's own account of itself (its leading comment block, else its first doc heredoc such as
    ``@moduledoc \"\"\"``, a Python docstring or a ``/** ... */`` block), and the lines not used for it."""
    start = 0
    while start < len(lines) and (not lines[start].strip() or lines[start].startswith("#!")):
        start += 1
    said: list[str] = []
    end = start
    while end < len(lines) and _COMMENT.match(lines[end]):
        said.append(_COMMENT_TEXT.sub("", lines[end]).strip())
        end += 1
    if said and " ".join(said).strip():
        return _clip(" ".join(said), PURPOSE_MAX), [*lines[:start], *lines[end:]]
    for i, line in enumerate(lines[:40]):
        one_line = next((q for q in _HEREDOC if line.strip().startswith(q) and line.strip().endswith(q)
                         and len(line.strip()) > 2 * len(q)), None)
        if one_line:  # """Parse the config file."""
            return _clip(line.strip()[len(one_line):-len(one_line)], PURPOSE_MAX), [*lines[:i], *lines[i + 1:]]
        opener = next((q for q in _HEREDOC if line.rstrip().endswith(q)), None)
        if opener is None:
            continue
        close = next((j for j in range(i + 1, min(len(lines), i + 30)) if opener in lines[j]), None)
        if close is None:
            break
        text = " ".join(part.strip() for part in lines[i + 1:close]).strip()
        if text:
            return _clip(text, PURPOSE_MAX), [*lines[:i], *lines[close + 1:]]
        break
    return "", list(lines)


def _rank(line: str) -> int:
    """Lower first: settings (constants, module attributes, environment variables with their defaults), then
    strings of words (messages, test names), then named declarations (``attribute :ordinal``, ``identity
    :unique_ref, [...]``, a route, a YAML key), then other code, then comments."""
    stripped = line.strip()
    if _ANNOTATION.match(stripped):
        return 4
    if _SETTING.search(stripped):
        return 0
    if _COMMENT.match(stripped):
        return 4
    if _MESSAGE.search(stripped):
        return 1
    if _KEY.match(line) and len(stripped) >= SHORT_LINE and not _DEFINITION.match(line):
        return 2
    return 3 if len(stripped) >= SHORT_LINE else 5


def _telling(lines: Sequence[str], budget: int, names: Sequence[str]) -> list[str]:
    """The file's telling lines, best first by ``_rank``, shown in file order within ``budget`` characters."""
    # a command continued over lines shows each line without its continuation mark
    lines = [line.rstrip().removesuffix("\\").rstrip() if line.rstrip().endswith(" \\") else line for line in lines]
    candidates = [line for line in lines if _salient(line) and not _only_definition(line, names)]
    return pick_lines(candidates, budget, _rank, range(5), LINE_MAX, 2)


def _only_definition(line: str, names: Sequence[str]) -> bool:
    """A bare definition line (``def mint(ttl) do``) says no more than the names listed in the narrative."""
    found = definitions(line)
    return bool(found) and found[0] in names and len(line.strip()) < 60 and bool(_DEFINITION.match(line))
