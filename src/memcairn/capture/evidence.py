"""The evidence kept behind the memories: each step of a turn as text (``schema.EVIDENCE_TABLES``).

A step is what a reader of the transcript would need to check a memory: the agent's words before a tool call, the
call's input and the head and tail of its output; or the agent's closing reply of a turn. The same for every agent:
calls arrive normalised (Claude Code, Codex's ``exec_command``/``apply_patch``, Gemini CLI), their payloads already
cleaned of secrets and private parts by the worker's door.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from memcairn.capture.offline.outcomes import response_text
from memcairn.capture.records import ToolCall, Turn
from memcairn.store.records import NewEvidence

INPUT_CHARS = 3000  # a patch or an edit's new text is often what a later question asks about
OUTPUT_HEAD_CHARS = 1200
OUTPUT_TAIL_CHARS = 600  # a test run's verdict and an error's last line come at the end
REPLY_CHARS = 4000


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + " …"


def _input_text(value: Any) -> str:
    """A call's input as lines of ``key: value`` (strings as they are, anything else as compact JSON). Numbers and
    flags are the call's knobs (a timeout, an output cap, a line offset, run in background), not what it did: left
    out, so a snippet quoting the step spends its lines on the command and its output."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        lines = []
        for key, field in value.items():
            if isinstance(field, bool | int | float):
                continue
            shown = field if isinstance(field, str) else json.dumps(field, ensure_ascii=False, default=str)
            lines.append(f"{key}: {shown}")
        return "\n".join(lines)
    return "" if value is None else json.dumps(value, ensure_ascii=False, default=str)


def _output_text(response: Any) -> str:
    text = response_text(response).strip()
    if len(text) <= OUTPUT_HEAD_CHARS + OUTPUT_TAIL_CHARS:
        return text
    return f"{text[:OUTPUT_HEAD_CHARS]}\n…\n{text[-OUTPUT_TAIL_CHARS:]}"


def call_text(call: ToolCall) -> str:
    """One tool call as evidence: narration, the call and what came back."""
    parts = [call.narration.strip() if call.narration else "",
             f"{call.name}: {_clip(_input_text(call.input).strip(), INPUT_CHARS)}", _output_text(call.response)]
    return "\n".join(p for p in parts if p)


def call_evidence(turn: Turn, calls: Sequence[ToolCall], item_ids: Sequence[int]) -> list[NewEvidence]:
    """The steps of these calls, each tied to the first memory made from them (None when none was)."""
    item = item_ids[0] if item_ids else None
    out = []
    for n, call in enumerate(calls):
        text = call_text(call)
        if text.strip():
            step = call.tool_use_id or f"call@{call.at_epoch}#{n}"
            out.append(NewEvidence(project=turn.project, platform_source=turn.platform_source,
                                   session=turn.session_id, step=step, text=text,
                                   created_at_epoch=call.at_epoch or turn.started_at_epoch, item_id=item))
    return out


def reply_evidence(turn: Turn, step: str, at_epoch: int, item_ids: Sequence[int]) -> list[NewEvidence]:
    """The agent's closing reply of a turn as one step, tied to the turn's summary."""
    reply = (turn.last_assistant_message or "").strip()
    if not reply:
        return []
    return [NewEvidence(project=turn.project, platform_source=turn.platform_source, session=turn.session_id,
                        step=step, text=_clip(reply, REPLY_CHARS), created_at_epoch=at_epoch,
                        item_id=item_ids[0] if item_ids else None)]
