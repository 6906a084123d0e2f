"""One raw hook event made into memories on its own, without a store: what a team server does with the prompts
and tool calls an agent sends it (``server/queue.py``).

The same code as the local worker's, with less context: ``admit`` (the queue's rules: memcairn's own and
housekeeping tools skipped, ``<private>`` parts removed, secrets replaced, a wholly private prompt kept as a
marker) and the cut of long tool input and output, applied before the event is queued; then the offline
extractor (``capture.offline``) observes the call. Where the local pipeline reads the turn back from its
store (the prompt, the turn's earlier calls, a batch of calls compressed together), a call here is observed
alone: its episode is itself, and no summary is made. A tool call of a turn whose prompt was private is not
known as such here (only the prompt itself is kept out): a client that must keep such a turn off the server
sends its calls only locally.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memcairn.capture.admission import admit
from memcairn.capture.noise import request_text
from memcairn.capture.offline import OfflineExtractor
from memcairn.capture.records import Observation, ToolCall, Turn
from memcairn.capture.truncate import cut_bytes, cut_value
from memcairn.core.errors import ValidationError
from memcairn.core.models import NewItem
from memcairn.store.records import MAX_FIELD_BYTES
from memcairn.wire.config import Settings
from memcairn.wire.protocol import TOOL_USE, USER_PROMPT

KINDS = (USER_PROMPT, TOOL_USE)
TITLE_CHARS = 80
# admission reads only the tool and project lists of the settings: a team server keeps their defaults
_SETTINGS = Settings(home=Path("."))
_BODY_FIELDS = ("prompt", "tool_name", "tool_input", "tool_response", "tool_use_id", "is_error", "cwd")


@dataclass(frozen=True)
class HookEvent:
    """A prompt (``user_prompt``) or a tool call (``tool_use``) as a hook reports it, under a project and session.
    ``body`` holds the hook's fields (``prompt``; ``tool_name``, ``tool_input``, ``tool_response``, ...)."""

    kind: str
    project: str
    session: str
    platform: str
    body: dict[str, Any]
    at_epoch: int | None = None


def admitted(event: HookEvent) -> HookEvent | None:
    """``event`` as it may be kept (scrubbed, long values cut), or None when it is never observed (a skipped
    tool). ValidationError when it is not a prompt or a tool call, or lacks what that needs."""
    if event.kind not in KINDS:
        raise ValidationError(f"event must be one of {', '.join(KINDS)}, not {event.kind!r}")
    body = {k: event.body[k] for k in _BODY_FIELDS if k in event.body}
    if event.kind == USER_PROMPT and not isinstance(body.get("prompt"), str):
        raise ValidationError("a user_prompt event needs its prompt (a string)")
    if event.kind == TOOL_USE and not (isinstance(body.get("tool_name"), str) and body["tool_name"].strip()):
        raise ValidationError("a tool_use event needs its tool_name")
    admission = admit(event.kind, {**body, "event": event.kind, "project": event.project}, _SETTINGS)
    if admission.body is None:
        return None
    clean = {k: admission.body[k] for k in (*_BODY_FIELDS, "private") if k in admission.body}
    limit = _SETTINGS.capture_max_tool_chars
    for name in ("tool_input", "tool_response"):
        if name in clean:
            clean[name] = cut_value(clean[name], limit)
    return HookEvent(event.kind, event.project, event.session, event.platform, clean, event.at_epoch)


def memories(event: HookEvent, at_epoch: int) -> list[NewItem]:
    """The memories an admitted event makes: a prompt item, or the observations of one tool call."""
    body = event.body
    common = {"project": event.project, "session": event.session, "platform_source": event.platform,
              "created_at_epoch": at_epoch}
    if event.kind == USER_PROMPT:
        prompt = request_text(body.get("prompt"))
        if body.get("private") or prompt is None:
            return []  # a private prompt, or no request at all (a harness notice, a bare "continue")
        return [NewItem(kind="prompt", type="prompt", title=_first_line(prompt),
                        text=cut_bytes(prompt, MAX_FIELD_BYTES), **common)]
    cwd = body.get("cwd")
    response = body.get("tool_response")
    if body.get("is_error") is True:  # the flag where the extractor reads it, as the local pipeline puts it
        response = {**response, "is_error": True} if isinstance(response, dict) else \
            {"content": response, "is_error": True}
    call = ToolCall(name=str(body["tool_name"]), input=body.get("tool_input"), response=response,
                    tool_use_id=body.get("tool_use_id") if isinstance(body.get("tool_use_id"), str) else None,
                    at_epoch=at_epoch, cwd=cwd if isinstance(cwd, str) else None)
    turn = Turn(session_id=event.session, platform_source=event.platform, project=event.project,
                cwd=call.cwd, started_at_epoch=at_epoch)
    observed = OfflineExtractor().observe(turn, [call]).observations
    return [NewItem(kind="observation", type=o.type, title=o.title, text=_text(o), **common) for o in observed]


def _text(obs: Observation) -> str:
    """An observation's narrative and facts as one text (what the team store keeps of it, as forwarding does)."""
    parts: list[str] = []
    for value in (obs.narrative, *obs.facts):
        if value and value.strip() and value not in parts:
            parts.append(value)
    return "\n".join(parts) or obs.title


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"
