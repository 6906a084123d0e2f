"""MCP over stdio by hand, with the standard library only: what ``memcairn mcp`` speaks.

Why not the MCP SDK: an agent waits for its MCP servers before its first model request (Claude Code in ``-p``
mode, Codex with a required server), and importing the SDK alone costs about 0.8 s of CPU, 2-3 s to the first
answer on a loaded machine. This module answers in the time the interpreter takes to start; the SDK's own
client is what the tests drive it with.

Both protocol eras are served on one connection, request by request, and neither locks the other out:

- the handshake era (2024-11-05 .. 2025-11-25): ``initialize``, then plain requests;
- the per-request era (2026-07-28): ``server/discover``, then requests whose ``params._meta`` carries
  ``io.modelcontextprotocol/protocolVersion``; their results carry ``resultType`` and the server's identity.

A client that probes ``server/discover``, gives up waiting and sends a classic ``initialize`` (Claude Code
does, after about 2.4 s) gets both answered, whichever it settles on.

Messages are JSON-RPC 2.0, one per line. Requests named in ``McpServer.slow`` (tool calls) run on threads of
their own, so a slow call never holds up a ``ping`` or a ``tools/list``; everything else is answered in
order on the reading thread.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from memcairn.wire.fastjson import dumps
from memcairn.wire.json_depth import loads_bounded

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing alone costs the server's start ~5 ms
    from collections.abc import Callable
    from typing import IO, Any

    ToolCall = Callable[[str, Mapping[str, Any] | None], tuple[str, bool]]  # (name, arguments) -> (text, is_error)

HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MODERN_VERSIONS = ("2026-07-28",)
PROTOCOL_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
UNSUPPORTED_PROTOCOL_VERSION = -32022

# Results the per-request era may cache: nothing of memcairn's is safe to cache (the tools' texts change with
# the memory; the list is fixed but costs nothing), so the hint says "do not".
NO_CACHE = {"ttlMs": 0, "cacheScope": "private"}
CACHEABLE = ("server/discover", "tools/list")


class RpcError(Exception):
    """A JSON-RPC error answer: ``code``, ``message`` and optional ``data``."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data


class ServerInfo:
    """The server's identity, as ``initialize`` and the per-request era's results name it."""

    def __init__(self, name: str, version: str, title: str | None = None) -> None:
        self.name, self.version, self.title = name, version, title

    def as_json(self) -> dict[str, str]:
        out = {"name": self.name, "version": self.version}
        if self.title:
            out["title"] = self.title
        return out




class McpServer:
    """The protocol: one JSON-RPC message in, its answer out (``None`` for a notification).

    ``tools`` is the ``tools/list`` entries as JSON; ``call`` runs one tool and returns its text and whether it
    failed (it should not raise: an exception becomes an internal error answer); ``instructions`` is asked for
    when a handshake or a discovery is answered (it may wait for start-up work of its own).
    """

    slow = frozenset({"tools/call"})

    def __init__(self, info: ServerInfo, tools: list[dict[str, Any]], call: ToolCall,
                 instructions: Callable[[], str]) -> None:
        self.info = info
        self.tools = tools
        self.call = call
        self.instructions = instructions
        self.capabilities = {"tools": {"listChanged": False}}

    # -- one message ----------------------------------------------------------------------------------
    def answer(self, message: Any) -> dict[str, Any] | None:
        """The answer to ``message`` (a decoded JSON value), or None when none is due (a notification, an
        answer from the client)."""
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return _error(None, INVALID_REQUEST, "not a JSON-RPC 2.0 message")
        if "method" not in message:
            return None  # an answer to a request of ours: this server sends none
        method, has_id, ident = message.get("method"), "id" in message, message.get("id")
        if not isinstance(method, str):
            return _error(ident, INVALID_REQUEST, "method must be text") if has_id else None
        if not has_id:
            return None  # notifications (initialized, cancelled, roots changed...) need nothing from this server
        params = message.get("params")
        if params is not None and not isinstance(params, dict):
            return _error(ident, INVALID_PARAMS, "params must be an object")
        try:
            modern = self._era(method, params)
            result = self._dispatch(method, params or {}, modern)
        except RpcError as exc:
            return _error(ident, exc.code, str(exc), exc.data)
        except Exception as exc:  # a bug here must not end the session
            return _error(ident, INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
        if modern:
            result = {**(NO_CACHE if method in CACHEABLE else {}), **result, "resultType": "complete",
                      "_meta": {SERVER_INFO_KEY: self.info.as_json()}}
        return {"jsonrpc": "2.0", "id": ident, "result": result}

    def _era(self, method: str, params: Mapping[str, Any] | None) -> bool:
        """Whether the request is of the per-request era (checking the version it names)."""
        if method == "initialize":
            return False
        meta = (params or {}).get("_meta")
        if not isinstance(meta, Mapping) or PROTOCOL_VERSION_KEY not in meta:
            if method == "server/discover":  # a probe without its envelope still asks about the new era
                return True
            return False
        version = meta[PROTOCOL_VERSION_KEY]
        if version not in MODERN_VERSIONS:
            raise RpcError(UNSUPPORTED_PROTOCOL_VERSION, f"protocol version {version!r} is not served",
                           {"supported": [*MODERN_VERSIONS, *HANDSHAKE_VERSIONS], "requested": str(version)})
        return True

    def _dispatch(self, method: str, params: Mapping[str, Any], modern: bool) -> dict[str, Any]:
        if method == "initialize":
            asked = params.get("protocolVersion")
            version = asked if asked in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[-1]
            return {"protocolVersion": version, "capabilities": self.capabilities,
                    "serverInfo": self.info.as_json(), "instructions": self.instructions()}
        if method == "server/discover":
            return {"supportedVersions": list(MODERN_VERSIONS), "capabilities": self.capabilities,
                    "instructions": self.instructions()}
        if method == "ping":
            return {}
        if method == "tools/list":
            return {"tools": self.tools}
        if method == "tools/call":
            name, arguments = params.get("name"), params.get("arguments")
            if not isinstance(name, str):
                raise RpcError(INVALID_PARAMS, "tools/call needs the tool's name")
            if arguments is not None and not isinstance(arguments, dict):
                raise RpcError(INVALID_PARAMS, "arguments must be an object")
            text, failed = self.call(name, arguments)
            return {"content": [{"type": "text", "text": text}], "isError": failed}
        raise RpcError(METHOD_NOT_FOUND, "Method not found", method)


def _error(ident: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": ident, "error": error}


# -- stdio -------------------------------------------------------------------------------------------------
class LineWriter:
    """Writes one JSON message per line, whole, from any thread."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self._lock = threading.Lock()

    def send(self, message: Any) -> None:
        data = dumps(message, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        with self._lock:
            self._out.write(data)
            self._out.flush()


def serve_lines(server: McpServer, source: IO[bytes], sink: IO[bytes]) -> None:
    """Answer the messages read from ``source`` on ``sink`` until ``source`` ends.

    Returns at end of input; a broken ``sink`` (the client went away) raises ``OSError``/``BrokenPipeError``
    from the reading thread and is silently ignored on a call's thread."""
    writer = LineWriter(sink)

    def in_background(message: dict[str, Any]) -> None:
        try:
            found = server.answer(message)
            if found is not None:
                writer.send(found)
        except OSError:
            pass  # nobody reads the answer any more

    for line in iter(source.readline, b""):
        if not line.strip():
            continue
        try:
            message = loads_bounded(line)  # deeper than MAX_DEPTH levels: cut and named, then answered
        except ValueError:
            writer.send(_error(None, PARSE_ERROR, "not JSON"))
            continue
        if isinstance(message, list):  # a batch (2025-03-26): answered together, in order
            answers = [a for a in (server.answer(m) for m in message) if a is not None]
            if answers or not message:
                writer.send(answers or _error(None, INVALID_REQUEST, "empty batch"))
            continue
        if isinstance(message, dict) and message.get("method") in server.slow and "id" in message:
            threading.Thread(target=in_background, args=(message,), name="memcairn-mcp-call", daemon=True).start()
            continue
        found = server.answer(message)
        if found is not None:
            writer.send(found)
