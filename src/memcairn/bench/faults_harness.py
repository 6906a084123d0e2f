"""The fault campaign's harness: a scenario's row of counts, a worker process, its requests, what the file holds."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memcairn.bench.hooks import free_port, payloads

Log = Callable[[str], None]
READY_TIMEOUT = 60.0
SESSION = "faults-session"


@dataclass
class Row:
    """One scenario's counts; ``acked`` and ``stored`` are sets of keys naming each write."""

    scenario: str
    sent: int = 0
    acked: set[str] = field(default_factory=set)
    stored: set[str] = field(default_factory=set)
    duplicated: int = 0
    refused: int = 0
    server_errors: int = 0  # 5xx answers other than the ones the design gives (507, store_damaged)
    unanswered: int = 0  # no answer at all (the worker was killed or not up yet)
    wrong_answers: int = 0  # answers that said nothing of being wrong (a search, a save into a damaged file)
    notes: list[str] = field(default_factory=list)
    skipped: str | None = None

    @property
    def lost(self) -> int:
        return len(self.acked - self.stored)

    def as_dict(self) -> dict[str, Any]:
        if self.skipped is not None:
            return {"scenario": self.scenario, "sent": "-", "acknowledged": "-", "stored": "-", "lost": "-",
                    "duplicated": "-", "refused": "-", "unexpected 5xx": "-", "held": "skipped",
                    "notes": self.skipped}
        held = self.lost == 0 and self.duplicated == 0 and self.server_errors == 0 and self.wrong_answers == 0
        return {"scenario": self.scenario, "sent": self.sent, "acknowledged": len(self.acked),
                "stored": len(self.stored), "lost": self.lost,
                "duplicated": self.duplicated, "refused": self.refused, "unexpected 5xx": self.server_errors,
                "held": "yes" if held else "NO", "notes": "; ".join(self.notes)}


# -- processes and requests -----------------------------------------------------------------------------
def _env(home: Path, port: int, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCAIRN_")}
    env.update(MEMCAIRN_HOME=str(home), MEMCAIRN_PORT=str(port), MEMCAIRN_VECTOR_BACKEND="none",
               MEMCAIRN_CAPTURE_BACKEND="offline", MEMCAIRN_WORKER_AUTOSTART="0",
               MEMCAIRN_CAPTURE_BATCH_WAIT_SECONDS="0")
    env.update(extra)
    return env


def _request(port: int, method: str, path: str, body: Any = None, timeout: float = 30.0,
             raw: bytes | None = None) -> tuple[int, Any]:
    """(status, parsed JSON or None); status 0 when the connection failed. ``raw``: a body as given (one that
    is no JSON ``json.dumps`` would write)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = raw if raw is not None else json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
        response = conn.getresponse()
        raw = response.read()
        try:
            return response.status, json.loads(raw)
        except ValueError:
            return response.status, None
    except (OSError, http.client.HTTPException):  # refused, reset, cut short (a killed worker)
        return 0, None
    finally:
        conn.close()


class Worker:
    """A ``memcairn worker run`` process for ``home``; ``kill`` sends SIGKILL, ``stop`` SIGTERM."""

    def __init__(self, home: Path, port: int, env: dict[str, str]) -> None:
        self.home, self.port, self.env = home, port, env
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "memcairn", "worker", "run"], env=self.env,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, cwd=str(self.home))
        deadline = time.monotonic() + READY_TIMEOUT
        while _request(self.port, "GET", "/api/readiness", timeout=2.0)[0] != 200:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the worker exited with code {self.proc.returncode} while starting")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the worker was not ready within {READY_TIMEOUT:.0f} s")
            time.sleep(0.05)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def drain(self, timeout: float = 120.0) -> None:
        """Wait until the hook event queue has nothing pending."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status, stats = _request(self.port, "GET", "/api/stats")
            if status == 200 and stats["ingest"]["pending"] == 0:
                return
            time.sleep(0.2)


@contextlib.contextmanager
def _worker(home: Path, **env: str) -> Iterator[Worker]:
    port = free_port()
    worker = Worker(home, port, _env(home, port, **env))
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()


def _event(n: int, tag: str) -> dict[str, Any]:
    body = payloads("/work/faults-project", n)["post-tool-use"]
    return {**body, "session_id": SESSION, "project": "faults", "tool_use_id": f"{tag}-{n}"}


def _stored_events(db: Path, tag: str) -> tuple[set[str], int]:
    """Tool use ids of stored events with this tag, and how many rows repeat one."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = [r[0] for r in conn.execute("SELECT tool_use_id FROM ingest_events WHERE tool_use_id LIKE ?",
                                           (f"{tag}-%",))]
    finally:
        conn.close()
    return set(rows), len(rows) - len(set(rows))


def _stored_items(db: Path, tag: str, after_id: int = 0) -> tuple[set[str], int]:
    """Texts of stored memories starting with this tag (the key is the text's first word) among the rows past
    ``after_id`` (a seek: a damaged page before it is not read), and how many rows repeat one."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    rows: list[str] = []
    try:
        for (text,) in conn.execute("SELECT text FROM memory_items WHERE id > ? AND kind = 'manual' AND text LIKE ?",
                                    (after_id, f"{tag}-%")):
            rows.append(text.split()[0])
    finally:
        conn.close()
    return set(rows), len(rows) - len(set(rows))


def _save(port: int, row: Row, key: str, size: int = 200) -> int:
    """POST one memory; count it; return the status."""
    row.sent += 1
    status, body = _request(port, "POST", "/api/memory/save",
                            {"project": "faults", "text": f"{key} " + "fault campaign text " * (size // 20)})
    if status == 200 and isinstance(body, dict) and body.get("id"):
        row.acked.add(key)
    elif status in (507,) or (isinstance(body, dict) and body.get("error") == "store_damaged"):
        row.refused += 1
    elif status >= 500:
        row.server_errors += 1
    elif status == 0:
        row.unanswered += 1
    return status


def _post_event(port: int, row: Row, n: int, tag: str) -> int:
    row.sent += 1
    status, body = _request(port, "POST", "/api/sessions/observations", _event(n, tag))
    if status == 202 and isinstance(body, dict) and body.get("status") == "accepted":
        row.acked.add(f"{tag}-{n}")
    elif status == 507:
        row.refused += 1
    elif status >= 500:
        row.server_errors += 1
    elif status == 0:
        row.unanswered += 1
    return status


@contextlib.contextmanager
def _small_disk(path: Path, size: str = "3m") -> Iterator[str | None]:
    """A tmpfs of ``size`` at ``path``: yields None when mounted, else why it could not be."""
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if done.returncode != 0:
        yield done.stderr.decode(errors="replace").strip() or "mount failed"
        return
    try:
        yield None
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)
