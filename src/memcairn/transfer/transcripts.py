"""Replay a recorded Claude Code transcript (JSONL) as the event bodies the hooks would have sent live.

An import then goes through the same queue and pipeline as live capture: each :class:`ReplayEvent` names
the worker's queue event type (``session_init``, ``observation``, ``summarize``) and carries the body a hook
would have posted, plus a stable ``source_key`` so importing the same file twice is a no-op.

What one session of a file becomes, in order:

- ``session_start`` at the session's first message line (user or assistant) that carries a ``cwd``;
- ``user_prompt`` for each real prompt, numbered from 1 per session;
- ``tool_use`` for each ``tool_use`` block of an assistant message, emitted when its ``tool_result``
  arrives (so in the order results arrive), with ``toolUseResult`` as the response when the result line
  holds exactly one result, else the ``tool_result`` content, and as ``narration`` the assistant's text
  blocks since the previous tool use (why it makes the call, what it made of the last result; the first call
  of several made at once carries it, the others none), as the worker reads it live
  (``capture.transcript_tail``);
- ``stop`` when a turn ends: just before the next real prompt, and at the end of the file; its key names the
  line that began the turn, so a file imported again after it grew (a live or resumed session) adds no
  second ``stop`` for a turn the first import already ended. Its body says which line the turn was read
  through (``turn_through``) and, for the stop at the end of the file, that the turn may still be going on
  (``turn_open``): once such a turn went on in a grown file, the importer queues the turn's stop again
  (``capture.importer``) and the pipeline replaces its early summary;
- ``session_end`` (reason ``transcript_import``) at the end of the file.

Source keys: an event of a line with a ``uuid`` (a prompt, a turn's ``stop``) or of a tool call with an id is
keyed by that uuid or id alone, not by the session: a resumed or forked session (``claude --resume``,
``--fork-session``) writes a new file under a new session id that repeats the earlier messages with their
uuids, and those shared turns must be queued once, whichever of the two files is imported first. Session
events (``session_start``, ``session_end``) and lines without a uuid keep keys that name the session.
Each event also names the key an earlier release gave it (:attr:`ReplayEvent.legacy_key`), so an importer
recognises what it queued before the keys changed.

Decisions, where the recorded file says less than the live hooks saw:

- Sidechain lines (``isSidechain``: a subagent's own traffic) are skipped entirely. The parent session
  keeps the subagent's call and final report (the ``Task`` tool use and its result), and subagent files
  (``<session>/subagents/agent-*.jsonl``) yield nothing, so replaying every file under
  ``~/.claude/projects`` records no session twice.
- Not prompts: ``isMeta`` lines (hook feedback, caveats), ``isCompactSummary`` lines, slash-command and
  local-command wrappers (``<command-name>``, ``<local-command-stdout>``, ...), interruption notices
  (``[Request interrupted by user...]``) and lines holding ``tool_result`` blocks. Text blocks that are only
  IDE context or system reminders are dropped from a prompt.
- A turn ends at the next real prompt, whether it was finished, interrupted or blocked by a Stop hook, so
  each prompt gets exactly one ``stop``; its ``last_assistant_message`` joins the text blocks of the last
  assistant message of the turn that had text (thinking blocks never count).
- A tool use whose result never arrived is emitted with ``tool_response`` None when its turn ends (at the
  latest at the end of the file), so it stays with the prompt it belongs to. Such an event is marked
  ``tool_response_pending`` and has a key of its own: the file may have been read while the call was still
  running, and once the result is written a later import emits the answered call under its usual key; the
  pipeline then replaces the observation of the unanswered call with the answered one.
- memcairn's own MCP tools are left out, as the live post-tool-use hook leaves them out.
- Non-message lines (``queue-operation``, ``summary``, ``system``, ``file-history-snapshot``, ...) are
  ignored. Malformed JSON, JSON that is not an object, and message lines with no usable shape (no session
  id, no message object, no known cwd) are counted in :attr:`ParseStats.skipped_lines`; none is fatal.
  Bytes that are not UTF-8 are decoded with replacement characters, and so are lone UTF-16 surrogates
  written as JSON escapes (``"\\ud800"``), which no store could hold.

Every event's body carries ``timestamp_ms``, the original time of the line it comes from (for a tool use:
the line with its result; for ``stop`` and ``session_end``: the last line of the turn or session).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memcairn.capture.compaction import compaction_text
from memcairn.capture.noise import is_background_notice, request_text
from memcairn.capture.truncate import cut
from memcairn.core.models import LONE_SURROGATE
from memcairn.core.project import ProjectIdentity, project_from_cwd
from memcairn.transfer.replay_events import (
    NARRATION,
    NARRATION_MAX_CHARS,
    TURN_OPEN,
    TURN_THROUGH,
    ParseStats,
    ReplayEvent,
    _PendingTool,
    _Session,
    timestamp_ms,
)
from memcairn.wire.bodyfit import fit_body
from memcairn.wire.json_depth import loads_bounded
from memcairn.wire.privacy.scrubbing import scrub
from memcairn.wire.protocol import HOOK_BODY_BYTES, KIND_PATHS, ROUTE_EVENT_TYPES, own_tool

PLATFORM = "claude-code"
END_REASON = "transcript_import"
QUEUE_EVENT = {kind: ROUTE_EVENT_TYPES[path] for kind, path in KIND_PATHS.items()}  # as the live hook sends each
HOOK_EVENT_NAME = {"session_start": "SessionStart", "user_prompt": "UserPromptSubmit", "tool_use": "PostToolUse",
                   "stop": "Stop", "session_end": "SessionEnd", "compaction": "PreCompact"}
MESSAGE_TYPES = ("user", "assistant")
# Text the harness writes into user messages: slash commands, local command output, `!` shell mode.
WRAPPER_PREFIXES = ("<command-name>", "<command-message>", "<command-args>", "<local-command-stdout>",
                    "<local-command-stderr>", "<local-command-caveat>", "<bash-input>", "<bash-stdout>",
                    "<bash-stderr>")
INTERRUPTED_PREFIX = "[Request interrupted by user"
# Whole text blocks that are context attached to a prompt rather than typed by the person.
CONTEXT_BLOCK_PREFIXES = ("<ide_opened_file>", "<ide_selection>", "<system-reminder>")
# A JSON escape of a surrogate: how a lone one (half of a cut emoji) gets into a line; json.loads keeps it.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _without_surrogates(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings (keys included) replaced by U+FFFD."""
    if isinstance(value, str):
        return LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_without_surrogates(k): _without_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_surrogates(v) for v in value]
    return value


# A line without a uuid is named by its line number, which only means something within one session.
_LINE_REF = re.compile(r"line\d+(\.\d+)?")


def _text_blocks(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    return [b["text"] for b in content
            if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)]


def _prompt_text(entry: dict[str, Any], content: Any) -> str | None:
    """The prompt a person typed, or None when the user line is not a real prompt."""
    if entry.get("isMeta") is True or entry.get("isCompactSummary") is True:
        return None
    if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
        return None
    parts = []
    for text in _text_blocks(content):
        stripped = text.strip()
        if not stripped:
            continue
        if stripped.startswith(WRAPPER_PREFIXES) or stripped.startswith(INTERRUPTED_PREFIX):
            return None
        if isinstance(content, list) and stripped.startswith(CONTEXT_BLOCK_PREFIXES):
            continue
        parts.append(text)
    return request_text("\n\n".join(parts)) if parts else None


def _background_notice(content: Any) -> str | None:
    """The text of a user line that is a background task's notice (``<task-notification>``), else None."""
    text = "\n\n".join(t for t in _text_blocks(content) if t.strip())
    return text if is_background_notice(text) else None


def _result_content(content: Any) -> Any:
    """A ``tool_result`` block's content: the string, or the text of a list of blocks."""
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
                parts.append(block["text"])
            elif isinstance(block, dict) and block.get("type") == "image":
                parts.append("[image]")
        return "\n".join(parts)
    return content


def _fit(body: dict[str, Any]) -> dict[str, Any]:
    """Cut oversized tool input and response strings as the live hook does, so the worker accepts the body.

    The body is scrubbed before it is cut: a cut through a secret leaves a head that redaction no longer
    recognises (admission scrubs again later, which changes nothing of an already scrubbed body)."""
    if len(json.dumps(body, ensure_ascii=False).encode("utf-8")) <= HOOK_BODY_BYTES:
        return body
    return json.loads(fit_body(scrub(body)))


class _Replayer:
    def __init__(self, path: Path, stats: ParseStats) -> None:
        self.transcript_path = os.path.abspath(path)
        self.stats = stats
        self.platform = PLATFORM
        self.sessions: dict[str, _Session] = {}
        self.keys: set[str] = set()
        self.identities: dict[str, ProjectIdentity] = {}
        # ``<session>/subagents/agent-<id>.jsonl``: a subagent's work, filed under the parent session
        self.subagent = path.parent.name == "subagents" and path.name.startswith("agent-")
        self.compaction_file = self.subagent and path.name.startswith("agent-acompact")
        # the session of lines that name none (older releases): the file's, from its name
        self.file_session = path.parent.parent.name if self.subagent else path.stem
        self.titles: list[tuple[str, str]] = []  # (summary line's text, its leafUuid)
        self.uuids: set[str] = set()
        if self.subagent:
            stats.shape = "claude-code compaction" if self.compaction_file else "claude-code subagent"

    # events -----------------------------------------------------------------------------------------
    def _identity(self, cwd: str) -> ProjectIdentity:
        ident = self.identities.get(cwd)
        if ident is None:
            ident = self.identities[cwd] = project_from_cwd(cwd)
        return ident

    def _event(self, session: _Session, event: str, cwd: str, at: int, key: tuple[str, str],
               extra: dict[str, Any]) -> ReplayEvent | None:
        """The event, or None when its key was already used in this parse (a repeated line). ``key`` is the
        (source key, legacy key) pair of :meth:`_key`."""
        source_key, legacy_key = key
        if source_key in self.keys:
            return None
        self.keys.add(source_key)
        ident = self._identity(cwd)
        body = {"event": event, "session_id": session.session_id, "cwd": cwd, "project": ident.name,
                "projects": list(ident.chain), "platform_source": self.platform,
                "hook_event_name": HOOK_EVENT_NAME[event], "transcript_path": self.transcript_path, **extra,
                "timestamp_ms": at}
        if event == "tool_use":
            body = _fit(body)
        self.stats.events += 1
        return ReplayEvent(QUEUE_EVENT[event], body, source_key, at,
                           legacy_key if legacy_key != source_key else None)

    @staticmethod
    def _key(session: _Session, ref: str, event: str, *, per_session: bool = False) -> tuple[str, str]:
        """(source key, legacy key) of an event named by ``ref``: a line's uuid or a tool call's id names it
        across sessions (a resumed or forked file repeats them under its own session id), unless
        ``per_session`` (the session's own start and end) or ``ref`` is a line number."""
        legacy = f"transcript:{session.session_id}:{ref}:{event}"
        if per_session or _LINE_REF.fullmatch(ref):
            return legacy, legacy
        return f"transcript:{ref}:{event}", legacy

    def _tool_event(self, session: _Session, tool: _PendingTool, response: Any, is_error: bool, cwd: str,
                    at: int, *, unanswered: bool = False) -> ReplayEvent | None:
        extra: dict[str, Any] = {"tool_name": tool.name, "tool_input": tool.input, "tool_response": response}
        if tool.narration:
            extra[NARRATION] = tool.narration
        key = tool.key
        if tool.tool_use_id is not None:
            extra["tool_use_id"] = tool.tool_use_id
            if unanswered:
                # its result may still be written (a live session): keep the usual key free for the answer
                extra["tool_response_pending"] = True
                key = (self._key(session, f"{tool.ref}.unanswered", "tool_use")[0], tool.key[1])
                self.keys.add(tool.key[0])
        if is_error:
            extra["is_error"] = True
        found = self._event(session, "tool_use", cwd, at, key, extra)
        if found is not None:
            self.stats.tool_uses += 1
        return found

    def _end_turn(self, session: _Session, *, at_end: bool = False) -> Iterator[ReplayEvent]:
        """Unanswered tool uses of the turn, then its ``stop``; ``at_end``: the file ends in the turn, which may
        still be going on (a live session), so its ``stop`` is marked ``turn_open``."""
        for tool in list(session.pending.values()):
            found = self._tool_event(session, tool, None, False, session.last_cwd, session.last_at,
                                     unanswered=True)
            if found is not None:
                self.stats.unanswered_tool_uses += 1
                yield found
        session.pending.clear()
        if session.turn_active and not self.subagent:
            extra: dict[str, Any] = {"last_assistant_message": "\n\n".join(session.texts)} if session.texts else {}
            extra[TURN_THROUGH] = session.last_ref  # the turn's last line (a next prompt is not read yet)
            if at_end:
                extra[TURN_OPEN] = True
            found = self._event(session, "stop", session.last_cwd, session.last_at,
                                self._key(session, session.turn_ref, "stop"), extra)
            if found is not None:
                yield found
        session.turn_active = False
        session.texts, session.text_message_id, session.said = [], None, []

    @staticmethod
    def _begin_turn(session: _Session, ref: str) -> None:
        """Mark the turn active; a turn is named by the line that began it, not by its last line, so that a
        file read again after it grew (a live session imported twice, a resumed one) ends each turn with the
        same ``stop`` key; a turn that went on meanwhile is told by the stop's ``turn_through``."""
        if not session.turn_active:
            session.turn_active, session.turn_ref = True, ref

    def _compaction(self, session: _Session, text: str, ref: str, at: int) -> Iterator[ReplayEvent]:
        """A summary the agent wrote of the conversation so far (at a compaction, or a title line)."""
        body = compaction_text(text)
        if not body:
            return
        found = self._event(session, "compaction", session.last_cwd, at, self._key(session, ref, "compaction"),
                            {"summary": body})
        if found is not None:
            self.stats.compactions += 1
            yield found

    def finish(self) -> Iterator[ReplayEvent]:
        for text, leaf in self.titles:
            # a title line belongs to this file's conversation only when the message it names is here
            session = next(iter(self.sessions.values()), None)
            if leaf in self.uuids and session is not None:
                yield from self._compaction(session, text, f"title-{leaf}", session.last_at)
            else:
                self.stats.leave_out("'summary' title lines naming a message of another file")
        for session in sorted(self.sessions.values(), key=lambda s: s.order):
            if self.compaction_file:
                if session.texts:
                    yield from self._compaction(session, "\n\n".join(session.texts), session.turn_ref or "compact",
                                                session.last_at)
                continue
            yield from self._end_turn(session, at_end=True)
            if self.subagent:
                continue  # the parent session's own file starts and ends it
            found = self._event(session, "session_end", session.last_cwd, session.last_at,
                                self._key(session, session.last_ref, "session_end", per_session=True),
                                {"reason": END_REASON})
            if found is not None:
                yield found

    # lines ------------------------------------------------------------------------------------------
    def line(self, number: int, raw: str) -> Iterator[ReplayEvent]:
        try:
            entry = loads_bounded(raw)  # a part nested too deep is cut and named (json_depth), the line kept
        except ValueError:
            self.stats.skipped_lines += 1
            return
        if not isinstance(entry, dict):
            self.stats.skipped_lines += 1
            return
        if _SURROGATE_ESCAPE.search(raw):
            try:
                entry = _without_surrogates(entry)
            except RecursionError:
                self.stats.skipped_lines += 1
                return
        kind = entry.get("type")
        if kind == "summary" and isinstance(entry.get("summary"), str) and isinstance(entry.get("leafUuid"), str):
            self.titles.append((entry["summary"], entry["leafUuid"]))
            return
        if kind not in MESSAGE_TYPES:
            self.stats.leave_out(f"'{kind}' lines (no message of the conversation)" if isinstance(kind, str)
                                 else "lines without a type")
            return
        if entry.get("isSidechain") is True and not self.subagent:
            self.stats.leave_out("sidechain lines (a subagent's work: imported from its own file)")
            return
        message = entry.get("message")
        session_id = entry.get("sessionId")
        if not isinstance(session_id, str) or not session_id.strip():
            session_id = self.file_session  # older releases wrote no sessionId: the file is the session
        if not isinstance(message, dict):
            self.stats.leave_out("message lines without a message object", malformed=True)
            return
        line_cwd = entry.get("cwd") if isinstance(entry.get("cwd"), str) and entry["cwd"].strip() else None
        uuid = entry.get("uuid")
        ref = uuid if isinstance(uuid, str) and uuid.strip() else f"line{number}"
        if uuid == ref:
            self.uuids.add(ref)
        session = self.sessions.get(session_id)
        at = timestamp_ms(entry.get("timestamp"))
        if session is None:
            if line_cwd is None:
                self.stats.leave_out("message lines before any line naming the working directory", malformed=True)
                return
            session = self.sessions[session_id] = _Session(session_id, line_cwd, last_cwd=line_cwd)
            session.last_at = at or 0
            self.stats.sessions.add(session_id)
            found = self._event(session, "session_start", line_cwd, session.last_at,
                                self._key(session, ref, "session_start", per_session=True), {})
            if found is not None:
                yield found
        cwd = line_cwd or session.last_cwd
        at = at if at is not None else session.last_at
        if entry.get("isCompactSummary") is True and not self.subagent:
            yield from self._compaction(session, "\n".join(_text_blocks(message.get("content"))), ref, at)
        elif self.compaction_file:
            if entry["type"] == "assistant":
                texts = [t.strip() for t in _text_blocks(message.get("content")) if t.strip()]
                if texts:
                    session.texts, session.turn_ref = texts, ref
        elif entry["type"] == "user":
            yield from self._user(session, entry, message, ref, cwd, at)
        else:
            self._assistant(session, message, ref)
        session.order, session.last_ref, session.last_at, session.last_cwd = number, ref, at, cwd

    def _new_prompt(self, session: _Session, prompt: str, ref: str, cwd: str, at: int) -> Iterator[ReplayEvent]:
        """The turn before ends; ``prompt`` begins the next."""
        key = self._key(session, ref, "user_prompt")
        if key[0] in self.keys:
            return
        yield from self._end_turn(session)
        session.prompt_count += 1
        found = self._event(session, "user_prompt", cwd, at, key,
                            {"prompt": prompt, "prompt_number": session.prompt_count})
        if found is not None:
            self.stats.prompts += 1
            yield found
        self._begin_turn(session, ref)

    def _notice(self, session: _Session, notice: str, ref: str, cwd: str, at: int) -> Iterator[ReplayEvent]:
        """A background task's notice: the turn before ends there (its last message is its own, not the answer to
        the notice), and what answers the notice is a turn of its own, sent with the notice as its prompt (which
        capture counts as no request and does not store)."""
        key = self._key(session, ref, "user_prompt")
        if key[0] in self.keys:
            return
        yield from self._end_turn(session)
        session.prompt_count += 1  # a turn of its own: its summary is of what was done after the notice
        found = self._event(session, "user_prompt", cwd, at, key,
                            {"prompt": notice, "prompt_number": session.prompt_count})
        if found is not None:
            yield found
        self._begin_turn(session, ref)

    def _user(self, session: _Session, entry: dict[str, Any], message: dict[str, Any], ref: str, cwd: str,
              at: int) -> Iterator[ReplayEvent]:
        content = message.get("content")
        prompt = None if self.subagent else _prompt_text(entry, content)  # a subagent's task is its parent's call
        if prompt is not None:
            yield from self._new_prompt(session, prompt, ref, cwd, at)
            return
        notice = None if self.subagent else _background_notice(content)
        if notice is not None:
            yield from self._notice(session, notice, ref, cwd, at)
            return
        if not isinstance(content, list):
            return
        results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
        rich = entry.get("toolUseResult") if len(results) == 1 else None
        for block in results:
            answered = block.get("tool_use_id")
            tool = session.pending.pop(answered, None) if isinstance(answered, str) else None
            if tool is None:
                continue  # its tool use was never seen (sidechain, a cut file) or was already answered
            self._begin_turn(session, ref)
            response = rich if rich is not None else _result_content(block.get("content"))
            found = self._tool_event(session, tool, response, block.get("is_error") is True, cwd, at)
            if found is not None:
                yield found

    def _assistant(self, session: _Session, message: dict[str, Any], ref: str) -> None:
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list):
            return
        self._begin_turn(session, ref)
        message_id = message.get("id") if isinstance(message.get("id"), str) else None
        texts = [t.strip() for t in _text_blocks(blocks) if t.strip()]
        if texts:
            # One API message spans several lines (one block a line); collect its text across them.
            if message_id is not None and message_id == session.text_message_id:
                session.texts.extend(texts)
            else:
                session.texts, session.text_message_id = texts, message_id
        for index, block in enumerate(blocks):
            if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
                if block["text"].strip():
                    session.said.append(block["text"].strip())
                continue
            if not isinstance(block, dict) or block.get("type") != "tool_use":
                continue
            said, session.said = session.said, []
            name = block.get("name")
            if not isinstance(name, str) or not name or own_tool(name):
                continue
            given = block.get("id")
            tool_use_id = given if isinstance(given, str) and given.strip() else None
            tool_ref = tool_use_id or f"{ref}.{index}"
            key = self._key(session, tool_ref, "tool_use")
            pending_key = tool_use_id or key[0]  # a tool use with no id can never be answered
            if key[0] in self.keys or pending_key in session.pending:
                continue
            narration = cut("\n\n".join(said), NARRATION_MAX_CHARS) if said else None
            session.pending[pending_key] = _PendingTool(tool_use_id, name, block.get("input"), key, tool_ref,
                                                        narration)
