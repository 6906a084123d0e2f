"""Evidence snippets: the few lines of stored steps that match a query (``store.evidence``).

Compression can drop what a later question needs; the step it came from still holds it. A search adds, beside its
hits, the best-matching steps trimmed to the lines holding a query word and the lines around them: small enough to
read with the index, never a step whole. A word matches on its stem-like head (a long word's first letters but the
last three, four at least), so ``failing`` finds ``failed`` and ``configuring`` finds ``configuration``, in any
language.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memcairn.core.models import MemoryItem
from memcairn.store.records import STOPWORDS, EvidenceHit

CONTEXT_LINES = 2  # lines kept before and after a matching line
SNIPPET_CHARS = 600  # one snippet at most
LINE_CHARS = 300  # a long line keeps this much around its first match
_WORD = re.compile(r"[^\W_]+", re.UNICODE)


@dataclass(frozen=True)
class EvidenceSnippet:
    """Matching lines of one stored step; ``item_id`` is the memory the step fed (None: none was made)."""

    item_id: int | None
    created_at_epoch: int
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"item_id": self.item_id, "created_at_epoch": self.created_at_epoch, "text": self.text}


def _heads(query: str) -> list[str]:
    words = [w.lower() for w in _WORD.findall(query)]
    kept = [w for w in words if w not in STOPWORDS and len(w) > 1] or words
    return sorted({w if len(w) <= 4 else w[:max(4, len(w) - 3)] for w in kept})


def _line_matcher(query: str) -> re.Pattern[str] | None:
    heads = _heads(query)
    if not heads:
        return None
    return re.compile(r"(?<![^\W_])(?:" + "|".join(re.escape(h) for h in heads) + ")", re.IGNORECASE)


def _cut_line(line: str, matcher: re.Pattern[str]) -> str:
    if len(line) <= LINE_CHARS:
        return line
    found = matcher.search(line)
    start = max(0, (found.start() if found else 0) - LINE_CHARS // 3)
    piece = line[start:start + LINE_CHARS]
    return ("…" if start else "") + piece + ("…" if start + LINE_CHARS < len(line) else "")


def trim(text: str, matcher: re.Pattern[str]) -> str:
    """The lines of ``text`` that match, with ``CONTEXT_LINES`` around each, in order, at most ``SNIPPET_CHARS``;
    ``…`` marks a gap."""
    lines = [line for line in text.splitlines() if line.strip()]
    keep: set[int] = set()
    for n, line in enumerate(lines):
        if matcher.search(line):
            keep.update(range(max(0, n - CONTEXT_LINES), min(len(lines), n + CONTEXT_LINES + 1)))
    out: list[str] = []
    total = 0
    last = -1
    for n in sorted(keep):
        piece = _cut_line(lines[n].strip(), matcher)
        if total + len(piece) > SNIPPET_CHARS and out:
            break
        if last >= 0 and n != last + 1:
            out.append("…")
        out.append(piece)
        total += len(piece)
        last = n
    return "\n".join(out)


def _plain(text: str) -> str:
    return " ".join(text.lower().split())


def shown_text(items: Sequence[MemoryItem]) -> str:
    """What the agent reads of these memories' full records, lower-cased with whitespace made single: a
    snippet's line already in it adds nothing."""
    parts: list[str] = []
    for item in items:
        parts += [item.title or "", item.subtitle or "", item.text or "", item.narrative or "", *item.facts,
                  item.request or "", item.investigated or "", item.learned or "", item.completed or "",
                  item.next_steps or "", item.notes or ""]
    return _plain("\n".join(p for p in parts if p))


def snippets(hits: Sequence[EvidenceHit], query: str, limit: int, shown: str = "") -> list[EvidenceSnippet]:
    """The best ``limit`` hits as snippets, each distinct, none empty; a line already in ``shown`` (the hits'
    records, ``shown_text``) is left out of a step before it is trimmed."""
    matcher = _line_matcher(query)
    if matcher is None:
        return []
    out: list[EvidenceSnippet] = []
    seen: set[str] = set()
    for hit in hits:
        lines = [line for line in hit.text.splitlines() if not (shown and _plain(line) and _plain(line) in shown)]
        text = trim("\n".join(lines), matcher)
        if text and text not in seen:
            seen.add(text)
            out.append(EvidenceSnippet(hit.item_id, hit.created_at_epoch, text))
        if len(out) >= limit:
            break
    return out
