"""The team server's context: a project's newest memories as one fenced digest within a token budget.

A memory is one line (``- #id type title: text``, cleaned and cut as recalled text is). Stored memories never
change (an edit stores a new one), so a line is rendered once per process and kept by id and content hash, and
a whole digest is kept by its projects and the lines it holds: agents of a team start sessions in the same few
projects, and cleaning text of markers (each line, then the whole fenced body) is the costliest step of a
context request. Nothing kept can be stale: the newest memories are read for every request.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from memcairn import fence, tokens
from memcairn.lru import Lru

TITLE_CHARS = 120
TEXT_CHARS = 300
NEWEST = 50  # memories read for a digest (the budget usually stops it first)
_KEEP = 20_000  # rendered lines kept per process
_KEEP_DIGESTS = 1_000  # whole digests kept per process (a few KB each)


class Digests:
    """Digests and their memory lines as rendered before (lines by id and content hash, digests by projects and
    lines); thread-safe."""

    def __init__(self, keep: int = _KEEP, keep_digests: int = _KEEP_DIGESTS) -> None:
        self._lines: Lru[tuple[int, str], tuple[str, int]] = Lru(keep)
        self._digests: Lru[tuple[tuple[str, ...], tuple[tuple[int, str], ...]], dict[str, Any]] = \
            Lru(keep_digests)

    def line(self, row: Mapping[str, Any]) -> tuple[str, int]:
        key = (int(row["id"]), str(row["content_hash"]))
        if (kept := self._lines.get(key)) is not None:
            return kept
        text = f"- #{row['id']} {row['type'] or row['kind']} {fence.clean_line(row['title'], TITLE_CHARS)}: " \
               f"{fence.clean_line(row['text'], TEXT_CHARS)}"
        return self._lines.put(key, (text, tokens.estimate_tokens(text) + 1))

    def render(self, names: Sequence[str], rows: Iterable[Mapping[str, Any]], budget: int) -> dict[str, Any]:
        """The digest of ``rows`` (newest first) for the projects ``names``: as many lines as fit ``budget``."""
        lines: list[str] = []
        held: list[tuple[int, str]] = []
        used = tokens.estimate_tokens(fence.fence(""))
        for row in rows:
            text, cost = self.line(row)
            if used + cost > budget:
                break
            lines.append(text)
            held.append((int(row["id"]), str(row["content_hash"])))
            used += cost
        key = (tuple(names), tuple(held))
        if (kept := self._digests.get(key)) is not None:
            return dict(kept)
        header = f"# memcairn team memory · {', '.join(names)}"
        fenced = fence.fence("\n".join([header, *lines]) if lines else f"{header}\n(no memories yet)")
        return dict(self._digests.put(key, {"projects": list(names), "items": len(lines),
                                            "tokens": tokens.estimate_tokens(fenced), "context": fenced}))
