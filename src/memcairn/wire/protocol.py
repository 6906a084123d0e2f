"""What the hooks and the worker agree on over loopback HTTP: one home for both sides (standard library only).

The hooks (``hooks/``, a new process for every agent event) and the worker (``worker/app.py``) are separate
programs that must spell the same names: routes, header and field names, event kinds, platform names and
their aliases, body limits, the prefixes of memcairn's own tools. Each is defined here once; both sides, the
capture pipeline and the transcript importer import it. Nothing here imports anything (``encode_json``, the
bodies' encoding, is in ``fastjson``).
"""

from __future__ import annotations

# -- agents -------------------------------------------------------------------------------------------------
PLATFORMS = ("claude-code", "codex", "gemini-cli")
# Other spellings of a platform, as a key of lower-case letters and digits (see ``canonical_platform``).
PLATFORM_ALIASES = {"claude": "claude-code", "claudecode": "claude-code", "gemini": "gemini-cli",
                    "geminicli": "gemini-cli", "codex": "codex", "codexcli": "codex"}


def platform_key(name: str) -> str:
    """The lookup key of a platform name: its letters and digits, lower-cased."""
    return "".join(c for c in name.lower() if c.isalnum())


# -- routes -------------------------------------------------------------------------------------------------
READINESS_PATH = "/api/readiness"
CONTEXT_PATH = "/api/context/inject"
SEARCH_PATH = "/api/search"
INIT_PATH = "/api/sessions/init"  # session starts and prompts
OBSERVATIONS_PATH = "/api/sessions/observations"  # tool calls
SUMMARIZE_PATH = "/api/sessions/summarize"  # turn ends and session ends
# The queue's event type each ingest route records (``ingest_events.event_type``).
ROUTE_EVENT_TYPES = {INIT_PATH: "session_init", OBSERVATIONS_PATH: "observation", SUMMARIZE_PATH: "summarize"}

# -- event kinds (a body's ``event`` field) -------------------------------------------------------------
SESSION_START = "session_start"
USER_PROMPT = "user_prompt"
TOOL_USE = "tool_use"
STOP = "stop"
SESSION_END = "session_end"
COMPACTION = "compaction"  # a transcript's compaction summary (imports only)
# The kind of a body without ``event`` (a claude-mem style client), by the queue event type of its route.
ROUTE_KINDS = {"session_init": USER_PROMPT, "observation": TOOL_USE, "summarize": STOP}
# The route each kind is sent to.
KIND_PATHS = {SESSION_START: INIT_PATH, USER_PROMPT: INIT_PATH, TOOL_USE: OBSERVATIONS_PATH, STOP: SUMMARIZE_PATH,
              SESSION_END: SUMMARIZE_PATH, COMPACTION: SUMMARIZE_PATH}

# -- fields -------------------------------------------------------------------------------------------------
# Every hook body's stamp of when its hook started, epoch ms (read by capture.pipeline and
# Store.last_prompt_event: an async tool event that arrives after the next prompt keeps its turn).
HOOK_STARTED_FIELD = "hook_started_at"
# Every live hook event's own key (random, 32 hex digits): the worker queues an event once however often it
# arrives (sent, answered too late, then spooled; see ``memcairn.wire.spool``).
EVENT_KEY_FIELD = "event_key"
# What names and routes an event rather than telling what happened: kept as sent when an event is cleaned of
# secrets before it rests in the spool (a 32-hex event key looks like a token, and the spooled copy must keep it).
ENVELOPE_FIELDS = ("event", "session_id", "tool_use_id", "tool_name", "event_key", "hook_started_at",
                   "context_delivered", "platform_source", "project", "projects", "cwd", "transcript_path",
                   "hook_event_name", "prompt_id", "agent_id", "agent_type", "model", "turn_id", "permission_mode",
                   "prompt_number")
# The SessionStart event's field saying whether its context reached the agent (read by Store.earlier_session_start).
DELIVERED_FIELD = "context_delivered"
# The answer statuses of an ingest route (202).
INGEST_STATUSES = ("accepted", "skipped")

# -- headers and texts --------------------------------------------------------------------------------------
# How /api/context/inject got its text: ``memo``, ``rendered``, ``resumed`` or ``excluded``. Every answer of
# the route carries it, so a hook tells the worker's answer from another program's on the port.
CONTEXT_HEADER = "X-Memcairn-Context"
# The home a hook serves (percent-encoded UTF-8): a worker of another home on the same port answers 409
# ``wrong_home`` instead of taking the event into its store or answering with its digest. ``/api/health`` is
# exempt: it is how a caller learns whose worker answers.
HOME_HEADER = "X-Memcairn-Home"
WRONG_HOME = "wrong_home"
# A line of the context that the person must see too (a model that failed, a token cap reached).
NOTICE_PREFIX = "memcairn notice: "

# -- limits -------------------------------------------------------------------------------------------------
MAX_BODY_BYTES = 1024 * 1024  # the worker refuses larger bodies (413)
# What the hooks and the transcript importer fit a body into: under the worker's limit with room to spare.
HOOK_BODY_BYTES = 900_000

# -- finding the worker (files under MEMCAIRN_HOME; see memcairn.wire.lifecycle) -----------------------------------
LOCK_FILE = "worker.lock"  # a running worker holds an exclusive flock on it, starting and stopping included
START_LOCK_FILE = "worker.start.lock"  # held while `memcairn worker start` (or a restart) brings one up
PID_FILE = "worker.pid"
# Written by whoever spawns a worker (a SessionStart hook): the pid of the process that will take the lock. A
# hook refused in the second it takes the worker to start knows it is coming (no "memory is off").
SPAWNED_FILE = "worker.spawned"
SPAWN_GRACE_SECONDS = 15

# -- memcairn's own tools -----------------------------------------------------------------------------------
MCP_SERVER_NAME = "memcairn"  # the key the installers give memcairn's MCP server
# How each agent names memcairn's MCP tools: Claude Code (``mcp__memcairn__search``, as a plugin
# ``mcp__plugin_memcairn_memcairn__search``), Codex (its namespace ``mcp__memcairn``), Gemini CLI
# (``mcp_memcairn_search``; releases before that prefix: ``memcairn__search``). Compared case-insensitively.
OWN_TOOL_PREFIXES = ("mcp__memcairn__", "mcp__plugin_memcairn_", "mcp_memcairn_", "memcairn__")


# The agents' own machinery, not the person's work: Claude Code's deferred-tool search, its wait for MCP servers,
# its MCP resource listing and to-do list; Codex's plan tool; Gemini CLI's to-do list. The default of the
# ``housekeeping_tools`` setting (``capture.admission`` never observes them).
HOUSEKEEPING_TOOLS = ("ToolSearch", "WaitForMcpServers", "ListMcpResourcesTool", "TodoWrite", "TodoRead",
                      "update_plan", "write_todos")


def own_tool(name: str) -> bool:
    """Whether ``name`` is one of memcairn's own MCP tools (never recorded: memory must not remember itself)."""
    return name.lower().startswith(OWN_TOOL_PREFIXES)

