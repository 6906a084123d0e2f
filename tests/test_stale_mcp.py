"""The MCP `search` tool's `stale` flag lists, through a real worker and the MCP SDK's client, what the code no
longer supports with the `forget` call that drops them."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from anchored_notes import FILES, anchored
from git_repo import committed_repo
from mcp_helpers import IDENTITY, call_in_process, start_worker, worker_env

from memcairn.mcp.server import MemoryTools, WorkerGateway
from memcairn.store import Store
from memcairn.wire.client import WorkerClient
from memcairn.wire.config import load_settings

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


@pytest.fixture
def env(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    yield from worker_env(isolated_home, monkeypatch)


@pytest.fixture
def worker(env: dict[str, str]) -> WorkerClient:
    return start_worker(env)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return committed_repo(tmp_path / "shop", FILES)


def test_the_mcp_search_lists_stale_memories_and_how_to_forget_them(worker: WorkerClient, repo: Path) -> None:
    with Store(load_settings().db_path) as store:
        gone = anchored(store, repo, "cart.py", "Totals come from `cart_total`")
        changed = anchored(store, repo, "ship.py", "Shipping is priced by `ship_cost`")
    (repo / "cart.py").unlink()
    (repo / "ship.py").write_text(FILES["ship.py"] + "\n\ndef ship_days(zone):\n    return 2\n")

    tools = MemoryTools(WorkerGateway(lambda: worker), IDENTITY)
    error, text = anyio.run(call_in_process, tools, "search", {"project": "shop", "stale": True})
    assert not error
    assert f"#{gone} just now  Totals come from `cart_total`  [stale] (shop)" in text
    assert "cart.py deleted since" in text and f'forget {{"ids": [{gone}]}}' in text
    assert f"#{changed}" not in text
    error, _ = anyio.run(call_in_process, tools, "forget", {"ids": [gone]})
    assert not error
    error, text = anyio.run(call_in_process, tools, "search", {"project": "shop", "stale": True})
    assert not error and text.startswith("No memory is contradicted by the code now"), text
