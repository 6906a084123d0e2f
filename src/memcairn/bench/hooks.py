"""``memcairn bench hooks``: end-to-end latency of real ``memcairn hook`` processes against a real worker.

- **Store**: ``items`` synthetic observations (``synthetic_items``; default 100k, all in ``project-00`` unless
  ``projects`` > 1), built once in ``home`` (reused on later runs with ``--home``).
- **Worker**: a real ``memcairn worker`` on a free loopback port with the vector mirror **disabled**
  (``MEMCAIRN_VECTOR_BACKEND=none``): SessionStart reads the store only (``/api/context/inject`` renders from
  SQLite) and PostToolUse only queues an event, so neither touches the mirror, and embedding 100k items
  would only slow the setup. The context is rendered against the whole store.
- **Hooks**: each run is a new process, interpreter start included, fed a recorded Claude Code payload on
  stdin, from a working directory named like the project. Warm-up runs first (they also warm the worker's
  past-work count; the first context request is reported on its own as "cold").
- **Table**: median, p95 and min per row, beside the reference figures of a Node-based hook (SessionStart
  598 ms, PostToolUse 436 ms per call).
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from itertools import islice
from pathlib import Path
from typing import Any

from memcairn.bench.synthetic import synthetic_items
from memcairn.bench.timing import percentile

REFERENCE_MS = {"session-start": 598.0, "post-tool-use": 436.0}
SESSION_ID = "c64cc478-3430-40fe-8e9c-4ee9986e9754"


def hook_command() -> list[str]:
    """How to run ``memcairn hook``: the console script next to this interpreter when it dispatches through
    ``memcairn.cli.entry`` (the light path), else ``python -m memcairn`` (which does too)."""
    script = Path(sys.executable).with_name("memcairn")
    try:
        if "memcairn.cli.entry" in script.read_text(encoding="utf-8", errors="replace"):
            return [str(script)]
    except OSError:
        pass
    return [sys.executable, "-m", "memcairn"]


def free_port() -> int:
    """A loopback port nobody listens on now (for a bench worker)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def payloads(cwd: str, n: int) -> dict[str, dict[str, Any]]:
    base = {"session_id": SESSION_ID, "cwd": cwd,
            "transcript_path": f"/home/dev/.claude/projects/-bench/{SESSION_ID}.jsonl"}
    return {
        "session-start": {**base, "hook_event_name": "SessionStart", "source": "startup"},
        "post-tool-use": {**base, "hook_event_name": "PostToolUse", "permission_mode": "default", "tool_name": "Read",
                          "tool_input": {"file_path": f"{cwd}/src/math_utils.py"}, "tool_use_id": f"toolu_bench_{n}",
                          "tool_response": {"type": "text", "file": {
                              "filePath": f"{cwd}/src/math_utils.py",
                              "content": '"""Math utility functions."""\n\n\ndef add_numbers(a: int, b: int) -> int:\n'
                                         '    """Add two numbers together."""\n    return a + b\n',
                              "numLines": 7, "startLine": 1, "totalLines": 7}}},
    }


def build_store(db: Path, items: int, projects: int, log: Callable[[str], None]) -> int:
    from memcairn.store import Store

    store = Store(db)
    try:
        have = store.count_items()
        if have >= items:
            log(f"reusing {db} ({have:,} items)")
            return have
        log(f"building {items - have:,} synthetic items in {db} ...")
        started = time.perf_counter()
        it = islice(synthetic_items(items, projects=projects), have, None)
        while batch := list(islice(it, 1000)):
            store.add_items(batch)
        log(f"built in {time.perf_counter() - started:.1f} s")
        return store.count_items()
    finally:
        store.close()


def _time(cmd: list[str], data: bytes, env: dict[str, str], cwd: str) -> tuple[float, bytes]:
    started = time.perf_counter()
    done = subprocess.run(cmd, input=data, capture_output=True, env=env, cwd=cwd, timeout=60)
    elapsed = (time.perf_counter() - started) * 1000
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.decode()[-300:]}")
    return elapsed, done.stdout


def _row(name: str, samples: list[float], reference: float | None = None) -> dict[str, Any]:
    return {"what": name, "runs": len(samples), "median ms": round(statistics.median(samples), 1),
            "p95 ms": round(percentile(samples, 95), 1), "min ms": round(min(samples), 1),
            "reference ms": f"{reference:g}" if reference is not None else "-",
            "speed-up": f"{reference / statistics.median(samples):.1f}x" if reference is not None else "-"}


def run(items: int = 100_000, runs: int = 40, home: Path | None = None, projects: int = 1,
        log: Callable[[str], None] = print) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="memcairn-bench-hooks-"))
    home = home or workdir / "home"
    home.mkdir(parents=True, exist_ok=True)
    total = build_store(home / "memcairn.db", items, projects, log)
    project_dir = workdir / "project-00"  # not a git checkout: the project is the directory's name
    project_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCAIRN_") and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(MEMCAIRN_HOME=str(home), MEMCAIRN_PORT=str(free_port()), MEMCAIRN_VECTOR_BACKEND="none",
               MEMCAIRN_WORKER_AUTOSTART="0")
    started = subprocess.run([sys.executable, "-m", "memcairn", "worker", "start", "--json"], env=env,
                             capture_output=True, text=True, timeout=120)
    if started.returncode != 0:
        raise RuntimeError(f"the worker did not start: {started.stderr.strip()[-500:]}")
    port = int(env["MEMCAIRN_PORT"])
    cmd = hook_command()
    rows: list[dict[str, Any]] = []
    try:
        def inject() -> float:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            t0 = time.perf_counter()
            conn.request("GET", "/api/context/inject?projects=project-00&platformSource=claude-code")
            response = conn.getresponse()
            body = response.read()
            elapsed = (time.perf_counter() - t0) * 1000
            conn.close()
            if response.status != 200 or not body:
                raise RuntimeError(f"/api/context/inject answered {response.status}")
            return elapsed

        cold = inject()
        warm = [inject() for _ in range(runs)]
        baseline = [_time([sys.executable, "-c", "pass"], b"", env, str(project_dir))[0] for _ in range(runs)]
        samples: dict[str, list[float]] = {"session-start": [], "post-tool-use": []}
        sample_out: dict[str, str] = {}
        for n in range(runs + 3):
            for event in samples:
                data = json.dumps(payloads(str(project_dir), n)[event]).encode()
                elapsed, out = _time([*cmd, "hook", event], data, env, str(project_dir))
                if n >= 3:  # the first runs warm the page cache (and write bytecode)
                    samples[event].append(elapsed)
                sample_out[event] = out.decode("utf-8", errors="replace")
        context = json.loads(sample_out["session-start"]).get("hookSpecificOutput", {}).get("additionalContext", "")
        if "## Recent observations" not in context:
            raise RuntimeError(f"session-start returned no context: {sample_out['session-start'][:300]}")
        for event, values in samples.items():
            rows.append(_row(f"memcairn hook {event}", values, REFERENCE_MS[event]))
        rows.append(_row("GET /api/context/inject (warm)", warm))
        rows.append(_row("GET /api/context/inject (cold: first after start)", [cold]))
        rows.append(_row("python -c pass (interpreter start)", baseline))
    finally:
        subprocess.run([sys.executable, "-m", "memcairn", "worker", "stop"], env=env, capture_output=True, timeout=60)
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)  # a --home given lives elsewhere and is kept
    return {"items": total, "projects": projects, "runs": runs, "command": " ".join(cmd), "rows": rows,
            "context_chars": len(context), "mirror": "disabled (MEMCAIRN_VECTOR_BACKEND=none)"}
