"""Codex CLI itself, offline against a stub of the OpenAI Responses API, with memcairn installed into a fresh HOME.

Session 1: the scripted model runs a command (``exec_command``, which hooks see as ``Bash``) and edits a file
(``apply_patch``): every hook reaches the worker and the prompt, the command and the edit are stored. Session 2:
the first request carries the digest with that memory and memcairn's MCP tools (one ``namespace`` tool), and the
model's search call gets the memory back. Codex has no SessionEnd event.

Codex offers ``apply_patch`` only to models its catalogue describes (an unknown name falls back to metadata
without it), and for its own models it defers MCP tools behind a search tool; the tests give it a catalogue
(``model_catalog_json``) of one model with the one and without the other.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from e2e_clients import CODEX, missing_message
from e2e_harness import World
from e2e_stubs import Call, ModelStub, Responses, call, say

pytestmark = pytest.mark.slow

PROMPT_1 = "Raise the retry limit in config.ini to five"
COMMAND = "grep -n retries config.ini"
PATCH = "*** Begin Patch\n*** Update File: config.ini\n@@\n-retries = 3\n+retries = 5\n*** End Patch\n"
KEY_VARIABLE = "MEMCAIRN_E2E_STUB_KEY"


# The one model of the catalogue these tests give Codex: it edits with the freeform apply_patch tool and has no
# tool search, so MCP tools are listed in the request rather than deferred behind a search tool.
STUB_MODEL = {
    "slug": "stub-model", "display_name": "stub model", "description": "the end-to-end tests' scripted model",
    "apply_patch_tool_type": "freeform", "shell_type": "shell_command", "supports_search_tool": False,
    "supports_parallel_tool_calls": False, "context_window": 200000, "max_context_window": 200000,
    "truncation_policy": {"mode": "tokens", "limit": 10000}, "input_modalities": ["text"], "visibility": "list",
    "supported_in_api": True, "priority": 1, "default_reasoning_level": "medium", "supported_reasoning_levels": [],
    "default_reasoning_summary": "none", "supports_reasoning_summary_parameter": False,
    "supports_reasoning_summaries": False, "support_verbosity": False, "experimental_supported_tools": [],
    "base_instructions": "You are a scripted test model.",
}


def offline_config(stub: ModelStub, catalogue: Path) -> str:
    """``~/.codex/config.toml`` that reaches nothing but the stub (written before ``memcairn install codex``)."""
    catalogue.write_text(json.dumps({"models": [STUB_MODEL]}))
    return f"""model = "stub-model"
model_catalog_json = "{catalogue}"
model_provider = "stub"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false

[model_providers.stub]
name = "stub"
base_url = "{stub.url}/v1"
wire_api = "responses"
env_key = "{KEY_VARIABLE}"

[analytics]
enabled = false

[history]
persistence = "none"

[features]
plugins = false
remote_plugin = false
apps = false
"""


def run_codex(world: World, prompt: str) -> str:
    done = subprocess.run([str(CODEX.executable()), "exec", "--skip-git-repo-check",
                           "--dangerously-bypass-approvals-and-sandbox", "--dangerously-bypass-hook-trust", prompt],
                          env={**world.env, KEY_VARIABLE: "sk-stub"}, cwd=world.workspace, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"codex exited {done.returncode}: {done.stderr[-3000:]}"
    return done.stderr


def texts(request: dict[str, Any], role: str) -> list[str]:
    out = []
    for item in request.get("input", []):
        if item.get("type") == "message" and item.get("role") == role:
            out += [part.get("text", "") for part in item.get("content", []) if isinstance(part, dict)]
    return out


def output_of(request: dict[str, Any], call_id: str) -> str:
    for item in request.get("input", []):
        if item.get("type") == "function_call_output" and item.get("call_id") == call_id:
            output = item.get("output")
            if isinstance(output, list):
                return "".join(part.get("text", "") for part in output if isinstance(part, dict))
            return output if isinstance(output, str) else json.dumps(output)
    raise AssertionError(f"no function_call_output for {call_id}")


@pytest.fixture
def stub(tmp_path: Path) -> Any:
    made = ModelStub(Responses())
    yield made
    made.close(tmp_path / "model-requests.jsonl")  # every request, to read after a failure
    assert not made.others, f"requests the stub does not serve: {made.others}"


@pytest.fixture
def world(tmp_path: Path, stub: ModelStub) -> Any:
    made = World.make(tmp_path)
    (made.home / ".codex").mkdir()
    (made.home / ".codex" / "config.toml").write_text(offline_config(stub, made.home / "codex-models.json"))
    made.start_worker()
    made.install("codex")
    yield made
    made.stop()


def test_codex_hooks_injection_and_mcp_search(world: World, stub: ModelStub) -> None:
    if not CODEX.installed():
        pytest.fail(missing_message(CODEX))
    config = world.workspace / "config.ini"
    config.write_text("retries = 3\n")

    # -- session 1 -------------------------------------------------------------------------------------
    stub.reset([call("exec_command", {"cmd": COMMAND}), lambda request: Call("apply_patch", {}, freeform=PATCH),
                say("The retry limit is now 5.")])
    log = run_codex(world, PROMPT_1)
    assert config.read_text() == "retries = 5\n"
    for hook in ("SessionStart", "UserPromptSubmit", "PostToolUse", "Stop"):
        assert f"hook: {hook} Completed" in log, log[-3000:]
    world.settled()
    events = world.events()
    kinds = [(e["event_type"], e["payload"].get("event")) for e in events]
    assert kinds.count(("session_init", "session_start")) == 1 and kinds.count(("session_init", "user_prompt")) == 1
    assert ("summarize", "stop") in kinds, kinds
    tools = {e["tool_use_id"]: e["payload"] for e in events if e["event_type"] == "observation"}
    assert set(tools) == {"call_stub0", "call_stub1"}, tools
    assert tools["call_stub0"]["tool_name"] == "Bash" and tools["call_stub0"]["tool_input"]["command"] == COMMAND
    assert tools["call_stub1"]["tool_name"] == "apply_patch"
    assert all(e["status"] == "done" for e in events)
    items = world.items()
    assert [i["text"] for i in items if i["kind"] == "prompt"] == [PROMPT_1]
    # an episode keeps its lookup commands among its facts (the edit is the narrative)
    observations = " ".join(f"{i['title']} {i['narrative']} {i['facts']}" for i in items if i["kind"] == "observation")
    assert COMMAND in observations and "Edited config.ini" in observations, observations

    # -- session 2 -------------------------------------------------------------------------------------
    stub.reset([lambda request: Call("search", {"query": "retries config.ini"}, namespace="mcp__memcairn"),
                say("config.ini's retry limit was raised to 5 last time.")])
    run_codex(world, "What did we change in config.ini last time?")
    first = stub.requests[0].body
    digests = [t for t in texts(first, "developer") if "<memcairn-memory" in t]
    assert digests, texts(first, "developer")
    digest = digests[0].split("</memcairn-memory>")[0]
    assert "Edited config.ini" in digest and PROMPT_1 in digest, digest

    namespaces = {t.get("name"): t for t in first.get("tools", []) if t.get("type") == "namespace"}
    assert "mcp__memcairn" in namespaces, [t.get("name") for t in first.get("tools", [])]
    # the hook gave the digest (above): the MCP server's instructions, shown as the namespace's description, do
    # not give it a second time
    described = json.dumps(namespaces["mcp__memcairn"])
    assert "<memcairn-memory" not in described and "Edited config.ini" not in described, described[:3000]
    offered = {t.get("name") for t in namespaces["mcp__memcairn"].get("tools", [])}
    assert {"search", "timeline", "get_observations", "save_memory"} <= offered, offered

    answer = output_of(stub.requests[1].body, "call_stub0")
    assert "Edited config.ini" in answer, answer
    print("after uninstall:", world.uninstall_leaves_the_agent_as_before("codex") or "every file as before")
