"""What the hook tests share: recorded agent payloads, the real hook process, real workers started for a home,
reading back what the hooks queued, and a foreign web app on a worker's port. The fixtures built on these
(``project``, ``env``, ``workers``) are in conftest.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from processes import free_port

from memcairn.bench.hooks import hook_command
from memcairn.core.models import NewItem
from memcairn.store import Store
from memcairn.wire.client import WorkerClient

FIXTURES = Path(__file__).parent / "fixtures"
HOOK = hook_command()
SCRIPT = Path(sys.executable).with_name("memcairn")


def make_project(parent: Path) -> Path:
    """A git checkout named "calc" (the project identity comes from its top-level directory)."""
    top = parent / "calc"
    (top / ".git").mkdir(parents=True)
    (top / "src").mkdir()
    return top


def hook_env(home: Path) -> dict[str, str]:
    """This process's environment with a free port, the hash embedder and no worker autostart (``home`` is the
    MEMCAIRN_HOME already set)."""
    out = dict(os.environ)
    out.update(MEMCAIRN_PORT=str(free_port()), MEMCAIRN_EMBEDDING_MODEL="hash", MEMCAIRN_WORKER_AUTOSTART="0")
    return out


def payload(name: str, cwd: Path, **changes: Any) -> dict[str, Any]:
    data = json.loads((FIXTURES / "hooks" / f"{name}.json").read_text())
    data["cwd"] = str(cwd)
    for key in ("tool_input",):
        if isinstance(data.get(key), dict) and "file_path" in data[key]:
            data[key]["file_path"] = data[key]["file_path"].replace("/tmp/tmpw6sk2trg", str(cwd))
    data.update(changes)
    return data


def hook(env: dict[str, str], event: str | None, data: Any = None, *args: str, stdin: bytes | None = None,
         cwd: Path | None = None, cmd: list[str] | None = None) -> tuple[dict[str, Any], str]:
    """Run the real hook process; check exit 0 and exactly one JSON object on stdout; (that object, stderr)."""
    raw = stdin if stdin is not None else json.dumps(data).encode()
    argv = [*(cmd or HOOK), "hook", *([event] if event else []), *args]
    done = subprocess.run(argv, input=raw, capture_output=True, env=env, timeout=30, cwd=cwd)
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode("utf-8")
    assert out.endswith("\n") and out.count("\n") == 1, out
    value, end = json.JSONDecoder().raw_decode(out)
    assert isinstance(value, dict) and out[end:] == "\n"
    return value, done.stderr.decode("utf-8")


class Workers:
    def __init__(self) -> None:
        self.started: list[tuple[dict[str, str], int]] = []

    def start(self, env: dict[str, str]) -> WorkerClient:
        done = subprocess.run([sys.executable, "-m", "memcairn", "worker", "start", "--json"], env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        self.started.append((env, json.loads(done.stdout)["pid"]))
        return WorkerClient(port=int(env["MEMCAIRN_PORT"]), token="")

    def stop_all(self) -> None:
        for env, pid in self.started:
            subprocess.run([sys.executable, "-m", "memcairn", "worker", "stop"], env=env, capture_output=True,
                           timeout=60)
            try:
                os.kill(pid, signal.SIGKILL)  # only if `worker stop` did not end it
            except ProcessLookupError:
                pass


def seed(home: Path, *items: NewItem) -> list[int]:
    store = Store(home / "memcairn.db")
    try:
        return [r.id for r in store.add_items(list(items))]
    finally:
        store.close()


def pending(home: Path) -> list[Any]:
    """Every event the hooks queued, processed by the worker's capture thread or not."""
    from memcairn.store.ingest_state import _row_to_event

    store = Store(home / "memcairn.db")
    try:
        return [_row_to_event(r) for r in store._conn.execute("SELECT * FROM ingest_events ORDER BY id")]
    finally:
        store.close()


class Foreign:
    """A web app on the worker's port: it answers every request with one fixed answer, and counts them."""

    def __init__(self, status: int, content_type: str, body: bytes) -> None:
        self.requests: list[tuple[str, str]] = []
        outer = self

        class Page(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                outer.requests.append((self.command, self.path))
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def port(self) -> int:
        return self.server.server_port

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
