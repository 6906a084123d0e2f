"""What the MCP tests share: the console script, a real worker for a test's home (``worker_env`` and ``start_worker``,
which a module's fixtures call), and calling a tool of a ``MemoryTools`` in this process through the SDK's
client."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_in_process import in_process
from processes import free_port, processes_of, with_args

from memcairn.core.project import ProjectIdentity
from memcairn.mcp.server import MemoryTools, WorkerGateway, build_server
from memcairn.wire import lifecycle
from memcairn.wire.client import WorkerClient
from memcairn.wire.config import load_settings

MEMCAIRN = str(Path(sys.executable).with_name("memcairn"))
IDENTITY = ProjectIdentity("demo", ("demo",))


MEMCAIRN = str(Path(sys.executable).with_name("memcairn"))
def processes_with(home: Path, *words: bytes) -> list[int]:
    """Live processes whose argv holds every word and whose MEMCAIRN_HOME is ``home``."""
    return processes_of(home, with_args(*words))


def worker_env(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """MEMCAIRN_* for one test (its own home, a free port, the hash embedder); stops its worker after (a module's
    ``env`` fixture yields from it)."""
    monkeypatch.setenv("MEMCAIRN_PORT", str(free_port()))
    monkeypatch.setenv("MEMCAIRN_EMBEDDING_MODEL", "hash")
    yield {k: v for k, v in os.environ.items() if k.startswith("MEMCAIRN_")} | {"PATH": os.environ["PATH"]}
    try:
        lifecycle.stop(load_settings(), timeout=10)
    finally:
        for pid in processes_with(isolated_home, b"worker", b"run"):
            os.kill(pid, signal.SIGKILL)
        for pid in processes_with(isolated_home, b"mcp"):
            os.kill(pid, signal.SIGKILL)


def start_worker(env: dict[str, str]) -> WorkerClient:
    """``memcairn worker start`` for ``env``'s home; its client."""
    started = subprocess.run([MEMCAIRN, "worker", "start", "--json"], env={**os.environ, **env}, capture_output=True,
                             text=True, timeout=60)
    assert started.returncode == 0, started.stderr
    return WorkerClient(settings=load_settings())


def text_of(result: Any) -> str:
    assert len(result.content) == 1 and result.content[0].type == "text"
    return result.content[0].text


async def call_in_process(tools: MemoryTools, name: str, arguments: dict[str, Any]) -> tuple[bool, str]:
    async with Client(in_process(build_server(tools))) as client:
        result = await client.call_tool(name, arguments)
        return result.is_error, text_of(result)


class BatchClient:
    """Answers ``/api/observations/batch`` with the records it holds."""

    def __init__(self, records: dict[int, dict[str, Any]]) -> None:
        self.records = records

    def post_json(self, path: str, body: Any) -> Any:
        ids = body["ids"]
        return {"items": [self.records[i] for i in ids if i in self.records],
                "missing": [i for i in ids if i not in self.records]}


class RecordingClient:
    """Records what the tools send and answers a search with ``rows`` manual notes."""

    def __init__(self, rows: int = 0) -> None:
        self.rows = rows
        self.sent: list[tuple[str, Any]] = []

    def get_json(self, path: str, params: dict[str, Any] | None = None) -> Any:
        self.sent.append((path, params))
        if path.startswith("/api/memory/"):
            return {"id": 12, "project": "demo"}
        return {"text": f"{self.rows} memories\n", "counts": {"manual": self.rows}}

    def post_json(self, path: str, body: Any) -> Any:
        self.sent.append((path, body))
        return {"id": 7, "created": True} if path == "/api/memory/save" else {"items": []}


def recorded(name: str, arguments: dict[str, Any], rows: int = 0) -> tuple[bool, str, list[tuple[str, Any]]]:
    client = RecordingClient(rows)
    tools = MemoryTools(WorkerGateway(lambda: client), IDENTITY)  # type: ignore[arg-type, return-value]
    error, text = anyio.run(call_in_process, tools, name, arguments)
    return error, text, client.sent
