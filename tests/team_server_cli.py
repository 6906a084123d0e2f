"""``memcairn server`` driven from outside, as an operator would: its CLI in a home, API keys made with it, and
waiting until the server answers /v1/health."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

MEMCAIRN = str(Path(sys.executable).parent / "memcairn")


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MEMCAIRN_HOME": str(home)}
    return subprocess.run([MEMCAIRN, *args], env=env, capture_output=True, text=True, timeout=120)


def make_key(home: Path, *args: str) -> dict[str, str]:
    done = cli(home, "server", "keys", "create", *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def wait_ready(url: str, server: subprocess.Popen[bytes], log: Path) -> None:
    """Readiness as an outside check sees it: /v1/health answers 200 (a wait, not a timed assertion)."""
    for _ in range(600):
        assert server.poll() is None, f"the server exited: {log.read_text(errors='replace')}"
        try:
            if httpx.get(f"{url}/v1/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError("the server did not become ready")
