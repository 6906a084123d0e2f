"""Small text helpers shared by the extractor: clipping, sentences, listings, names of definitions."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

TITLE_MAX = 80
DESCRIPTION_MAX = 120
SUBTITLE_MAX = 120
FACT_MAX = 240
FACTS_MAX = 12
ERROR_MAX = 200
TEXT_MAX = 1000
LIST_MAX = 4




_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
# Markdown emphasis: ``**bold**`` anywhere; ``__bold words__`` only around words with a space between them and
# not inside a word, so ``agentv__worktrees``, ``__init__`` and ``**kwargs`` keep their underscores and stars.
_STARS = re.compile(r"(?<![\w*])\*\*(?=[^\s*])(.+?)(?<=[^\s*])\*\*(?![\w*])")
_UNDERSCORES = re.compile(r"(?<!\w)__(?=[^\W_])((?:(?!__).)*?\s(?:(?!__).)*?)(?<=[^\W_])__(?!\w)")


def _clip(text: str | None, limit: int) -> str:
    """One line, collapsed whitespace, at most ``limit`` characters (an ellipsis marks a cut)."""
    flat = " ".join(str(text or "").split())
    if len(flat) <= limit:
        return flat
    cut = flat[: max(limit - 1, 0)]
    space = cut.rfind(" ")
    if space >= limit // 2 and not flat[len(cut)].isspace():
        cut = cut[:space]  # a whole word, not part of one, when that keeps at least half
    return cut.rstrip() + "…"


def _first_sentences(text: str | None, limit: int) -> str:
    """Whole leading sentences of ``text`` that fit in ``limit`` (at least a clipped first one)."""
    flat = _plain(text)
    if not flat:
        return ""
    out = ""
    for sentence in _SENTENCE_END.split(flat):
        candidate = f"{out} {sentence}".strip()
        if len(candidate) > limit:
            break
        out = candidate
    return out or _clip(flat, limit)


def _first_sentence(text: str | None, limit: int) -> str:
    """The first sentence of the first non-empty line."""
    for line in str(text or "").splitlines():
        line = _plain(line)
        if line:
            return _clip(_SENTENCE_END.split(line, maxsplit=1)[0], limit)
    return ""


def without_emphasis(text: str) -> str:
    """``text`` without Markdown bold/underline markers; identifiers holding ``__`` or ``**`` stay whole."""
    return _UNDERSCORES.sub(r"\1", _STARS.sub(r"\1", text))


def _plain(text: str | None) -> str:
    """Markdown emphasis and heading markers dropped, whitespace collapsed."""
    lines = []
    for line in str(text or "")[: TEXT_MAX * 8].splitlines():
        line = re.sub(r"^\s*(?:#+|[-*+]|\d+\.)\s+", "", line)
        lines.append(without_emphasis(line))
    return " ".join(" ".join(lines).split())


def _unique(items: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for item in items:
        if item and item not in seen:
            seen[item] = None
    return list(seen)


def join_list(parts: Iterable[str]) -> str:
    """``a; b; c``; after a part that ends in ``;`` already (a line of code) only a space, never ``;;``."""
    out = ""
    for part in parts:
        if out:
            out += " " if out.endswith(";") else "; "
        out += part
    return out


def _listing(items: Sequence[str], limit: int = LIST_MAX) -> str:
    """``a, b, c (+2 more)``."""
    shown = ", ".join(items[:limit])
    return f"{shown} (+{len(items) - limit} more)" if len(items) > limit else shown


def _code(command: str, limit: int = 60) -> str:
    return f"`{_clip(command.splitlines()[0] if command.strip() else command, limit)}`"


def _lines(text: str | None) -> int:
    return 0 if not text else str(text).count("\n") + 1
