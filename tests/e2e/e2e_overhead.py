"""What memcairn adds to a ``claude -p`` run: wall time with its hooks and MCP server installed against nothing
installed, runs alternating, same scripted model (one shell command, then the answer), same stub.

Run by hand (``PYTHONPATH=tests .venv/bin/python tests/e2e/e2e_overhead.py [runs]``); it prints each run and
the medians. Not a test: the figure depends on the machine and its load. The worker is started before the
runs, as a user's would be.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from e2e_claude import claude_env
from e2e_clients import CLAUDE_NATIVE
from e2e_harness import World
from e2e_stubs import Anthropic, ModelStub, call, say


def one_run(world: World, stub: ModelStub) -> float:
    stub.reset([call("Bash", {"command": "ls", "description": "list"}), say("done")])
    started = time.perf_counter()
    done = subprocess.run([str(CLAUDE_NATIVE.executable()), "-p", "List the files", "--dangerously-skip-permissions"],
                          env=claude_env(world, stub), cwd=world.workspace, capture_output=True, text=True,
                          timeout=180)
    took = time.perf_counter() - started
    assert done.returncode == 0, done.stderr
    return took


def without_mcp(world: World) -> None:
    """The installed hooks alone: memcairn's MCP server taken out of ``~/.claude.json`` again."""
    state = world.home / ".claude.json"
    data = json.loads(state.read_text())
    data.get("mcpServers", {}).pop("memcairn", None)
    state.write_text(json.dumps(data))


def main(runs: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="memcairn-overhead-"))
    worlds = {"nothing installed": World.make(root / "bare"), "hooks only": World.make(root / "hooks"),
              "hooks + MCP": World.make(root / "installed")}
    for name in ("hooks only", "hooks + MCP"):
        worlds[name].env["MEMCAIRN_PORT"] = worlds["hooks + MCP"].env["MEMCAIRN_PORT"]
        worlds[name].env["MEMCAIRN_HOME"] = worlds["hooks + MCP"].env["MEMCAIRN_HOME"]
        worlds[name].install("claude-code")
    without_mcp(worlds["hooks only"])
    worlds["hooks + MCP"].start_worker()
    stub = ModelStub(Anthropic())
    times: dict[str, list[float]] = {name: [] for name in worlds}
    try:
        for world in worlds.values():  # warm the disk cache and the worker once
            one_run(world, stub)
        for i in range(runs):
            for name, world in worlds.items():
                times[name].append(one_run(world, stub))
                print(f"run {i + 1} {name}: {times[name][-1]:.2f} s", flush=True)
    finally:
        stub.close()
        worlds["hooks + MCP"].stop()
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, value in medians.items():
        print(f"median {name}: {value:.2f} s")
    for name in ("hooks only", "hooks + MCP"):
        print(f"overhead of {name}: {medians[name] - medians['nothing installed']:+.2f} s")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
