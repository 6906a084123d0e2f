"""``memcairn bench mcp``: how soon a freshly spawned ``memcairn mcp`` answers, and how soon it exits.

An agent waits for its MCP servers before its first model request, so the time from spawn to the first
answer (interpreter start included) is what a user waits for. Each run spawns the server, sends one request
and times its answer, then ends it (closing its input, or SIGINT as Claude Code does) and times the exit.
No worker is needed: nothing before a tool call reaches one.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from memcairn.bench.timing import summary_ms

FIRST_REQUESTS = {
    "initialize": {"method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                                      "clientInfo": {"name": "bench", "version": "0"}}},
    "server/discover": {"method": "server/discover", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {}}}},
}


def _command() -> list[str]:
    script = Path(sys.executable).with_name("memcairn")
    return [str(script), "mcp"] if script.exists() else [sys.executable, "-m", "memcairn", "mcp"]


def one(first: str, stop: str) -> tuple[float, float]:
    """Milliseconds from spawn to the answer of ``first``, and from ``stop`` ("eof" or "sigint") to the exit."""
    started = time.perf_counter()
    proc = subprocess.Popen(_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 1, **FIRST_REQUESTS[first]}).encode() + b"\n")
        proc.stdin.flush()
        answer = json.loads(proc.stdout.readline())
        answered = time.perf_counter()
        if "result" not in answer:
            raise RuntimeError(f"memcairn mcp refused {first}: {answer}")
        if stop == "sigint":
            proc.send_signal(signal.SIGINT)
        else:
            proc.stdin.close()
        ending = time.perf_counter()
        proc.wait(timeout=30)
        return (answered - started) * 1000, (time.perf_counter() - ending) * 1000
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        if not proc.stdin.closed:
            proc.stdin.close()


def run(runs: int) -> list[dict[str, Any]]:
    rows = []
    for first in FIRST_REQUESTS:
        for stop in ("eof", "sigint"):
            answers, exits = [], []
            for _ in range(runs):
                answer_ms, exit_ms = one(first, stop)
                answers.append(answer_ms)
                exits.append(exit_ms)
            rows.append({"first request": first, "ended by": stop, "runs": runs,
                         **{f"answer {k}": v for k, v in summary_ms(answers).items()},
                         **{f"exit {k}": v for k, v in summary_ms(exits).items()}})
    return rows
