"""``memcairn mcp``: the memory as MCP tools, over stdio, for any agent that speaks MCP.

The server is a thin client of the worker: every tool is one or two loopback HTTP calls, and no store,
index or model is opened in this process. The worker is reached lazily, on the first tool call that needs
it (``ensure_worker`` starts one when none answers), so an agent that never searches costs nothing.

Tools (read-only ones carry ``readOnlyHint``), each defined once, by its typed method in ``memcairn.mcp.tools``
(its schema, its argument checking and its call come from there):

- ``important_workflow``: the three-layer workflow below, in its description and its result.
- ``search`` -> the compact index (``/api/search?format=index``): one row per memory with its id.
- ``timeline`` -> what happened around an anchor id (or the best match of a query) (``/api/timeline``).
- ``get_observations`` -> full records for the ids picked from the two above (``/api/observations/batch``);
  ``ids`` is required by the schema, so full records cannot be fetched without filtering first. Text such as
  ``"12, 15"`` is read as that list. The answer is bounded (``memcairn.mcp.records``): long texts, long lists and
  large records are cut where marked, and the note names ``memcairn show <id> --json`` for the whole record.
- ``session_start_context`` -> exactly the text the SessionStart hook injects (``/api/context/inject``), or
  ``NO_CONTEXT`` (why there is none) when that is empty.
- ``save_memory`` and ``forget``: write a memory, delete memories by id.

Why three layers: measured on real sessions, an index row costs about 20-30 tokens and a full record about
150-300 (``WORKFLOW`` has the figures); reading the index, narrowing it down, then fetching a few records
spends several times fewer tokens than returning full records from every search. The tool definitions are
kept under 1,000 tokens, since every session that loads the server pays for them.

**Project defaults.** A tool called without ``project`` works on the project of the directory the server
runs for: ``CLAUDE_PROJECT_DIR`` (Claude Code sets it for MCP servers), else ``GEMINI_PROJECT_DIR``, else
the server's working directory, named as ``memcairn.core.project`` names it (a git worktree also reads its main
checkout's memories). ``project: "*"`` means every project. A timeline around an id without ``project``
uses that memory's own project.

**Errors** come back as tool errors (``isError``) whose text says what to do, never as a crash: no worker
(and none could be started), an unknown id, a malformed argument.

**Context at start-up (Codex).** ``memcairn mcp --platform codex`` (what ``memcairn install codex``
registers) puts the SessionStart context into the server's ``instructions`` at initialisation: Codex runs a
hook only after the user trusted it in ``/hooks``, so on Codex the context comes through MCP first and the
SessionStart hook (HTTP) second. Fetching it is bounded (``STARTUP_CONTEXT_SECONDS``, within Codex's
default 10 s start-up timeout; the worker is started if needed); when it does not arrive in time the
instructions ask the agent to call ``session_start_context`` instead.

**Wire.** ``memcairn.mcp.protocol`` (standard library only) speaks MCP: agents wait for their servers
before the first model request, and the SDK's import alone took longer than the whole answer does now. Nothing
of the worker, and not pydantic, is imported before the first tool call: ``tools/list`` serves the schemas generated
into ``memcairn.mcp.schema``.

**Lifetime.** The server exits when its stdin closes (the client went away), on SIGINT and, should the pipe
stay open, when its parent process dies (a daemon thread watches ``os.getppid()``).
"""

from __future__ import annotations

import os
import sys
import threading
import time

from memcairn import __version__
from memcairn.core.errors import ConfigError, MemcairnError, NotFoundError, ValidationError, WorkerUnavailableError
from memcairn.mcp.protocol import McpServer, ServerInfo, serve_lines

# Imported where first needed, not at start (the agent waits for the first answer, and together they cost the
# server's start ~15 ms): ``logging`` (the first line logged), ``typing`` (never: annotations only), and the tools
# (``memcairn.mcp.tools``: pydantic, the worker's client, ``re``; the first tool call).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any, TypeVar

    from memcairn.mcp.tools import MemoryTools
    from memcairn.wire.client import WorkerClient

    T = TypeVar("T")

LOG_FORMAT = "memcairn mcp: %(levelname)s %(message)s"
_log_to_stderr = False  # set by main: the server's own process, whose stderr the agent keeps


class _Log:
    """``logging.getLogger("memcairn.mcp")``, made on first use (see above); in the server's own process the
    first use also sends warnings to stderr, as ``main`` did at start before."""

    def __getattr__(self, name: str) -> Any:
        return getattr(_logger(), name)


def _logger() -> Any:
    import logging

    if _log_to_stderr:
        logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format=LOG_FORMAT)  # once: then a no-op
    return logging.getLogger("memcairn.mcp")


log = _Log()

SERVER_NAME = "memcairn"
ALL_PROJECTS = "*"
PARENT_POLL_SECONDS = 1.0
STARTUP_CONTEXT_SECONDS = 6.0
STARTUP_PLATFORMS = ("codex",)  # agents whose server instructions carry the SessionStart context

WORKFLOW = """\
memcairn memory is read in three steps, cheapest first. Follow them in order.

1. search(query) -> a compact index: one row per memory with its #id, time, type, title and ~N tok, what
   reading that memory's full record costs. Memories that only resemble the query are marked "weak"
   (the index says so first when every row is); what nothing relates to is hidden and counted (min_score=0
   shows it).
2. timeline(anchor=<id>) -> what happened just before and after an interesting row, to confirm it is the
   right one.
3. get_observations(ids=[...]) -> full records, ONLY for the few ids you kept.

What it costs (measured on two long real coding sessions): an index row about 20-30 tokens; a full record
about 150-300 (median 166), a session summary up to about 900. A row is about 7 times cheaper than its
record, so narrow down before fetching.

Without `project`, every tool works on the current project; `project: "*"` searches every project.
save_memory stores something worth remembering; forget deletes memories by id.
"""

# The worker answers an empty text for an excluded project and for a budget too small for any memory (see
# ``memcairn.context.build``); an empty tool result would read as a failure, and the start-up instructions would ask
# for the tool again.
NO_CONTEXT = ("No session start context: memcairn memory is turned off for this project (exclude_projects), or "
              "context_token_budget is too small to show any of it.")
STARTUP_CONTEXT_HEADING = "What memcairn remembers of this project (the session start context):"
# Codex's hooks ran this week: its SessionStart hook gives the context, which the instructions would repeat.
STARTUP_CONTEXT_BY_HOOK = ("memcairn's SessionStart hook gives this session what memcairn remembers of the project; "
                           "search for more.")
HOOKS_SILENT = ("Note for the person: Codex has not run memcairn's hooks this week, so nothing of this session is "
                "being remembered. Codex runs a hook only after it is trusted: open /hooks in Codex and trust the "
                "memcairn hooks (`memcairn doctor` checks it).")
STARTUP_CONTEXT_MISSING = ("At the start of this session, call session_start_context once: it returns what memcairn "
                           "remembers of this project (the memory could not be read while this server started).")

class ToolError(Exception):
    """A failure whose message is returned to the agent as the tool's error text."""


# -- the worker -------------------------------------------------------------------------------------
def installed_version() -> str | None:
    """The version a worker started now would run: the ``__version__`` in the package's file on disk, which an
    upgrade rewrites while this long-lived process keeps the one it imported. None when it cannot be read."""
    from pathlib import Path

    import memcairn

    try:
        source = Path(memcairn.__file__ or "").read_text(encoding="utf-8")
    except OSError:
        return None
    import re

    found = re.search(r'^__version__ = "([^"]+)"', source, re.MULTILINE)
    return found.group(1) if found else None


def connect_worker() -> WorkerClient:
    """``ensure_worker``, unless memcairn was upgraded (or downgraded) while this server ran.

    ``ensure_worker`` replaces a worker of another version than this process's and waits for one of this
    process's version, which a worker started from the upgraded files never reports: a stale server would stop
    the up-to-date worker on every connection and fail after the start timeout. The installed package decides
    instead (``memcairn worker start`` run from it), and its output stays off this server's stdout.
    """
    import subprocess

    from memcairn.wire.client import START_TIMEOUT, WorkerClient, ensure_worker
    from memcairn.wire.config import load_settings
    from memcairn.wire.lifecycle import current_version

    installed = installed_version()
    if installed is None or installed == current_version():
        return ensure_worker()
    log.warning("memcairn %s is installed but this server runs %s; restart the MCP server to use the new version",
                installed, current_version())
    try:
        done = subprocess.run([sys.executable, "-m", "memcairn", "worker", "start", "--keep-running"],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=START_TIMEOUT + 5)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise WorkerUnavailableError(f"`memcairn worker start` failed: {exc}") from None
    if done.returncode != 0:
        detail = done.stderr.strip()[-500:] or f"exit code {done.returncode}"
        raise WorkerUnavailableError(f"`memcairn worker start` failed: {detail}")
    return WorkerClient(settings=load_settings())


class WorkerGateway:
    """The worker, reached lazily: started (if needed) on first use, and once more after a lost connection."""

    def __init__(self, ensure: Callable[[], WorkerClient] | None = None) -> None:
        self._ensure = ensure or connect_worker
        self._client: WorkerClient | None = None
        self._lock = threading.Lock()

    def _connect(self) -> WorkerClient:
        with self._lock:
            if self._client is None:
                try:
                    self._client = self._ensure()
                except (WorkerUnavailableError, ConfigError) as exc:
                    raise ToolError("the memory worker is not running and could not be started: run "
                                    f"`memcairn worker start` and try again ({exc})") from None
            return self._client

    def call(self, fn: Callable[[WorkerClient], T]) -> T:
        """``fn(client)``; when the worker went away, start it again and retry once."""
        client = self._connect()
        try:
            return fn(client)
        except WorkerUnavailableError as exc:
            log.warning("the worker did not answer (%s); starting it again", exc)
            with self._lock:
                self._client = None
            return fn(self._connect())


def error_text(exc: BaseException) -> str:
    """What the agent reads when a tool fails: what went wrong and what to do."""
    if isinstance(exc, ToolError):
        return str(exc)
    if isinstance(exc, ValidationError):
        return f"invalid request: {exc}"
    if isinstance(exc, NotFoundError):
        return str(exc) if "search" in str(exc) else f"{exc}; search first to find ids that exist"
    if isinstance(exc, WorkerUnavailableError):
        return f"the memory worker did not answer: {exc}"
    if isinstance(exc, MemcairnError):
        return str(exc)
    return f"unexpected error in memcairn mcp ({type(exc).__name__}: {exc}); the details are on its stderr"


# -- the MCP server ---------------------------------------------------------------------------------
class LazyTools:
    """The server's ``MemoryTools``, made on first use: ``memcairn.mcp.tools`` imports pydantic (~100 ms of CPU),
    which neither the handshake nor ``tools/list`` should wait for."""

    def __init__(self, tools: MemoryTools | None = None) -> None:
        self._tools = tools
        self._lock = threading.Lock()

    def __call__(self) -> MemoryTools:
        with self._lock:
            if self._tools is None:
                from memcairn.mcp.tools import MemoryTools

                self._tools = MemoryTools()
            return self._tools


def _made(tools: MemoryTools | LazyTools) -> MemoryTools:
    return tools() if isinstance(tools, LazyTools) else tools


class StartupInstructions:
    """``WORKFLOW`` followed by the SessionStart context of the current project, for agents that get the context
    through the server's instructions (``STARTUP_PLATFORMS``).

    The fetch (which starts the worker if needed) begins when this is made, at the server's start, and the
    first handshake waits for it until ``timeout`` seconds after that start; when the context cannot be had in
    time, the instructions ask the agent to call ``session_start_context`` instead. The first text given is
    kept, so a client that probes and then hands shakes reads the same instructions twice. Never raises: a
    server that cannot read memory still starts.
    """

    def __init__(self, tools: MemoryTools | LazyTools, timeout: float = STARTUP_CONTEXT_SECONDS,
                 platform: str = "codex") -> None:
        self._deadline = time.monotonic() + timeout
        self._found: dict[str, str] = {}
        self._text: str | None = None
        self._lock = threading.Lock()
        self._note_given = False

        def fetch() -> None:
            try:
                heard = _made(tools).hooks_heard()
            except Exception as exc:  # an older worker, or none: as if the hooks had not run
                log.info("cannot tell whether the agent's hooks ran: %s", exc)
                heard = []
            if platform in heard:  # the SessionStart hook gives the context: once is enough
                self._found["hooked"] = "yes"
                return
            self._found["silent"] = "yes"
            try:
                self._found["text"] = _made(tools).session_start_context()
            except Exception as exc:  # reported in the instructions, never fatal
                log.warning("no session start context for the instructions: %s", exc)

        self._fetcher = threading.Thread(target=fetch, name="memcairn-mcp-startup-context", daemon=True)
        self._fetcher.start()

    def __call__(self) -> str:
        with self._lock:
            if self._text is None:
                self._fetcher.join(max(0.0, self._deadline - time.monotonic()))
                text = self._found.get("text", "").strip()
                if self._found.get("hooked"):
                    self._text = f"{WORKFLOW}\n{STARTUP_CONTEXT_BY_HOOK}\n"
                else:
                    self._text = (f"{WORKFLOW}\n{STARTUP_CONTEXT_HEADING}\n\n{text}\n" if text
                                  else f"{WORKFLOW}\n{STARTUP_CONTEXT_MISSING}\n")
                    if text and self._found.get("silent"):
                        self._text += f"\n{HOOKS_SILENT}\n"
            return self._text

    def first_call_note(self) -> str:
        """Said once, with the first tool result, when the agent's hooks have not run this week."""
        self()
        with self._lock:
            if self._note_given or not self._found.get("silent"):
                return ""
            self._note_given = True
            return HOOKS_SILENT


def startup_instructions(tools: MemoryTools | LazyTools, timeout: float = STARTUP_CONTEXT_SECONDS) -> str:
    """The start-up instructions (see ``StartupInstructions``), fetched now within ``timeout`` seconds."""
    return StartupInstructions(tools, timeout)()


def tool_entries() -> list[dict[str, Any]]:
    """The tools as ``tools/list`` entries: generated from their typed definitions (``memcairn.mcp.tools``)."""
    from memcairn.mcp.schema import TOOL_ENTRIES

    return TOOL_ENTRIES


def build_server(tools: MemoryTools | LazyTools | None = None, instructions: str | Callable[[], str] = WORKFLOW,
                 first_note: Callable[[], str] | None = None) -> McpServer:
    """The MCP server of ``tools`` (made on the first tool call when None: nothing of the worker is touched
    before), announcing ``instructions`` (text, or a function asked at each handshake); ``first_note``'s text,
    when it has one, follows a tool's answer."""
    current = tools if isinstance(tools, LazyTools) else LazyTools(tools)

    def call(name: str, arguments: Mapping[str, Any] | None) -> tuple[str, bool]:
        try:
            answer = current().run(name, arguments)
            note = first_note() if first_note is not None else ""
            return (f"{answer.rstrip()}\n\n{note}" if note else answer), False
        except Exception as exc:
            if not isinstance(exc, ToolError | MemcairnError):
                log.exception("tool %s failed", name)
            return error_text(exc), True

    announced = instructions if callable(instructions) else (lambda: instructions)
    return McpServer(ServerInfo(SERVER_NAME, __version__, "memcairn memory"), tool_entries(), call, announced)


def watch_parent(interval: float = PARENT_POLL_SECONDS, on_orphaned: Callable[[], None] | None = None) -> None:
    """Exit (or call ``on_orphaned``) once the parent process is gone, checked every ``interval`` seconds.

    A daemon thread compares ``os.getppid()`` with its value at start: when the parent dies the process is
    re-parented (to init or a subreaper) and the value changes. Nothing is watched when the parent is
    already init.
    """
    parent = os.getppid()
    if parent <= 1:
        return

    def orphaned() -> None:
        log.info("parent process %d is gone; exiting", parent)
        os._exit(0)

    action = on_orphaned or orphaned

    def loop() -> None:
        while os.getppid() == parent:
            time.sleep(interval)
        action()

    threading.Thread(target=loop, name="memcairn-mcp-parent-watch", daemon=True).start()


def main(platform: str | None = None) -> int:
    """Run the stdio server (the ``memcairn mcp`` command); logs go to stderr, stdout carries the protocol.

    ``platform`` names the agent that runs the server; for those in ``STARTUP_PLATFORMS`` the instructions
    carry the SessionStart context (see the module docstring). Returns when stdin closes or on SIGINT.
    """
    global _log_to_stderr
    _log_to_stderr = True
    watch_parent()
    tools = LazyTools()
    instructions: str | Callable[[], str] = WORKFLOW
    first_note = None
    if platform in STARTUP_PLATFORMS:
        instructions = StartupInstructions(tools, platform=platform)
        first_note = instructions.first_call_note
    try:
        serve_lines(build_server(tools, instructions, first_note), sys.stdin.buffer, sys.stdout.buffer)
    except (KeyboardInterrupt, BrokenPipeError, ConnectionError):
        pass  # told to stop, or the client went away: nothing is left to answer
    return 0


def __getattr__(name: str) -> Any:
    """``MemoryTools`` and ``default_identity``, which moved to ``memcairn.mcp.tools``, imported when asked for
    (importing them here would cost every start pydantic's import)."""
    if name in ("MemoryTools", "default_identity"):
        from memcairn.mcp import tools as mcp_tools

        return getattr(mcp_tools, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
