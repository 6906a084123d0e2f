"""Who may talk to the worker, as plain ASGI middleware (it runs before routing and never reads a body twice).

- **Host guard** (DNS rebinding): on a loopback bind the ``Host`` header must name loopback
  (``127.0.0.1``, ``localhost``, ``[::1]``, with or without the port); otherwise 403.
- **Origin guard**: a request with an ``Origin`` header other than the worker's own origin is refused
  (403): a web page in the user's browser must not read or write their memory. Requests without ``Origin``
  (hooks, the CLI, curl) pass.
- **Token**: bound to anything but loopback, the worker refuses to start without a token, and every
  request must carry ``Authorization: Bearer <token>`` (compared in constant time); otherwise 401.
- **Body limit**: request bodies above ``max_body_bytes`` are refused with 413 before the route runs.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from memcairn.config import Settings
from memcairn.errors import ConfigError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_BODY_BYTES = 1024 * 1024
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")


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


def _split_host(value: str) -> tuple[str, str | None]:
    """(hostname, port or None) of a Host header value; IPv6 literals keep no brackets."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return value, None
        rest = value[end + 1:]
        return value[1:end], rest[1:] if rest.startswith(":") else None
    if value.count(":") == 1:
        name, port = value.split(":")
        return name, port
    return value, None


def allowed_origins(cfg: Settings) -> frozenset[str]:
    hosts = ["127.0.0.1", "localhost", "[::1]"]
    host = cfg.host.strip().strip("[]").lower()
    if host not in ("0.0.0.0", "::", ""):  # the bound address is the viewer's own origin (also 127.0.0.2, ...)
        hosts.append(f"[{host}]" if ":" in host else host)
    return frozenset(f"http://{h}:{cfg.port}" for h in hosts)


async def _refuse(send: Send, status: int, error: str, detail: str,
                  extra_headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = json.dumps({"error": error, "detail": detail}).encode("utf-8")
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + (extra_headers or [])})
    await send({"type": "http.response.body", "body": body})


class GuardMiddleware:
    """Host, Origin and token checks (see the module docstring)."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.port = str(settings.port)
        self.loopback = is_loopback_host(settings.host)
        self.host_names = frozenset({*LOOPBACK_NAMES, settings.host.strip().strip("[]").lower()})
        token = (settings.token or "").strip()  # a header value arrives stripped, so compare the stripped token
        self.token = token.encode("utf-8") if (token and not self.loopback) else None
        self.origins = allowed_origins(settings)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers: dict[bytes, bytes] = {}
        for key, value in scope.get("headers", []):
            headers.setdefault(key.lower(), value)
        if self.loopback:
            host = headers.get(b"host", b"").decode("latin-1")
            name, port = _split_host(host)
            if name not in self.host_names or (port is not None and port != self.port):
                await _refuse(send, 403, "forbidden_host",
                              f"Host {host!r} is not this worker's loopback address; use http://127.0.0.1:{self.port}")
                return
        origin = headers.get(b"origin")
        if origin is not None and origin.decode("latin-1").rstrip("/").lower() not in self.origins:
            await _refuse(send, 403, "forbidden_origin",
                          "cross-origin requests are refused: web pages may not read or write your memory")
            return
        if self.token is not None:
            auth = headers.get(b"authorization", b"")
            scheme, _, given = auth.partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(given.strip(), self.token):
                await _refuse(send, 401, "unauthorized",
                              "this worker requires Authorization: Bearer <MEMCAIRN_TOKEN>",
                              [(b"www-authenticate", b"Bearer")])
                return
        await self.app(scope, receive, send)


class BodyLimitMiddleware:
    """Buffer request bodies up to ``max_bytes`` and refuse larger ones with 413 before the route runs."""

    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        too_big = f"the request body is larger than {self.max_bytes:,} bytes; send less per request"
        for key, value in scope.get("headers", []):
            if key.lower() == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await _refuse(send, 400, "invalid_request", "Content-Length is not a number")
                    return
                if declared > self.max_bytes:
                    await _refuse(send, 413, "payload_too_large", too_big)
                    return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await _refuse(send, 413, "payload_too_large", too_big)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
