"""The session-start hook: the fenced context for the project chain, the worker started when none listens."""

from __future__ import annotations

import os
import time

from memcairn.hooks.hook import INGEST_TIMEOUT, Hook, _context_output, context_answer
from memcairn.hooks.runner import warn
from memcairn.wire.bodyfit import fit_body
from memcairn.wire.protocol import (
    CONTEXT_PATH,
    DELIVERED_FIELD,
    INIT_PATH,
    NOTICE_PREFIX,
    READINESS_PATH,
    SESSION_START,
)
from memcairn.wire.transport import Unreachable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

CONTEXT_TIMEOUT = 3.0
# Claude Code moves an additionalContext over 10,000 characters (UTF-16 units) into a file: stay under it, with
# room for characters outside the BMP, which it counts twice.
CLAUDE_CONTEXT_CHARS = 9_600
ZONE_DIRS = ("/usr/share/zoneinfo", "/usr/lib/zoneinfo", "/usr/share/lib/zoneinfo", "/etc/zoneinfo")
AUTOSTART_WAIT = 1.0


def _autostart(hook: Hook) -> bool:
    """Spawn a worker (detached) and wait for it at most ``AUTOSTART_WAIT`` s; True if it is ready in time."""
    try:
        from memcairn.wire.config import settings_from_values
        from memcairn.wire.lifecycle import exit_reason_since, spawn, stderr_size

        cfg = settings_from_values(hook.settings)
        offset = stderr_size(cfg)
        proc = spawn(cfg)
    except Exception as exc:  # the session must start regardless
        warn(f"could not start the worker: {exc}")
        return False
    deadline = time.monotonic() + AUTOSTART_WAIT
    while time.monotonic() < deadline:
        try:
            if hook.worker.request("GET", READINESS_PATH, timeout=0.2).ok:
                return True
        except Unreachable:
            pass
        if proc.poll() is not None:  # it ended at once (a port taken, a setting it cannot use): say why
            why = exit_reason_since(cfg, offset) or f"exit code {proc.returncode}"
            warn(f"the worker it started exited at once ({why}); this session starts without memory context "
                 f"(logs: {os.path.join(hook.home, 'logs')})")
            return False
        time.sleep(0.05)
    warn(f"the worker is starting (not ready within {AUTOSTART_WAIT:g} s), so this session starts without memory "
         "context; what happens next is remembered once it runs")
    return False


def local_zone() -> str:
    """This process's zone (the person's) as the worker's ``tz`` parameter reads it: the IANA name from ``TZ``
    or the ``/etc/localtime`` link when the zone files hold it, else the current UTC offset. Without
    ``zoneinfo``, whose import would cost every session start more than this."""
    given = os.environ.get("TZ")
    if given is None:
        try:
            given = os.path.realpath("/etc/localtime")
        except OSError:
            given = ""
    name = given.lstrip(":").split("zoneinfo/", 1)[-1]
    if name and not name.startswith("/") and ".." not in name.split("/") and any(
            os.path.isfile(os.path.join(d, name)) for d in ZONE_DIRS):
        return name
    minutes = time.localtime().tm_gmtoff // 60
    return f"{'-' if minutes < 0 else '+'}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def _context_params(hook: Hook, **params: Any) -> dict[str, Any]:
    """The context route's parameters: the project chain (each name its own ``project``), times in this
    process's zone, and under Claude Code's inline limit."""
    params.update(project=list(hook.identity.chain), tz=local_zone())
    if hook.platform == "claude-code":
        params["maxTokens"] = CLAUDE_CONTEXT_CHARS // 4
    return params


def _resume_params(hook: Hook) -> dict[str, str]:
    """For a resumed Claude Code session, what lets the worker answer one line instead of the context again:
    Claude Code replays the transcript, the context the session's start was given included. (Codex and
    Gemini are not documented to replay it, so they get the context.)"""
    session = hook.text("session_id")
    if hook.platform != "claude-code" or hook.text("source") != "resume" or not session:
        return {}
    # started: this resume's own SessionStart event is sent after this request, so only events from before
    # this hook started can be the session's earlier start (the worker needs no grace window to skip it)
    return {"source": "resume", "session": session, "agent": hook.platform, "started": str(hook.started_at)}


def session_start(hook: Hook) -> dict[str, Any]:
    # No platformSource: a session starts with what every agent learned in this project chain.
    resumed = _resume_params(hook)
    params = _context_params(hook, **resumed)
    context = hook.send("POST", CONTEXT_PATH, params=params, raw=b"{}", timeout=CONTEXT_TIMEOUT)
    if context is None and hook.refused and hook.settings["worker_autostart"] and _autostart(hook):
        hook.failure, hook.refused = None, False
        context = hook.send("POST", CONTEXT_PATH, params=params, raw=b"{}", timeout=CONTEXT_TIMEOUT)
    if context is None:  # nothing listens: the start is still recorded (spooled), the session goes on
        _record_start(hook, False)
        return {}
    terminal = hook.settings["terminal_output"]
    coloured = None
    if terminal and hook.platform == "claude-code":  # Codex and Gemini print systemMessage as it is: no ANSI
        coloured = hook.send("POST", CONTEXT_PATH, params=_context_params(hook, colors="true", **resumed),
                             raw=b"{}", timeout=CONTEXT_TIMEOUT)
    answer = hook.wait(context, context_answer)
    shown = hook.wait(coloured, context_answer) if coloured is not None else None
    if hook.foreign:  # another program answers on the port: nothing to tell it
        return {}
    text = answer.text() if answer is not None else ""
    out = _context_output(hook, text)
    # Sent once the context's fate is known: a later resume of this session is told its context is earlier in
    # the conversation only when this start delivered one (the worker's earlier_session_start).
    _record_start(hook, bool(out))
    if answer is None and hook.answered and hook.failure is not None:  # dispatch says nothing: the worker answered
        warn(f"this session starts without memory context: {hook.failure}")
    if terminal:
        person = shown.text() if shown is not None else (text if hook.platform != "claude-code" else "")
        if person.strip():
            out["systemMessage"] = f"{person.rstrip()}\n\nView memory live: {hook.worker.base_url}/"
    else:
        notices = [line for line in text.splitlines() if line.startswith(NOTICE_PREFIX)]
        if notices:  # the person must learn that memory fell back or a cap was hit, not only the model
            out["systemMessage"] = "\n".join(notices)
    return out


def _record_start(hook: Hook, delivered: bool) -> None:
    if not hook.text("session_id"):
        return
    body = hook.base_body(SESSION_START)
    if hook.text("source"):
        body["source"] = hook.text("source")
    body[DELIVERED_FIELD] = delivered
    hook.delivered(hook.deliver(INIT_PATH, fit_body(body, ()), INGEST_TIMEOUT))
