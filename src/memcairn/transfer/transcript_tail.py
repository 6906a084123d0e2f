"""What the agent wrote right before a tool call, read live from the end of its Claude Code transcript.

A ``PostToolUse`` body names the call (``tool_use_id``) and the session's transcript (``transcript_path``) but
not the assistant's text around the call: why it makes it, what it concluded from the previous result. The
worker reads that text from the transcript when it accepts the event, so it travels in the queued body
(``narration``) as an import's replay puts it there (``capture.transcripts``): the text blocks of the
assistant lines before the call's own ``tool_use`` block, back to the previous observed tool use or a prompt
(calls that are never observed, such as a todo-list update, and their results are read through). Of several
calls made at once, the first carries that text.

Careful by design: the file is Claude Code's and is being written while it is read. At most ``MAX_BYTES`` from
its end are read, in blocks (``capture.transcript_end.lines_backwards``), and only until the call is found; the call's
line is normally among the last few. Only a regular ``*.jsonl`` file the caller's own user could read is read
(``capture.transcript_access``: a local user must not get the worker to store lines of a file it may not read).
Anything unexpected (no such file, one the caller may not read, the call not found within the window, lines that
are not JSON) gives None: the event is queued without narration, never refused or delayed beyond the read.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from memcairn.capture.truncate import cut
from memcairn.transfer.transcript_access import open_transcript
from memcairn.wire.json_depth import loads_bounded
from memcairn.wire.transcript_end import lines_backwards

MAX_BYTES = 2 * 1024 * 1024
MAX_LINES_BEFORE = 40  # assistant lines read before the call's own, at most
NARRATION_MAX_CHARS = 8_000  # as an import keeps (capture.transcripts.NARRATION_MAX_CHARS)


def _blocks(entry: dict[str, Any]) -> list[Any]:
    message = entry.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return content if isinstance(content, list) else []


def _texts(blocks: list[Any]) -> list[str]:
    return [b["text"].strip() for b in blocks if isinstance(b, dict) and b.get("type") == "text"
            and isinstance(b.get("text"), str) and b["text"].strip()]


def _calls(blocks: list[Any]) -> list[str]:
    return [str(b.get("id")) for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"]


def _names(blocks: list[Any]) -> dict[str, str]:
    return {str(b.get("id")): str(b.get("name")) for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"}


def _results(blocks: list[Any]) -> list[str] | None:
    """The ids a user line answers, or None when it is anything else (a prompt)."""
    ids = [str(b.get("tool_use_id")) for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
    return ids if ids and len(ids) == len(blocks) else None


def narration_before(path: str, tool_use_id: str, *, max_bytes: int = MAX_BYTES,
                     unobserved: Callable[[str], bool] = lambda name: False) -> str | None:
    """The assistant's text between the previous tool use and the call ``tool_use_id``, or None. Calls of tools
    that are never observed (``unobserved``: housekeeping such as a todo list) are read through, with their
    results, as the import carries their text to the next call (``capture.importer``)."""
    if not (isinstance(path, str) and path.endswith(".jsonl") and tool_use_id):
        return None
    fd = open_transcript(path)
    if fd is None:
        return None
    try:
        found = False
        said: list[str] = []
        waiting: set[str] = set()  # results met of calls not met yet (walking back)
        before = 0
        for raw in lines_backwards(f"/dev/fd/{fd}", max_bytes):  # the file checked, opened again
            if not found and tool_use_id.encode() not in raw:
                continue
            try:
                entry = loads_bounded(raw)
            except ValueError:
                if found:
                    break
                continue
            if not isinstance(entry, dict) or entry.get("isSidechain") is True:
                continue
            blocks = _blocks(entry)
            if not found:
                calls = _calls(blocks) if entry.get("type") == "assistant" else []
                if tool_use_id not in calls:
                    continue  # the id quoted elsewhere (its result, a later message)
                found = True
                own = blocks[: next(i for i, b in enumerate(blocks) if isinstance(b, dict)
                                    and b.get("type") == "tool_use" and str(b.get("id")) == tool_use_id)]
                if not all(unobserved(name) for name in _names(own).values()):
                    return None  # an earlier call of the same line took the text
                said = _texts(own)
                continue
            if entry.get("type") not in ("user", "assistant"):
                continue  # progress, system and snapshot lines sit between messages
            if entry.get("type") == "user":
                answered = _results(blocks)
                if answered is None:
                    break  # a prompt: the turn begins here
                waiting.update(answered)
                continue
            names = _names(blocks)
            if names:
                if not (set(names) <= waiting or not waiting) or not all(unobserved(n) for n in names.values()):
                    break  # an observed call: its text was its own
                waiting.difference_update(names)
            before += 1
            if before > MAX_LINES_BEFORE:
                break
            said[:0] = _texts(blocks)
    except (OSError, RecursionError, StopIteration):
        return None
    finally:
        os.close(fd)
    if not said:
        return None
    return cut("\n\n".join(said), NARRATION_MAX_CHARS)
