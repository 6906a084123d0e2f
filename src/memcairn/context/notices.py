"""memcairn's own warnings above the digest's fence, fitted to their share of the budget."""

from __future__ import annotations

from collections.abc import Sequence

from memcairn.wire.fence import clean_line
from memcairn.wire.protocol import NOTICE_PREFIX

NOTICE_CHARS = 300  # one notice at most
MORE_NOTICES = "{count:,} more {noun} not shown (notices take at most half of the context's token budget)."


def notice_lines(notices: Sequence[str], limit: int | None = None) -> str:
    """memcairn's own warnings (a failing model backend, a token cap): outside the fence, since they are not
    recalled memory; the SessionStart hook also shows them to the person.

    At most ``limit`` characters (None: all of them): the oldest notices that fit, then one line counting the
    rest, so that warnings piled up between two sessions cannot push the text past its budget."""
    lines = [f"{NOTICE_PREFIX}{clean_line(n, NOTICE_CHARS)}\n" for n in notices]

    def more(count: int) -> str:
        noun = "warning" if count == 1 else "warnings"
        return f"{NOTICE_PREFIX}{MORE_NOTICES.format(count=count, noun=noun)}\n" if count else ""

    if limit is None or sum(map(len, lines)) <= limit:
        return "".join(lines)
    kept: list[str] = []
    size = 0
    for line in lines:
        if size + len(line) + len(more(len(lines) - len(kept) - 1)) > limit:
            break
        kept.append(line)
        size += len(line)
    return "".join(kept) + more(len(lines) - len(kept))
