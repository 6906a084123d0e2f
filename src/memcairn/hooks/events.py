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
import time

from memcairn.hooks import state
from memcairn.hooks.runner import warn
from memcairn.hooks.transport import Call, Response, Unreachable, Worker
from memcairn.wire.bodyfit import fit_body
from memcairn.wire.fastjson import encode_json, loads
from memcairn.wire.protocol import (
    CONTEXT_HEADER,
    CONTEXT_PATH,
    DELIVERED_FIELD,
    EVENT_KEY_FIELD,
    HOOK_STARTED_FIELD,
    INGEST_STATUSES,
    INIT_PATH,
    LOCK_FILE,
    MCP_SERVER_NAME,
    NOTICE_PREFIX,
    OBSERVATIONS_PATH,
    READINESS_PATH,
    SEARCH_PATH,
    SESSION_END,
    SESSION_START,
    SPAWN_GRACE_SECONDS,
    SPAWNED_FILE,
    START_LOCK_FILE,
    STOP,
    SUMMARIZE_PATH,
    TOOL_USE,
    USER_PROMPT,
    WRONG_HOME,
    own_tool,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
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
AGENT_NAMES = {
    "session-start": "SessionStart", "user-prompt-submit": "UserPromptSubmit", "pre-tool-use": "PreToolUse",
    "post-tool-use": "PostToolUse", "stop": "Stop", "session-end": "SessionEnd",
}
GEMINI_NAMES = {**AGENT_NAMES, "user-prompt-submit": "BeforeAgent", "pre-tool-use": "BeforeTool",
                "post-tool-use": "AfterTool", "stop": "AfterAgent"}

CONTEXT_TIMEOUT = 3.0
# Claude Code moves an additionalContext over 10,000 characters (UTF-16 units) into a file: stay under it, with
# room for characters outside the BMP, which it counts twice.
CLAUDE_CONTEXT_CHARS = 9_600
ZONE_DIRS = ("/usr/share/zoneinfo", "/usr/lib/zoneinfo", "/usr/share/lib/zoneinfo", "/etc/zoneinfo")
INGEST_TIMEOUT = 1.5
DIGEST_TIMEOUT = 1.0
SESSION_END_TIMEOUT = 1.0
AUTOSTART_WAIT = 1.0
PROMPT_DIGEST_TOKENS = 300
PROMPT_DIGEST_ROWS = 3
PROMPT_QUERY_CHARS = 500
READ_DIGEST_TOKENS = 400
READ_DIGEST_ROWS = 5
# An event spooled while older ones still wait this long: the worker has not drained the spool, so memory is off
# (what counts toward the person's notice). A slow answer (a held write lock) or a 503 of a restart is no outage.
SPOOL_STALE_SECONDS = 60.0
STOP_SIGNALS = ("SIGTERM", "SIGHUP", "SIGINT")
NO_MATCH = "No memories matched"
TAG_TEXT = "memcairn-memory"  # fence.TAG, checked before the fence module (0.6 ms of patterns) is imported


# -- the worker's own answers (worker/app.py) -------------------------------------------------------------
# Another program given the worker's port answers too (a development server's 200 page, its 404): such an answer
# is no memory, and taking it for a success would lose the event and hide that memory is off. Each check reads
# only what the answer already holds (a header, its small JSON body): no extra request.


def context_answer(response: Response) -> bool:
    """``/api/context/inject``: every answer carries ``X-Memcairn-Context`` (``excluded`` for an excluded
    project's empty one)."""
    return CONTEXT_HEADER.lower() in response.headers  # transport.Response keeps names lower-cased


def ingest_answer(response: Response) -> bool:
    """``/api/sessions/init``, ``/observations``, ``/summarize``: 202 ``{"status": "accepted" | "skipped", ...}``."""
    data = response.json_object()
    return response.status == 202 and data is not None and data.get("status") in INGEST_STATUSES


def search_answer(response: Response) -> bool:
    """``/api/search?format=index``: ``{"format": "index", "text": ..., ...}``."""
    data = response.json_object()
    return data is not None and data.get("format") == "index" and isinstance(data.get("text"), str)


def error_answer(response: Response) -> bool:
    """Every error answer of the worker (routes, guards, body limit): JSON ``{"error", "detail"}``."""
    data = response.json_object()
    return data is not None and isinstance(data.get("error"), str)


def canonical_event(name: str | None) -> str | None:
    if not name:
        return None
    return ALIASES.get("".join(c for c in name.lower() if c.isalpha()))


class Hook:
    """One event: the payload, the settings, the worker, and whether the worker answered."""

    def __init__(self, event: str, platform: str, payload: dict[str, Any]) -> None:
        self.started_at = int(time.time() * 1000)  # first: what orders this event among the session's hooks
        from memcairn.wire.settings_source import read_values

        self.event = event
        self.platform = platform
        self.payload = payload
        self.settings = read_values()  # every setting by name, and "home"
        self.home: str = self.settings["home"]
        self.worker = Worker(self.settings["host"], self.settings["port"], self.settings["token"], self.home)
        self.answered = False
        self.foreign = False  # another program answered on the worker's port
        self.failure: str | None = None
        self.refused = False
        self.event_key = os.urandom(16).hex()  # the worker queues this event once, however often it arrives
        self.pending: tuple[str, bytes] | None = None  # the event being delivered (route, body): not yet durable
        self.spooled = False
        self._spooling = False
        self._before: tuple[str | None, bool] = (None, False)  # the failure noted before the delivery began
        self._identity: Any = None
        names = GEMINI_NAMES if platform == "gemini-cli" else AGENT_NAMES
        given = payload.get("hook_event_name")
        self.agent_event = given if isinstance(given, str) and given.strip() else names[event]

    # payload fields ---------------------------------------------------------------------------------
    def text(self, name: str) -> str | None:
        value = self.payload.get(name)
        return value if isinstance(value, str) and value.strip() else None

    @property
    def cwd(self) -> str:
        return self.text("cwd") or os.getcwd()

    @property
    def identity(self) -> Any:
        if self._identity is None:
            from memcairn.core.project import project_from_cwd

            self._identity = project_from_cwd(self.cwd)
        return self._identity

    def base_body(self, event: str) -> dict[str, Any]:
        ident = self.identity
        body = {"event": event, "session_id": self.text("session_id"), "cwd": self.cwd, "project": ident.name,
                "projects": list(ident.chain), "platform_source": self.platform,
                "hook_event_name": self.agent_event, HOOK_STARTED_FIELD: self.started_at,
                EVENT_KEY_FIELD: self.event_key}
        for name in ("transcript_path", "permission_mode", "prompt_id", "agent_id", "agent_type", "model",
                     "turn_id"):
            value = self.payload.get(name)
            if isinstance(value, str) and value:
                body[name] = value
        return body

    # calls ------------------------------------------------------------------------------------------
    def send(self, method: str, path: str, **kwargs: Any) -> Call | None:
        try:
            return self.worker.send(method, path, **kwargs)
        except Unreachable as exc:
            self._failed(str(exc), refused=exc.refused)
            return None

    def wait(self, call: Call | None, expect: Callable[[Response], bool]) -> Response | None:
        """The answer of a call, or None (failure noted). ``expect`` tells the worker's own success answer of
        the route from another program's (``not_the_worker``); an error answer must be the worker's JSON error,
        and is reported on stderr."""
        if call is None:
            return None
        try:
            response = call.result()
        except Unreachable as exc:
            self._failed(str(exc))
            return None
        if response.status >= 500:
            self._failed(f"the worker answered {response.status} ({response.detail()})")
            return None
        if not (expect(response) if response.ok else error_answer(response)):
            self.not_the_worker()
            return None
        if response.status == 409 and (response.json_object() or {}).get("error") == WRONG_HOME:
            self.not_the_worker(f"the memcairn worker on {self.worker.base_url} serves another home, not {self.home}"
                                f" (give this home a port of its own: MEMCAIRN_PORT)")
            return None
        if not self.foreign:
            self.answered = True
        if not response.ok:
            warn(f"the worker refused {self.event} data: {response.status} {response.detail()}")
            return None
        return response

    # delivery: the event is durable once the worker acknowledged it or it is in the spool ----------------
    def deliver(self, path: str, raw: bytes, timeout: float) -> Call | None:
        """Send this hook's event; ``delivered`` makes it durable. From here until then, a signal that ends
        the hook (an agent cancelling it as it exits) spools the event first."""
        self.pending = (path, raw)
        self._before = (self.failure, self.refused)
        _spool_on_signals(self)
        return self.send("POST", path, raw=raw, timeout=timeout)

    def delivered(self, call: Call | None) -> Response | None:
        """The worker's answer to ``deliver``'s call. Not acknowledged (nothing listens, 503 while it starts or
        stops, no answer in time, another program on the port): the event goes to the spool, which the worker
        drains into its queue. A refusal of the worker (4xx) is final: spooling would not change it."""
        earlier, self.answered = self.answered, False
        answer = self.wait(call, ingest_answer)
        taken, self.answered = self.answered, self.answered or earlier
        if taken:  # acknowledged (or refused by the worker itself)
            if answer is not None and (answer.json_object() or {}).get("held"):
                self.keep_held()
            self.pending = None
            return answer
        self.spool_pending()
        return None

    def keep_held(self) -> None:
        """The disk is full and the worker holds the event in memory only (``worker/held_events.py``): spooled
        too when the spool has room, it outlives a worker that dies before the disk takes it."""
        from memcairn.wire import spool

        if self.pending is None:
            return
        try:
            spool.write(self.home, *_without_secrets(self.pending))
        except OSError as exc:
            warn(f"the disk is full ({exc}); the worker holds this event in memory and queues it once there is "
                 "room (a worker killed before then loses it)")

    def spool_pending(self) -> None:
        """Write the undelivered event to the spool. Once there, a slow or restarting worker (no answer in time,
        503 or a closed port while a worker of this home starts or stops) is no failure, unless it has left the
        spool undrained for ``SPOOL_STALE_SECONDS``; no worker at all, or another program on its port, still is
        one (memory is off until a worker runs)."""
        if self.pending is None or self._spooling:
            return
        from memcairn.wire import spool

        self._spooling = True
        try:
            spool.write(self.home, *_without_secrets(self.pending))
        except OSError as exc:
            warn(f"could not keep the event in {spool.spool_dir(self.home)} ({exc}); it is lost")
            return
        finally:
            self._spooling = False
        self.pending = None
        self.spooled = True
        why = self.failure
        if self.foreign or (self.refused and not _worker_coming_or_going(self.home)):
            warn(f"the worker did not take this event ({why}); it is kept in {spool.spool_dir(self.home)} and "
                 "queued when a worker of this home runs")
            return  # another program on the port, or no worker at all: memory is off
        warn(f"the worker is starting or busy ({why}); this event waits in {spool.spool_dir(self.home)} and is "
             "queued in a moment")
        age = spool.oldest_age(self.home)
        if age is not None and age > SPOOL_STALE_SECONDS:
            self.failure = (f"{why}; events have waited in {spool.spool_dir(self.home)} for {age:.0f} s "
                            "for a worker to take them")
            return
        self.failure, self.refused = self._before

    def not_the_worker(self, why: str | None = None) -> None:
        """Another program (or another home's worker) answers on the worker's port: its answers are not this
        home's memory, so this event counts as a failure (and the person learns memory is off) instead of a
        success."""
        self.foreign = True
        self.answered = False
        self._failed(why or f"what answers on {self.worker.base_url} is not a memcairn worker (does another "
                            f"program use port {self.worker.port}?)")

    def _failed(self, reason: str, refused: bool = False) -> None:
        self.refused = self.refused or refused
        if self.failure is None:
            self.failure = reason

    def missing(self, *names: str) -> bool:
        absent = [n for n in names if self.payload.get(n) in (None, "")]
        if absent:
            warn(f"{self.agent_event} payload has no {', '.join(absent)}; nothing recorded")
        return bool(absent)


def _without_secrets(pending: tuple[str, bytes]) -> tuple[str, bytes]:
    """An event about to rest in the spool (the worker is away), as admission would clean it: its secrets and
    ``<private>`` parts out (``capture.privacy``, standard library only). Only on this path: a delivered event
    is cleaned by the worker. Kept as it is should cleaning fail: losing the event would be worse."""
    route, raw = pending
    try:
        from memcairn.wire.privacy.scrubbing import scrub_event

        return route, encode_json(scrub_event(loads(raw)))
    except Exception:  # noqa: BLE001 - the event matters more than this pass over it
        return route, raw


def _just_spawned(home: str) -> bool:
    """A worker spawned in the last ``SPAWN_GRACE_SECONDS`` whose process still lives (it takes its lock once
    Python has started: a second or so)."""
    path = os.path.join(home, SPAWNED_FILE)
    try:
        if time.time() - os.stat(path).st_mtime > SPAWN_GRACE_SECONDS:
            return False
        with open(path, encoding="ascii") as fh:
            os.kill(int(fh.read().strip()), 0)
        return True
    except (OSError, ValueError):
        return False


def _worker_coming_or_going(home: str) -> bool:
    """Whether a worker process of this home is starting, running or stopping (it holds ``worker.lock``, or a
    start holds ``worker.start.lock``): a refused connection then is a restart, not an outage."""
    import fcntl

    if _just_spawned(home):
        return True
    for name in (LOCK_FILE, START_LOCK_FILE):
        try:
            fd = os.open(os.path.join(home, name), os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return True
        finally:
            os.close(fd)  # closing releases a lock this probe took
    return False


def _spool_on_signals(hook: Hook) -> None:
    """An agent that cancels the hook (Claude Code does when ``claude -p`` exits right after a tool call) ends it
    with a signal: the event not yet acknowledged is spooled before the process exits. ``_signal``, which the
    interpreter has loaded at start, not ``signal``: that one builds its enums with ``enum`` (~1 ms and more)."""
    import _signal

    def on_signal(signum: int, frame: Any) -> None:
        if hook._spooling:  # the spool write under way finishes, then the hook ends anyway
            return
        hook.spool_pending()
        from memcairn.hooks.runner import emit

        emit({})
        os._exit(0)

    for name in STOP_SIGNALS:
        try:
            _signal.signal(getattr(_signal, name), on_signal)
        except (AttributeError, ValueError, OSError):  # not the main thread, or no such signal here
            pass


# -- events ---------------------------------------------------------------------------------------------
def _context_output(hook: Hook, text: str) -> dict[str, Any]:
    if not text.strip():
        return {}
    return {"hookSpecificOutput": {"hookEventName": hook.agent_event, "additionalContext": text}}


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


def _answer_rows(answer: dict[str, Any]) -> list[str]:
    """The digest's rows from the search answer's structured ``rows`` (``search.rows``; a team server's ids as
    ``team#12``), each with its day: ``#12 2026-12-01 14:03 bugfix · Title · ~120 tok``."""
    rows = answer.get("rows")
    if not isinstance(rows, list):  # a worker from before the rows field, until it is replaced
        return _index_rows(answer["text"])
    out = []
    for row in rows:
        if not isinstance(row, dict):
            continue
        head = " ".join(str(row.get(k)) for k in ("id", "day", "time", "type") if row.get(k))
        parts = [head, str(row.get("title") or ""), *([str(row["project"])] if row.get("project") else []),
                 f"~{row.get('tokens')} tok", *(["weak"] if row.get("weak") is True else [])]
        out.append(" · ".join(parts))
    return out


def _index_rows(text: str) -> list[str]:
    """Rows of ``render_index`` text, each with its day (an older worker's answer has no ``rows``)."""
    rows, day = [], ""
    for line in text.splitlines():
        if line.startswith("### "):
            day = line[4:].strip()
        elif line.startswith("- #"):
            rest = line[2:]
            ident, _, tail = rest.partition(" ")
            rows.append(f"{ident} {day} {tail}".replace("  ", " ") if day else rest)
    return rows


def digest(heading: str, rows: list[str], max_tokens: int, max_rows: int) -> str:
    """A fenced block of ``heading`` and up to ``max_rows`` rows, dropping rows until it fits the budget."""
    from memcairn.wire.fence import clean_line, fence, fenced_size  # its patterns cost 0.6 ms to compile

    limit = max_tokens * 4
    kept = [clean_line(r, 300) for r in rows[:max_rows]]
    while kept:
        body = "\n".join([heading, *kept])
        if fenced_size(len(body)) <= limit:
            return fence(body)
        kept.pop()
    return ""


def _excluded(hook: Hook) -> bool:
    """Whether the project chain is excluded (``exclude_projects``): such a project is neither captured (the
    worker refuses its events) nor given memories, so the digests are not even asked for."""
    from memcairn.wire.settings_source import project_excluded

    return project_excluded(hook.identity.chain, str(hook.settings.get("exclude_projects") or ""))


def _search_digest(hook: Hook, call: Call | None, heading: Callable[[], str], max_tokens: int, max_rows: int) -> str:
    """The digest of a search's answer, under ``heading()`` (made only when there is one: it may need ``fence``,
    whose ``re`` a hook with nothing to show does without)."""
    answer = hook.wait(call, search_answer)
    if answer is None:
        return ""
    data = answer.json_object()  # search_answer: a JSON object with a text
    if data["text"].startswith(NO_MATCH):
        return ""
    return digest(heading(), _answer_rows(data), max_tokens, max_rows)


def user_prompt_submit(hook: Hook) -> dict[str, Any]:
    if hook.missing("session_id", "prompt"):
        return {}
    prompt = hook.payload["prompt"]
    if not isinstance(prompt, str):
        warn("the prompt is not text; nothing recorded")
        return {}
    if "hook_context" in prompt or TAG_TEXT in prompt:  # the context Gemini CLI put in front of the prompt
        from memcairn.wire.fence import strip_injected

        prompt = strip_injected(prompt)
    body = {**hook.base_body(USER_PROMPT), "prompt": prompt}
    number = hook.payload.get("prompt_number")
    if isinstance(number, int) and not isinstance(number, bool) and 0 <= number <= 1_000_000:
        body["prompt_number"] = number
    search = None
    if hook.settings["prompt_context"] and prompt.strip() and not _excluded(hook):
        search = hook.send("GET", SEARCH_PATH, timeout=DIGEST_TIMEOUT, params={
            "query": prompt[:PROMPT_QUERY_CHARS], "format": "index", "limit": PROMPT_DIGEST_ROWS,
            "project": list(hook.identity.chain)})
    init = hook.deliver(INIT_PATH, fit_body(body, ("prompt",), warn), INGEST_TIMEOUT)
    text = _search_digest(hook, search, lambda: "Memories that may relate to this prompt (most relevant first):",
                          PROMPT_DIGEST_TOKENS, PROMPT_DIGEST_ROWS) if search is not None else ""
    hook.delivered(init)
    return _context_output(hook, text)


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


def _read_target(hook: Hook) -> str | None:
    if hook.payload.get("tool_name") != "Read":
        return None
    tool_input = hook.payload.get("tool_input")
    path = tool_input.get("file_path") if isinstance(tool_input, dict) else None
    if not isinstance(path, str) or not path.strip():
        return None
    cwd = hook.cwd
    if os.path.isabs(path) and cwd:
        try:
            relative = os.path.relpath(path, cwd)
        except ValueError:
            relative = path
        if not relative.startswith(".."):
            return relative
    return path


def pre_tool_use(hook: Hook) -> dict[str, Any]:
    if hook.platform == "gemini-cli":  # Gemini takes no additionalContext before a tool runs
        return {}
    target = _read_target(hook)
    if target is None or _excluded(hook):
        return {}
    call = hook.send("GET", SEARCH_PATH, timeout=DIGEST_TIMEOUT, params={
        "files": target, "format": "index", "limit": READ_DIGEST_ROWS, "project": list(hook.identity.chain)})

    def heading() -> str:
        from memcairn.wire.fence import clean_line

        return f"Earlier sessions touched {clean_line(target, 200)} (newest first):"

    text = _search_digest(hook, call, heading, READ_DIGEST_TOKENS, READ_DIGEST_ROWS)
    return _context_output(hook, text)


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

