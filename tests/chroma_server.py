"""A real Chroma server for tests, on 127.0.0.1 and a free port.

    with running_chroma_server(tmp_path / "chroma") as url:
        index = ChromaIndex(16, url=url)

    with chroma_server(tmp_path / "chroma") as server:   # when the test needs to crash/restart it
        index = ChromaIndex(16, url=server.url)
        server.kill()      # SIGKILL, as a crash would
        server.start()     # same port, same data directory

The ``chroma`` command comes with the chromadb package (next to the Python running the tests).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from processes import free_port

STARTUP_TIMEOUT = 30.0
HEARTBEAT_PATHS = ("/api/v2/heartbeat", "/api/v1/heartbeat")


def chroma_executable() -> str | None:
    candidate = Path(sys.executable).with_name("chroma")
    if candidate.exists():
        return str(candidate)
    return shutil.which("chroma")


def _heartbeat(url: str) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    for path in HEARTBEAT_PATHS:
        try:
            with opener.open(url + path, timeout=1.0) as response:
                if response.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            continue
    return False


class ChromaServer:
    """One ``chroma run`` process; stop/kill/start keep the port and the data directory."""

    def __init__(self, path: Path, port: int | None = None) -> None:
        self.path = Path(path)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.path.parent / f"{self.path.name}-server.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self, timeout: float = STARTUP_TIMEOUT) -> str:
        exe = chroma_executable()
        if exe is None:
            raise RuntimeError("the `chroma` command is not installed (it comes with chromadb)")
        if self.process is not None and self.process.poll() is None:
            return self.url
        self.path.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, ANONYMIZED_TELEMETRY="False", NO_COLOR="1")
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [exe, "run", "--path", str(self.path), "--host", "127.0.0.1", "--port", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"chroma server exited with {self.process.returncode}; see {self.log_path}")
            if _heartbeat(self.url):
                return self.url
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"chroma server on {self.url} did not answer within {timeout:.0f}s; see {self.log_path}")

    def stop(self, timeout: float = 10.0) -> None:
        """Terminate gracefully (SIGTERM), then kill if it lingers."""
        self._end(signal.SIGTERM, timeout)

    def kill(self) -> None:
        """Kill at once (SIGKILL), as a crash would."""
        self._end(signal.SIGKILL, 10.0)

    def _end(self, sig: int, timeout: float) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(sig)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10.0)


@contextmanager
def chroma_server(path: Path, port: int | None = None) -> Iterator[ChromaServer]:
    """Start ``chroma run`` on 127.0.0.1, yield the `ChromaServer`, stop it by its pid at the end."""
    server = ChromaServer(path, port)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def running_chroma_server(path: Path, port: int | None = None) -> Iterator[str]:
    """Start ``chroma run`` on 127.0.0.1, yield its URL, stop it by its pid at the end."""
    with chroma_server(path, port) as server:
        yield server.url
