"""``memcairn mcp`` at start-up and at the end: how soon the first answer comes, both protocol eras on one
connection (the ``server/discover`` probe and a later ``initialize``), and how soon it exits when told to.

Agents wait for their MCP servers before the first model request, so these are the server's user-visible
latencies. `memcairn bench mcp` times them; these tests check what keeps them short, and that it ends when told."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp_helpers import MEMCAIRN, start_worker, text_of, worker_env
from mcp_in_process import in_process

from memcairn.cli.entry import main as entry_main
from memcairn.mcp.protocol import MODERN_VERSIONS, PROTOCOL_VERSION_KEY, SERVER_INFO_KEY, UNSUPPORTED_PROTOCOL_VERSION
from memcairn.mcp.schema import TOOL_ENTRIES
from memcairn.mcp.server import WORKFLOW, build_server
from memcairn.wire.client import WorkerClient


@pytest.fixture
def env(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """A home, a free port and the hash embedder; its worker stopped after (mcp_helpers.worker_env)."""
    yield from worker_env(isolated_home, monkeypatch)


@pytest.fixture
def worker(env: dict[str, str]) -> WorkerClient:
    return start_worker(env)



MODERN = "2026-07-28"


def _envelope(version: str = MODERN) -> dict[str, Any]:
    return {"_meta": {PROTOCOL_VERSION_KEY: version, "io.modelcontextprotocol/clientCapabilities": {},
                      "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "0"}}}


def _initialize(ident: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}


class Server:
    """``memcairn mcp`` spawned with pipes, spoken to one JSON line at a time."""

    def __init__(self, environ: dict[str, str], cwd: Path, *args: str) -> None:
        self.started = time.perf_counter()
        self.proc = subprocess.Popen([MEMCAIRN, "mcp", *args], env={**os.environ, **environ}, cwd=cwd,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def seconds_to_exit(self, stop: str) -> float:
        """Seconds from SIGINT (``stop="sigint"``) or closing stdin (``"eof"``) to the process's end."""
        assert self.proc.stdin is not None
        started = time.perf_counter()
        if stop == "sigint":
            self.proc.send_signal(signal.SIGINT)
        else:
            self.proc.stdin.close()
        self.proc.wait(timeout=10)
        return time.perf_counter() - started

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None and not pipe.closed:
                pipe.close()


# The first answer's latency is timed by ``memcairn bench mcp``; here, what makes it short: answering
# ``initialize`` imports neither the MCP SDK (about 0.8 s of CPU to import, 2-3 s to the answer) nor anything of the
# worker, the store or the CLI, nor the standard library's slow starters (``logging``, ``typing``, ``json`` with its
# ``re``: ~15 ms of CPU together, while the agent starts its hooks too). The probe runs the real entry point and lists
# ``sys.modules`` once it has ended (importing nothing itself).
IMPORT_PROBE = """
import sys
from memcairn.cli.entry import main
main(["mcp"])
sys.stderr.write("MODULES " + " ".join(sorted(sys.modules)) + "\\n")
"""
SLOW_STDLIB = {"logging", "typing", "json", "re", "enum"}
SDK_ROOTS = {"mcp", "anyio", "pydantic", "pydantic_core", "httpx", "starlette", "uvicorn", "sse_starlette"}
HEAVY_ROOTS = {"click", "sqlite3", "numpy", "sqlite_vec", "http", "ssl", "asyncio"}
WORKER_PACKAGES = ("memcairn.wire.client", "memcairn.worker", "memcairn.store", "memcairn.search", "memcairn.mirror",
                   "memcairn.capture", "memcairn.cli.app", "memcairn.wire.config", "memcairn.wire.lifecycle",
                   "memcairn.vectors")


def test_answering_initialize_and_tools_list_imports_neither_the_sdk_nor_the_worker(env: dict[str, str],
                                                                                    tmp_path: Path) -> None:
    """The tools' schemas are served as generated from their typed definitions: pydantic waits for a tool call."""
    proc = subprocess.Popen([sys.executable, "-c", IMPORT_PROBE], env={**os.environ, **env}, cwd=tmp_path,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    out, err = proc.communicate(b"".join(json.dumps(m).encode() + b"\n" for m in (_initialize(), listing)),
                                timeout=30)
    assert proc.returncode == 0, err.decode()[-2000:]
    hello, listed = (json.loads(line) for line in out.splitlines())
    assert hello["result"]["serverInfo"]["name"] == "memcairn" and listed["result"]["tools"] == TOOL_ENTRIES
    line = next(x for x in err.decode().splitlines() if x.startswith("MODULES "))
    loaded = line[len("MODULES "):].split()
    assert "memcairn.mcp.protocol" in loaded  # the probe ran the light path
    assert sorted(set(loaded) & SLOW_STDLIB) == []
    assert [m for m in loaded if m.split(".")[0] in SDK_ROOTS | HEAVY_ROOTS] == []
    assert [m for m in loaded if any(m == p or m.startswith(p + ".") for p in WORKER_PACKAGES)] == []


@pytest.mark.parametrize("stop", ["sigint", "eof"])
def test_the_server_exits_cleanly_on_sigint_or_end_of_input(env: dict[str, str], tmp_path: Path, stop: str) -> None:
    """It ends by itself (no kill) with a clean status; how fast is `memcairn bench mcp`'s exit column, not an
    assert here (these machines are noisy)."""
    server = Server(env, tmp_path)
    try:
        assert server.ask({"jsonrpc": "2.0", "id": 1, "method": "ping"})["result"] == {}
        server.seconds_to_exit(stop)  # waits for the process, up to 10 s: a hang fails here
        assert server.proc.returncode in (0, -signal.SIGINT), server.proc.returncode
    finally:
        server.close()


def test_a_probe_and_a_later_handshake_are_both_answered_on_one_connection(env: dict[str, str],
                                                                           tmp_path: Path) -> None:
    """Claude Code probes ``server/discover``, may give up waiting, then sends ``initialize``: an answered probe
    must not lock the connection to the newer era (the SDK's server refused the handshake with -32022)."""
    server = Server(env, tmp_path)
    try:
        probe = server.ask({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": _envelope()})
        assert probe["result"]["supportedVersions"] == list(MODERN_VERSIONS)
        assert probe["result"]["resultType"] == "complete" and probe["result"]["instructions"] == WORKFLOW
        assert probe["result"]["_meta"][SERVER_INFO_KEY]["name"] == "memcairn"

        hello = server.ask(_initialize(2))
        assert hello["result"]["protocolVersion"] == "2025-11-25" and hello["result"]["instructions"] == WORKFLOW
        old = server.ask({**_initialize(3), "params": {**_initialize()["params"], "protocolVersion": "2024-11-05"}})
        assert old["result"]["protocolVersion"] == "2024-11-05"

        listed = server.ask({"jsonrpc": "2.0", "id": 4, "method": "tools/list"})
        assert [t["name"] for t in listed["result"]["tools"]] == [t["name"] for t in TOOL_ENTRIES]
        assert "resultType" not in listed["result"]  # a handshake-era request gets a handshake-era result
        modern = server.ask({"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": _envelope()})
        assert modern["result"]["resultType"] == "complete" and len(modern["result"]["tools"]) == len(TOOL_ENTRIES)

        called = server.ask({"jsonrpc": "2.0", "id": 6, "method": "tools/call",
                             "params": {"name": "important_workflow", "arguments": {}, **_envelope()}})
        assert called["result"]["content"] == [{"type": "text", "text": WORKFLOW}]
        assert called["result"]["isError"] is False and called["result"]["resultType"] == "complete"

        future = server.ask({"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": _envelope("2099-01-01")})
        assert future["error"]["code"] == UNSUPPORTED_PROTOCOL_VERSION
        assert MODERN in future["error"]["data"]["supported"]
        unknown = server.ask({"jsonrpc": "2.0", "id": 8, "method": "resources/list"})
        assert unknown["error"]["code"] == -32601
    finally:
        server.close()


async def _sdk_session(params: Any, mode: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    async with Client(params, mode=mode) as client:  # type: ignore[arg-type]
        seen["tools"] = [t.name for t in (await client.list_tools()).tools]
        saved = await client.call_tool("save_memory", {"text": "The parser keeps byte offsets, not characters.",
                                                       "title": "Parser offsets are bytes"})
        seen["saved"] = (saved.is_error, text_of(saved))
        found = await client.call_tool("search", {"query": "parser byte offsets"})
        seen["search"] = (found.is_error, text_of(found))
    return seen


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_the_sdk_client_works_in_either_era_against_a_real_worker(env: dict[str, str],
                                                                  worker: WorkerClient,
                                                                  tmp_path: Path, mode: str) -> None:
    """``auto`` probes ``server/discover`` and settles on the 2026-07-28 era; ``legacy`` hands shakes."""
    params = StdioServerParameters(command=MEMCAIRN, args=["mcp"], env=env, cwd=str(tmp_path))
    seen = anyio.run(_sdk_session, params, mode)
    assert seen["tools"] == [t["name"] for t in TOOL_ENTRIES]
    assert seen["saved"][0] is False and seen["saved"][1].startswith("Saved as #")
    assert seen["search"][0] is False and "Parser offsets are bytes" in seen["search"][1]


async def _in_process_modern() -> str:
    async with Client(in_process(build_server()), mode=MODERN) as client:
        return text_of(await client.call_tool("important_workflow", {}))


def test_the_sdk_client_pinned_to_the_new_era_needs_no_probe() -> None:
    assert anyio.run(_in_process_modern) == WORKFLOW


@pytest.mark.parametrize("args", [["--platform", "nowhere"], ["--bogus"]])
def test_arguments_the_short_path_does_not_know_are_explained_by_the_full_command(
        args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert entry_main(["mcp", *args]) == 2
    assert "Usage: memcairn mcp" in capsys.readouterr().err


def test_the_start_up_bench_times_each_first_request_and_each_ending() -> None:
    from memcairn.bench import mcp as bench

    rows = bench.run(1)
    assert [(r["first request"], r["ended by"]) for r in rows] == [
        ("initialize", "eof"), ("initialize", "sigint"), ("server/discover", "eof"), ("server/discover", "sigint")]
    assert all(r["answer median_ms"] > 0 and r["exit median_ms"] >= 0 for r in rows)


def test_an_agent_configured_by_an_earlier_memcairn_still_starts_its_server(env: dict[str, str],
                                                                            tmp_path: Path) -> None:
    """Agents installed before the packages were cut by concept run ``from memcairn.entry import mcp``: an upgrade
    must not break them before ``memcairn install`` is run again."""
    proc = subprocess.run([sys.executable, "-I", "-c", "from memcairn.entry import mcp; mcp()"],
                          env={**os.environ, **env}, cwd=tmp_path, input=json.dumps(_initialize()).encode() + b"\n",
                          capture_output=True, timeout=30)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    assert json.loads(proc.stdout.splitlines()[0])["result"]["serverInfo"]["name"] == "memcairn"
