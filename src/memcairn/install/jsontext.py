"""Writing a changed JSON document back over its old text, changing only the values that changed.

``json.dumps`` of the whole document would reflow what the person wrote (``"allow": ["Bash(ls:*)"]`` becomes
a three-line array). Here the old text is scanned once for the spans of its values; the new document is then
written by copying the old text of every value that did not change, byte for byte, and writing only what
memcairn changed (an object or array is rebuilt member by member, reusing the old separators) in the file's
style (``jsonedit.JsonStyle``).

Comments (``//`` and ``/* */``) and trailing commas, which Gemini CLI's settings allow, are read as part of the
spacing around values: a member that stays keeps the comments before it, and a member added after the last one
goes after that one's end-of-line comment.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any

_WS = re.compile(r"(?:[ \t\r\n]+|//[^\n]*|/\*.*?\*/)*", re.DOTALL)
_COMMENT = re.compile(r"//|/\*")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_SCALAR = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null")


@dataclass
class Span:
    """Where one value sits in the text; an object's members (key, where the key starts, the value) or an
    array's items."""

    start: int
    end: int
    members: list[tuple[str, int, Span]] = field(default_factory=list)
    items: list[Span] = field(default_factory=list)


class _Scanner:
    def __init__(self, text: str) -> None:
        self.text = text

    def skip(self, pos: int) -> int:
        return _WS.match(self.text, pos).end()  # type: ignore[union-attr]

    def value(self, pos: int) -> Span:
        pos = self.skip(pos)
        char = self.text[pos:pos + 1]
        if char == "{":
            return self._object(pos)
        if char == "[":
            return self._array(pos)
        match = (_STRING if char == '"' else _SCALAR).match(self.text, pos)
        if match is None:
            raise ValueError(f"unexpected text at {pos}")
        return Span(pos, match.end())

    def _object(self, start: int) -> Span:
        span, pos = Span(start, start), self.skip(start + 1)
        if self.text[pos] == "}":
            span.end = pos + 1
            return span
        while True:
            key = _STRING.match(self.text, pos)
            if key is None:
                raise ValueError(f"expected a key at {pos}")
            pos = self.skip(key.end())
            if self.text[pos] != ":":
                raise ValueError(f"expected ':' at {pos}")
            value = self.value(pos + 1)
            span.members.append((json.loads(key.group()), key.start(), value))
            pos = self.skip(value.end)
            if self.text[pos] == "}":
                span.end = pos + 1
                return span
            pos = self.skip(pos + 1)  # the comma
            if self.text[pos] == "}":  # a trailing comma
                span.end = pos + 1
                return span

    def _array(self, start: int) -> Span:
        span, pos = Span(start, start), self.skip(start + 1)
        if self.text[pos] == "]":
            span.end = pos + 1
            return span
        while True:
            item = self.value(pos)
            span.items.append(item)
            pos = self.skip(item.end)
            if self.text[pos] == "]":
                span.end = pos + 1
                return span
            pos = self.skip(pos + 1)
            if self.text[pos] == "]":  # a trailing comma
                span.end = pos + 1
                return span


def _eol_comment(text: str) -> tuple[str, str]:
    """The comment ending the line ``text`` starts on, without a comma before it, and the rest of ``text``;
    ("", text) when that line holds no comment."""
    newline = text.find("\n")
    head = text[:newline] if newline >= 0 else text
    if not _COMMENT.search(head):
        return "", text
    if head.lstrip().startswith(","):
        head = head.lstrip()[1:]
    return head, text[newline:] if newline >= 0 else ""


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON (``True == 1`` in Python, not in JSON)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


class _Writer:
    def __init__(self, text: str, style: Any) -> None:
        self.text = text
        self.style = style

    def fresh(self, value: Any, depth: int, inline: bool = False) -> str:
        """``value`` written in the file's style, indented for ``depth`` (on one line inside a container the
        person wrote on one line)."""
        if inline:
            return replace(self.style, indent=None, item_separator=", ", trailing_newline=False).dump(value)
        out = self.style.dump(value)
        if self.style.trailing_newline:
            out = out[: -len(self.style.newline)]
        if self.style.indent is None:
            return out
        unit = self.style.indent if isinstance(self.style.indent, str) else " " * self.style.indent
        return out.replace(self.style.newline, self.style.newline + unit * depth)

    def _between(self, leads: list[str]) -> str:
        """The separator between two members: one the file already uses here (without its comments), else the
        opening's spacing."""
        if len(leads) > 1 and not _COMMENT.search(leads[1]):
            return leads[1]
        lead = leads[0]
        if "\n" not in lead:
            return ", "
        if not _COMMENT.search(lead):
            return "," + lead
        cut = lead.rfind("\n")
        return "," + lead[cut - 1 if lead[cut - 1:cut] == "\r" else cut:]

    def _join(self, leads: list[str], tail: str, pieces: list[tuple[int | None, str]]) -> tuple[str, str]:
        """The members between the brackets (original ones by index, added ones as None), and what follows them.

        A member kept right after the one it followed keeps the text between them (comments included); the
        first keeps the opening's spacing. An original member's end-of-line comment stays with it when what
        followed it changed, and goes with it when it is removed."""
        between = self._between(leads)
        following = leads[1:] + [tail]  # the text after each original member
        out, last = leads[0], len(leads) - 1
        for n, (index, text) in enumerate(pieces):
            previous = pieces[n - 1][0] if n else None
            if n == 0:
                pass
            elif index is not None and previous is not None and index == previous + 1:
                out += leads[index]
            else:
                comment = _eol_comment(following[previous])[0] if previous is not None else ""
                out += "," + comment + between[1:] if comment else between
            out += text
        final = pieces[-1][0]
        if final == last:
            return out, tail
        if final is not None:
            out += _eol_comment(following[final])[0]
        return out, _eol_comment(tail)[1]

    def value(self, span: Span, old: Any, new: Any, depth: int) -> str:
        if _same(old, new):
            return self.text[span.start:span.end]
        if isinstance(old, dict) and isinstance(new, dict) and span.members:
            return self._object(span, old, new, depth)
        if isinstance(old, list) and isinstance(new, list) and span.items:
            return self._array(span, old, new, depth)
        return self.fresh(new, depth)

    def _parts(self, starts: list[int], ends: list[int], span: Span) -> tuple[list[str], str]:
        """What precedes each member (the opening's spacing, then a comma and spacing) and what follows the last
        one (spacing and the closing bracket)."""
        leads, previous = [], span.start + 1
        for start, end in zip(starts, ends, strict=True):
            leads.append(self.text[previous:start])
            previous = end
        return leads, self.text[previous:span.end]

    def _object(self, span: Span, old: dict[str, Any], new: dict[str, Any], depth: int) -> str:
        kept = [k for k in new if k in old]
        if kept != [k for k in old if k in new]:  # reordered: nothing to keep in place
            return self.fresh(new, depth)
        leads, tail = self._parts([m[1] for m in span.members], [m[2].end for m in span.members], span)
        inline = "\n" not in self.text[span.start:span.end]
        pieces: list[tuple[int | None, str]] = []
        for index, (key, key_start, value_span) in enumerate(span.members):
            if key not in new:
                continue
            head = self.text[key_start:value_span.start]
            pieces.append((index, head + self.value(value_span, old[key], new[key], depth + 1)))
        for key in new:
            if key not in old:
                pieces.append((None, json.dumps(key, ensure_ascii=self.style.ensure_ascii) + self.style.key_separator
                               + self.fresh(new[key], depth + 1, inline)))
        if not pieces:
            return "{}"
        body, tail = self._join(leads, tail, pieces)
        return "{" + body + tail

    def _array(self, span: Span, old: list[Any], new: list[Any], depth: int) -> str:
        leads, tail = self._parts([s.start for s in span.items], [s.end for s in span.items], span)
        inline = "\n" not in self.text[span.start:span.end]
        pieces: list[tuple[int | None, str]] = []
        cursor = 0
        for value in new:
            found = next((i for i in range(cursor, len(old)) if _same(old[i], value)), None)
            if found is None:
                pieces.append((None, self.fresh(value, depth + 1, inline)))
            else:
                pieces.append((found, self.text[span.items[found].start:span.items[found].end]))
                cursor = found + 1
        if not pieces:
            return "[]"
        body, tail = self._join(leads, tail, pieces)
        return "[" + body + tail


def rewrite(text: str, old: Any, new: Any, style: Any) -> str:
    """``new`` written over ``text`` (which holds ``old``): what did not change keeps its bytes, the rest is
    written in ``style``. Falls back to ``style.dump(new)`` for text it cannot scan."""
    try:
        scanner = _Scanner(text)
        span = scanner.value(0)
    except (ValueError, IndexError):
        return style.dump(new)
    body = _Writer(text, style).value(span, old, new, 0)
    return text[:span.start] + body + text[span.end:]
