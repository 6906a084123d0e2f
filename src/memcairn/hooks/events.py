"""What each hook event does. Every handler returns the JSON object the agent reads (``{}`` for nothing).

- **session-start**: the project chain from ``cwd``; ``POST /api/context/inject`` (the fenced context, with
  times in this process's zone, and for Claude Code within its 10,000-character inline limit), then
  ``POST /api/sessions/init`` with ``context_delivered`` (whether that context reached the agent: a resume of
  the session is told its context is earlier in the conversation only after a start that delivered one); the
  context becomes ``additionalContext``. With the
  ``terminal_output`` setting the person also sees a digest in ``systemMessage`` (the coloured variant and
  the viewer URL; on Codex and Gemini, which print it without interpreting colours, the plain text). Capture
  warnings (a model that failed, a token cap reached: the context's ``memcairn notice:`` lines) always reach
  the person in ``systemMessage`` too, terminal output or not. No worker listening: one is started
  (``worker_autostart``) and awaited for at most ``AUTOSTART_WAIT`` seconds, then the session goes on
  without context.
- **user-prompt-submit**: the prompt goes to ``POST /api/sessions/init``. With the ``prompt_context``
  setting, the few memories most relevant to the prompt come back as ``additionalContext`` (at most
  ``PROMPT_DIGEST_TOKENS`` tokens, fenced), unless the project is excluded (``exclude_projects``).
- **post-tool-use**: the tool call goes to ``POST /api/sessions/observations`` and the hook returns as
  soon as the worker has queued it (it never waits for processing). Calls of memcairn's own MCP tools are
  not recorded. Oversized strings are cut so the body stays under the worker's limit, their secrets
  redacted first so that no half of one escapes the worker's redaction (see ``capture.bodyfit``).
- **pre-tool-use**: for ``Read``, when earlier memories touched the file, a digest of at most
  ``READ_DIGEST_ROWS`` rows and ``READ_DIGEST_TOKENS`` tokens as ``additionalContext``; never a permission
  decision, so the read always goes ahead. Nothing for an excluded project.
- **stop**: ``POST /api/sessions/summarize`` with the last assistant message (sent by the agent, else read
  from the end of the transcript).
- **session-end**: ``POST /api/sessions/summarize`` with ``event: "session_end"`` and the reason, within
  ``SESSION_END_TIMEOUT`` (Claude Code gives all SessionEnd hooks 1.5 s together).

Every body the hooks send carries ``session_id``, ``cwd``, ``project`` (the chain's first name),
``projects`` (the chain), ``platform_source``, ``event`` and ``hook_started_at`` (when this hook process started,
epoch ms, taken once: the pipeline files a tool event that arrived after the next prompt, as an ``async``
PostToolUse hook's can, under the turn whose prompt hook started before it); the worker stores it as sent.
Every answer must be the worker's own (its context header, its ingest or search JSON, its JSON error; see
``Hook.wait``): another program on the port counts as a failure, like a dead worker.
"""

from __future__ import annotations

import os

from memcairn.hooks import state
from memcairn.hooks.digests import pre_tool_use, user_prompt_submit
from memcairn.hooks.hook import INGEST_TIMEOUT, Hook
from memcairn.hooks.runner import warn
from memcairn.hooks.session_start import session_start
from memcairn.wire.bodyfit import fit_body
from memcairn.wire.protocol import (
    MCP_SERVER_NAME,
    OBSERVATIONS_PATH,
    SESSION_END,
    STOP,
    SUMMARIZE_PATH,
    TOOL_USE,
    own_tool,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

CANONICAL = ("session-start", "user-prompt-submit", "pre-tool-use", "post-tool-use", "stop", "session-end")
ALIASES = {
    "sessionstart": "session-start",
    "userpromptsubmit": "user-prompt-submit", "beforeagent": "user-prompt-submit", "prompt": "user-prompt-submit",
    "pretooluse": "pre-tool-use", "beforetool": "pre-tool-use",
    "posttooluse": "post-tool-use", "aftertool": "post-tool-use",
    "stop": "stop", "afteragent": "stop",
    "sessionend": "session-end",
}
SESSION_END_TIMEOUT = 1.0


def canonical_event(name: str | None) -> str | None:
    if not name:
        return None
    return ALIASES.get("".join(c for c in name.lower() if c.isalpha()))


def _own_mcp_server(context: Any) -> bool:
    """Whether Gemini's ``mcp_context`` names memcairn's MCP server: Gemini CLI releases before the ``mcp_``
    prefix name an MCP tool by its bare name (``search``) or ``<server>__<tool>``, so only this tells."""
    return isinstance(context, dict) and context.get("server_name") == MCP_SERVER_NAME


def post_tool_use(hook: Hook) -> dict[str, Any]:
    if hook.missing("session_id", "tool_name"):
        return {}
    tool = hook.payload["tool_name"]
    if not isinstance(tool, str):
        warn("tool_name is not text; nothing recorded")
        return {}
    if own_tool(tool) or _own_mcp_server(hook.payload.get("mcp_context")):
        return {}
    body = {**hook.base_body(TOOL_USE), "tool_name": tool}
    for name in ("tool_input", "tool_response", "duration_ms"):
        if name in hook.payload:
            body[name] = hook.payload[name]
    if isinstance(hook.payload.get("tool_use_id"), str):
        body["tool_use_id"] = hook.payload["tool_use_id"]
    # the event is made durable before anything else: an async hook may be cancelled as soon as the agent exits
    hook.delivered(hook.deliver(OBSERVATIONS_PATH, fit_body(body, warn=warn), INGEST_TIMEOUT))
    return {}


def stop(hook: Hook) -> dict[str, Any]:
    if hook.missing("session_id"):
        return {}
    message = hook.text("last_assistant_message") or hook.text("prompt_response")
    body = hook.base_body(STOP)
    if message is None and hook.text("transcript_path"):
        from memcairn.wire.transcript_end import last_assistant_text

        message = last_assistant_text(hook.payload["transcript_path"])
        if message is not None:
            body["message_source"] = "transcript"
    if message is not None:
        body["last_assistant_message"] = message
    if isinstance(hook.payload.get("stop_hook_active"), bool):
        body["stop_hook_active"] = hook.payload["stop_hook_active"]
    hook.delivered(hook.deliver(SUMMARIZE_PATH, fit_body(body, ("last_assistant_message",), warn), INGEST_TIMEOUT))
    return {}


def session_end(hook: Hook) -> dict[str, Any]:
    if hook.missing("session_id"):
        return {}
    body = hook.base_body(SESSION_END)
    if hook.text("reason"):
        body["reason"] = hook.text("reason")
    hook.delivered(hook.deliver(SUMMARIZE_PATH, fit_body(body, ()), SESSION_END_TIMEOUT))
    return {}


HANDLERS = {
    "session-start": session_start, "user-prompt-submit": user_prompt_submit, "pre-tool-use": pre_tool_use,
    "post-tool-use": post_tool_use, "stop": stop, "session-end": session_end,
}


def dispatch(event_arg: str | None, platform: str, payload: dict[str, Any]) -> dict[str, Any]:
    """Run the event's handler and keep the failure count; the JSON object for stdout."""
    given = event_arg or payload.get("hook_event_name")
    event = canonical_event(given if isinstance(given, str) else None)
    if event is None:
        warn(f"unknown hook event {given!r}; expected one of {', '.join(CANONICAL)}")
        return {}
    hook = Hook(event, platform, payload)
    out = HANDLERS[event](hook)
    if hook.answered:
        state.record_success(hook.home)
    elif hook.failure is not None:
        warn(f"memory is off for this event: {hook.failure}")
        if state.record_failure(hook.home, hook.failure, can_notify=event != "session-end"):
            kept = " (events wait in its spool)" if hook.spooled else ""
            notice = (f"memcairn: memory is off — the worker has not answered {state.NOTIFY_AFTER} times in a row"
                      f"{kept}; run `memcairn worker start` or see the logs in {os.path.join(hook.home, 'logs')}")
            out["systemMessage"] = f"{notice}\n\n{out['systemMessage']}" if out.get("systemMessage") else notice
    return out

