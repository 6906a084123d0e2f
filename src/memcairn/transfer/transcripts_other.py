"""Replay Codex and Gemini CLI session files as the events their hooks would have sent (see ``transcripts``).

The events, keys and turn rules are Claude Code's (``transcripts._Replayer``); only reading differs.

**Codex** (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``): one ``{timestamp, type, payload}`` a line.
``session_meta`` names the session (``id``) and its directory (``cwd``; ``turn_context`` may move it). A
``response_item`` is a ``message`` (role ``user``: a prompt, unless it is context Codex writes itself, such as
``<environment_context>`` or the AGENTS.md instructions; role ``assistant``: the agent's text), a call
(``function_call`` with JSON ``arguments``, ``custom_tool_call`` with ``input``, ``local_shell_call`` with an
``action``) or its result (``*_output``, by ``call_id``; a JSON ``{output, metadata}`` result is read as such).
``compacted`` lines hold the summary Codex wrote when it compacted the conversation. ``event_msg`` lines repeat
the conversation for the terminal and ``reasoning`` items are the model's thinking: both are counted, not used.

**Gemini CLI** (``~/.gemini/tmp/<project>/chats/session-*.json``): one JSON object, ``sessionId`` and
``messages``; a ``user`` message is a prompt, a ``gemini`` message the agent's text with its ``toolCalls``
(``name``, ``args``, ``result`` / ``resultDisplay``, ``status``), each answered in place. The file names no
directory: a ``.project_root`` file beside ``chats/`` (newer releases) gives it; else the session is filed under
a project named after the directory of the file's project hash (``import transcripts --project`` names another).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memcairn.capture.noise import request_text
from memcairn.transfer.replay_events import ParseStats, ReplayEvent, _PendingTool, _Session, timestamp_ms
from memcairn.transfer.transcripts import _Replayer
from memcairn.wire.json_depth import loads_bounded
from memcairn.wire.protocol import own_tool

# Text Codex writes into user messages itself (not typed by the person).
CODEX_CONTEXT_PREFIXES = ("<environment_context>", "<user_instructions>", "# AGENTS.md instructions",
                          "<permissions instructions>", "<user_shell_command>", "<turn_aborted>")
CODEX_CALLS = ("function_call", "custom_tool_call", "local_shell_call")
CODEX_RESULTS = ("function_call_output", "custom_tool_call_output", "local_shell_call_output")


# Codex CLI's exec_command / write_stdin results (0.1xx) are text: a header of "Key: value" lines, then "Output:" and
# what the command printed. The header is the tool's bookkeeping, not output: its exit code says how the call ended.
_CODEX_EXEC_HEAD = re.compile(r"(?:(?:Chunk ID|Wall time|Process exited with code|Process running with session ID|"
                              r"Original token count)[: ][^\n]*\n)+Output:\n?")
_CODEX_EXIT = re.compile(r"^Process exited with code (-?\d+)$", re.MULTILINE)


def codex_exec_output(value: Any) -> tuple[Any, bool]:
    """(the response, whether it failed) of a Codex exec result: its header becomes ``exit_code`` beside the
    ``output`` the command printed; anything else as it is (failed when its ``metadata`` gives a non-zero exit)."""
    if isinstance(value, str):
        head = _CODEX_EXEC_HEAD.match(value)
        if head is not None:
            code = _CODEX_EXIT.search(head.group(0))
            exit_code = int(code.group(1)) if code else None
            return {"output": value[head.end():], "exit_code": exit_code}, exit_code not in (None, 0)
        return value, False
    meta = value.get("metadata") if isinstance(value, dict) else None
    return value, isinstance(meta, dict) and meta.get("exit_code") not in (None, 0)


def _json_or_text(value: Any) -> Any:
    if isinstance(value, str) and value.strip()[:1] in ("{", "["):
        try:
            return loads_bounded(value)
        except ValueError:
            return value
    return value


class _OtherReplayer(_Replayer):
    """What Codex and Gemini share: a session met once, prompts, calls whose result arrives by id."""

    def __init__(self, path: Path, stats: ParseStats, platform: str) -> None:
        super().__init__(path, stats)
        self.platform = platform
        stats.shape = platform

    def _open(self, session_id: str, cwd: str, ref: str, at: int) -> Iterator[ReplayEvent]:
        if session_id in self.sessions:
            return
        session = self.sessions[session_id] = _Session(session_id, cwd, last_cwd=cwd, last_at=at)
        self.stats.sessions.add(session_id)
        found = self._event(session, "session_start", cwd, at, self._key(session, ref, "session_start",
                                                                         per_session=True), {})
        if found is not None:
            yield found

    def _call(self, session: _Session, call_id: str | None, name: str, tool_input: Any, ref: str) -> None:
        if not name or own_tool(name):
            return
        said, session.said = session.said, []
        tool_ref = call_id or ref
        key = self._key(session, tool_ref, "tool_use")
        pending = call_id or key[0]
        if key[0] in self.keys or pending in session.pending:
            return
        self._begin_turn(session, ref)
        session.pending[pending] = _PendingTool(call_id, name, tool_input, key, tool_ref,
                                                "\n\n".join(said) if said else None)

    def _result(self, session: _Session, call_id: str, response: Any, is_error: bool, at: int
                ) -> Iterator[ReplayEvent]:
        tool = session.pending.pop(call_id, None)
        if tool is None:
            self.stats.leave_out("results of calls not in the file")
            return
        found = self._tool_event(session, tool, response, is_error, session.last_cwd, at)
        if found is not None:
            yield found

    def _prompt(self, session: _Session, text: str, ref: str, at: int) -> Iterator[ReplayEvent]:
        """A prompt, unless it is no request (``capture.noise``): then the turn goes on."""
        request = request_text(text)
        if request is None:
            if text.strip():
                self.stats.leave_out("prompts that are no request (a notice, a bare 'continue')")
            return
        yield from self._new_prompt(session, request, ref, session.last_cwd, at)

    def _said(self, session: _Session, text: str, ref: str) -> None:
        text = text.strip()
        if text:
            self._begin_turn(session, ref)
            session.said.append(text)
            session.texts = [text]


# -- Codex ----------------------------------------------------------------------------------------------
def _codex_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "\n".join(b["text"] for b in content if isinstance(b, dict) and isinstance(b.get("text"), str))


class _CodexReplayer(_OtherReplayer):
    def __init__(self, path: Path, stats: ParseStats) -> None:
        super().__init__(path, stats, "codex")
        self.session: _Session | None = None

    def line(self, number: int, raw: str) -> Iterator[ReplayEvent]:
        try:
            entry = loads_bounded(raw)
        except ValueError:
            self.stats.leave_out("malformed JSON lines", malformed=True)
            return
        payload = entry.get("payload") if isinstance(entry, dict) else None
        if not isinstance(payload, dict):
            self.stats.leave_out("lines without a payload object", malformed=True)
            return
        kind, at = entry.get("type"), timestamp_ms(entry.get("timestamp"))
        ref = f"line{number}"
        if kind == "session_meta":
            cwd, session_id = payload.get("cwd"), payload.get("id")
            if isinstance(cwd, str) and cwd.strip() and isinstance(session_id, str) and session_id.strip():
                yield from self._open(session_id, cwd, ref, at or 0)
                self.session = self.sessions[session_id]
            else:
                self.stats.leave_out("session_meta lines without an id and cwd", malformed=True)
            return
        session = self.session
        if session is None:
            self.stats.leave_out("lines before the session_meta line", malformed=True)
            return
        at = at if at is not None else session.last_at
        if kind == "turn_context":
            if isinstance(payload.get("cwd"), str) and payload["cwd"].strip():
                session.last_cwd = payload["cwd"]
        elif kind == "compacted":
            yield from self._compaction(session, str(payload.get("message") or ""), ref, at)
        elif kind == "response_item":
            yield from self._item(session, payload, ref, at)
        else:
            self.stats.leave_out(f"'{kind}' lines (the terminal's copy of the conversation)")
        session.order, session.last_ref, session.last_at = number, ref, at

    def _item(self, session: _Session, item: dict[str, Any], ref: str, at: int) -> Iterator[ReplayEvent]:
        kind = item.get("type")
        if kind == "message":
            text = _codex_text(item.get("content"))
            if item.get("role") == "user":
                if not text.strip() or text.lstrip().startswith(CODEX_CONTEXT_PREFIXES):
                    self.stats.leave_out("user messages Codex writes itself (environment, instructions)")
                else:
                    yield from self._prompt(session, text, ref, at)
            elif item.get("role") == "assistant":
                self._said(session, text, ref)
            else:
                self.stats.leave_out(f"'{item.get('role')}' messages (instructions)")
        elif kind in CODEX_CALLS:
            call_id = item.get("call_id") if isinstance(item.get("call_id"), str) else None
            if kind == "function_call":
                tool_input = _json_or_text(item.get("arguments"))
            elif kind == "custom_tool_call":
                tool_input = item.get("input")
            else:
                tool_input = item.get("action")
            name = item.get("name") if isinstance(item.get("name"), str) else "shell"
            self._call(session, call_id, name, tool_input, ref)
        elif kind in CODEX_RESULTS:
            call_id = item.get("call_id")
            if isinstance(call_id, str):
                output, failed = codex_exec_output(_json_or_text(item.get("output")))
                yield from self._result(session, call_id, output, failed, at)
        else:
            self.stats.leave_out(f"'{kind}' items (the model's reasoning or other internals)")


def replay_codex(path: Path, stats: ParseStats) -> Iterator[ReplayEvent]:
    replayer = _CodexReplayer(path, stats)
    with open(path, encoding="utf-8", errors="replace") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            stats.lines += 1
            yield from replayer.line(number, raw)
    yield from replayer.finish()


# -- Gemini CLI -----------------------------------------------------------------------------------------
def _gemini_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _gemini_response(call: dict[str, Any]) -> Any:
    shown = call.get("resultDisplay")
    if isinstance(shown, str) and shown.strip():
        return shown
    for part in call.get("result") or ():
        response = part.get("functionResponse", {}).get("response") if isinstance(part, dict) else None
        if isinstance(response, dict):
            return response.get("output", response)
    return shown


def _gemini_cwd(path: Path, data: dict[str, Any]) -> tuple[str, bool]:
    """(the session's directory, whether the file or its folder named it)."""
    for name in ("cwd", "projectRoot", "directory"):
        if isinstance(data.get(name), str) and data[name].strip():
            return data[name], True
    marker = path.parent.parent / ".project_root"
    try:
        root = marker.read_text(encoding="utf-8").strip()
        if root:
            return root, True
    except OSError:
        pass
    return f"/gemini-project-{str(data.get('projectHash') or path.parent.parent.name)[:12]}", False


def replay_gemini(path: Path, stats: ParseStats) -> Iterator[ReplayEvent]:
    replayer = _OtherReplayer(path, stats, "gemini-cli")
    with open(path, encoding="utf-8", errors="replace") as fh:
        try:
            data = loads_bounded(fh.read())
        except ValueError:
            stats.leave_out("file is not valid JSON", malformed=True)
            return
    messages = data.get("messages") if isinstance(data, dict) else None
    session_id = data.get("sessionId") if isinstance(data, dict) else None
    if not isinstance(messages, list) or not isinstance(session_id, str) or not session_id.strip():
        stats.leave_out("file without sessionId and messages", malformed=True)
        return
    cwd, named = _gemini_cwd(path, data)
    if not named:
        stats.leave_out("working directory not recorded (filed under a project named after the file's project "
                        "hash; give --project to choose one)")
    at = timestamp_ms(data.get("startTime")) or 0
    yield from replayer._open(session_id, cwd, "start", at)
    session = replayer.sessions[session_id]
    for number, message in enumerate(messages, start=1):
        stats.lines += 1
        if not isinstance(message, dict):
            stats.leave_out("messages that are not objects", malformed=True)
            continue
        ref = message["id"] if isinstance(message.get("id"), str) and message["id"].strip() else f"line{number}"
        at = timestamp_ms(message.get("timestamp")) or session.last_at
        kind = message.get("type")
        if kind == "user":
            yield from replayer._prompt(session, _gemini_text(message.get("content")), ref, at)
        elif kind in ("gemini", "model", "assistant"):
            replayer._said(session, _gemini_text(message.get("content")), ref)
            for n, call in enumerate(message.get("toolCalls") or ()):
                if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                    continue
                call_id = call["id"] if isinstance(call.get("id"), str) else f"{ref}.{n}"
                replayer._call(session, call_id, call["name"], call.get("args"), ref)
                yield from replayer._result(session, call_id, _gemini_response(call),
                                            call.get("status") in ("error", "cancelled"),
                                            timestamp_ms(call.get("timestamp")) or at)
        else:
            stats.leave_out(f"'{kind}' messages (notices of the CLI, not the conversation)")
        session.order, session.last_ref, session.last_at = number, ref, at
    yield from replayer.finish()
