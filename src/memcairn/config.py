"""Settings: one frozen dataclass, each setting's name, default and help kept together.

Precedence, highest first: a ``MEMCAIRN_<NAME>`` environment variable, the settings file
``$MEMCAIRN_HOME/settings.json``, the default below. ``MEMCAIRN_HOME`` itself only comes from the
environment (default ``~/.memcairn``).

This module imports only the standard library: the hook path reads settings too.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from memcairn.errors import ConfigError

DEFAULT_PORT = 37877


@dataclass(frozen=True)
class Setting:
    name: str
    default: Any
    help: str


SETTINGS: tuple[Setting, ...] = (
    Setting("host", "127.0.0.1", "Address the worker binds to. Anything but loopback requires a token."),
    Setting("port", DEFAULT_PORT, "Loopback port of the worker."),
    Setting("token", "", "Bearer token; required when the worker binds to a non-loopback address."),
    Setting("vector_backend", "sqlite-vec", "Semantic mirror backend: sqlite-vec | chroma | none."),
    Setting("chroma_url", "", "URL of a Chroma server (e.g. http://127.0.0.1:8000); empty = embedded."),
    Setting("embedding_model", "all-MiniLM-L6-v2-int8", "Embedding model id (the bundled one by default)."),
    Setting("recency_window_days", 0,
            "Semantic hits older than this many days are dropped unless a date range is given; 0 = off."),
    Setting("context_observations", 50, "Observations shown in the SessionStart context."),
    Setting("context_summaries", 10, "Summaries shown in the SessionStart context."),
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
            "Base URL of the LLM API (Anthropic default https://api.anthropic.com; required for openai)."),
    Setting("llm_api_key_env", "",
            "Environment variable holding the API key; empty = ANTHROPIC_API_KEY or OPENAI_API_KEY."),
    Setting("claude_cli", "claude", "The claude executable used by the claude-cli backend."),
    Setting("llm_timeout_seconds", 60, "Timeout of one model call."),
    Setting("llm_session_token_cap", 200_000, "Model tokens one session may spend; then the offline extractor."),
    Setting("llm_daily_token_cap", 2_000_000, "Model tokens all sessions may spend per day; then offline."),
    Setting("capture_max_tool_chars", 4000, "Tool inputs and outputs are cut to this many characters (head and tail)."),
    Setting("capture_batch_wait_seconds", 2,
            "Tool events of a turn wait this long for more before being compressed together (0 = at once)."),
    Setting("exclude_projects", "", "Projects not captured nor given context: comma-separated globs."),
    Setting("skip_tools", "", "Tools never observed: comma-separated names."),
    Setting("ingest_retention_days", 7, "Processed hook events are pruned after this many days."),
)

_BY_NAME = {s.name: s for s in SETTINGS}


def memcairn_home() -> Path:
    raw = os.environ.get("MEMCAIRN_HOME")
    return Path(raw).expanduser() if raw else Path.home() / ".memcairn"


@dataclass(frozen=True)
class Settings:
    home: Path
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    token: str = ""
    vector_backend: str = "sqlite-vec"
    chroma_url: str = ""
    embedding_model: str = "all-MiniLM-L6-v2-int8"
    recency_window_days: int = 0
    context_observations: int = 50
    context_summaries: int = 10
    context_token_budget: int = 2000
    context_types: str = ""
    terminal_output: bool = False
    prompt_context: bool = False
    worker_autostart: bool = True
    log_max_bytes: int = 5_000_000
    log_backups: int = 3
    capture_backend: str = "offline"
    llm_model: str = ""
    llm_base_url: str = ""
    llm_api_key_env: str = ""
    claude_cli: str = "claude"
    llm_timeout_seconds: int = 60
    llm_session_token_cap: int = 200_000
    llm_daily_token_cap: int = 2_000_000
    capture_max_tool_chars: int = 4000
    capture_batch_wait_seconds: int = 2
    exclude_projects: str = ""
    skip_tools: str = ""
    ingest_retention_days: int = 7

    @property
    def db_path(self) -> Path:
        return self.home / "memcairn.db"

    @property
    def logs_dir(self) -> Path:
        return self.home / "logs"

    @property
    def settings_file(self) -> Path:
        return self.home / "settings.json"

    def as_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["home"] = str(self.home)
        return out


def _coerce(name: str, value: Any, default: Any, origin: str) -> Any:
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
        try:
            return int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{origin}: {name} must be a whole number, got {value!r}") from None
    return str(value)


def load_settings(home: Path | None = None, environ: dict[str, str] | None = None) -> Settings:
    """Read settings from the environment and ``settings.json``.

    Raises:
        ConfigError: a value has the wrong type or the settings file is not a JSON object.
    """
    env = os.environ if environ is None else environ
    base = home or (Path(env["MEMCAIRN_HOME"]).expanduser() if env.get("MEMCAIRN_HOME") else memcairn_home())
    values: dict[str, Any] = {}
    settings_file = base / "settings.json"
    if settings_file.exists():
        try:
            data = json.loads(settings_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read {settings_file}: {exc}; fix or delete the file") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{settings_file} must hold a JSON object of settings")
        for key, value in data.items():
            if key not in _BY_NAME:
                raise ConfigError(
                    f"{settings_file}: unknown setting {key!r}; known: {', '.join(sorted(_BY_NAME))}"
                )
            values[key] = _coerce(key, value, _BY_NAME[key].default, str(settings_file))
    for setting in SETTINGS:
        raw = env.get(f"MEMCAIRN_{setting.name.upper()}")
        if raw is not None and raw != "":
            values[setting.name] = _coerce(setting.name, raw, setting.default, f"MEMCAIRN_{setting.name.upper()}")
    return Settings(home=base, **values)
