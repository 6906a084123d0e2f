"""What memcairn adds to a ``claude -p`` run: wall time with its hooks and MCP server installed against nothing
installed, runs alternating, same scripted model (one shell command, then the answer), same stub.

Run by hand (``PYTHONPATH=tests .venv/bin/python tests/e2e/e2e_overhead.py [runs]``); it prints each run and
the medians. Not a test: the figure depends on the machine and its load. The worker is started before the
runs, as a user's would be.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from e2e_clients import CLAUDE_NATIVE
from e2e_harness import World
from e2e_stubs import Anthropic, ModelStub, call, say
from test_e2e_claude_code import claude_env


def one_run(world: World, stub: ModelStub) -> float:
    stub.reset([call("Bash", {"command": "ls", "description": "list"}), say("done")])
    started = time.perf_counter()
    done = subprocess.run([str(CLAUDE_NATIVE.executable()), "-p", "List the files", "--dangerously-skip-permissions"],
                          env=claude_env(world, stub), cwd=world.workspace, capture_output=True, text=True,
                          timeout=180)
    took = time.perf_counter() - started
    assert done.returncode == 0, done.stderr
    return took


def main(runs: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="memcairn-overhead-"))
    bare, installed = World.make(root / "bare"), World.make(root / "installed")
    installed.start_worker()
    installed.install("claude-code")
    stub = ModelStub(Anthropic())
    times: dict[str, list[float]] = {"nothing installed": [], "hooks + MCP": []}
    try:
        one_run(installed, stub)  # warm the disk cache and the worker once, for both
        one_run(bare, stub)
        for i in range(runs):
            for name, world in (("nothing installed", bare), ("hooks + MCP", installed)):
                times[name].append(one_run(world, stub))
                print(f"run {i + 1} {name}: {times[name][-1]:.2f} s", flush=True)
    finally:
        stub.close()
        installed.stop()
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, value in medians.items():
        print(f"median {name}: {value:.2f} s")
    print(f"overhead: {medians['hooks + MCP'] - medians['nothing installed']:+.2f} s")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
