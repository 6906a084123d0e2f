"""A developer's link to a team server (``memcairn connect``): where it is, the key, and a small /v1 client.

``$MEMCAIRN_HOME/remote.json`` (0600, written whole then renamed) holds ``{"url", "key", "project_map"}``; its
presence is remote mode. The worker reads it on every forwarding pass, so ``connect`` and ``disconnect`` take
effect in a running worker within a second, without a restart. ``remote-status.json`` is what the worker's
forwarder last did (for ``memcairn settings`` and ``doctor``, which need no worker to read it).

Standard library only: the doors use it to check a server before saving it.
"""

from __future__ import annotations

import ipaddress
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memcairn.core.errors import ConfigError

REMOTE_FILE = "remote.json"
STATUS_FILE = "remote-status.json"
TEAM_ID_PREFIX = "team#"  # a team server's memory as remote mode shows it: ``team#12`` (local ones are ``#12``)
MAX_TEAM_ID = 2**63 - 1  # the server's bigint ids


def team_id(value: object) -> int | None:
    """The server's id of ``"team#12"`` (any case, spaces around), None for anything else (a local id included)."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    if text[:len(TEAM_ID_PREFIX)].lower() != TEAM_ID_PREFIX:
        return None
    digits = text[len(TEAM_ID_PREFIX):]
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 19 or not 0 < int(digits) <= MAX_TEAM_ID:
        return None
    return int(digits)


def team_ref(item_id: int) -> str:
    return f"{TEAM_ID_PREFIX}{item_id}"


@dataclass(frozen=True)
class RemoteConfig:
    url: str
    key: str
    project_map: dict[str, str] = field(default_factory=dict)
    insecure: bool = False  # plain http:// to a host other than this machine, allowed by `connect --insecure`

    def server_project(self, local: str) -> str:
        """The server's name of a local project (the same name unless mapped)."""
        return self.project_map.get(local, local)

    def local_project(self, server: str) -> str:
        for local, remote in self.project_map.items():
            if remote == server:
                return local
        return server


def mask_key(key: str) -> str:
    """A key as it may be shown: its public prefix (``mck_<id>``) and nothing of the secret part."""
    head = key.rsplit("_", 1)[0] if key.count("_") >= 2 else key[:4]
    return f"{head}_… (not shown)"


def normalise_url(url: str, *, insecure: bool = False) -> str:
    """``url`` without query, fragment or trailing slash.

    Raises:
        ConfigError: not http(s)://host, or plain http:// to another machine without ``insecure``."""
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"the team server URL must be http(s)://host:port, got {url!r}")
    check_transport(url, insecure=insecure)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host.lower() == "localhost" or host.lower().endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_transport(url: str, *, insecure: bool) -> None:
    """Refuse plain http:// to a host other than this machine (the key and every memory would cross the network
    readable) unless ``insecure`` says so.

    Raises:
        ConfigError: saying what to do."""
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme == "http" and not insecure and not is_loopback(parts.hostname):
        raise ConfigError(f"{url} is plain HTTP to another machine: the key and every memory would cross the network "
                          "unencrypted. Use https:// (`memcairn server --tls-cert FILE --tls-key FILE`, or a proxy "
                          "that terminates TLS), or connect again with --insecure on a network you trust")


def _write_private(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(data, ensure_ascii=False, indent=2) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(staging, path)
    except BaseException:  # a full disk: no staging file left behind
        staging.unlink(missing_ok=True)
        raise


def load_remote(home: Path) -> RemoteConfig | None:
    """The saved link, or None in local mode.

    Raises:
        ConfigError: the file exists but is not a link (fix it or run ``memcairn disconnect``).
    """
    path = home / REMOTE_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}; run `memcairn disconnect` and connect again") from None
    if not isinstance(data, dict) or not isinstance(data.get("url"), str) or not isinstance(data.get("key"), str):
        raise ConfigError(f"{path} must hold {{\"url\", \"key\"}}; run `memcairn disconnect` and connect again")
    mapping = data.get("project_map") or {}
    if not isinstance(mapping, dict):
        raise ConfigError(f"{path}: project_map must be an object of local name -> server name")
    insecure = data.get("insecure") is True
    check_transport(data["url"], insecure=insecure)  # a link written by hand, or before the check existed
    return RemoteConfig(data["url"], data["key"], {str(k): str(v) for k, v in mapping.items()}, insecure)


def save_remote(home: Path, cfg: RemoteConfig) -> Path:
    path = home / REMOTE_FILE
    _write_private(path, {"url": cfg.url, "key": cfg.key, "project_map": cfg.project_map,
                          **({"insecure": True} if cfg.insecure else {})})
    return path


def clear_remote(home: Path) -> bool:
    """Back to local mode; True when there was a link."""
    removed = False
    for name in (REMOTE_FILE, STATUS_FILE):
        try:
            (home / name).unlink()
            removed = True if name == REMOTE_FILE else removed
        except FileNotFoundError:
            pass
    return removed


def write_status(home: Path, status: dict[str, Any]) -> None:
    _write_private(home / STATUS_FILE, status)


def read_status(home: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((home / STATUS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class TeamUnavailable(Exception):
    """No answer from the team server (refused, reset, timed out, not HTTP); ``timed_out`` when it was a wait
    that ran out (connecting or reading), which callers report as such."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


@dataclass(frozen=True)
class TeamResponse:
    status: int
    headers: dict[str, str]
    body: Any

    def retry_after(self, default: float) -> float:
        """The server's ``Retry-After`` in seconds (a number of seconds; an HTTP date counts as ``default``)."""
        raw = self.headers.get("retry-after", "")
        try:
            return max(0.0, float(raw))
        except ValueError:
            return default


class TeamClient:
    """One team server's /v1 API with one key; every call bounded by ``timeout`` seconds per socket step."""

    def __init__(self, url: str, key: str, timeout: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self.key = key
        self.timeout = timeout

    def request(self, method: str, path: str, *, params: dict[str, Any] | None = None, body: Any = None,
                headers: dict[str, str] | None = None, timeout: float | None = None) -> TeamResponse:
        """Raises:
            TeamUnavailable: no HTTP answer."""
        query = ""
        if params:
            query = "?" + urllib.parse.urlencode([(k, v) for k, v in params.items() if v is not None], doseq=True)
        sent = {"Authorization": f"Bearer {self.key}", "Accept": "application/json", **(headers or {})}
        data = None
        if body is not None:
            data = json.dumps(body, ensure_ascii=False).encode("utf-8")
            sent["Content-Type"] = "application/json"
        req = urllib.request.Request(self.url + path + query, data=data, method=method, headers=sent)
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as resp:  # noqa: S310 - http(s) only
                return _response(resp.status, resp.headers, resp.read())
        except urllib.error.HTTPError as exc:
            return _response(exc.code, exc.headers, exc.read())
        except (OSError, ValueError) as exc:  # URLError, timeouts, resets, a reply that is no HTTP
            reason = getattr(exc, "reason", exc)
            raise TeamUnavailable(f"{self.url}: {reason}", timed_out=isinstance(reason, TimeoutError)) from None


def _response(status: int, headers: Any, raw: bytes) -> TeamResponse:
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        body = raw.decode("utf-8", errors="replace")[:500]
    return TeamResponse(status, {k.lower(): v for k, v in headers.items()}, body)


def error_detail(resp: TeamResponse) -> str:
    if isinstance(resp.body, dict):
        return str(resp.body.get("detail") or resp.body.get("error") or resp.body)
    return str(resp.body)[:200]


def describe(home: Path) -> dict[str, Any]:
    """Remote mode as ``memcairn settings`` and ``doctor`` show it: the server, the key masked, the last sync."""
    try:
        cfg = load_remote(home)
    except ConfigError as exc:
        return {"mode": "remote", "state": "misconfigured", "last_error": str(exc)}
    if cfg is None:
        return {"mode": "local"}
    status = read_status(home) or {}
    if status.get("url") not in (None, cfg.url):
        status = {}  # what the worker did for an earlier link
    return {"mode": "remote", "url": cfg.url, "key": mask_key(cfg.key), "project_map": cfg.project_map,
            "state": status.get("state", "not yet synced (the worker forwards within a second of starting)"),
            "pending": status.get("pending"), "forwarded": status.get("forwarded"), "refused": status.get("refused"),
            "last_sync_epoch": status.get("last_sync_epoch"), "last_error": status.get("last_error")}


def doctor_check(home: Path) -> dict[str, str]:
    """One ``memcairn doctor`` line: local mode, or the link and how forwarding goes (a problem when refused)."""
    info = describe(home)
    if info["mode"] == "local":
        return {"name": "team server", "status": "ok", "detail": "local mode (not connected)"}
    state = info.get("state")
    detail = f"remote mode, {info.get('url')}: {state}"
    if info.get("pending"):
        detail += f", {info['pending']} memories waiting"
    if info.get("last_error"):
        detail += f"; last error: {info['last_error']}"
    status = "problem" if state in ("misconfigured", "refused") else "warning" if state in ("retrying",
                                                                                             "throttled") else "ok"
    return {"name": "team server", "status": status, "detail": detail}
