"""Settings: one frozen dataclass, the typed view of the settings the rest of memcairn reads.

The table of settings (name, default, help) and the reading of the environment and ``settings.json``
live in ``memcairn.wire.settings_source``, which hooks import directly: it costs them no ``dataclasses``,
``pathlib`` or ``typing``. Precedence, highest first: a ``MEMCAIRN_<NAME>`` environment variable, the
settings file ``$MEMCAIRN_HOME/settings.json``, the default. ``MEMCAIRN_HOME`` itself only comes from the
environment (default ``~/.memcairn``).

This module imports only the standard library.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from memcairn.core.errors import ConfigError
from memcairn.wire.protocol import HOUSEKEEPING_TOOLS
from memcairn.wire.settings_source import DEFAULT_PORT, SETTINGS, Setting, read_values
from memcairn.wire.settings_source import memcairn_home as _home_str

__all__ = ["DEFAULT_PORT", "SETTINGS", "Setting", "Settings", "check_bind", "is_loopback_host", "load_settings",
           "memcairn_home", "private_home", "settings_from_values"]


def memcairn_home() -> Path:
    return Path(_home_str())


@dataclass(frozen=True)
class Settings:
    home: Path
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    token: str = ""
    vector_backend: str = "sqlite-vec"
    chroma_url: str = ""
    embedding_model: str = "all-MiniLM-L6-v2-int8"
    worker_embedding_threads: int = 1
    worker_keyword_index: bool = True
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
    capture_evidence: bool = True
    search_evidence_snippets: int = 3
    capture_batch_wait_seconds: int = 2
    exclude_projects: str = ""
    skip_tools: str = ""
    housekeeping_tools: str = ",".join(HOUSEKEEPING_TOOLS)
    ingest_retention_days: int = 7
    integrity_check_seconds: int = 1800
    remote_timeout_ms: int = 400

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


PRIVATE_UMASK = 0o077  # files created 0600, folders 0700


def private_home(home: Path, *, create: bool) -> None:
    """Keep ``home`` to its owner: this process's umask becomes 077, so every file it creates from now on (the
    database with its -wal and -shm, logs, the pid file, settings) is 0600 whichever code creates it (SQLite and
    ``logging`` take no mode); the home is made 0700 (with ``create``), and an existing one of ours that others
    may enter (0755, as earlier releases made it) is tightened to 0700. Called by the processes that own the
    home (the worker, the command line), not by a library: the umask is the whole process's."""
    os.umask(PRIVATE_UMASK)
    if create:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        st = home.stat()
        if st.st_uid == os.geteuid() and st.st_mode & 0o077 and not _others_inside(home):
            os.chmod(home, st.st_mode & 0o700)
    except OSError:
        pass  # no home yet (made 0700 under the umask when it is), or not ours to change


def _others_inside(home: Path) -> bool:
    """Another user owns a folder of the home: the team server's embedded PostgreSQL (``postgres/``, run as an
    unprivileged user when memcairn runs as root) would be locked out of its cluster by a 0700 home."""
    uid = os.geteuid()
    with os.scandir(home) as entries:
        return any(e.is_dir(follow_symlinks=False) and e.stat(follow_symlinks=False).st_uid != uid for e in entries)


def settings_from_values(values: Mapping[str, Any]) -> Settings:
    """``Settings`` from what ``read_values`` returns (``home`` a string or a path)."""
    rest = {k: v for k, v in values.items() if k != "home"}
    return Settings(home=Path(values["home"]), **rest)


def load_settings(home: Path | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Read settings from the environment and ``settings.json``.

    Raises:
        ConfigError: a value has the wrong type or the settings file is not a JSON object.
    """
    values = read_values(home, environ)
    if home:
        values["home"] = home  # kept as given, as a Path
    return settings_from_values(values)


# -- where the worker may listen ---------------------------------------------------------------------
def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (``127.0.0.0/8``, ``::1``)."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_bind(cfg: Settings) -> None:
    """Refuse a port outside 1-65535 (the socket layer would silently wrap or randomise it) and a non-loopback
    bind without a token (a blank token counts as none: no request could ever present it).

    Raises:
        ConfigError: the port is out of range, or ``host`` is not loopback and no token is configured.
    """
    if not isinstance(cfg.port, int) or not 0 < cfg.port < 65536:
        raise ConfigError(f"the worker port must be between 1 and 65535, got {cfg.port!r}; set MEMCAIRN_PORT to a free "
                          "port")
    if not is_loopback_host(cfg.host) and not (cfg.token or "").strip():
        raise ConfigError(
            f"refusing to bind the worker to {cfg.host}: any machine that can reach it could read and write "
            "your memory. Set MEMCAIRN_TOKEN (or \"token\" in settings.json) to a long random secret, or bind "
            "to 127.0.0.1"
        )
