"""What an edit changed, read from its old and new text with cheap, language-agnostic rules.

A memory that says "replaced 1 lines with 3 lines" answers nothing a week later; one that says which
definitions appeared, went away or were renamed, and quotes the telling new lines (a route, an index name, a
config key, an import) does. Definitions are found by one regular expression per family of languages
(Python, JS/TS, Rust, Go, Elixir, Ruby, Java/C#/Kotlin/Swift, SQL, shell), the gist by ranking the added lines:
lines that define something first, then lines carrying names, strings, paths or keys; closers, blank lines and
lines the old text already had never count. Everything is bounded: a huge paste costs a bounded scan.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from memcairn.capture.offline.text import _clip, _listing, _unique

_SCAN_MAX = 60_000  # characters of an edit's text that are looked at
_GIST_LINE = 110  # a quoted line is clipped to this
_MODIFIERS = (
    r"(?:(?:export|default|pub(?:\([^)]*\))?|async|static|public|private|protected|internal|abstract|final|"
    r"override|open|unsafe|extern|inline|virtual|sealed|partial|declare|readonly)\s+)*"
)
# A line that defines something; group ``name`` is its name. One alternation per family of languages.
_DEFINITION = re.compile(
    r"^[ \t]*(?:"
    # Elixir: defmodule/def/defp/defmacro/defstruct/defprotocol/defimpl/defdelegate/defguard
    r"(?:defmodule|defprotocol|defimpl)\s+(?P<module>[A-Z][\w.]*)"
    r"|(?:defp?|defmacrop?|defdelegate|defguardp?|defn)\s+(?P<fn>[a-z_]\w*[?!]?)"
    # Python / Ruby / JS / TS / Rust / Go / Swift / Kotlin / PHP keywords that introduce a named definition
    rf"|{_MODIFIERS}(?:def|class|module|fn|func|function\*?|struct|enum|trait|interface|impl|mod|type|"
    r"protocol|extension|object|record|namespace|fun)\s+(?:\([^)]*\)\s*)?(?P<name>[A-Za-z_$][\w$]*)"
    # JS/TS: const name = (...) => / function, and object-literal methods are left to the gist
    rf"|{_MODIFIERS}(?:const|let|var)\s+(?P<var>[A-Za-z_$][\w$]*)\s*(?::[^=]+)?=\s*(?:async\s*)?"
    r"(?:\([^)]*\)|[A-Za-z_$][\w$]*)\s*=>"
    # SQL
    r"|(?i:create\s+(?:unique\s+)?(?:table|index|view|trigger)\s+(?:if\s+not\s+exists\s+)?)(?P<sql>[\w.\"]+)"
    # shell functions
    r"|(?P<sh>[A-Za-z_][\w-]*)\s*\(\)\s*\{"
    r")",
    re.MULTILINE,
)
# Named entries of declarative files and DSLs: ``key:``/``"key":`` at the start of a line (YAML, JSON, TOML
# ``key =``), Elixir/Ash/Ecto-style ``attribute :state``, ``live("/path", Mod)``, ``get "/api/x"``.
_KEY = re.compile(
    r"^[ \t]*(?:\"(?P<json>[^\"\n]{1,60})\"\s*:|(?P<yaml>[A-Za-z_][\w.-]{0,60})(?::(?!:)|\s*=(?!=|>))"
    r"|(?P<dsl>[a-z_]\w*)\(?\s+:(?P<atom>[a-z_]\w*[?!]?)"
    r"|(?P<verb>get|post|put|patch|delete|live|scope|resources|forward|route)\s*\(?\s*[\"'](?P<route>/[^\"'\s]*))"
)
_TRIVIAL = re.compile(r"^[\s\])}>;,.]*(?:end|fi|done|esac|\}\)?;?|\)\s*;?|do|else|\{|\[|\(|<\/\w+>|\*/|/\*\*?|\"\"\")?"
                      r"[\s\])}>;,.]*$")
# A setting: ``@ttl_seconds 120``, ``MAX_SIZE = 10``, ``export const API_URL =``, ``PORT=1100``, a line naming
# an environment variable (``{"APP_REVIEW_TOKEN", token}``, ``${APP_PORT:-1100}``), or a long option given a number
# (``--max-time 10``, ``--retries=3``): the timeouts and limits a command is run with, often on a line of its own
# in a command continued over lines.
_SETTING = re.compile(
    r"^@[a-z_]\w*\s+\S|^(?:export\s+)?(?:(?:const|let|var|static|readonly|final)\s+)?[A-Z][A-Z0-9_]{2,}\s*(?::[^=]+)?="
    r"|\b[A-Z][A-Z0-9]*_[A-Z0-9_]{2,}\b|(?:^|\s)--[a-z][\w-]*(?:=|\s+)\d"
)
_COMMENT = re.compile(r"^\s*(?:#|//|--|/?\*|<!--|;)")
# Elixir attributes that document or annotate code (``@moduledoc false``, ``@impl true``, ``@spec ...``): not
# settings; with nothing but a flag or a heredoc opener after them they say nothing at all.
_ANNOTATION = re.compile(
    r"^@(?:moduledoc|doc|typedoc|impl|spec|type|typep|opaque|callback|macrocallback|behaviour|derive|tag"
    r"|moduletag|describetag|external_resource|compile|dialyzer|deprecated|since|enforce_keys|before_compile"
    r"|after_compile|on_load|optional_callbacks)\b(?P<rest>.*)$"
)
_EMPTY_ANNOTATION = frozenset({"", "true", "false", "nil", '"""', "'''", "~S\"\"\"", "~s\"\"\""})
_SIGNAL = re.compile(r"[\"'`]|[A-Za-z]_[A-Za-z]|[a-z][A-Z]|/\w|:\w|\w\(|=|\[|^[\w.-]+:\s")


@dataclass
class EditChange:
    """What one edit of one file changed."""

    added: list[str] = field(default_factory=list)  # definitions new in the text
    removed: list[str] = field(default_factory=list)  # definitions gone from it
    renamed: list[tuple[str, str]] = field(default_factory=list)
    touched: list[str] = field(default_factory=list)  # definitions whose body changed
    keys: list[str] = field(default_factory=list)  # declarative keys added
    gist: list[str] = field(default_factory=list)  # telling added lines, clipped

    def describe(self, limit: int = 3) -> list[str]:
        """Short phrases: ``renamed x → y``, ``added a, b`` (definitions, then keys and DSL entries such as
        ``attribute :state``), ``removed c``, ``changed d`` (a definition whose body changed)."""
        parts = []
        if self.renamed:
            parts.append("renamed " + ", ".join(f"{a} → {b}" for a, b in self.renamed[:limit]))
        added = _unique([*self.added, *self.keys])
        if added:
            parts.append(f"added {_listing(added, limit)}")
        if self.removed:
            parts.append(f"removed {_listing(self.removed, limit)}")
        if self.touched and not (added or self.removed or self.renamed):
            parts.append(f"changed {_listing(self.touched, limit)}")
        return parts


def definitions(text: str | None) -> list[str]:
    """Names the text defines, in order, once each (modules keep their dotted name)."""
    found = []
    for match in _DEFINITION.finditer(str(text or "")[:_SCAN_MAX]):
        name = next((value for value in match.groupdict().values() if value), None)
        if name:
            found.append(name.strip('"'))
    return _unique(found)


def _definition_lines(lines: Sequence[str]) -> dict[str, str]:
    """Name → the line defining it."""
    out: dict[str, str] = {}
    for line in lines:
        names = definitions(line)
        if names and names[0] not in out:
            out[names[0]] = line
    return out


def _keys(lines: Sequence[str]) -> list[str]:
    found = []
    for line in lines:
        match = _KEY.match(line)
        if match and not _DEFINITION.match(line):
            groups = match.groupdict()
            if groups["dsl"]:
                found.append(f"{groups['dsl']} :{groups['atom']}")
            elif groups["verb"]:
                found.append(f"{groups['verb']} {groups['route']}")
            else:
                found.append(groups["json"] or groups["yaml"])
    return _unique(found)


def _salient(line: str) -> bool:
    stripped = line.strip()
    if len(stripped) < 4 or _TRIVIAL.match(stripped):
        return False
    annotation = _ANNOTATION.match(stripped)
    if annotation and annotation["rest"].strip() in _EMPTY_ANNOTATION:
        return False
    if _DEFINITION.match(line) or _SETTING.search(stripped):
        return True
    return bool(_SIGNAL.search(stripped)) or len(stripped.split()) >= 3


def _rank(line: str) -> int:
    """Higher first: definitions, then settings (constants, module attributes, environment variables: the
    values a later question asks for), then lines with strings/paths/keys, then comments (often a why)."""
    stripped = line.strip()
    if _DEFINITION.match(line):
        return 4
    if _ANNOTATION.match(stripped):
        return 1
    if _SETTING.search(stripped):
        return 3
    if _COMMENT.match(stripped):
        return 1
    return 2


def gist(added_lines: Sequence[str], budget: int) -> list[str]:
    """The telling added lines, in file order, within ``budget`` characters in all: definitions first, then
    settings, other lines, comments (``_rank``)."""
    return pick_lines([line for line in added_lines if _salient(line)], budget, _rank, (4, 3, 2, 1), _GIST_LINE, 3)


def pick_lines(lines: Sequence[str], budget: int, rank: Callable[[str], int], order: Sequence[int],
               line_max: int, separator: int) -> list[str]:
    """``lines`` chosen rank by rank (in ``order``; a rank not in it is never chosen), each clipped to
    ``line_max``, while they fit ``budget`` characters (each costing ``separator`` more), shown in their order."""
    chosen: list[tuple[int, str]] = []
    used = 0
    ranks = [rank(line) for line in lines]
    for wanted in order:
        for index, line in enumerate(lines):
            if ranks[index] != wanted:
                continue
            shown = _clip(line, line_max)
            if used + len(shown) + separator > budget:
                continue
            chosen.append((index, shown))
            used += len(shown) + separator
    return _unique(shown for _, shown in sorted(chosen))


def change(old: str | None, new: str | None, budget: int = 220) -> EditChange:
    """Compare an edit's old and new text (old empty for a new file)."""
    old_lines = str(old or "")[:_SCAN_MAX].splitlines()
    new_lines = str(new or "")[:_SCAN_MAX].splitlines()
    before = set(line.strip() for line in old_lines)
    added_lines = [line for line in new_lines if line.strip() and line.strip() not in before]
    after = set(line.strip() for line in new_lines)
    removed_lines = [line for line in old_lines if line.strip() and line.strip() not in after]
    old_defs, new_defs = _definition_lines(old_lines), _definition_lines(new_lines)
    added = [name for name in new_defs if name not in old_defs]
    removed = [name for name in old_defs if name not in new_defs]
    renamed: list[tuple[str, str]] = []
    if len(added) == 1 and len(removed) == 1:  # one definition out, one in: a rename
        renamed, added, removed = [(removed[0], added[0])], [], []
    changed_lines = {line.strip() for line in [*added_lines, *removed_lines]}
    touched = [name for name, line in new_defs.items() if name in old_defs and line.strip() in changed_lines]
    if not touched and (added_lines or removed_lines):
        touched = _enclosing(new_lines, added_lines)
    return EditChange(added=added, removed=removed, renamed=renamed, touched=touched,
                      keys=[k for k in _keys(added_lines) if k not in _keys(removed_lines)],
                      gist=gist(added_lines, budget))


def _enclosing(lines: Sequence[str], added_lines: Sequence[str]) -> list[str]:
    """The definition a changed line sits in (the nearest one above the first added line), when the edit's
    text shows one."""
    if not added_lines:
        return []
    first = added_lines[0]
    current = None
    for line in lines:
        if line is first or line == first:
            break
        names = definitions(line)
        current = names[0] if names else current
    return [current] if current else []
