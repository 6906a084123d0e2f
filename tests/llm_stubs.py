"""What the LLM capture tests share: recorded model replies, a local HTTP stub speaking the Anthropic and
OpenAI APIs, a usage ledger and a clock in memory, a fake ``claude`` CLI script, and compressors built on them.
The fixtures (``stub``, ``fake_claude``, ``no_proxies``) are in conftest.py."""

from __future__ import annotations

import json
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from memcairn.capture.llm import AnthropicClient, ClaudeCliClient, LlmCompressor, OpenAIClient
from memcairn.capture.records import ToolCall, Turn, Usage
from memcairn.wire.config import Settings

GOOD = """<observation>
  <type>bugfix</type>
  <title>Pager rounded the page count down</title>
  <subtitle>page_count used floor division, losing the last partial page</subtitle>
  <facts>
    <fact>src/pager.py: page_count now uses ceiling division</fact>
    <fact>the last 1-9 items were never shown</fact>
  </facts>
  <narrative>The pager computed pages with //. Switched to ceiling division so a partial page counts.</narrative>
  <concepts><concept>problem-solution</concept><concept>gotcha</concept></concepts>
  <files_read><file>src/pager.py</file><file>tests/test_pager.py</file></files_read>
  <files_modified><file>src/pager.py</file></files_modified>
</observation>"""

SECOND = """<observation>
  <type>discovery</type>
  <title>Tests use a fixed page size of 10</title>
  <facts><fact>tests/test_pager.py sets PAGE_SIZE = 10</fact></facts>
  <concepts><concept>how-it-works</concept></concepts>
  <files_read><file>tests/test_pager.py</file></files_read>
</observation>"""

SUMMARY = """<summary>
  <request>Fix the pager losing the last page</request>
  <investigated>src/pager.py and its tests</investigated>
  <learned>page_count used floor division</learned>
  <completed>Switched to ceiling division; tests pass</completed>
  <next_steps>None</next_steps>
  <notes></notes>
</summary>"""


class MemoryLedger:
    """A ``UsageLedger`` in memory; ``preload`` puts earlier spending in."""

    def __init__(self) -> None:
        self.rows: list[tuple[Usage, str | None, int]] = []

    def preload(self, tokens: int, session_id: str | None, at_ms: int | None = None) -> None:
        self.rows.append((Usage("test", "m", tokens, 0), session_id, at_ms or int(time.time() * 1000)))

    def tokens_spent(self, *, session_id: str | None = None, since_epoch: int | None = None) -> int:
        return sum(u.input_tokens + u.output_tokens for u, sid, at in self.rows
                   if (session_id is None or sid == session_id) and (since_epoch is None or at >= since_epoch))

    def record_usage(self, usage: Usage, session_id: str | None) -> None:
        self.rows.append((usage, session_id, int(time.time() * 1000)))


@dataclass
class Stub:
    url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    replies: list[tuple[int, Any, float, dict[str, str], float]] = field(default_factory=list)

    def reply(self, body: Any, status: int = 200, delay: float = 0.0, headers: dict[str, str] | None = None,
              trickle: float = 0.0) -> Stub:
        """Queue an answer: ``body`` as JSON (bytes and str as they are), after ``delay`` seconds, with extra
        ``headers``; ``trickle`` sends the body one byte at a time that many seconds apart."""
        self.replies.append((status, body, delay, headers or {}, trickle))
        return self


class _Handler(BaseHTTPRequestHandler):
    server: _StubServer

    def do_POST(self) -> None:  # noqa: N802 - the http.server naming
        stub = self.server.stub
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        stub.requests.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                              "body": json.loads(raw)})
        status, body, delay, headers, trickle = (
            stub.replies.pop(0) if stub.replies else (500, {"error": "no reply queued"}, 0.0, {}, 0.0))
        if delay:
            time.sleep(delay)
        data = body if isinstance(body, bytes) else body.encode() if isinstance(body, str) else \
            json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            if not trickle:
                self.wfile.write(data)
            for index in range(len(data) if trickle else 0):
                self.wfile.write(data[index:index + 1])
                self.wfile.flush()
                time.sleep(trickle)
        except OSError:
            pass

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the http.server signature
        pass


class _StubServer(ThreadingHTTPServer):
    daemon_threads = True
    stub: Stub

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


@contextmanager
def running_stub() -> Iterator[Stub]:
    """A ``Stub`` served on a free loopback port until the block ends."""
    server = _StubServer(("127.0.0.1", 0), _Handler)
    server.stub = Stub(url=f"http://127.0.0.1:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server.stub
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def drop_proxies_and_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy and no model API key of the host reaches the code under test."""
    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "CLAUDECODE"):
        monkeypatch.delenv(name, raising=False)


def anthropic_body(text: str, input_tokens: int = 120, output_tokens: int = 45, **extra: Any) -> dict[str, Any]:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-haiku-4-5",
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens}, **extra}


def openai_body(text: str, usage: dict[str, int] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"id": "c1", "object": "chat.completion", "model": "qwen2.5:3b",
                            "choices": [{"index": 0, "finish_reason": "stop",
                                         "message": {"role": "assistant", "content": text}}]}
    if usage is not None:
        body["usage"] = usage
    return body


def settings_for(tmp_path: Path, **values: Any) -> Settings:
    base: dict[str, Any] = {"capture_max_tool_chars": 500, "llm_timeout_seconds": 5}
    return Settings(home=tmp_path / "home", **{**base, **values})


def turn_with(*calls: ToolCall, session: str = "s1") -> Turn:
    return Turn(session_id=session, platform_source="claude", project="pager", prompt="Fix the pager please",
                prompt_number=1, cwd="/src/pager", tools=calls, last_assistant_message="Fixed: ceiling division.")


def edit_call(output: str = "ok") -> ToolCall:
    return ToolCall(name="Edit", input={"file_path": "src/pager.py", "old_string": "//", "new_string": "-(-a // b)"},
                    response=output, tool_use_id="t1", at_epoch=1, cwd="/src/pager")


def anthropic_compressor(stub: Stub, tmp_path: Path, ledger: MemoryLedger, monkeypatch: pytest.MonkeyPatch,
                         timeout: float | None = None, **values: Any) -> LlmCompressor:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    settings = settings_for(tmp_path, capture_backend="anthropic", llm_base_url=stub.url, **values)
    return LlmCompressor(AnthropicClient(settings, timeout=timeout), ledger, settings, "anthropic")


def openai_compressor(stub: Stub, tmp_path: Path, ledger: MemoryLedger, **values: Any) -> LlmCompressor:
    settings = settings_for(tmp_path, capture_backend="openai", llm_base_url=stub.url + "/v1",
                            llm_model="qwen2.5:3b", **values)
    return LlmCompressor(OpenAIClient(settings), ledger, settings, "openai")


FAKE_CLAUDE = """#!{python}
import json, os, sys, time
record = {{"argv": sys.argv[1:], "stdin": sys.stdin.read(), "child": os.environ.get("MEMCAIRN_CAPTURE_CHILD"),
          "claudecode": os.environ.get("CLAUDECODE")}}
with open({log!r}, "w", encoding="utf-8") as fh:
    json.dump(record, fh)
mode = {mode!r}
usage = {{"input_tokens": 30, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 70, "output_tokens": 40}}
if mode == "ok":
    print(json.dumps({{"type": "result", "subtype": "success", "is_error": False, "result": {reply!r},
                      "usage": usage, "total_cost_usd": 0.001,
                      "modelUsage": {{"claude-haiku-4-5-20251001": {{"inputTokens": 30}}}}}}))
elif mode == "noisy":
    print("Update available! Run: claude update")
    print(json.dumps({{"type": "result", "subtype": "success", "is_error": False, "result": {reply!r},
                      "usage": usage}}))
    print("(wrapper) done")
elif mode == "list":
    print(json.dumps([{{"type": "system"}}, {{"type": "result", "subtype": "success", "is_error": False,
                                            "result": {reply!r}}}]))
elif mode == "login":
    print(json.dumps({{"type": "result", "subtype": "success", "is_error": True,
                      "result": "Invalid API key · Please run /login", "usage": usage}}))
    sys.exit(1)
elif mode == "limit":
    sys.stderr.write("Claude AI usage limit reached|1718000000\\n")
    sys.exit(1)
elif mode == "crash":
    sys.stderr.write("TypeError: something broke\\n")
    sys.exit(2)
elif mode == "slow":
    time.sleep(10)
"""


def fake_claude_maker(bin_dir: Path, log: Path) -> Callable[..., tuple[Path, Path]]:
    """``make(mode, reply)`` writes an executable ``claude`` in ``bin_dir`` that logs its call to ``log`` and
    answers as ``mode`` says; (the script, the log)."""
    bin_dir.mkdir()

    def make(mode: str, reply: str = GOOD) -> tuple[Path, Path]:
        script = bin_dir / "claude"
        script.write_text(FAKE_CLAUDE.format(python=sys.executable, log=str(log), mode=mode, reply=reply),
                          encoding="utf-8")
        script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        return script, log

    return make


def cli_compressor(tmp_path: Path, ledger: MemoryLedger, executable: str, timeout: float | None = None,
                   **values: Any) -> LlmCompressor:
    settings = settings_for(tmp_path, capture_backend="claude-cli", claude_cli=executable, **values)
    return LlmCompressor(ClaudeCliClient(settings, timeout=timeout), ledger, settings, "claude-cli")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now
