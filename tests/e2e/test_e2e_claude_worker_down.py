"""Claude Code itself with the worker gone mid-session: what the hooks could not hand over is kept and stored
once the worker is back (see test_e2e_claude_code for the set-up)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from e2e_claude import anthropic_stub, claude_world, run_claude, session_of
from e2e_clients import CLAUDE_NATIVE, missing_message
from e2e_harness import World
from e2e_stubs import Call, ModelStub, say

pytestmark = pytest.mark.slow


@pytest.fixture
def world(tmp_path: Path) -> Any:
    yield from claude_world(tmp_path)


@pytest.fixture
def stub(tmp_path: Path) -> Any:
    yield from anthropic_stub(tmp_path)


def test_a_tool_call_made_while_the_worker_is_down_is_stored_once_it_is_back(world: World, stub: ModelStub,
                                                                          tmp_path: Path) -> None:
    """The worker stops while the model picks its tool (a restart, an upgrade); ``claude -p`` runs the command
    and exits right after. The hooks keep the events locally, and the worker, once started again, stores them."""
    if not CLAUDE_NATIVE.installed():
        pytest.fail(missing_message(CLAUDE_NATIVE))

    def stop_then_call(request: dict[str, Any]) -> Call:
        world.memcairn("worker", "stop")
        return Call("Bash", {"command": "echo while-the-worker-was-down", "description": "echo"})

    stub.reset([stop_then_call, say("done")])
    lines = run_claude(CLAUDE_NATIVE, world, stub, "Echo something while the worker is down", tmp_path / "d.txt")
    session = session_of(lines)
    world.start_worker()

    def kept() -> list[tuple[str, str | None]]:  # the spool is drained at start and then every second
        return [(e["event_type"], e["payload"].get("event")) for e in world.events(session)]

    world.wait_until(lambda: ("observation", "tool_use") in kept() and ("summarize", "stop") in kept(), 30,
                     "the kept events to be queued")
    world.settled()
    events = world.events(session)
    commands = [e["payload"].get("tool_input", {}).get("command") for e in events if e["event_type"] == "observation"]
    assert commands == ["echo while-the-worker-was-down"], [(e["event_type"], e["payload"].get("event"))
                                                            for e in events]
    assert ("summarize", "stop") in [(e["event_type"], e["payload"].get("event")) for e in events]
