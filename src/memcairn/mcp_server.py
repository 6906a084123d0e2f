"""``memcairn mcp``: the memory as MCP tools, over stdio, for any agent that speaks MCP.

The server is a thin client of the worker: every tool is one or two loopback HTTP calls, and no store,
index or model is opened in this process. The worker is reached lazily, on the first tool call that needs
it (``ensure_worker`` starts one when none answers), so an agent that never searches costs nothing.

Tools (read-only ones carry ``readOnlyHint``):

- ``important_workflow``: the three-layer workflow below, in its description and its result.
- ``search`` -> the compact index (``/api/search?format=index``): one row per memory with its id.
- ``timeline`` -> what happened around an anchor id (or the best match of a query) (``/api/timeline``).
- ``get_observations`` -> full records for the ids picked from the two above (``/api/observations/batch``);
  ``ids`` is required by the schema, so full records cannot be fetched without filtering first. Text such as
  ``"12, 15"`` is read as that list. The answer is bounded (see ``MAX_RECORDS_CHARS``): long texts, long lists and
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
the server's working directory, named as ``memcairn.project`` names it (a git worktree also reads its main
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

**Wire.** ``memcairn.mcp_protocol`` (standard library only) speaks MCP: agents wait for their servers
before the first model request, and the SDK's import alone took longer than the whole answer does now. Nothing
of the worker is imported before the first tool call.

**Lifetime.** The server exits when its stdin closes (the client went away), on SIGINT and, should the pipe
stay open, when its parent process dies (a daemon thread watches ``os.getppid()``).
"""

from __future__ import annotations

import os
import sys
import threading
import time

from memcairn import __version__
from memcairn.errors import ConfigError, MemcairnError, NotFoundError, ValidationError, WorkerUnavailableError
from memcairn.fastjson import dumps
from memcairn.mcp_protocol import McpServer, ServerInfo, serve_lines
from memcairn.project import project_from_cwd

# Imported where first needed, not at start (the agent waits for the first answer, and together they cost the
# server's start ~15 ms): ``logging`` (the first line logged), ``re`` and ``fence`` (the first tool call), ``typing``
# (never: annotations only), and the worker's client (http.client, ssl, settings: the first tool call).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any, TypeVar

    from memcairn.client import WorkerClient
    from memcairn.project import ProjectIdentity

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
MAX_IDS = 100
# search, timeline and session_start_context send their arguments in the request's URL, and the worker refuses
# a request line over about 128 KB (it resets the connection, which reads as a dead worker); 10,000 characters
# stay under it even when every character is percent-encoded as three UTF-8 bytes.
URL_TOOLS = ("search", "timeline", "session_start_context")
MAX_URL_ARG_CHARS = 10_000
# get_observations answers into the agent's context: a saved memory may hold 256 KiB in each of its fields (and in
# its metadata, and in each list: thousands of short facts), and Claude Code refuses a tool result over 25,000
# tokens. A text is cut past MAX_FIELD_CHARS, a list or an object (metadata) past MAX_ENTRIES entries, nesting
# past MAX_DEPTH levels, and one record past MAX_RECORDS_CHARS characters of JSON (so the first record, always
# shown, is bounded too); records past MAX_RECORDS_CHARS in all are left for another call (their ids are listed).
MAX_FIELD_CHARS = 8_000
MAX_ENTRIES = 50
MAX_DEPTH = 8
MAX_RECORDS_CHARS = 60_000
# Where a cut record can be read whole (the CLI reads the store; the note names the first cut id).
SHOW_IN_FULL = "memcairn show {id} --json"

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
# ``memcairn.context``); an empty tool result would read as a failure, and the start-up instructions would ask
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

IDS_REQUIRED = 'ids is required: call search first to find ids, then pass them as a list, e.g. {"ids": [12, 15]}'
# Between the ids of one text ("12,15", "#12, #15", "12 15"): commas, semicolons and white space.
ID_SEPARATORS = r"[\s,;]+"


def _local_tz() -> str:
    """This process's zone (the agent's), so the worker reads dates and prints times as the agent would."""
    from memcairn.search.request import local_tz_name

    return local_tz_name()


class ToolError(Exception):
    """A failure whose message is returned to the agent as the tool's error text."""


# -- tool definitions -------------------------------------------------------------------------------
class ToolSpec:
    """One tool: its name, texts, argument schema and hints. (A plain class: ``dataclasses`` would cost the
    server's start-up about as much as the rest of this module.)"""

    __slots__ = ("name", "title", "description", "input_schema", "read_only", "destructive", "idempotent")

    def __init__(self, name: str, title: str, description: str, input_schema: dict[str, Any], read_only: bool,
                 destructive: bool = False, idempotent: bool = True) -> None:
        self.name, self.title, self.description, self.input_schema = name, title, description, input_schema
        self.read_only, self.destructive, self.idempotent = read_only, destructive, idempotent


def _string(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **extra}


PROJECT_ARG = _string('Default: the current project; "*" = all; comma-separated for several.')
IDS_ARG = {"type": "array", "items": {"type": "integer"}, "minItems": 1, "description": "Ids, e.g. [12, 15]."}
# get_observations also takes back the ids a team server's search gives (remote mode) as text: "team#12"
# (its items' schema says so too: a client that checks arguments against the schema would refuse them otherwise)
READ_IDS_ARG = {**IDS_ARG,
                "items": {"anyOf": [{"type": "integer"}, {"type": "string", "pattern": r"^(#?\d+|team#\d+)$"}]},
                "description": "Ids, e.g. [12, 15]; a team server's as text: [\"team#12\", \"team#15\"]."}
DATE_FORMS = "2026-08-01, ISO time or 7d"

# Kept short on purpose: every session that loads the server pays for these texts (important_workflow's
# result carries the longer guidance, on demand). tests/test_mcp_server.py holds them under 1,000 tokens.
TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "important_workflow", "How to read memcairn memory",
        "Read once before using memory: search -> timeline -> get_observations, cheapest first.",
        {"type": "object", "properties": {}},
        read_only=True,
    ),
    ToolSpec(
        "search", "Search memory",
        "Step 1. Search past work: one row per memory (#id, time, type, title, ~tokens to read it). Weak "
        "matches are hidden. No query: newest first.",
        {"type": "object", "properties": {
            "query": _string("Keywords or a question."),
            "limit": {"type": "integer", "description": "Rows, 1-100 (default 20)."},
            "offset": {"type": "integer", "description": "Rows to skip."},
            "project": PROJECT_ARG,
            "type": _string("Record kind.", enum=["observations", "summaries", "prompts", "all"]),
            "obs_type": _string("bugfix, feature, change, discovery, decision, note..."),
            "concepts": _string("Comma-separated."),
            "files": _string("Path parts, comma-separated."),
            "date_start": _string(f"From: {DATE_FORMS}."),
            "date_end": _string("Until (same forms)."),
            "order_by": _string("Default: relevance with a query.", enum=["relevance", "newest", "oldest"]),
            "platform_source": _string("claude-code, codex or gemini-cli."),
            "min_score": {"type": "number", "description": "Relevance floor: 0.75 default, 0 shows all."},
        }},
        read_only=True,
    ),
    ToolSpec(
        "timeline", "Timeline around a memory",
        "Step 2. Memories just before and after an anchor.",
        {"type": "object", "properties": {
            "anchor": _string(f"An id (12, team#12), S<id> for a summary, or a time: {DATE_FORMS}."),
            "query": _string("Anchor on its best match instead."),
            "before": {"type": "integer", "description": "Rows before, 0-50 (default 10)."},
            "after": {"type": "integer", "description": "Rows after (default 10)."},
            "project": _string("Default: the anchor's project, else the current one."),
        }},
        read_only=True,
    ),
    ToolSpec(
        "get_observations", "Read full memory records",
        "Step 3. Full records of the few ids worth reading (each costs the ~tokens on its row).",
        {"type": "object", "properties": {"ids": READ_IDS_ARG}, "required": ["ids"]},
        read_only=True,
    ),
    ToolSpec(
        "session_start_context", "Session start context",
        "The digest injected at session start, for clients without hooks.",
        {"type": "object", "properties": {
            "project": PROJECT_ARG,
            "platform_source": _string("claude-code, codex or gemini-cli."),
            "full": {"type": "boolean", "description": "Not the compact rendering."},
        }},
        read_only=True,
    ),
    ToolSpec(
        "save_memory", "Save a memory",
        "Remember something for later sessions (a decision, a gotcha, a fact).",
        {"type": "object", "properties": {
            "text": _string("Self-contained text."),
            "title": _string("Short title."),
            "type": _string("decision, bugfix, note (default)..."),
            "project": _string("Default: the current project."),
        }, "required": ["text"]},
        read_only=False,
    ),
    ToolSpec(
        "forget", "Delete memories",
        "Delete memories by id for good (wrong, outdated or sensitive).",
        {"type": "object", "properties": {"ids": IDS_ARG}, "required": ["ids"]},
        read_only=False, destructive=True,
    ),
)
TOOLS_BY_NAME = {t.name: t for t in TOOLS}


# -- arguments --------------------------------------------------------------------------------------
# Earlier names of arguments, still read: one vocabulary (before / after) across the CLI, MCP and HTTP.
# Other names a tool takes for its arguments: earlier spellings (claude-mem's camelCase among them).
ARGUMENT_ALIASES = {"timeline": {"depth_before": "before", "depth_after": "after"},
                    "search": {"dateStart": "date_start", "dateEnd": "date_end", "orderBy": "order_by",
                               "platformSource": "platform_source"},
                    "session_start_context": {"projects": "project", "platformSource": "platform_source"}}


def _check_arguments(spec: ToolSpec, arguments: Mapping[str, Any] | None) -> dict[str, Any]:
    """The arguments as the handlers expect them (types checked, ``null`` dropped), or a ``ToolError``."""
    args = {k: v for k, v in (arguments or {}).items() if v is not None}
    for old, new in ARGUMENT_ALIASES.get(spec.name, {}).items():
        if old in args:
            value = args.pop(old)
            args.setdefault(new, value)
    props: dict[str, Any] = spec.input_schema.get("properties", {})
    unknown = sorted(set(args) - set(props))
    if unknown:
        accepted = ", ".join(props) or "none"
        raise ToolError(f"{spec.name} does not take {', '.join(unknown)}; its arguments are: {accepted}")
    if "ids" in props and not args.get("ids"):
        raise ToolError(IDS_REQUIRED)
    for name, value in args.items():
        kind = props[name].get("type")
        if kind == "string":
            if isinstance(value, int | float) and not isinstance(value, bool):
                number = _whole(value)  # an id given as a number where text is expected: 12.0 reads as "12"
                value = str(value if number is None else number)
            elif isinstance(value, list) and all(isinstance(v, str) for v in value):
                value = ",".join(value)  # a list where comma-separated text is expected
            if not isinstance(value, str):
                raise ToolError(f"{name} must be text, got {_shown(value)}")
            allowed = props[name].get("enum")
            if allowed and value not in allowed:
                raise ToolError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")
        elif kind == "integer":
            number = _whole(value)
            if number is None:
                raise ToolError(f"{name} must be a whole number, got {_shown(value)}")
            value = number
        elif kind == "number":
            if isinstance(value, str):
                try:
                    value = float(value)
                except ValueError:
                    raise ToolError(f"{name} must be a number, got {_shown(value)}") from None
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
                raise ToolError(f"{name} must be a number >= 0, got {_shown(value)}")
        elif kind == "boolean":
            if not isinstance(value, bool):
                raise ToolError(f"{name} must be true or false, got {_shown(value)}")
        elif kind == "array" and name == "ids":
            value = _ids(value, team=spec.name == "get_observations")
        elif kind == "array":
            value = [value] if isinstance(value, str) else value
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ToolError(f'{name} must be a list of text, e.g. ["first", "second"]')
        args[name] = value
    if spec.name in URL_TOOLS:
        sizes = {n: len(v) if isinstance(v, str) else sum(len(x) + 1 for x in v)
                 for n, v in args.items() if isinstance(v, str | list)}
        if sum(sizes.values()) > MAX_URL_ARG_CHARS:
            longest = max(sizes, key=lambda n: sizes[n])
            raise ToolError(f"{spec.name} takes at most {MAX_URL_ARG_CHARS:,} characters of arguments in all; "
                            f"{longest} alone is {sizes[longest]:,}: shorten it")
    return args


def _shown(value: Any) -> str:
    """An argument as an error message quotes it: JSON, with its non-ASCII text as written ("²", not "\\u00b2")."""
    return dumps(value, ensure_ascii=False)


def _whole(value: Any) -> int | None:
    """``value`` as a whole number, or None when it is not one.

    Accepted: an int; a float without a fraction (JSON Schema's "integer" admits 12.0, and some clients send
    numbers that way); text that ``int`` reads ("12", " -3 "). Text is parsed rather than checked with
    ``isdigit``, which also passes "²" and "--5" that ``int`` then refuses with an exception.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:  # not a number, or past int's digit limit
            return None
    return None


def _id_entries(value: Any) -> list[Any]:
    """The entries of an ``ids`` argument: a list as given, and text split into its ids.

    Models often send ids as one text ("12,15", "#12, #15", even "[12, 15]") where the schema asks for a
    list; that is read as the list it means. Anything else is left whole for ``_ids`` to refuse by name."""
    import re

    raw = value if isinstance(value, list) else [value]
    entries: list[Any] = []
    for entry in raw:
        if isinstance(entry, str):
            text = entry.strip()
            if text.startswith("[") and text.endswith("]"):
                text = text[1:-1]
            entries += [part for part in re.split(ID_SEPARATORS, text) if part]
        else:
            entries.append(entry)
    return entries


def _ids(value: Any, *, team: bool = False) -> list[int | str]:
    """Memory ids; with ``team`` also a team server's, kept as ``team#12`` (remote mode's search shows them)."""
    from memcairn.team_client import team_id, team_ref

    out: list[int | str] = []
    for entry in _id_entries(value):
        held = team_id(entry)
        if held is not None:
            if not team:
                raise ToolError(f"{_shown(entry)} is a team server's memory; this tool takes local ids (#12)")
            out.append(team_ref(held))
            continue
        number = _whole(entry.lstrip("#") if isinstance(entry, str) else entry)
        if number is None or number < 1:
            raise ToolError(f"ids must be memory ids (whole numbers such as 12), got {_shown(entry)}; "
                            "call search first to find ids")
        out.append(number)
    if not out:  # text of separators only, such as " , "
        raise ToolError(IDS_REQUIRED)
    if len(out) > MAX_IDS:
        raise ToolError(f"at most {MAX_IDS} ids per call; narrow the list down with search or timeline first")
    return list(dict.fromkeys(out))


def _compact(record: dict[str, Any]) -> dict[str, Any]:
    """A record without its empty fields (null, "", [] and {} say nothing and cost tokens)."""
    return {k: v for k, v in record.items() if v not in (None, "", [], {})}


class _Budget:
    """Characters of JSON one record may still spend, and whether anything of it was cut."""

    def __init__(self, chars: int) -> None:
        self.left = chars
        self.cut = False

    def spend(self, chars: int) -> None:
        self.left -= chars


def _cost(value: Any) -> int:
    """Characters ``value`` takes in the tool's answer (JSON escapes such as ``\\n`` count double or more)."""
    return len(dumps(value, ensure_ascii=False))


def _fitting(text: str, room: int) -> int:
    """How many leading characters of ``text`` (at most ``MAX_FIELD_CHARS``) fit in ``room`` characters of JSON."""
    high = min(len(text), MAX_FIELD_CHARS)
    if _cost(text[:high]) - 2 <= room:
        return high
    low = 0
    while low < high:  # the encoded length grows with the prefix: bisect
        middle = (low + high + 1) // 2
        low, high = (middle, high) if _cost(text[:middle]) - 2 <= room else (low, middle - 1)
    return low


def _cut_text(text: str, budget: _Budget) -> str:
    from memcairn.fence import defuse

    text = defuse(text)  # stored text in the agent's context: no fence or chat-template role marker passes
    keep = _fitting(text, max(0, budget.left))
    if keep < len(text):
        text = f"{text[:keep]}… [cut: {len(text) - keep:,} more characters]"
        budget.cut = True
    budget.spend(_cost(text))
    return text


def _cut_list(values: list[Any], budget: _Budget, depth: int) -> list[Any]:
    out: list[Any] = []
    for value in values:
        if len(out) == MAX_ENTRIES or budget.left <= 0:
            break
        out.append(_cut(value, budget, depth + 1))
        budget.spend(2)  # ", "
    if len(out) < len(values):
        budget.cut = True
        out.append(f"… [cut: {len(values) - len(out):,} more entries]")
    return out


def _cut_object(fields: dict[str, Any], budget: _Budget, depth: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in fields.items():
        if len(out) == MAX_ENTRIES or budget.left <= 0:
            break
        budget.spend(_cost(key) + 4)  # ": " and ", "
        out[key] = _cut(value, budget, depth + 1)
    if len(out) < len(fields):
        budget.cut = True
        out["…"] = f"[cut: {len(fields) - len(out):,} more keys]"
    return out


def _cut(value: Any, budget: _Budget, depth: int = 0) -> Any:
    """``value`` (one field of a record) within ``budget``: texts, lists and objects cut and marked."""
    if isinstance(value, str):
        return _cut_text(value, budget)
    if isinstance(value, list | dict) and depth >= MAX_DEPTH:
        budget.cut = True
        marker = f"… [cut: nested deeper than {MAX_DEPTH} levels]"
        budget.spend(_cost(marker))
        return marker
    if isinstance(value, list):
        return _cut_list(value, budget, depth)
    if isinstance(value, dict):
        return _cut_object(value, budget, depth)
    budget.spend(_cost(value))
    return value


def _bounded(record: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """``record`` within ``MAX_RECORDS_CHARS`` characters of JSON (plus the cut markers), and whether it was cut.

    Every field is kept (with a marker when cut), in the record's order; the budget goes to the plain fields
    first (id, title, text...), then the lists, then objects (metadata), so a large metadata cannot push the
    memory's own text out."""
    budget = _Budget(MAX_RECORDS_CHARS)

    def rank(key: str) -> int:
        value = record[key]
        return 2 if isinstance(value, dict) else 1 if isinstance(value, list) else 0

    cut: dict[str, Any] = {}
    for key in sorted(record, key=rank):
        budget.spend(_cost(key) + 4)
        cut[key] = _cut(record[key], budget, 1)
    return {key: cut[key] for key in record}, budget.cut


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

    from memcairn.client import START_TIMEOUT, WorkerClient, ensure_worker
    from memcairn.config import load_settings
    from memcairn.lifecycle import current_version

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


# -- the tools --------------------------------------------------------------------------------------
def default_identity(environ: Mapping[str, str] | None = None, cwd: str | None = None) -> ProjectIdentity:
    """The project a tool call without ``project`` works on (see the module docstring)."""
    env = os.environ if environ is None else environ
    root = env.get("CLAUDE_PROJECT_DIR") or env.get("GEMINI_PROJECT_DIR") or cwd or os.getcwd()
    return project_from_cwd(root)


def _next_offset(args: Mapping[str, Any], rows: int) -> int | None:
    """The offset of the next page of a search that returned ``rows`` rows, when that page was full (the index
    does not say whether more match); None otherwise, or when the next page lies past the largest offset.
    The offset and limit are taken as the worker applies them: clamped, the default when absent."""
    from memcairn.search.request import DEFAULT_LIMIT, MAX_LIMIT, MAX_OFFSET, MIN_LIMIT  # late, as in _local_tz

    offset = min(max(0, args.get("offset", 0)), MAX_OFFSET)
    limit = min(max(MIN_LIMIT, args.get("limit", DEFAULT_LIMIT)), MAX_LIMIT)
    return offset + limit if rows >= limit and offset + limit <= MAX_OFFSET else None


def _split(value: str | list[str]) -> list[str]:
    parts = value if isinstance(value, list) else value.split(",")
    return [p.strip() for p in parts if p.strip()]


class MemoryTools:
    """One method per tool: arguments in (already checked), text out; errors raise."""

    def __init__(self, gateway: WorkerGateway | None = None, identity: ProjectIdentity | None = None) -> None:
        self.gateway = gateway or WorkerGateway()
        self.identity = identity or default_identity()

    def _projects(self, value: str | list[str] | None) -> list[str] | None:
        """Projects to filter on: the default chain when none given, None (every project) for ``*``."""
        if value is None or value == [] or (isinstance(value, str) and not value.strip()):
            return list(self.identity.chain)
        names = _split(value)
        if not names:  # only commas and spaces: the default, not every project
            return list(self.identity.chain)
        return None if ALL_PROJECTS in names else names

    def important_workflow(self, args: dict[str, Any]) -> str:
        return WORKFLOW

    def search(self, args: dict[str, Any]) -> str:
        kind = {"observations": "observation,manual", "summaries": "summary", "prompts": "prompt",
                "all": None}.get(args.get("type", "all"))
        projects = self._projects(args.get("project"))
        params = {
            "format": "index", "query": args.get("query"), "limit": args.get("limit"), "offset": args.get("offset"),
            "project": projects, "kind": kind, "obs_type": args.get("obs_type"), "concepts": args.get("concepts"),
            "files": args.get("files"), "dateStart": args.get("date_start"), "dateEnd": args.get("date_end"),
            "orderBy": args.get("order_by"), "platformSource": args.get("platform_source"), "tz": _local_tz(),
            "min_score": args.get("min_score"),
        }
        answer = self.gateway.call(lambda c: c.get_json("/api/search", params))
        text = str(answer.get("text", ""))
        rows = sum((answer.get("counts") or {}).values())
        following = _next_offset(args, rows)
        if following is not None:
            text += f"(a full page: more may match; call search again with offset {following})\n"
        if "project" not in args and not rows and not args.get("offset"):  # past the last page: not the project
            text += (f"(searched project {', '.join(self.identity.chain)}, the current one; "
                     'pass project "*" to search every project)\n')
        return text

    def timeline(self, args: dict[str, Any]) -> str:
        anchor, query = args.get("anchor"), args.get("query")
        if anchor is not None and query is not None:
            raise ToolError("give anchor or query, not both")
        if anchor is None and query is None:
            raise ToolError("give anchor (an id from search, e.g. 12) or query (its best match becomes the anchor)")
        digits = anchor.strip().lstrip("#Ss") if anchor is not None else ""
        anchor_id = _whole(digits) if digits.isdecimal() else None
        if "project" in args:
            projects = self._projects(args["project"])
        elif anchor_id is not None:
            projects = self._anchor_project(anchor_id)
        else:
            projects = list(self.identity.chain)
        params = {"format": "index", "anchor": anchor, "query": query, "before": args.get("before"),
                  "after": args.get("after"), "project": projects, "tz": _local_tz()}
        answer = self.gateway.call(lambda c: c.get_json("/api/timeline", params))
        return str(answer.get("text", ""))

    def _anchor_project(self, item_id: int) -> list[str] | None:
        """The anchor's own project; None (no filter) when it does not exist: the timeline then says so."""
        try:
            item = self.gateway.call(lambda c: c.get_json(f"/api/memory/{item_id}"))
        except NotFoundError:
            return None
        return [item["project"]] if isinstance(item, dict) and item.get("project") else None

    def get_observations(self, args: dict[str, Any]) -> str:
        body = {"ids": args["ids"], "format": "agent", "tz": _local_tz()}
        answer = self.gateway.call(lambda c: c.post_json("/api/observations/batch", body))
        items: list[dict[str, Any]] = []
        truncated: list[Any] = []
        left: list[Any] = []
        size = 0
        for raw in answer.get("items", []):
            if left:  # kept in order: the rest go to the next call
                left.append(raw.get("id"))
                continue
            record, cut = _bounded(_compact(raw))
            cost = len(dumps(record, ensure_ascii=False))
            if items and size + cost > MAX_RECORDS_CHARS:
                left.append(record.get("id"))
                continue
            items.append(record)
            size += cost
            if cut:
                truncated.append(record.get("id"))
        out: dict[str, Any] = {"items": items}
        notes: list[str] = []
        if answer.get("missing"):
            out["missing"] = answer["missing"]
            notes.append("no memory has the missing ids; they may have been deleted")
        if truncated:
            out["truncated"] = truncated
            notes.append(f"the truncated ids were cut where marked (texts past {MAX_FIELD_CHARS:,} characters, lists "
                         f"past {MAX_ENTRIES} entries, a record past {MAX_RECORDS_CHARS:,} characters); the stored "
                         f"memories are whole: `{SHOW_IN_FULL.format(id=truncated[0])}` prints one in full")
        if left:
            out["not_included"] = left
            notes.append(f"the records passed {MAX_RECORDS_CHARS:,} characters; call get_observations again with "
                         "the not_included ids")
        if notes:
            out["note"] = "; ".join(notes)
        return dumps(out, ensure_ascii=False)

    def hooks_heard(self) -> list[str]:
        """The agents whose hooks reached the worker this week (``/api/stats``)."""
        return list(self.gateway.call(lambda c: c.get_json("/api/stats")).get("hooks_heard") or [])

    def session_start_context(self, args: dict[str, Any]) -> str:
        chosen = args.get("project")
        projects = self._projects(chosen)
        params = {"project": projects, "platformSource": args.get("platform_source"),
                  "full": "true" if args.get("full") else None, "tz": _local_tz()}
        # POST: the context reaches the agent, so the capture notices in it count as shown (as at SessionStart)
        text = self.gateway.call(lambda c: c.post_text("/api/context/inject", params))
        return text if text.strip() else NO_CONTEXT

    def save_memory(self, args: dict[str, Any]) -> str:
        if not args.get("text", "").strip():
            raise ToolError("text is required: the memory to save, as self-contained text")
        project = args.get("project", "").strip() or self.identity.name  # stored without the spaces
        if project == ALL_PROJECTS:
            raise ToolError('a memory belongs to one project; give its name instead of "*"')
        if "," in args.get("project", ""):  # search would read it as several projects and never find the memory
            raise ToolError(f"a memory belongs to one project; give one name, not a list ({project!r})")
        body = {"text": args["text"], "title": args.get("title"), "type": args.get("type"), "project": project}
        answer = self.gateway.call(lambda c: c.post_json("/api/memory/save", {k: v for k, v in body.items()
                                                                                if v is not None}))
        if answer.get("created"):
            return f"Saved as #{answer['id']} in project {project}."
        return f"Already saved as #{answer['id']} in project {project}; nothing changed."

    def forget(self, args: dict[str, Any]) -> str:
        deleted: list[int] = []
        missing: list[int] = []
        for item_id in args["ids"]:
            try:
                self.gateway.call(lambda c, i=item_id: c.delete(f"/api/memory/{i}"))
                deleted.append(item_id)
            except NotFoundError:
                missing.append(item_id)
        parts = []
        if deleted:
            parts.append("Deleted " + ", ".join(f"#{i}" for i in deleted) + ".")
        if missing:
            parts.append("No memory with id " + ", ".join(f"#{i}" for i in missing) + " (nothing to delete).")
        return " ".join(parts)

    def run(self, name: str, arguments: Mapping[str, Any] | None) -> str:
        """Check the arguments and run one tool (blocking). Raises ``ToolError`` or a ``MemcairnError``."""
        spec = TOOLS_BY_NAME.get(name)
        if spec is None:
            raise ToolError(f"no tool named {name!r}; the tools are: {', '.join(TOOLS_BY_NAME)}")
        args = _check_arguments(spec, arguments)
        return getattr(self, name)(args)


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
class StartupInstructions:
    """``WORKFLOW`` followed by the SessionStart context of the current project, for agents that get the context
    through the server's instructions (``STARTUP_PLATFORMS``).

    The fetch (which starts the worker if needed) begins when this is made, at the server's start, and the
    first handshake waits for it until ``timeout`` seconds after that start; when the context cannot be had in
    time, the instructions ask the agent to call ``session_start_context`` instead. The first text given is
    kept, so a client that probes and then hands shakes reads the same instructions twice. Never raises: a
    server that cannot read memory still starts.
    """

    def __init__(self, tools: MemoryTools, timeout: float = STARTUP_CONTEXT_SECONDS, platform: str = "codex") -> None:
        self._deadline = time.monotonic() + timeout
        self._found: dict[str, str] = {}
        self._text: str | None = None
        self._lock = threading.Lock()
        self._note_given = False

        def fetch() -> None:
            try:
                heard = tools.hooks_heard()
            except Exception as exc:  # an older worker, or none: as if the hooks had not run
                log.info("cannot tell whether the agent's hooks ran: %s", exc)
                heard = []
            if platform in heard:  # the SessionStart hook gives the context: once is enough
                self._found["hooked"] = "yes"
                return
            self._found["silent"] = "yes"
            try:
                self._found["text"] = tools.session_start_context({})
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


def startup_instructions(tools: MemoryTools, timeout: float = STARTUP_CONTEXT_SECONDS) -> str:
    """The start-up instructions (see ``StartupInstructions``), fetched now within ``timeout`` seconds."""
    return StartupInstructions(tools, timeout)()


def tool_entries() -> list[dict[str, Any]]:
    """``TOOLS`` as ``tools/list`` entries."""
    entries = []
    for spec in TOOLS:
        annotations: dict[str, Any] = {"readOnlyHint": spec.read_only}
        if not spec.read_only:
            annotations |= {"destructiveHint": spec.destructive, "idempotentHint": spec.idempotent}
        entries.append({"name": spec.name, "description": spec.description, "inputSchema": spec.input_schema,
                        "annotations": annotations})
    return entries


def build_server(tools: MemoryTools | None = None, instructions: str | Callable[[], str] = WORKFLOW,
                 first_note: Callable[[], str] | None = None) -> McpServer:
    """The MCP server of ``tools`` (made on the first tool call when None: nothing of the worker is touched
    before), announcing ``instructions`` (text, or a function asked at each handshake); ``first_note``'s text,
    when it has one, follows a tool's answer."""
    holder: dict[str, MemoryTools] = {}
    lock = threading.Lock()

    def current() -> MemoryTools:
        with lock:
            if "tools" not in holder:
                holder["tools"] = tools or MemoryTools()
            return holder["tools"]

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
    tools: MemoryTools | None = None
    instructions: str | Callable[[], str] = WORKFLOW
    first_note = None
    if platform in STARTUP_PLATFORMS:
        tools = MemoryTools()
        instructions = StartupInstructions(tools, platform=platform)
        first_note = instructions.first_call_note
    try:
        serve_lines(build_server(tools, instructions, first_note), sys.stdin.buffer, sys.stdout.buffer)
    except (KeyboardInterrupt, BrokenPipeError, ConnectionError):
        pass  # told to stop, or the client went away: nothing is left to answer
    return 0
