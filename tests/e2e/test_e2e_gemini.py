"""Gemini CLI itself, offline against a stub of the Gemini API, with memcairn installed into a fresh HOME.

Session 1: the scripted model runs a shell command and edits a file (``replace``): every hook (SessionStart,
BeforeAgent, AfterTool, AfterAgent, SessionEnd) reaches the worker and the prompt, the command and the edit are
stored. Session 2: the first request carries the digest with that memory (Gemini prepends SessionStart context
to the prompt, HTML-escaped, in ``<hook_context>``) and memcairn's MCP tools (``mcp_memcairn_<tool>``), and the
model's search call gets the memory back.
"""

from __future__ import annotations

import html
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from e2e_clients import GEMINI, missing_message
from e2e_harness import World
from e2e_stubs import Gemini, ModelStub, call, say

pytestmark = pytest.mark.slow

PROMPT_1 = "Raise the retry limit in config.ini to five"
COMMAND = "grep -n retries config.ini"
MODEL = "gemini-2.5-flash"


def offline_settings() -> dict[str, Any]:
    """``~/.gemini/settings.json`` before ``memcairn install gemini``: an API key (the base URL alone selects a
    gateway auth the CLI refuses), no update checks, no telemetry."""
    return {"security": {"auth": {"selectedType": "gemini-api-key"}},
            "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
            "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False}, "model": {"name": MODEL}}


def run_gemini(world: World, stub: ModelStub, prompt: str) -> None:
    env = {**world.env, "GEMINI_API_KEY": "stub-key", "GOOGLE_GEMINI_BASE_URL": stub.url,
           "GEMINI_CLI_TRUST_WORKSPACE": "true",  # an untrusted folder exits 55 and starts no stdio MCP server
           # as on a CI runner: Gemini then strips variables it does not know (MEMCAIRN_PORT, so the hooks and the
           # MCP server would look for another worker) from hooks and MCP servers unless the settings allow them
           "GITHUB_SHA": "0" * 40}
    done = subprocess.run([str(GEMINI.executable()), "-p", prompt, "--yolo"], env=env, cwd=world.workspace,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"gemini exited {done.returncode}: {done.stdout[-1500:]}{done.stderr[-3000:]}"


def user_texts(request: dict[str, Any]) -> list[str]:
    return [part["text"] for content in request.get("contents", []) if content.get("role") == "user"
            for part in content.get("parts", []) if "text" in part]


def declared(request: dict[str, Any]) -> list[str]:
    return [f.get("name", "") for tool in request.get("tools", []) for f in tool.get("functionDeclarations", [])]


def function_response(request: dict[str, Any], name: str) -> str:
    for content in request.get("contents", []):
        for part in content.get("parts", []):
            if part.get("functionResponse", {}).get("name") == name:
                return json.dumps(part["functionResponse"].get("response"))
    raise AssertionError(f"no functionResponse for {name}")


@pytest.fixture
def stub(tmp_path: Path) -> Any:
    made = ModelStub(Gemini())
    yield made
    made.close(tmp_path / "model-requests.jsonl")  # every request, to read after a failure
    assert not made.others, f"requests the stub does not serve: {made.others}"


@pytest.fixture
def world(tmp_path: Path) -> Any:
    made = World.make(tmp_path)
    (made.home / ".gemini").mkdir()
    (made.home / ".gemini" / "settings.json").write_text(json.dumps(offline_settings()))
    made.start_worker()
    made.install("gemini")
    yield made
    made.stop()


def test_gemini_cli_hooks_injection_and_mcp_search(world: World, stub: ModelStub) -> None:
    if not GEMINI.installed():
        pytest.fail(missing_message(GEMINI))
    config = world.workspace / "config.ini"
    config.write_text("retries = 3\n")

    # -- session 1 -------------------------------------------------------------------------------------
    stub.reset([call("run_shell_command", {"command": COMMAND}),
                call("replace", {"file_path": str(config), "old_string": "retries = 3", "new_string": "retries = 5",
                                 "instruction": "Raise the retry limit to five"}),
                say("The retry limit is now 5.")])
    run_gemini(world, stub, PROMPT_1)
    assert config.read_text() == "retries = 5\n"
    world.settled()
    events = world.events()
    kinds = [(e["event_type"], e["payload"].get("event")) for e in events]
    assert kinds.count(("session_init", "session_start")) == 1 and kinds.count(("session_init", "user_prompt")) == 1
    assert ("summarize", "stop") in kinds and ("summarize", "session_end") in kinds, kinds
    tools = [(e["payload"].get("tool_name"), e["payload"].get("tool_input")) for e in events
             if e["event_type"] == "observation"]
    assert [name for name, _ in tools] == ["run_shell_command", "replace"], tools
    assert tools[0][1]["command"] == COMMAND and tools[1][1]["new_string"] == "retries = 5"
    assert all(e["status"] == "done" for e in events)
    items = world.items()
    assert [i["text"] for i in items if i["kind"] == "prompt"] == [PROMPT_1]
    # an episode keeps its lookup commands among its facts (the edit is the narrative)
    observations = " ".join(f"{i['title']} {i['narrative']} {i['facts']}" for i in items if i["kind"] == "observation")
    assert COMMAND in observations and "Edited config.ini" in observations, observations

    # -- session 2 -------------------------------------------------------------------------------------
    stub.reset([call("mcp_memcairn_search", {"query": "retries config.ini"}),
                say("config.ini's retry limit was raised to 5 last time.")])
    run_gemini(world, stub, "What did we change in config.ini last time?")
    first = stub.requests[0].body
    contexts = [html.unescape(t) for t in user_texts(first) if "<hook_context>" in t]
    assert contexts and "<memcairn-memory" in contexts[0], user_texts(first)
    digest = contexts[0].split("</memcairn-memory>")[0]
    assert "Edited config.ini" in digest and PROMPT_1 in digest, digest

    offered = set(declared(first))
    assert {f"mcp_memcairn_{n}" for n in ("search", "timeline", "get_observations", "save_memory")} <= offered

    answer = function_response(stub.requests[1].body, "mcp_memcairn_search")
    assert "Edited config.ini" in answer, answer
    print("after uninstall:", world.uninstall_leaves_the_agent_as_before("gemini") or "every file as before")
