"""Stubs of the agents' model APIs on a loopback port: scripted turns, streamed as each client expects.

One ``ModelStub`` serves one dialect (``Anthropic`` for Claude Code, ``Responses`` for Codex, ``Gemini`` for
Gemini CLI). A script is a list of turns; the turn a request gets is the number of model turns already in
its history (not "was the last message a tool result?": hook context and other harness text arrive as
messages of their own, after tool results too). A turn is a function of the request that returns the
model's answer: ``Call`` (a tool call) or ``Say`` (text, the end of the run). Every request is logged with
its path and body; past the script's end the model says "done".
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Call:
    """A tool call: the tool's name as the client offers it, and its arguments."""

    name: str
    arguments: dict[str, Any]
    namespace: str | None = None  # Codex: the MCP server's namespace ("mcp__memcairn")
    freeform: str | None = None  # Codex: the text input of a custom (grammar) tool such as apply_patch


@dataclass(frozen=True)
class Say:
    text: str


Turn = Callable[[dict[str, Any]], Call | Say]


def call(name: str, arguments: dict[str, Any], namespace: str | None = None) -> Turn:
    return lambda request: Call(name, arguments, namespace)


def say(text: str) -> Turn:
    return lambda request: Say(text)


@dataclass
class Logged:
    path: str
    body: dict[str, Any]
    turn: int


class Dialect:
    """How one API numbers turns and streams an answer."""

    probes: tuple[str, ...] = ()  # reachability checks the client makes ("GET /"): answered 200, not counted

    def turn_of(self, body: dict[str, Any]) -> int:
        raise NotImplementedError

    def stream(self, answer: Call | Say, ident: int) -> Iterator[bytes]:
        raise NotImplementedError

    def handles(self, path: str) -> bool:
        raise NotImplementedError


def _sse(data: dict[str, Any], event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


class Anthropic(Dialect):
    """``POST /v1/messages`` (streaming): Claude Code."""

    probes = ("GET /", "HEAD /")  # Claude Code 2.1.197 checks that the base URL answers

    def handles(self, path: str) -> bool:
        return path.startswith("/v1/messages") and "count_tokens" not in path

    def turn_of(self, body: dict[str, Any]) -> int:
        return sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")

    def stream(self, answer: Call | Say, ident: int) -> Iterator[bytes]:
        usage = {"input_tokens": 10, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        yield _sse({"type": "message_start", "message": {
            "id": f"msg_stub{ident}", "type": "message", "role": "assistant", "model": "claude-stub", "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": usage}}, "message_start")
        if isinstance(answer, Call):
            block = {"type": "tool_use", "id": f"toolu_stub{ident:04d}", "name": answer.name, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(answer.arguments)}
            stop = "tool_use"
        else:
            block = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": answer.text}
            stop = "end_turn"
        yield _sse({"type": "content_block_start", "index": 0, "content_block": block}, "content_block_start")
        yield _sse({"type": "content_block_delta", "index": 0, "delta": delta}, "content_block_delta")
        yield _sse({"type": "content_block_stop", "index": 0}, "content_block_stop")
        yield _sse({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": 5}}, "message_delta")
        yield _sse({"type": "message_stop"}, "message_stop")


class Responses(Dialect):
    """``POST /v1/responses`` (streaming): Codex."""

    CALLS = ("function_call", "custom_tool_call", "local_shell_call")

    def handles(self, path: str) -> bool:
        return path.startswith("/v1/responses")

    def turn_of(self, body: dict[str, Any]) -> int:
        items = body.get("input", [])
        return sum(1 for i in items if isinstance(i, dict) and (i.get("type") in self.CALLS or (
            i.get("type") == "message" and i.get("role") == "assistant")))

    def stream(self, answer: Call | Say, ident: int) -> Iterator[bytes]:
        rid = f"resp_stub{ident}"
        yield _sse({"type": "response.created", "response": {"id": rid}}, "response.created")
        if isinstance(answer, Call) and answer.freeform is not None:
            item: dict[str, Any] = {"type": "custom_tool_call", "id": f"ctc_stub{ident}", "status": "completed",
                                    "call_id": f"call_stub{ident}", "name": answer.name, "input": answer.freeform}
        elif isinstance(answer, Call):
            item = {"type": "function_call", "id": f"fc_stub{ident}", "call_id": f"call_stub{ident}",
                    "name": answer.name, "arguments": json.dumps(answer.arguments)}
            if answer.namespace:
                item["namespace"] = answer.namespace
        else:
            item = {"type": "message", "id": f"msg_stub{ident}", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": answer.text, "annotations": []}]}
            yield _sse({"type": "response.output_item.added", "output_index": 0, "item": {**item, "content": []}},
                       "response.output_item.added")
            yield _sse({"type": "response.output_text.delta", "delta": answer.text, "item_id": item["id"],
                        "output_index": 0, "content_index": 0}, "response.output_text.delta")
        yield _sse({"type": "response.output_item.done", "output_index": 0, "item": item},
                   "response.output_item.done")
        yield _sse({"type": "response.completed", "response": {
            "id": rid, "usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                                 "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
                                 "total_tokens": 15}}}, "response.completed")


class Gemini(Dialect):
    """``POST /v1beta/models/<model>:streamGenerateContent?alt=sse``: Gemini CLI."""

    def handles(self, path: str) -> bool:
        return ":streamGenerateContent" in path or ":generateContent" in path

    def turn_of(self, body: dict[str, Any]) -> int:
        return sum(1 for c in body.get("contents", []) if c.get("role") == "model")

    def stream(self, answer: Call | Say, ident: int) -> Iterator[bytes]:
        if isinstance(answer, Call):
            part: dict[str, Any] = {"functionCall": {"name": answer.name, "args": answer.arguments}}
        else:
            part = {"text": answer.text}
        yield _sse({"candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP",
                                    "index": 0}],
                    "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
                    "modelVersion": "gemini-stub"})


@dataclass
class ModelStub:
    """A threaded HTTP server answering ``dialect``'s requests from ``script``; ``requests`` logs them all."""

    dialect: Dialect
    script: list[Turn] = field(default_factory=list)
    requests: list[Logged] = field(default_factory=list)
    others: list[str] = field(default_factory=list)  # requests no turn answered (method and path)
    history: list[Logged] = field(default_factory=list)  # every answered request, across resets

    def __post_init__(self) -> None:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - the http.server name
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if not stub.dialect.handles(self.path):
                    stub.others.append(f"POST {self.path}")
                    self._reply(404, b'{"error": "not stubbed"}', "application/json")
                    return
                body = json.loads(raw or b"{}")
                with stub.lock:
                    turn = stub.dialect.turn_of(body)
                    ident = len(stub.requests)
                    stub.requests.append(Logged(self.path, body, turn))
                    stub.history.append(stub.requests[-1])
                answer = stub.script[turn](body) if turn < len(stub.script) else Say("done")
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                for chunk in stub.dialect.stream(answer, ident):
                    self.wfile.write(chunk)
                    self.wfile.flush()
                self.close_connection = True

            def do_GET(self) -> None:  # noqa: N802
                asked = f"{self.command} {self.path}"
                if asked in stub.dialect.probes:
                    self._reply(200, b"{}", "application/json")
                    return
                stub.others.append(asked)
                self._reply(404, b'{"error": "not stubbed"}', "application/json")

            do_HEAD = do_GET  # noqa: N815

            def _reply(self, status: int, data: bytes, kind: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that opened a connection and dropped it (a pre-connect) is no failure

        self.lock = threading.Lock()
        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def reset(self, script: list[Turn]) -> None:
        """A new script for the next run; ``requests`` starts empty again (``history`` keeps them all)."""
        with self.lock:
            self.script = script
            self.requests = []

    def close(self, log: Path | None = None) -> None:
        """Stop serving; with ``log``, write every request it saw there (JSON lines), to read after a failure."""
        self.server.shutdown()
        self.server.server_close()
        if log is not None:
            self.dump(log)

    def dump(self, log: Path) -> None:
        with log.open("w", encoding="utf-8") as out:
            for logged in self.history:
                out.write(json.dumps({"path": logged.path, "turn": logged.turn, "body": logged.body}) + "\n")
            for other in self.others:
                out.write(json.dumps({"unanswered": other}) + "\n")
