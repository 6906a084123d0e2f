"""A real `memcairn server --database URL` process on a test's own database (tests/postgres_server.py), for the
tests of how the server behaves when PostgreSQL is slow, locked or drops connections."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from postgres_server import TEST_SECRET

from memcairn.pgstore.embedded import free_port

MEMCAIRN = str(Path(sys.executable).parent / "memcairn")


@dataclass
class RunningServer:
    url: str
    home: Path
    database: str

    def env(self) -> dict[str, str]:
        return {**os.environ, "MEMCAIRN_HOME": str(self.home)}

    def make_key(self, tenant: str = "acme") -> str:
        done = subprocess.run([MEMCAIRN, "server", "keys", "create", "--tenant", tenant, "--database", self.database,
                               "--json"], env=self.env(), capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return str(json.loads(done.stdout)["key"])


def home_with_test_secret(home: Path) -> Path:
    """memcairn_app is one role of the whole cluster: the home derives the same password as the other tests'."""
    (home / "server").mkdir(parents=True, mode=0o700)
    (home / "server" / "secret").write_text(TEST_SECRET.hex() + "\n")
    return home


@contextmanager
def serving(argv: list[str], env: dict[str, str], log: Path, url: str, verify: object = True) -> Iterator[None]:
    """``memcairn <argv>`` as a process until its ``/v1/health`` answers 200; stopped (SIGTERM, exit 0) after."""
    with log.open("wb") as sink:
        process = subprocess.Popen([MEMCAIRN, *argv], env=env, stdout=sink, stderr=sink)
    try:
        for _ in range(600):
            assert process.poll() is None, f"the server exited: {log.read_text(errors='replace')}"
            try:
                if httpx.get(f"{url}/v1/health", timeout=2, verify=verify).status_code == 200:  # type: ignore[arg-type]
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        else:
            raise AssertionError("the server did not become ready")
        yield
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, log.read_text(errors="replace")


@contextmanager
def running_server(tmp_path: Path, database: str, *args: str, env: dict[str, str] | None = None
                   ) -> Iterator[RunningServer]:
    home = home_with_test_secret(tmp_path / "home")
    port = free_port()
    server = RunningServer(f"http://127.0.0.1:{port}", home, database)
    with serving(["server", "--database", database, "--port", str(port), *args], {**server.env(), **(env or {})},
                 tmp_path / "server.log", server.url):
        yield server
