"""What a transcript replay yields and counts: the events, the parse's counts, a session's state while read."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from memcairn.store.records import MAX_EPOCH_MS

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class ReplayEvent:
    event_type: str  # the worker's queue event type: session_init | observation | summarize
    body: dict[str, Any]  # the body a hook would have sent; ``body["event"]`` names the hook event
    source_key: str  # stable and unique: importing the same line again is a no-op
    at_epoch: int  # milliseconds, the original time
    legacy_key: str | None = None  # the key earlier releases gave this event, when it differs


# In a ``stop`` body: the last line of the turn that was read (its ref), and whether the file ended in the turn.
TURN_THROUGH = "turn_through"
TURN_OPEN = "turn_open"
# In a ``tool_use`` body: the assistant's text since the previous tool use, at most this long.
NARRATION = "narration"
NARRATION_MAX_CHARS = 8_000


@dataclass
class ParseStats:
    """Counts for one or more parses; complete once the iterator of :func:`replay_transcript` is exhausted."""

    lines: int = 0  # non-blank lines read
    events: int = 0
    skipped_lines: int = 0
    prompts: int = 0
    tool_uses: int = 0
    unanswered_tool_uses: int = 0  # emitted with tool_response None
    compactions: int = 0  # compaction summaries emitted
    sessions: set[str] = field(default_factory=set)
    # lines read and left out, by why (malformed lines are also in ``skipped_lines``; lines that are no message
    # of the conversation, such as hook progress or file snapshots, only here)
    left_out: dict[str, int] = field(default_factory=dict)
    shape: str = "claude-code"  # claude-code | claude-code subagent | claude-code compaction | codex | gemini-cli

    def leave_out(self, reason: str, malformed: bool = False) -> None:
        self.left_out[reason] = self.left_out.get(reason, 0) + 1
        if malformed:
            self.skipped_lines += 1


@dataclass
class _PendingTool:
    tool_use_id: str | None
    name: str
    input: Any
    key: tuple[str, str]  # (source key, legacy key) of the answered call
    ref: str  # what names the call: its id, else its line and block
    narration: str | None = None  # the assistant's text since the previous tool use


@dataclass
class _Session:
    session_id: str
    cwd: str
    order: int = 0  # index of the last line seen, to end sessions in the order they went quiet
    prompt_count: int = 0
    turn_active: bool = False
    turn_ref: str = ""  # the line that began the current turn (its prompt, else its first line)
    texts: list[str] = field(default_factory=list)
    text_message_id: Any = None
    said: list[str] = field(default_factory=list)  # assistant text since the last tool use (the next call's)
    last_ref: str = ""
    last_at: int = 0
    last_cwd: str = ""
    pending: dict[str, _PendingTool] = field(default_factory=dict)


def timestamp_ms(value: Any) -> int | None:
    """Milliseconds since the epoch from an ISO 8601 timestamp (``Z`` or an offset; naive means UTC).

    None for anything else, including numbers that are not finite and times the store cannot hold (before
    1970 or past the year 9999): an event carrying one would have its items refused."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        if not math.isfinite(value):
            return None
        ms = int(value if value > 100_000_000_000 else value * 1000)
    elif isinstance(value, str) and value.strip():
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            return None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        ms = (moment - _EPOCH) // timedelta(milliseconds=1)
    else:
        return None
    return ms if 0 <= ms <= MAX_EPOCH_MS else None
