"""``<private>…</private>`` parts removed from text, failing closed on a tag never opened or never closed."""

from __future__ import annotations

import re
from functools import cache


@cache
def _tag_pattern() -> re.Pattern[str]:
    return re.compile(r"<[ \t]{0,8}(/?)[ \t]{0,8}private\b[^<>]{0,200}>", re.IGNORECASE)


def _private_spans(text: str) -> tuple[list[tuple[int, int]], bool]:
    """Spans to remove, and whether private text was seen. Tags nest and fail closed: an opening tag never closed
    hides the rest of the text, and a closing tag never opened hides everything before it (the text is the end of
    a private part whose start was cut off: a file read from an offset, the tail of an output). A self-closing
    ``<private/>`` is removed on its own."""
    spans: list[tuple[int, int]] = []
    depth, start, opened = 0, 0, False
    for match in _tag_pattern().finditer(text):
        closing = match.group(1) == "/"
        self_closing = not closing and match.group(0).endswith("/>")
        if depth == 0:
            if closing:
                opened = opened or bool(text[: match.start()].strip())
                spans = [(0, match.end())]
            elif self_closing:
                spans.append(match.span())
            else:
                depth, start, opened = 1, match.start(), True
        elif closing:
            depth -= 1
            if depth == 0:
                spans.append((start, match.end()))
        elif not self_closing:
            depth += 1
    if depth:
        spans.append((start, len(text)))
    return spans, opened


def _merge_whitespace(before: str, after: str) -> str:
    """One run of whitespace standing for the two runs that surrounded removed text: the one with more line breaks
    wins (the later one on a tie, so the next line keeps its indentation); on a single line, the earlier one."""
    if "\n" in before or "\n" in after:
        return before if before.count("\n") > after.count("\n") else after
    return before or after


def _assemble(pieces: list[str]) -> str:
    """Join the text kept between removed spans, collapsing the whitespace each removal leaves behind."""
    out: list[str] = []
    carry: str | None = None  # whitespace waiting for the next kept content; None while nothing was kept
    for index, piece in enumerate(pieces):
        core = piece.strip()
        if not core:
            if carry is not None:
                carry = _merge_whitespace(carry, piece)
            continue
        lead = piece[: len(piece) - len(piece.lstrip())]
        if carry is None:
            out.append(lead if index == 0 else "")
        else:
            out.append(_merge_whitespace(carry, lead))
        out.append(core)
        carry = piece[len(piece.rstrip()) :]
    if carry:
        # Trailing whitespace of the text is kept as it was; after a removal at the end only line breaks stay.
        out.append(carry if pieces[-1].strip() else carry.strip(" \t"))
    return "".join(out)


def strip_private(text: str) -> str:
    """Remove every ``<private>…</private>`` part of ``text`` (tag names in any case, across lines, nested)."""
    if "<" not in text:
        return text
    spans, _ = _private_spans(text)
    if not spans:
        return text
    pieces: list[str] = []
    position = 0
    for start, end in spans:
        pieces.append(text[position:start])
        position = end
    pieces.append(text[position:])
    return _assemble(pieces)


def is_entirely_private(text: str) -> bool:
    """True when ``text`` holds a ``<private>`` tag and nothing but whitespace is left once private parts go."""
    if "<" not in text:
        return False
    _, opened = _private_spans(text)
    return opened and not strip_private(text).strip()
