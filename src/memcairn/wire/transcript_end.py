"""The last assistant text of a Claude Code transcript (JSONL), read backwards from the end, bounded.

Used by the Stop hook when the agent did not send ``last_assistant_message`` (Claude Code before 2.1.47), and
by the worker's live read of what the agent wrote before a call (``capture.transcript_tail``). The transcript
format is internal to Claude Code; what is relied on here is small: an
``assistant`` line carries ``message.id`` and ``message.content`` blocks, one message may span several
consecutive lines (one block a line), text blocks are ``{"type": "text", "text": ...}``, and a subagent's lines
carry ``isSidechain: true``.

At most ``max_bytes`` from the end are read, in blocks, so a long session costs no more than a short one.
Standard library only.
"""

from __future__ import annotations

import os

from memcairn.wire.json_depth import loads_bounded

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

BLOCK = 64 * 1024
MAX_BYTES = 4 * 1024 * 1024
MAX_CHARS = 20_000


def lines_backwards(path: str, max_bytes: int) -> Iterator[bytes]:
    """The non-blank lines of ``path``, last first, from at most ``max_bytes`` before its end."""
    with open(path, "rb") as fh:
        end = fh.seek(0, os.SEEK_END)
        start_limit = max(0, end - max_bytes)
        pos, tail = end, b""
        while pos > start_limit:
            step = min(BLOCK, pos - start_limit)
            pos -= step
            fh.seek(pos)
            data = fh.read(step) + tail
            lines = data.split(b"\n")
            tail = lines[0]  # may be the end of a line that starts in an earlier block
            for line in reversed(lines[1:]):
                if line.strip():
                    yield line
        if pos == 0 and tail.strip():
            yield tail


def _texts(message: dict) -> list[str]:
    content = message.get("content")
    if isinstance(content, str):
        return [content] if content.strip() else []
    if not isinstance(content, list):
        return []
    return [b["text"] for b in content
            if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str) and b["text"].strip()]


def last_assistant_text(path: str, *, max_bytes: int = MAX_BYTES, max_chars: int = MAX_CHARS) -> str | None:
    """The text of the last assistant message that has text, or None (no file, nothing found, not JSONL)."""
    found: list[str] = []
    current_id: object = None
    try:
        for raw in lines_backwards(path, max_bytes):
            try:
                entry = loads_bounded(raw)
            except ValueError:
                continue
            if not isinstance(entry, dict) or entry.get("isSidechain") is True:
                continue  # a subagent's line (older Claude Code wrote them into the session's file) is not the answer
            message = entry.get("message")
            is_assistant = entry.get("type") == "assistant" and isinstance(message, dict)
            if found:
                # Keep collecting the earlier lines of the same message; anything else ends it.
                if is_assistant and message.get("id") is not None and message.get("id") == current_id:
                    found[:0] = _texts(message)
                    continue
                break
            if is_assistant:
                texts = _texts(message)
                if texts:
                    found, current_id = texts, message.get("id")
    except OSError:
        return None
    if not found:
        return None
    text = "\n\n".join(t.strip() for t in found)
    return text if len(text) <= max_chars else text[-max_chars:]
