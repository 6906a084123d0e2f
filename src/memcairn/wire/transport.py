"""HTTP/1.1 to the worker over one loopback socket per request, standard library only: the one way a request
reaches the worker (the hooks send through it, and so does ``memcairn.wire.client``).

Why not ``http.client``: it imports ``email`` and ``ssl`` (~10 ms of a hook's budget, every agent event). Why
``_socket`` and not ``socket``: the module around it builds its enums at import (``enum``, ``selectors``: ~4 ms
more of every hook); a plain connected socket is all a request needs.

The worker answers every request with ``Content-Length`` (or chunked), and hooks send ``Connection: close``,
so a request is: connect, send, read to the end, parse one status line.

``Worker.send`` returns a ``Call`` at once (the request is on the wire); ``Call.result()`` reads the answer.
Sending several calls before reading any lets the worker serve them concurrently.
"""

from __future__ import annotations

import _socket
import time

from memcairn.wire.fastjson import encode_json, loads
from memcairn.wire.protocol import HOME_HEADER

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MAX_RESPONSE_BYTES = 8 * 1024 * 1024
_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


class Unreachable(Exception):
    """Nothing answered: refused, timed out, reset, or not HTTP. ``refused`` is True for a closed port,
    ``timed_out`` when the time given ran out."""

    def __init__(self, detail: str, refused: bool = False, timed_out: bool = False) -> None:
        super().__init__(detail)
        self.refused = refused
        self.timed_out = timed_out


class Response:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body
        self._object: Any = False  # json_object's value once parsed (False: not parsed yet)

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return loads(self.body)

    def json_object(self) -> dict[str, Any] | None:
        """The body as a JSON object, else None (not JSON, or JSON of another kind); parsed once."""
        if self._object is False:
            try:
                data = loads(self.body)
            except (ValueError, RecursionError):
                data = None
            self._object = data if isinstance(data, dict) else None
        return self._object

    def detail(self) -> str:
        """The worker's error detail (``{"error", "detail"}``), else the start of the body."""
        try:
            data = self.json()
        except ValueError:
            return self.text()[:200]
        if isinstance(data, dict):
            return f"{data.get('error', self.status)}: {data.get('detail', '')}"[:300]
        return self.text()[:200]


def quote(value: str) -> str:
    """Percent-encoding of a query value (RFC 3986 unreserved characters stay; a lone surrogate becomes ``?``)."""
    return "".join(chr(b) if b in _SAFE else f"%{b:02X}" for b in value.encode("utf-8", "replace"))


def query(params: dict[str, Any]) -> str:
    """``?k=v&...``; a list or tuple value repeats its key once per element."""
    pairs = [f"{quote(k)}={quote(str(v))}" for k, value in params.items()
             for v in (value if isinstance(value, list | tuple) else (value,)) if v is not None and v != ""]
    return ("?" + "&".join(pairs)) if pairs else ""


def _dechunk(data: bytes) -> bytes:
    out, pos = bytearray(), 0
    while True:
        end = data.find(b"\r\n", pos)
        if end < 0:
            raise Unreachable("truncated chunked answer")
        size = int(data[pos:end].split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            return bytes(out)
        out += data[end + 2:end + 2 + size]
        pos = end + 2 + size + 2


class Call:
    """One request in flight (already sent); ``result`` reads and parses the answer."""

    def __init__(self, sock: _socket.socket, deadline: float, what: str,
                 limit: int | None = MAX_RESPONSE_BYTES) -> None:
        self._sock = sock
        self._deadline = deadline
        self._what = what
        self._limit = limit  # the largest answer taken, None for any

    def _remaining(self) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise Unreachable(f"no answer to {self._what} in time", timed_out=True)
        return left

    def result(self) -> Response:
        sock, buf = self._sock, bytearray()
        try:
            head_end, length, chunked, headers, status = -1, None, False, {}, 0
            while True:
                sock.settimeout(self._remaining())
                chunk = sock.recv(65536)
                if chunk:
                    buf += chunk
                    if self._limit is not None and len(buf) > self._limit:
                        raise Unreachable(f"the answer to {self._what} is too large")
                if head_end < 0:
                    head_end = buf.find(b"\r\n\r\n")
                    if head_end >= 0:
                        status, headers = _parse_head(bytes(buf[:head_end]))
                        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
                        if "content-length" in headers:
                            length = int(headers["content-length"])
                if head_end >= 0 and length is not None and len(buf) - head_end - 4 >= length:
                    body = bytes(buf[head_end + 4:head_end + 4 + length])
                    return Response(status, headers, body)
                if not chunk:
                    if head_end < 0:
                        raise Unreachable(f"the worker closed the connection during {self._what}")
                    body = bytes(buf[head_end + 4:])
                    if length is not None:
                        raise Unreachable(f"the answer to {self._what} was cut short")
                    return Response(status, headers, _dechunk(body) if chunked else body)
        except TimeoutError:
            raise Unreachable(f"no answer to {self._what} in time", timed_out=True) from None
        except (OSError, ValueError) as exc:
            raise Unreachable(f"{self._what} failed: {exc}") from None
        finally:
            sock.close()

    def close(self) -> None:
        self._sock.close()


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/"):
        raise Unreachable(f"not an HTTP answer: {lines[0][:60]!r}")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers


def connect(host: bytes, port: int, timeout: float) -> _socket.socket:
    """A TCP connection to the first address of ``host`` that accepts one, as ``socket.create_connection`` makes it:
    each address tried in turn, the last error raised when none connects."""
    error: OSError = OSError(f"no address for {host!r}")
    for family, kind, proto, _name, address in _socket.getaddrinfo(host, port, 0, _socket.SOCK_STREAM):
        sock = _socket.socket(family, kind, proto)
        try:
            sock.settimeout(timeout)
            sock.connect(address)
            return sock
        except OSError as exc:
            sock.close()
            error = exc
    raise error


class Worker:
    """Where the worker listens, and the token to present (see ``memcairn.wire.settings_source``)."""

    def __init__(self, host: str, port: int, token: str = "", home: str = "") -> None:
        self.host = "127.0.0.1" if host in ("", "0.0.0.0", "::", "[::]") else host
        self.port = int(port)
        self.token = token
        self.home = home  # named in every request: only this home's worker takes it (protocol.HOME_HEADER)

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def send(self, method: str, path: str, *, params: dict[str, Any] | None = None, body: Any = None,
             timeout: float = 2.0, raw: bytes | None = None, limit: int | None = MAX_RESPONSE_BYTES) -> Call:
        """Connect and send; raise ``Unreachable`` when nothing listens. ``raw`` is an encoded JSON body; ``timeout``
        bounds the whole request, the answer included; ``limit`` is the largest answer taken (None: any)."""
        deadline = time.monotonic() + timeout
        target = path + (query(params) if params else "")
        data = raw if raw is not None else (None if body is None else encode_json(body))
        host = f"[{self.host}]" if ":" in self.host else self.host
        head = [f"{method} {target} HTTP/1.1", f"Host: {host}:{self.port}", "Connection: close",
                "Accept: application/json, text/plain"]
        if self.token:
            head.append(f"Authorization: Bearer {self.token}")
        if self.home:
            head.append(f"{HOME_HEADER}: {quote(self.home)}")
        if data is not None:
            head += ["Content-Type: application/json", f"Content-Length: {len(data)}"]
        what = f"{method} {path}"
        try:
            # A bytes host: getaddrinfo would otherwise load the "idna" codec (and unicodedata) for a str.
            sock = connect(self.host.encode("ascii", "replace"), self.port, timeout)
        except ConnectionRefusedError:
            raise Unreachable(f"nothing listens on {self.base_url}", refused=True) from None
        except TimeoutError:
            raise Unreachable(f"connecting to {self.base_url} timed out", timed_out=True) from None
        except OSError as exc:
            raise Unreachable(f"cannot connect to {self.base_url}: {exc}") from None
        try:
            sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + (data or b""))
        except OSError as exc:
            sock.close()
            raise Unreachable(f"sending {what} failed: {exc}", timed_out=isinstance(exc, TimeoutError)) from None
        return Call(sock, deadline, what, limit)

    def request(self, method: str, path: str, **kwargs: Any) -> Response:
        return self.send(method, path, **kwargs).result()
