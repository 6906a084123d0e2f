"""Claude Code itself against memcairn, shared by the Claude Code end-to-end tests: its environment pointed at the
model stub, ``claude -p`` run to the end, and the set-up (a world with the worker and the install, the stub)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from e2e_clients import Cli
from e2e_harness import World
from e2e_stubs import Anthropic, ModelStub


def claude_env(world: World, stub: ModelStub) -> dict[str, str]:
    return {**world.env, "ANTHROPIC_BASE_URL": stub.url, "ANTHROPIC_API_KEY": "sk-ant-stub",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1",
            "DISABLE_ERROR_REPORTING": "1", "IS_SANDBOX": "1",  # --dangerously-skip-permissions as root
            # every MCP tool in the request's tools (not deferred behind ToolSearch), connected before the first
            "ENABLE_TOOL_SEARCH": "false", "MCP_CONNECTION_NONBLOCKING": "false"}


def run_claude(cli: Cli, world: World, stub: ModelStub, prompt: str, debug: Path) -> list[dict[str, Any]]:
    """``claude -p`` to the end; its stream-json lines (hook events included)."""
    done = subprocess.run([str(cli.executable()), "-p", prompt, "--dangerously-skip-permissions",
                           "--output-format", "stream-json", "--verbose", "--include-hook-events",
                           "--debug-file", str(debug)],
                          env=claude_env(world, stub), cwd=world.workspace, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"claude exited {done.returncode}: {done.stderr[-2000:]}"
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    results = [line for line in lines if line.get("type") == "result"]
    assert [r.get("subtype") for r in results] == ["success"], [(x.get("type"), x.get("subtype")) for x in lines]
    return lines


def session_of(lines: list[dict[str, Any]]) -> str:
    return next(line["session_id"] for line in lines if line.get("session_id"))


def claude_world(tmp_path: Path) -> Iterator[World]:
    """A home with a running worker and memcairn installed for Claude Code (a module's ``world`` fixture)."""
    made = World.make(tmp_path)
    made.start_worker()
    made.install("claude-code")
    yield made
    made.stop()


def anthropic_stub(tmp_path: Path) -> Iterator[ModelStub]:
    """The Anthropic API's stand-in; every request kept beside the test (a module's ``stub`` fixture)."""
    made = ModelStub(Anthropic())
    yield made
    made.close(tmp_path / "model-requests.jsonl")  # every request, to read after a failure
    assert not made.others, f"requests the stub does not serve: {made.others}"
