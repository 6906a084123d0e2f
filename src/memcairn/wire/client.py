"""A thin client of the worker for the doors (CLI, MCP server), using only the standard library.

``WorkerClient`` speaks JSON over loopback HTTP, sent through ``memcairn.wire.transport`` as a hook's requests are,
and turns error answers back into memcairn's exceptions
(400 -> ``ValidationError``, 404 -> ``NotFoundError``, 401/403 -> ``ConfigError``, no answer or 503 ->
``WorkerUnavailableError``, another error -> ``WorkerError``). ``ensure_worker`` starts a worker when none
answers (the same code path as ``memcairn worker start``) and waits, bounded, until it is ready.

Port and token come from the arguments, else the settings (``MEMCAIRN_PORT`` / ``MEMCAIRN_TOKEN`` or
``$MEMCAIRN_HOME/settings.json``).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote, urlencode

from memcairn.core.errors import ConfigError, NotFoundError, ValidationError, WorkerError, WorkerUnavailableError
from memcairn.wire.config import Settings, load_settings
from memcairn.wire.transport import Unreachable, Worker

DEFAULT_TIMEOUT = 10.0
START_TIMEOUT = 30.0


def connect_host(host: str) -> str:
    """Where to reach a worker bound to ``host``: a wildcard bind is reached on loopback."""
    return "127.0.0.1" if host in ("", "0.0.0.0", "::", "[::]") else host


class WorkerClient:
    def __init__(self, port: int | None = None, host: str = "127.0.0.1", token: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT, settings: Settings | None = None) -> None:
        if port is None or token is None:
            settings = settings or load_settings()
        self.port = int(port if port is not None else settings.port)  # type: ignore[union-attr]
        self.host = connect_host(host)
        self.token = token if token is not None else settings.token  # type: ignore[union-attr]
        self.timeout = timeout
        self.home = str(settings.home) if settings is not None else None

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def _unavailable(self, reason: str) -> WorkerUnavailableError:
        log = f" (its log: {self.home}/logs/worker.log)" if self.home else ""
        return WorkerUnavailableError(
            f"no memcairn worker answered at {self.base_url} ({reason}); start one with `memcairn worker start`"
            f"{log}, or check MEMCAIRN_PORT"
        )

    def request(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None,
                timeout: float | None = None) -> tuple[int, str, bytes]:
        """Send one request; return (status, content type, body bytes).

        Raises:
            WorkerUnavailableError: nothing answered (refused, timed out, connection dropped).
        """
        url = quote(path, safe="/:@!$&'()*+,;=-._~%")
        if params:
            pairs = [(k, v) for k, v in params.items() if v is not None]
            url += "?" + urlencode(pairs, doseq=True)
        data = None if body is None else json.dumps(body, ensure_ascii=False).encode("utf-8")
        wait = timeout or self.timeout
        try:
            # no size limit: an export or a long context is read whole, unlike a hook's answer
            answer = Worker(self.host, self.port, self.token or "").request(method, url, raw=data, timeout=wait,
                                                                           limit=None)
        except Unreachable as exc:
            if exc.refused:
                raise self._unavailable("connection refused") from None
            if exc.timed_out:
                raise self._unavailable(f"no answer within {wait:g} s") from None
            raise self._unavailable(str(exc)) from None
        return answer.status, answer.headers.get("content-type", ""), answer.body

    def _decode(self, status: int, content_type: str, raw: bytes) -> Any:
        parsed: Any = None
        if "json" in content_type:
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = None
        if 200 <= status < 300:
            if parsed is None and "json" not in content_type:
                return raw.decode("utf-8", errors="replace")
            return parsed
        code, detail = "", raw.decode("utf-8", errors="replace")[:300]
        if isinstance(parsed, dict):
            code, detail = str(parsed.get("error", "")), str(parsed.get("detail", detail))
        if status in (400, 413, 422):
            raise ValidationError(detail)
        if status == 404:
            raise NotFoundError(detail)
        if status in (401, 403):
            raise ConfigError(f"the worker at {self.base_url} refused the request ({code or status}): {detail}; "
                              "check MEMCAIRN_TOKEN and MEMCAIRN_PORT")
        if status == 503:
            raise WorkerUnavailableError(f"the worker at {self.base_url} is not ready ({code}): {detail}")
        raise WorkerError(f"the worker at {self.base_url} answered {status} ({code}): {detail}")

    def get_json(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self._decode(*self.request("GET", path, params=params))

    def get_text(self, path: str, params: dict[str, Any] | None = None) -> str:
        status, content_type, raw = self.request("GET", path, params=params)
        value = self._decode(status, content_type, raw)
        return value if isinstance(value, str) else json.dumps(value)

    def post_text(self, path: str, params: dict[str, Any] | None = None, body: Any = None) -> str:
        """A POST (``body``, default ``{}``, as JSON) whose answer is text, such as the context an agent is given."""
        status, content_type, raw = self.request("POST", path, body={} if body is None else body, params=params)
        value = self._decode(status, content_type, raw)
        return value if isinstance(value, str) else json.dumps(value)

    def post_json(self, path: str, body: Any) -> Any:
        return self._decode(*self.request("POST", path, body=body))

    def delete(self, path: str) -> Any:
        return self._decode(*self.request("DELETE", path))

    def health(self, timeout: float | None = None) -> dict[str, Any]:
        """The worker's health answer.

        Raises:
            WorkerUnavailableError: nothing answers, or what answers is not a memcairn worker.
        """
        status, content_type, raw = self.request("GET", "/api/health", timeout=timeout)
        try:
            value = self._decode(status, content_type, raw)
        except WorkerError as exc:  # health never fails on a worker: what answers is not a usable one
            raise WorkerUnavailableError(str(exc)) from None
        if not isinstance(value, dict) or value.get("status") not in ("ok", "degraded") or "pid" not in value:
            raise WorkerUnavailableError(
                f"something that is not a memcairn worker answers at {self.base_url}; set MEMCAIRN_PORT to a free port"
            )
        return value

    def ready(self, timeout: float | None = None) -> bool:
        try:
            self._decode(*self.request("GET", "/api/readiness", timeout=timeout))
        except (WorkerUnavailableError, WorkerError, ConfigError):
            return False
        return True


def ensure_worker(timeout: float = START_TIMEOUT, settings: Settings | None = None) -> WorkerClient:
    """A client of a ready worker of the installed version, starting (or replacing an older version of) one if
    needed. A worker of this home serving another port is left alone (an error says so).

    Raises:
        WorkerUnavailableError: no worker became ready within ``timeout`` seconds.
        ConfigError: the settings are unusable (e.g. a non-loopback host without a token).
    """
    cfg = settings or load_settings()
    client = WorkerClient(port=cfg.port, host=connect_host(cfg.host), token=cfg.token, settings=cfg)
    from memcairn.wire.lifecycle import start  # standard library only at import time

    start(cfg, timeout=timeout, replace_other_port=False)  # never stop a worker this caller was not set up for
    return client
