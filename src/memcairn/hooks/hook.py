"""One hook event: its payload and settings, its calls to the worker, and its delivery (acknowledged or spooled)."""

from __future__ import annotations

import os
import time

from memcairn.core.clock import now_ms
from memcairn.hooks.runner import warn
from memcairn.wire.fastjson import encode_json, loads
from memcairn.wire.protocol import (
    CONTEXT_HEADER,
    EVENT_KEY_FIELD,
    HOOK_STARTED_FIELD,
    INGEST_STATUSES,
    LOCK_FILE,
    SPAWN_GRACE_SECONDS,
    SPAWNED_FILE,
    START_LOCK_FILE,
    WRONG_HOME,
)
from memcairn.wire.transport import Call, Response, Unreachable, Worker

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

AGENT_NAMES = {
    "session-start": "SessionStart", "user-prompt-submit": "UserPromptSubmit", "pre-tool-use": "PreToolUse",
    "post-tool-use": "PostToolUse", "stop": "Stop", "session-end": "SessionEnd",
}
GEMINI_NAMES = {**AGENT_NAMES, "user-prompt-submit": "BeforeAgent", "pre-tool-use": "BeforeTool",
                "post-tool-use": "AfterTool", "stop": "AfterAgent"}

INGEST_TIMEOUT = 1.5
# An event spooled while older ones still wait this long: the worker has not drained the spool, so memory is off
# (what counts toward the person's notice). A slow answer (a held write lock) or a 503 of a restart is no outage.
SPOOL_STALE_SECONDS = 60.0
STOP_SIGNALS = ("SIGTERM", "SIGHUP", "SIGINT")


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


class Hook:
    """One event: the payload, the settings, the worker, and whether the worker answered."""

    def __init__(self, event: str, platform: str, payload: dict[str, Any]) -> None:
        self.started_at = now_ms()  # first: what orders this event among the session's hooks
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


def _context_output(hook: Hook, text: str) -> dict[str, Any]:
    if not text.strip():
        return {}
    return {"hookSpecificOutput": {"hookEventName": hook.agent_event, "additionalContext": text}}
