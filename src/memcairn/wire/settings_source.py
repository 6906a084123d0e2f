"""Where settings come from: the table of settings and the reading of the environment and ``settings.json``.

Precedence, highest first: a ``MEMCAIRN_<NAME>`` environment variable, the settings file
``$MEMCAIRN_HOME/settings.json``, the default below. ``MEMCAIRN_HOME`` itself only comes from the
environment (default ``~/.memcairn``).

Hooks read their settings here: a hook is a new process for every agent event, so this module imports
nothing beyond ``json`` and ``os`` (no ``dataclasses``, ``pathlib`` or ``typing``, which together cost a
hook ~14 ms). ``memcairn.wire.config.Settings`` is the typed view the rest of the code uses, built from
``read_values``.
"""

from __future__ import annotations

import os

from memcairn.core.errors import ConfigError
from memcairn.wire.fastjson import loads
from memcairn.wire.protocol import HOUSEKEEPING_TOOLS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Any

DEFAULT_PORT = 37877


class Setting(tuple):
    """One setting: ``name``, ``default`` and ``help`` (an immutable triple)."""

    __slots__ = ()

    def __new__(cls, name: str, default: Any, help: str) -> Setting:
        return tuple.__new__(cls, (name, default, help))

    @property
    def name(self) -> str:
        return self[0]

    @property
    def default(self) -> Any:
        return self[1]

    @property
    def help(self) -> str:
        return self[2]

    def __repr__(self) -> str:
        return f"Setting(name={self[0]!r}, default={self[1]!r}, help={self[2]!r})"


SETTINGS: tuple[Setting, ...] = (
    Setting("host", "127.0.0.1", "Address the worker binds to. Anything but loopback requires a token."),
    Setting("port", DEFAULT_PORT, "Loopback port of the worker."),
    Setting("token", "", "Bearer token; required when the worker binds to a non-loopback address."),
    Setting("vector_backend", "sqlite-vec", "Semantic mirror backend: sqlite-vec | chroma | none."),
    Setting("chroma_url", "", "URL of a Chroma server (e.g. http://127.0.0.1:8000); empty = embedded."),
    Setting("embedding_model", "all-MiniLM-L6-v2-int8", "Embedding model id (the bundled one by default)."),
    Setting("worker_embedding_threads", 1,
            "Threads per call of the worker's embedding model; 0 = every core. One embeds a query fastest and leaves "
            "the other cores to concurrent requests; more speeds up a large mirror backfill in the worker."),
    Setting("worker_keyword_index", True,
            "The worker keeps the keyword index's postings in memory (about 700 bytes an item, built in seconds at "
            "start; stores up to 500,000 items) and ranks keyword searches from them: the same results, several "
            "times faster. Off = SQLite."),
    Setting("recency_window_days", 0,
            "Semantic hits older than this many days are dropped unless a date range is given; 0 = off."),
    Setting("context_observations", 50, "Observations shown in the SessionStart context."),
    Setting("context_summaries", 10, "Sessions (their summaries) shown in the SessionStart context."),
    Setting("context_token_budget", 2000, "Hard cap on the SessionStart context, in tokens (chars/4)."),
    Setting("context_types", "", "Observation types shown in the SessionStart context, comma-separated; empty = all."),
    Setting("terminal_output", False, "Hooks also show the person a coloured SessionStart digest and the viewer URL."),
    Setting("prompt_context", False, "On each prompt, add the few memories most relevant to it (~300 tokens)."),
    Setting("worker_autostart", True, "SessionStart starts a worker when none answers (waiting 1 s at most)."),
    Setting("log_max_bytes", 5_000_000, "Size at which a worker log file rotates."),
    Setting("log_backups", 3, "How many rotated log files are kept."),
    Setting("capture_backend", "offline",
            "What turns tool use into observations: offline | anthropic | claude-cli | openai."),
    Setting("llm_model", "", "Model for the LLM backend; empty = the backend's small fast default."),
    Setting("llm_base_url", "",
            "Base URL of the LLM API (Anthropic default https://api.anthropic.com; required for openai): a host "
            "(http://localhost:11434), its /v1, or the full endpoint URL."),
    Setting("llm_api_key_env", "",
            "Environment variable holding the API key; empty = ANTHROPIC_API_KEY or OPENAI_API_KEY."),
    Setting("claude_cli", "claude", "The claude executable used by the claude-cli backend."),
    Setting("llm_timeout_seconds", 60, "Timeout of one model call."),
    Setting("llm_session_token_cap", 200_000, "Model tokens one session may spend; then the offline extractor."),
    Setting("llm_daily_token_cap", 2_000_000, "Model tokens all sessions may spend per day; then offline."),
    Setting("capture_max_tool_chars", 4000, "Tool inputs and outputs are cut to this many characters (head and tail)."),
    Setting("capture_evidence", True,
            "Keep each step (the agent's words, a call and its output's head and tail) as evidence a search quotes "
            "the matching lines of."),
    Setting("search_evidence_snippets", 3, "Evidence snippets a search adds beside its hits (0 = none)."),
    Setting("capture_batch_wait_seconds", 2,
            "Tool events of a turn wait this long for more before being compressed together (0 = at once)."),
    Setting("exclude_projects", "", "Projects not captured nor given context: comma-separated globs."),
    Setting("skip_tools", "", "Tools never observed, beyond housekeeping_tools: comma-separated names."),
    Setting("housekeeping_tools", ",".join(HOUSEKEEPING_TOOLS),
            "The agents' own machinery, never observed (like skip_tools, and memcairn's own MCP tools); "
            "empty to observe them."),
    Setting("ingest_retention_days", 7, "Processed hook events are pruned after this many days."),
    Setting("integrity_check_seconds", 1800,
            "The worker checks the database file and the keyword index (repairing the index) this often, once "
            "no write came for a minute; damage SQLite reports is checked at once."),
    Setting("remote_timeout_ms", 400,
            "Connected to a team server (`memcairn connect`): how long context and search wait for its answer "
            "before the worker answers from the local copy instead."),
)

BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
SETTINGS_FILE = "settings.json"


def project_excluded(names: Iterable[str], exclude_projects: str) -> bool:
    """Whether any of ``names`` matches a glob of the ``exclude_projects`` setting (comma-separated): such a
    project is neither captured nor given memories. Standard library only, for the hooks and the worker alike."""
    patterns = [part.strip() for part in exclude_projects.split(",") if part.strip()]
    if not patterns:
        return False
    from fnmatch import fnmatchcase

    return any(fnmatchcase(name, pattern) for name in names for pattern in patterns)


def tidy_path(path: str) -> str:
    """``path`` spelled as ``str(pathlib.PurePosixPath(path))`` would spell it (repeated slashes and ``.``
    parts dropped, no trailing slash, ``..`` kept), so paths read here compare equal to ``Settings.home``."""
    if os.sep != "/":
        return os.path.normpath(path)
    if not path:
        return "."
    lead = "//" if path.startswith("//") and not path.startswith("///") else ("/" if path.startswith("/") else "")
    return lead + "/".join(p for p in path.split("/") if p and p != ".") or "."


def _env_home(raw: str) -> str:
    """``raw`` (a ``MEMCAIRN_HOME``) with ``~`` expanded and, when relative, put under the current directory:
    hooks run in each project's directory, and a relative home would give every project a store of its own."""
    path = os.path.expanduser(raw)
    if not os.path.isabs(path):
        try:
            path = os.path.join(os.getcwd(), path)
        except OSError:  # the current directory was removed: keep the path as given
            pass
    return tidy_path(path)


def memcairn_home(environ: Mapping[str, str] | None = None) -> str:
    """``$MEMCAIRN_HOME`` (``~`` expanded, made absolute), else ``~/.memcairn``, as a string."""
    raw = (os.environ if environ is None else environ).get("MEMCAIRN_HOME")
    return _env_home(raw) if raw else tidy_path(os.path.join(os.path.expanduser("~"), ".memcairn"))


LIST_SETTINGS = frozenset({"context_types", "exclude_projects", "skip_tools", "housekeeping_tools"})
"""Comma-separated settings, which ``settings.json`` may also give as a JSON list of strings."""
INT_RANGES: dict[str, tuple[int, int | None]] = {"port": (1, 65535), "context_token_budget": (1, None),
                                                 "llm_timeout_seconds": (1, None), "log_max_bytes": (1024, None)}
"""Bounds (lowest, highest or None) of whole-number settings; any other must be 0 or more."""


def coerce(name: str, value: Any, default: Any, origin: str) -> Any:
    """``value`` converted to the type of ``default``; ``origin`` (where it came from) goes into the error."""
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in {"1", "true", "yes", "on"}:
            return True
        if text in {"0", "false", "no", "off"}:
            return False
        raise ConfigError(f"{origin}: {name} must be true or false, got {value!r}")
    if isinstance(default, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        try:
            if isinstance(value, (bool, float)):
                raise TypeError
            number = int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{origin}: {name} must be a whole number, got {value!r}") from None
        low, high = INT_RANGES.get(name, (0, None))
        if high is not None and not low <= number <= high:
            raise ConfigError(f"{origin}: {name} must be between {low} and {high}, got {number}")
        if number < low:
            raise ConfigError(f"{origin}: {name} must be {low} or more, got {number}")
        return number
    if name in LIST_SETTINGS and isinstance(value, list):
        if not all(isinstance(part, str) for part in value):
            raise ConfigError(f"{origin}: {name} must be a string or a list of strings, got {value!r}")
        return ",".join(value)
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ConfigError(f"{origin}: {name} must be a string, got {value!r}")
    return str(value)


def read_values(home: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None,
                origins: dict[str, str] | None = None) -> dict[str, Any]:
    """Every setting's value by name, plus ``home`` (a string), from the environment, the file and the defaults.

    ``home`` overrides ``MEMCAIRN_HOME``; ``environ`` replaces ``os.environ`` for the ``MEMCAIRN_<NAME>``
    variables (and for ``MEMCAIRN_HOME`` when it holds one). ``origins``, when given, receives where each
    value came from: ``default``, the settings file's path or the variable's name.

    Raises:
        ConfigError: a value has the wrong type or the settings file is not a JSON object.
    """
    env = os.environ if environ is None else environ
    if home:
        base = tidy_path(os.fspath(home))
    elif env.get("MEMCAIRN_HOME"):
        base = _env_home(env["MEMCAIRN_HOME"])
    else:
        base = memcairn_home()
    values: dict[str, Any] = {s.name: s.default for s in SETTINGS}
    origin = origins if origins is not None else {}
    origin.update({s.name: "default" for s in SETTINGS})
    settings_file = os.path.join(base, SETTINGS_FILE)
    if os.path.exists(settings_file):
        try:
            with open(settings_file, encoding="utf-8") as fh:
                data = loads(fh.read())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read {settings_file}: {exc}; fix or delete the file") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{settings_file} must hold a JSON object of settings")
        for key, value in data.items():
            if key not in BY_NAME:
                raise ConfigError(f"{settings_file}: unknown setting {key!r}; known: {', '.join(sorted(BY_NAME))}")
            values[key] = coerce(key, value, BY_NAME[key].default, settings_file)
            origin[key] = settings_file
    for setting in SETTINGS:
        variable = f"MEMCAIRN_{setting.name.upper()}"
        raw = env.get(variable)
        if raw is not None and raw != "":
            values[setting.name] = coerce(setting.name, raw, setting.default, variable)
            origin[setting.name] = variable
    values["home"] = base
    origin["home"] = "MEMCAIRN_HOME" if not home and env.get("MEMCAIRN_HOME") else ("argument" if home else "default")
    return values
