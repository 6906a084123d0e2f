"""Claude Code itself, offline against a stub of the Anthropic API, with memcairn installed into a fresh HOME.

Session 1: the scripted model runs a shell command, reads and edits a file: every hook reaches the worker and
the prompt, the command and the edit are stored. Session 2: the first model request carries the SessionStart
digest with session 1's memory, offers memcairn's MCP tools, and the model's search call gets that memory
back. Both the newest release (its native binary) and the one a plain ``npm install`` resolves to on Node 20.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from e2e_claude import anthropic_stub, claude_env, claude_world, run_claude, session_of
from e2e_clients import CLAUDE_NATIVE, CLAUDE_NPM, Cli, missing_message
from e2e_harness import World
from e2e_stubs import Call, ModelStub, Say, Turn, call, say

pytestmark = pytest.mark.slow

SEARCH = "mcp__memcairn__search"
PROMPT_1 = "Raise the retry limit in config.ini to five"
COMMAND = "grep -n retries config.ini"
DIGEST_PREFIX = "SessionStart hook additional context:"


def hook_outcomes(lines: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Hook name (``PostToolUse:Bash``) -> the outcomes of its runs, as the stream reports them."""
    out: dict[str, list[str]] = {}
    for line in lines:
        if line.get("type") == "system" and line.get("subtype") == "hook_response":
            out.setdefault(line["hook_name"], []).append(f"{line.get('outcome')}:{line.get('exit_code')}")
    return out


def tool_names(request: dict[str, Any]) -> list[str]:
    return [t.get("name", "") for t in request.get("tools", [])]


def system_texts(request: dict[str, Any]) -> list[str]:
    """The harness's own messages (hook context among them), which Claude Code sends with ``role: system``."""
    texts = []
    for message in request.get("messages", []):
        if message.get("role") != "system":
            continue
        content = message.get("content")
        parts = [content] if isinstance(content, str) else [p.get("text", "") for p in content or []]
        texts += [p for p in parts if p]
    return texts


def tool_result(request: dict[str, Any], tool_use_id: str) -> str:
    for message in request.get("messages", []):
        for block in message.get("content", []) if isinstance(message.get("content"), list) else []:
            if block.get("type") == "tool_result" and block.get("tool_use_id") == tool_use_id:
                content = block.get("content")
                return content if isinstance(content, str) else "".join(p.get("text", "") for p in content or [])
    raise AssertionError(f"no tool_result for {tool_use_id}")


def search_when_offered(query: str) -> Turn:
    """Call memcairn's search once the request offers it (2.1.197 lists MCP tools from its second request on);
    until then run a harmless command."""
    def turn(request: dict[str, Any]) -> Call | Say:
        if SEARCH in tool_names(request):
            return Call(SEARCH, {"query": query})
        return Call("Bash", {"command": "true", "description": "wait"})
    return turn


def first_session(cli: Cli, world: World, stub: ModelStub, tmp_path: Path) -> str:
    config = world.workspace / "config.ini"
    config.write_text("[client]\nretries = 3\n")
    stub.reset([call("Bash", {"command": COMMAND, "description": "Show the retry setting"}),
                call("Read", {"file_path": str(config)}),
                call("Edit", {"file_path": str(config), "old_string": "retries = 3", "new_string": "retries = 5"}),
                say("The retry limit is now 5.")])
    lines = run_claude(cli, world, stub, PROMPT_1, tmp_path / "debug-1.txt")
    assert config.read_text() == "[client]\nretries = 5\n"
    session = session_of(lines)

    outcomes = hook_outcomes(lines)
    for hook in ("SessionStart:startup", "UserPromptSubmit", "PreToolUse:Read", "Stop"):
        assert outcomes.get(hook) == ["success:0"], (hook, outcomes)
    for hook in ("PostToolUse:Bash", "PostToolUse:Read", "PostToolUse:Edit"):
        # async: the last one is often cancelled as claude -p exits; its event must reach the worker all the same
        assert len(outcomes.get(hook, [])) == 1 and outcomes[hook][0].split(":")[0] in ("success", "cancelled"), (
            hook, outcomes)
    # SessionEnd runs after the result line: its run is proven below by its event reaching the worker (the
    # debug file, where Claude Code logs it, was found unflushed when read right after 2.1.197 exited)

    world.settled()
    events = world.events(session)
    kinds = [(e["event_type"], e["payload"].get("event")) for e in events]
    assert kinds.count(("session_init", "session_start")) == 1, kinds
    assert kinds.count(("session_init", "user_prompt")) == 1, kinds
    assert ("summarize", "stop") in kinds, kinds
    # 2.1.197 runs no SessionEnd hook at all after cancelling an async hook as it exits (measured with a hook that
    # logs its start and signals: the cancelled PostToolUse got SIGTERM, the SessionEnd hook never started); the
    # newest release runs it either way. Only then may the session end be missing.
    cancelled = any(o.startswith("cancelled") for hook, runs in outcomes.items() if hook.startswith("PostToolUse")
                    for o in runs)
    if not (cli is CLAUDE_NPM and cancelled):
        assert ("summarize", "session_end") in kinds, kinds
    tools = {e["payload"].get("tool_name"): e for e in events if e["event_type"] == "observation"}
    assert set(tools) == {"Bash", "Read", "Edit"}, tools
    assert tools["Bash"]["payload"]["tool_input"]["command"] == COMMAND
    assert tools["Edit"]["payload"]["tool_input"]["new_string"] == "retries = 5"
    assert all(e["status"] == "done" for e in events), [(e["event_type"], e["status"]) for e in events]

    items = world.items()
    assert [i["text"] for i in items if i["kind"] == "prompt"] == [PROMPT_1]
    # an episode keeps its lookup commands among its facts (the edit is the narrative)
    observations = " ".join(f"{i['title']} {i['narrative']} {i['facts']}" for i in items if i["kind"] == "observation")
    assert COMMAND in observations and "Edited config.ini" in observations, observations
    return session


def second_session(cli: Cli, world: World, stub: ModelStub, tmp_path: Path) -> None:
    stub.reset([search_when_offered("retries config.ini"), search_when_offered("retries config.ini"),
                say("config.ini's retry limit was raised to 5 last time.")])
    run_claude(cli, world, stub, "What did we change in config.ini last time?", tmp_path / "debug-2.txt")

    first = stub.requests[0].body
    digests = [t for t in system_texts(first) if t.startswith(DIGEST_PREFIX)]
    assert len(digests) == 1 and "<memcairn-memory" in digests[0], system_texts(first)
    digest = digests[0].split("</memcairn-memory>")[0]
    assert "Edited config.ini" in digest and PROMPT_1 in digest, digest

    offered = [i for i, r in enumerate(stub.requests) if SEARCH in tool_names(r.body)]
    assert offered, [tool_names(r.body) for r in stub.requests]
    if cli is CLAUDE_NATIVE:
        assert offered[0] == 0  # connected before the first model request
    listed = tool_names(stub.requests[offered[0]].body)
    assert {f"mcp__memcairn__{n}" for n in ("search", "timeline", "get_observations", "save_memory")} <= set(listed)

    searched = offered[0]  # the turn that called search; its result is in the next request
    answer = tool_result(stub.requests[searched + 1].body, f"toolu_stub{searched:04d}")
    assert "Edited config.ini" in answer, answer


@pytest.fixture
def world(tmp_path: Path) -> Any:
    yield from claude_world(tmp_path)


@pytest.fixture
def stub(tmp_path: Path) -> Any:
    yield from anthropic_stub(tmp_path)


@pytest.mark.parametrize("cli", [CLAUDE_NATIVE, CLAUDE_NPM], ids=["newest-native", "plain-npm"])
def test_claude_code_hooks_injection_and_mcp_search(cli: Cli, world: World, stub: ModelStub, tmp_path: Path) -> None:
    if not cli.installed():
        pytest.fail(missing_message(cli))
    first_session(cli, world, stub, tmp_path)
    second_session(cli, world, stub, tmp_path)
    print("after uninstall:", world.uninstall_leaves_the_agent_as_before("claude-code") or "every file as before")


def test_claude_p_exiting_right_after_a_tool_call_loses_no_event(world: World, stub: ModelStub,
                                                                 tmp_path: Path) -> None:
    """The model's last word comes straight after a tool call, so ``claude -p`` exits at once: an async
    PostToolUse hook still running then is cancelled. Its event must have reached the worker first."""
    if not CLAUDE_NATIVE.installed():
        pytest.fail(missing_message(CLAUDE_NATIVE))
    sessions = []
    for attempt in range(2):
        stub.reset([call("Bash", {"command": f"echo attempt-{attempt}", "description": "echo"}), say("done")])
        lines = run_claude(CLAUDE_NATIVE, world, stub, f"Echo attempt {attempt}", tmp_path / f"debug-{attempt}.txt")
        sessions.append(session_of(lines))
    world.settled()
    for attempt, session in enumerate(sessions):
        commands = [e["payload"].get("tool_input", {}).get("command") for e in world.events(session)
                    if e["event_type"] == "observation"]
        assert commands == [f"echo attempt-{attempt}"], (attempt, commands)


def test_with_tool_search_on_the_model_finds_memcairn_and_housekeeping_is_not_remembered(
        world: World, stub: ModelStub, tmp_path: Path) -> None:
    """Claude Code's default: MCP tools are deferred behind its ToolSearch tool. The model loads memcairn's search
    through it and calls it; neither ToolSearch nor memcairn's own tool becomes a memory."""
    if not CLAUDE_NATIVE.installed():
        pytest.fail(missing_message(CLAUDE_NATIVE))
    stub.reset([call("ToolSearch", {"query": f"select:{SEARCH}", "max_results": 5}),
                call(SEARCH, {"query": "retry limit"}), say("Nothing about the retry limit yet.")])
    env = claude_env(world, stub)
    del env["ENABLE_TOOL_SEARCH"], env["MCP_CONNECTION_NONBLOCKING"]
    prompt = "Does memory say anything about the retry limit?"
    done = subprocess.run([str(CLAUDE_NATIVE.executable()), "-p", prompt, "--dangerously-skip-permissions"],
                          env=env, cwd=world.workspace, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    assert SEARCH not in tool_names(stub.requests[0].body) and SEARCH in tool_names(stub.requests[1].body)
    assert "1 memory (1 prompt)" in tool_result(stub.requests[2].body, "toolu_stub0001")  # this session's prompt

    world.settled()
    tools = [e["payload"].get("tool_name") for e in world.events() if e["event_type"] == "observation"]
    assert SEARCH not in tools  # the hook does not even send memcairn's own calls
    assert [(i["kind"], i["text"] or i["title"]) for i in world.items()] == [("prompt", prompt),
                                                                           ("summary", prompt)]
