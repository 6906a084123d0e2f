"""A turn rebuilt from SQLite for the capture pipeline: its prompt, its earlier tool calls, its number.

A tool event may arrive after the next turn's prompt: Claude Code runs memcairn's PostToolUse hook in the
background (``async: true``), so a prompt sent right after a turn ended (a quick person, a ``claude -p`` loop)
can overtake it. Every live hook stamps its body with when it started (``hook_started_at``, epoch ms, taken once
at the hook's start; see ``hooks.events``), and a tool event is filed under the last prompt before it whose hook
started at or before its own (``Store.last_prompt_event``): its turn's prompt, number and context, in batches of
its own turn only. A stamp is bounded by the event's receipt (the same machine's clock; a stamp in the future is
not believed), and arrival order decides wherever a stamp is missing (events of older hooks; transcript imports,
whose replay already queues each call within its turn, so their line times are not used) or no prompt qualifies.
A tool event that arrives after its turn's Stop was summarised is filed under its own turn (its prompt number)
and made an observation there; the summary is not made again, and the next turn's summary does not take it. The
turn's number is the prompt event's own (given, else the session's count less the prompts processed after it),
so a late event, or one retried after later prompts were done, is numbered with its turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memcairn.capture.noise import request_text
from memcairn.capture.records import ToolCall, Turn
from memcairn.capture.truncate import cut_value
from memcairn.store.protocols import CaptureStore
from memcairn.store.records import IngestEvent
from memcairn.wire.config import Settings
from memcairn.wire.protocol import HOOK_STARTED_FIELD

TURN_CONTEXT_CALLS = 50  # earlier calls of a turn given to a compressor as context, at most
TURN_NARRATION_CHARS = 60_000  # the agent's text of a turn's calls given to a compressor, at most (the latest)
HOOK_STARTED = HOOK_STARTED_FIELD  # read in SQL by Store.last_prompt_event too


class TurnReader:
    """Reads back the turn an event belongs to; ``CapturePipeline`` is one (it holds the store and the
    settings)."""

    store: CaptureStore
    settings: Settings

    def _project(self, event: IngestEvent) -> str:
        """The session's project once it has one: an agent that changes directory mid-session (into another
        repository) keeps filing that session's memories where it started, as the store requires (an item's
        session belongs to the item's project; anything else would be refused and the events lost)."""
        return self.store.session_project(event.platform_source, event.session_id) or _event_project(event)

    def _turn(self, event: IngestEvent) -> tuple[Turn, IngestEvent | None]:
        """The turn ``event`` belongs to, rebuilt from SQLite: its prompt and its earlier tool calls."""
        prompt_event, earlier, number = self._turn_events(event)
        return self._make_turn(event, prompt_event, earlier, number), prompt_event

    def _turn_prompt(self, event: IngestEvent) -> IngestEvent | None:
        """The prompt event of the turn ``event`` belongs to: by the hooks' start times for a tool event (which
        may have arrived after the next prompt), else by arrival order."""
        started = _started_at(event) if event.kind == "tool_use" else None
        return self.store.last_prompt_event(event.platform_source, event.session_id, event.id, started_at=started)

    def _turn_prompt_id(self, event: IngestEvent) -> int | None:
        found = self._turn_prompt(event)
        return found.id if found is not None else None

    def _turn_events(self, event: IngestEvent) -> tuple[IngestEvent | None, list[IngestEvent], int | None]:
        """The prompt of the turn ``event`` belongs to, the turn's tool events before ``event`` and the turn's
        prompt number.

        The tool events are those queued between the prompt and ``event`` that belong to this turn: a late call
        of an earlier turn queued after this prompt is not this turn's, nor is a call of a later turn queued
        before a late ``event``. The number is the prompt event's own, else the session's prompt count less
        the prompts processed after this one (each processed prompt event counted one, in id order)."""
        prompt_event = self._turn_prompt(event)
        after = prompt_event.id if prompt_event is not None else 0
        later = [e for e in self.store.session_events(event.platform_source, event.session_id, after_id=after,
                                                       event_type="session_init") if e.kind == "user_prompt"]
        chain = ([prompt_event] if prompt_event is not None else []) + [e for e in later if e.id < event.id]
        earlier = [e for e in self.store.session_events(event.platform_source, event.session_id, after_id=after,
                                                         before_id=event.id, event_type="observation")
                   if e.kind == "tool_use" and _in_turn(e, prompt_event, chain)]
        count = self.store.session_prompt_count(event.platform_source, event.session_id)
        if prompt_event is None:
            number = count or None
        else:
            done_after = sum(1 for e in later if e.status == "done")
            number = given_number(prompt_event) or (max(count - done_after, 0) or None)
        return prompt_event, earlier, number

    def _make_turn(self, event: IngestEvent, prompt_event: IngestEvent | None, earlier: list[IngestEvent],
                   number: int | None, answering: set[str] | frozenset[str] = frozenset()) -> Turn:
        # a call read before its result, once answered (earlier in the turn or by ``answering``), counts once
        answered = set(answering) | {i for i in (call_id(e) for e in earlier if not pending_result(e)) if i}
        earlier = [e for e in earlier if not (pending_result(e) and call_id(e) in answered)]
        narration = _turn_narration(earlier)
        earlier = earlier[-TURN_CONTEXT_CALLS:]
        prompt = request_text(prompt_event.payload.get("prompt")) if prompt_event is not None else None
        cwd = event.payload.get("cwd")
        turn = Turn(
            session_id=event.session_id, platform_source=event.platform_source, project=self._project(event),
            prompt=prompt, prompt_number=number,
            cwd=cwd if isinstance(cwd, str) else None, tools=tuple(self._call(e) for e in earlier),
            started_at_epoch=prompt_event.at_epoch if prompt_event is not None else event.at_epoch,
            narration=narration,
        )
        return turn

    def _call(self, event: IngestEvent) -> ToolCall:
        limit = self.settings.capture_max_tool_chars
        payload = event.payload
        cwd = payload.get("cwd")
        return ToolCall(
            name=str(payload.get("tool_name") or "unknown"), input=cut_value(payload.get("tool_input"), limit),
            response=cut_value(_flagged(payload.get("tool_response"), payload.get("is_error") is True), limit),
            tool_use_id=event.tool_use_id, at_epoch=event.at_epoch, cwd=cwd if isinstance(cwd, str) else None,
            narration=_narration(event),
        )


def _event_project(event: IngestEvent) -> str:
    name = event.payload.get("project")
    if isinstance(name, str) and name.strip():
        return name.strip()
    cwd = event.payload.get("cwd")
    if isinstance(cwd, str) and cwd.strip():
        from memcairn.core.project import project_from_cwd

        return project_from_cwd(cwd).name
    return "unknown"


def _started_at(event: IngestEvent) -> int | None:
    """When the live hook that sent ``event`` started (``hook_started_at``, epoch ms), bounded by when the
    worker received it: both clocks are this machine's, so a stamp past the receipt is not believed. None
    without a stamp (an older hook, a transcript import)."""
    given = event.payload.get(HOOK_STARTED)
    if isinstance(given, int) and not isinstance(given, bool) and given > 0:
        return min(given, event.created_at_epoch)
    return None


def _in_turn(event: IngestEvent, prompt: IngestEvent | None, chain: list[IngestEvent]) -> bool:
    """Whether ``event`` (queued after ``prompt``) belongs to ``prompt``'s turn. ``chain`` holds that prompt
    event, if any, and the prompt events queued after it, in id order; the turn of ``event`` is the last of them
    queued before it whose hook started at or before its own (any, for an event without a stamp; a prompt
    without a stamp where it stands), as ``Store.last_prompt_event`` picks it. None qualifying: an earlier turn's
    (a prompt event before ``prompt``), or, with no prompt, the turn without one."""
    started = _started_at(event) if event.kind == "tool_use" else None
    for candidate in reversed([c for c in chain if c.id < event.id]):
        stamp = _started_at(candidate)
        if started is None or stamp is None or stamp <= started:
            return prompt is not None and candidate.id == prompt.id
    return prompt is None


def _narration(event: IngestEvent) -> str | None:
    """The agent's text before the call (``narration``: an import's replay or the worker's live read)."""
    said = event.payload.get("narration")
    return said if isinstance(said, str) and said.strip() else None


def _turn_narration(events: Sequence[IngestEvent]) -> tuple[str, ...]:
    """The narration of the turn's calls, in order, the latest ``TURN_NARRATION_CHARS`` of it."""
    said = [n for n in (_narration(e) for e in events) if n]
    kept: list[str] = []
    total = 0
    for text in reversed(said):
        total += len(text)
        if total > TURN_NARRATION_CHARS and kept:
            break
        kept.append(text)
    return tuple(reversed(kept))


def pending_result(event: IngestEvent) -> bool:
    """A tool call an import read before its result was written."""
    return event.payload.get("tool_response_pending") is True


def _flagged(response: Any, is_error: bool) -> Any:
    """The response with the event's own error flag (a transcript replay's ``tool_result`` block marked
    ``is_error``: ``transcripts.py`` puts it beside the response) where the compressors read a response's
    flags: a failure whose text does not say so is still a failure."""
    if not is_error:
        return response
    if isinstance(response, dict):
        return response if "is_error" in response else {**response, "is_error": True}
    return {"content": response, "is_error": True}


def call_id(event: IngestEvent) -> str | None:
    given = event.tool_use_id or event.payload.get("tool_use_id")
    return given if isinstance(given, str) and given else None


def given_number(event: IngestEvent | None) -> int | None:
    value = event.payload.get("prompt_number") if event is not None else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
