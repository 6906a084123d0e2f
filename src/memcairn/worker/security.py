"""Who may talk to the worker, as plain ASGI middleware (it runs before routing and never reads a body twice).

- **Host guard** (DNS rebinding): on a loopback bind the ``Host`` header must name loopback
  (``127.0.0.1``, ``localhost``, ``[::1]``, with or without the port); otherwise 403.
- **Origin guard**: a request with an ``Origin`` header other than the worker's own origin is refused
  (403): a web page in the user's browser must not read or write their memory. Requests without ``Origin``
  (hooks, the CLI, curl) pass. Off loopback, the worker's own origin is also the one the browser sees:
  ``scheme://host:port`` of the request's ``Host`` (a LAN address, a machine name, a wildcard bind's
  interfaces), so the viewer may write from wherever it was opened; every other origin is still refused.
- **Token**: bound to anything but loopback, the worker refuses to start without a token, and every
  request must carry ``Authorization: Bearer <token>`` or the viewer cookie (both compared in constant
  time); otherwise 401.
- **Viewer cookie**: a browser cannot put a header on an ``EventSource`` and the page never learns the
  token, so ``GET /?token=<token>`` (whenever a token is configured, also on loopback) checks the token and
  answers ``303 /`` with an ``HttpOnly; SameSite=Strict; Path=/`` cookie (named after the port, so two
  workers on one machine keep their own) whose value is ``HMAC-SHA256(key=token, "memcairn viewer cookie
  v1")``: not the token itself (a leaked cookie does not reveal the token, which also works as a bearer
  header in every other client), and void once the token changes. The redirect drops the token from the
  address bar. A wrong token gets the 401 of the token guard and no cookie. Browsers send a host's cookies
  to every port of it, so another web server on the same host name receives this one too: it can replay it
  here (not learn the token); ``HttpOnly`` keeps it from the scripts of pages served there.
- **Cross-site writes**: a browser sends some requests to any site without asking it first (a form's POST, a
  ``fetch`` in ``no-cors`` mode with a ``text/plain`` or form body), and an older browser or a redirect may
  send them without ``Origin``. So every POST must say ``Content-Type: application/json`` (415 otherwise),
  which no page can send to another origin without a CORS preflight the worker never grants; and a write
  (POST, PUT, PATCH, DELETE) whose ``Sec-Fetch-Site`` is not ``same-origin`` or ``none`` (typed by the person)
  is refused (403): ``same-site`` is refused too, as every other port of localhost is the same site. Hooks, the
  CLI and the MCP server send no ``Sec-Fetch-Site`` and JSON bodies; the viewer's own requests are same-origin.
- **Body limit**: request bodies above ``max_body_bytes`` are refused with 413 before the route runs; a body
  that stops arriving before its ``Content-Length`` is complete is refused with 400 after ``BODY_IDLE_SECONDS``
  without a byte, and a request line longer than the server reads gets 414 (``daemon.py``).

Why the Host guard stops at loopback. DNS rebinding makes ``http://evil.example:37877`` resolve to the
worker's address, so the attacker's page talks to the worker *as its own origin*: the Origin check cannot
tell (Origin and Host both say ``evil.example``). On loopback, where no credential is required, only the Host
check stops it. Off loopback every request must carry the token or the cookie, and a rebound page has
neither: it cannot read the token, and the browser files cookies by host name, so it sends
``evil.example``'s cookies (which the attacker sets, but cannot give a valid value without the token), never
the cookie the worker set for the name the person used. The credential is the rebinding protection there,
and a Host list could not be complete anyway (every interface of a wildcard bind, machine and mDNS names,
port forwards), so off loopback any Host is accepted. For the same reason the "own origin" accepted off
loopback is derived from ``Host``: a rebound page passes the Origin check but not the token check, while a
page of another origin (another site, or another port of the same machine, which counts as the same *site*
for ``SameSite`` and so would carry the cookie) sends an ``Origin`` that differs from ``Host`` and is
refused (no cross-site request forgery); without CORS headers it could not read an answer either.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode

from memcairn.wire.config import Settings, is_loopback_host
from memcairn.wire.protocol import HOME_HEADER, MAX_BODY_BYTES, WRONG_HOME

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# A body that gets no byte for this long before it is whole was declared longer than it is: loopback clients
# (hooks, the CLI, the MCP server, the viewer) send theirs at once, in microseconds.
BODY_IDLE_SECONDS = 1.0
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
JSON_BODY_METHODS = frozenset({"POST"})  # the only method with a body the routes take
SAME_ORIGIN_FETCH_SITES = (b"same-origin", b"none")
TOKEN_PARAM = "token"  # GET /?token=<token> trades the token for the viewer cookie
COOKIE_LABEL = b"memcairn viewer cookie v1"
COOKIE_MAX_AGE = 30 * 24 * 3600  # the browser keeps it a month; changing the token voids it at once
UNAUTHORIZED = ("this worker requires Authorization: Bearer <MEMCAIRN_TOKEN>; in a browser, open "
                "/?token=<MEMCAIRN_TOKEN> once")


def cookie_name(port: int | str) -> str:
    """The viewer cookie's name: one per port, as cookies do not tell ports of a host apart."""
    return f"memcairn_viewer_{port}"


def cookie_value(token: str) -> str:
    """The viewer cookie's value for ``token`` (stripped): an HMAC of a fixed label keyed by the token."""
    return hmac.new(token.strip().encode("utf-8"), COOKIE_LABEL, hashlib.sha256).hexdigest()


def _cookies(scope: Scope, name: bytes) -> list[bytes]:
    """Every value sent for cookie ``name`` (another site's page may plant one of the same name on a parent
    domain: any matching value counts, not just the first)."""
    found = []
    for key, value in scope.get("headers", []):
        if key.lower() == b"cookie":
            for part in value.split(b";"):
                key_, eq, val = part.strip().partition(b"=")
                if eq and key_.strip() == name:
                    found.append(val.strip().strip(b'"'))
    return found


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
    """Host, Origin and token checks and the viewer cookie (see the module docstring)."""

    def __init__(self, app: ASGIApp, settings: Settings, json_paths: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.json_paths = json_paths  # the routes taking POST: a POST there must be JSON (others get 404 or 405)
        self.port = str(settings.port)
        self.loopback = is_loopback_host(settings.host)
        self.host_names = frozenset({*LOOPBACK_NAMES, settings.host.strip().strip("[]").lower()})
        token = (settings.token or "").strip()  # a header value arrives stripped, so compare the stripped token
        self.token = token.encode("utf-8") if (token and not self.loopback) else None  # required of every request
        self.cookie = cookie_value(token).encode("ascii") if token else None  # None: no /?token= exchange
        self.cookie_name = cookie_name(settings.port)
        self.origins = allowed_origins(settings)
        self.home = os.path.realpath(settings.home)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers: dict[bytes, bytes] = {}
        for key, value in scope.get("headers", []):
            headers.setdefault(key.lower(), value)
        host = headers.get(b"host", b"").decode("latin-1")
        if self.loopback:
            name, port = _split_host(host)
            if name not in self.host_names or (port is not None and port != self.port):
                await _refuse(send, 403, "forbidden_host",
                              f"Host {host!r} is not this worker's loopback address; use http://127.0.0.1:{self.port}")
                return
        origin = headers.get(b"origin")
        if origin is not None and not self._own_origin(origin.decode("latin-1").rstrip("/").lower(), scope, host):
            await _refuse(send, 403, "forbidden_origin",
                          "cross-origin requests are refused: web pages may not read or write your memory")
            return
        given_home = headers.get(HOME_HEADER.lower().encode("ascii"))
        if given_home is not None and scope.get("path") != "/api/health" and not self._own_home(given_home):
            shown = unquote(given_home.decode("latin-1"))
            await _refuse(send, 409, WRONG_HOME,
                          f"this worker serves the memcairn home {self.home}, not {shown}: give that home a port of "
                          f"its own (MEMCAIRN_PORT), or use this home (MEMCAIRN_HOME={self.home})")
            return
        refusal = _write_refusal(scope.get("method", ""), headers, scope.get("path") in self.json_paths)
        if refusal is not None:
            await _refuse(send, *refusal)
            return
        if self.cookie is not None and scope.get("path") == "/" and scope.get("method") in ("GET", "HEAD"):
            given, rest = _take_token(scope.get("query_string", b""))
            if given is not None:
                await self._exchange(send, given, rest, secure=scope.get("scheme") == "https")
                return
        if self.token is not None and not (self._bearer_ok(headers) or self._cookie_ok(scope)):
            await _refuse(send, 401, "unauthorized", UNAUTHORIZED, [(b"www-authenticate", b"Bearer")])
            return
        await self.app(scope, receive, send)

    def _own_home(self, given: bytes) -> bool:
        try:
            return os.path.realpath(unquote(given.decode("latin-1"), errors="strict")) == self.home
        except (UnicodeDecodeError, ValueError):
            return False

    def _own_origin(self, origin: str, scope: Scope, host: str) -> bool:
        if origin in self.origins:
            return True
        # Off loopback the origin the browser sees (any name that reaches the worker) is its own: a rebound
        # page gets this far but has no token or cookie (module docstring).
        return self.token is not None and bool(host) and origin == f"{scope.get('scheme', 'http')}://{host.lower()}"

    def _bearer_ok(self, headers: dict[bytes, bytes]) -> bool:
        scheme, _, given = headers.get(b"authorization", b"").partition(b" ")
        return (self.token is not None and scheme.lower() == b"bearer"
                and hmac.compare_digest(given.strip(), self.token))

    def _cookie_ok(self, scope: Scope) -> bool:
        expected = self.cookie
        return expected is not None and any(hmac.compare_digest(value, expected)
                                            for value in _cookies(scope, self.cookie_name.encode("ascii")))

    async def _exchange(self, send: Send, given: str, rest: list[tuple[str, str]], *, secure: bool) -> None:
        """``/?token=``: the cookie and a redirect to the page without the token, or 401 and no cookie. Both
        sides are HMACed before the comparison, so its time tells nothing of the token, not even its length."""
        assert self.cookie is not None
        offered = cookie_value(given).encode("ascii")
        private = [(b"cache-control", b"no-store"), (b"referrer-policy", b"no-referrer")]
        if not hmac.compare_digest(offered, self.cookie):
            await _refuse(send, 401, "unauthorized",
                          "the token in the address is not this worker's MEMCAIRN_TOKEN; no cookie was set",
                          [(b"www-authenticate", b"Bearer"), *private])
            return
        cookie = (f"{self.cookie_name}={self.cookie.decode('ascii')}; Path=/; Max-Age={COOKIE_MAX_AGE}; HttpOnly; "
                  f"SameSite=Strict{'; Secure' if secure else ''}")
        location = "/" + (f"?{urlencode(rest)}" if rest else "")
        await send({"type": "http.response.start", "status": 303, "headers": [
            (b"location", location.encode("latin-1")), (b"set-cookie", cookie.encode("latin-1")),
            (b"content-length", b"0"), *private]})
        await send({"type": "http.response.body", "body": b""})


def is_json_content_type(value: bytes | None) -> bool:
    """``application/json``, in any case, with or without parameters (``; charset=utf-8``)."""
    return value is not None and value.split(b";", 1)[0].strip().lower() == b"application/json"


def _write_refusal(method: str, headers: dict[bytes, bytes], json_route: bool) -> tuple[int, str, str] | None:
    """(status, error, detail) refusing a write a web page of another site may have sent, else None.
    ``json_route``: the path is a route taking POST (elsewhere the router answers 404 or 405)."""
    if method not in WRITE_METHODS:
        return None
    site = headers.get(b"sec-fetch-site")
    if site is not None and site.strip().lower() not in SAME_ORIGIN_FETCH_SITES:
        return (403, "forbidden_site", f"a write sent by a page of another site (Sec-Fetch-Site: "
                f"{site.decode('latin-1')}) is refused: web pages may not write your memory")
    if json_route and method in JSON_BODY_METHODS and not is_json_content_type(headers.get(b"content-type")):
        given = headers.get(b"content-type")
        return (415, "unsupported_media_type", "send the body as JSON with Content-Type: application/json"
                + (f" (got {given.decode('latin-1')!r})" if given is not None else " (none was given)"))
    return None


def _take_token(query: bytes) -> tuple[str | None, list[tuple[str, str]]]:
    """(the ``token`` parameter or None, the other parameters) of a query string."""
    pairs = parse_qsl(query.decode("latin-1"), keep_blank_values=True)
    tokens = [value for key, value in pairs if key == TOKEN_PARAM]
    return (tokens[0] if tokens else None), [(key, value) for key, value in pairs if key != TOKEN_PARAM]


class BodyLimitMiddleware:
    """Buffer request bodies up to ``max_bytes`` and refuse larger ones with 413 before the route runs; a body
    that stops arriving for ``idle_seconds`` before it is whole (a ``Content-Length`` larger than what was
    sent) is refused with 400 instead of holding the request open until the client gives up."""

    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES, idle_seconds: float = BODY_IDLE_SECONDS) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.idle_seconds = idle_seconds

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
        import anyio  # here: the CLI's lifecycle commands import this module for check_bind alone

        chunks: list[bytes] = []
        size = 0
        while True:
            with anyio.move_on_after(self.idle_seconds) as idle:
                message = await receive()
            if idle.cancelled_caught:
                await _refuse(send, 400, "invalid_request",
                              f"the body stopped {size:,} bytes in, short of its Content-Length; send the whole body "
                              "(or the right Content-Length)")
                return
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
