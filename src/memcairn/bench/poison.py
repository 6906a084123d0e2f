"""``memcairn bench faults --only poison``: one poison event among healthy sessions must stop nothing.

A real worker; ``sessions`` healthy sessions post a prompt and ``events`` tool events each. Before they start, a
poison row is planted straight into the queue with SQLite (a prompt stored with ``Infinity``, as an earlier release
queued ``1e999``, followed by tool events of its session, and a pending row with ``NaN``); halfway through, a body
with ``1e999`` is posted. The row counts the healthy events: acknowledged (202) and captured (processed by the
worker, read straight from the file), how long until the last was captured, and what each poison got: the
posted body its answer (400 naming the number), the planted rows their state (set aside, or captured with the
number read as text), and ``/api/health``'s status at the end.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from memcairn.bench.faults_harness import Log, Row, _request, _worker
from memcairn.core.clock import now_ms

CAPTURE_TIMEOUT = 60.0
PROJECT = "poison-bench"


def _tool(session: str, n: int) -> dict[str, Any]:
    return {"session_id": session, "project": PROJECT, "platform_source": "claude-code",
            "hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_use_id": f"{session}-{n}",
            "tool_input": {"command": f"pytest tests/test_part_{n}.py -q", "description": f"part {n}"},
            "tool_response": {"stdout": f"{n + 1} passed in 0.{n % 10}s\n", "stderr": "", "interrupted": False}}


def _prompt(session: str) -> dict[str, Any]:
    return {"session_id": session, "project": PROJECT, "platform_source": "claude-code",
            "hook_event_name": "UserPromptSubmit", "prompt": f"make the test suite of {session} pass"}


def _plant(db: Path) -> dict[str, int]:
    """Rows as an earlier release wrote them: a done prompt holding Infinity with its session's tool events
    pending after it, and a pending prompt holding NaN. Their ids by name."""
    now = now_ms()
    conn = sqlite3.connect(db)
    try:
        with conn:
            def insert(session: str, event_type: str, payload: str, status: str, tool: str | None = None) -> int:
                cur = conn.execute(
                    "INSERT INTO ingest_events(session_id, platform_source, event_type, tool_use_id, payload, status,"
                    " created_at_epoch, updated_at_epoch) VALUES (?, 'claude-code', ?, ?, ?, ?, ?, ?)",
                    (session, event_type, tool, payload, status, now, now))
                return int(cur.lastrowid or 0)

            ids = {"infinity prompt": insert(
                "planted", "session_init", json.dumps(_prompt("planted"))[:-1] + ', "ratio": Infinity}', "done")}
            for n in range(2):
                ids[f"planted tool {n}"] = insert("planted", "observation", json.dumps(_tool("planted", n)),
                                                  "pending", f"planted-{n}")
            ids["nan prompt"] = insert("planted-nan", "session_init",
                                       json.dumps(_prompt("planted-nan"))[:-1] + ', "ratio": NaN}', "pending")
    finally:
        conn.close()
    return ids


def _captured(db: Path, sessions: list[str]) -> set[str]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        marks = ",".join("?" * len(sessions))
        return {r[0] for r in conn.execute(
            f"SELECT tool_use_id FROM ingest_events WHERE status = 'done' AND event_type = 'observation' "
            f"AND session_id IN ({marks})", sessions)}
    finally:
        conn.close()


def _states(db: Path, ids: dict[str, int]) -> dict[str, tuple[str, str | None]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {name: conn.execute("SELECT status, error FROM ingest_events WHERE id = ?", (i,)).fetchone()
                for name, i in ids.items()}
    finally:
        conn.close()


def poison(workdir: Path, log: Log, sessions: int = 5, events: int = 20) -> Row:
    row = Row(f"poison among {sessions} sessions x {events} events")
    home = workdir / "poison"
    home.mkdir()
    db = home / "memcairn.db"
    names = [f"healthy-{s}" for s in range(sessions)]
    with _worker(home) as worker:
        planted = _plant(db)
        started = time.monotonic()
        answer: tuple[int, Any] = (0, None)
        planted_captured: set[str] = set()
        for n in range(events):
            if n == events // 2:  # the poison body, halfway
                answer = _request(worker.port, "POST", "/api/sessions/observations",
                                  raw=(json.dumps(_tool("poisoned", 0))[:-1] + ', "ratio": 1e999}').encode())
            for name in names:
                if n == 0:
                    _request(worker.port, "POST", "/api/sessions/init", _prompt(name))
                row.sent += 1
                status, body = _request(worker.port, "POST", "/api/sessions/observations", _tool(name, n))
                if status == 202 and isinstance(body, dict) and body.get("status") == "accepted":
                    row.acked.add(f"{name}-{n}")
                elif status >= 500:
                    row.server_errors += 1
                elif status == 0:
                    row.unanswered += 1
                else:
                    row.refused += 1
        deadline = time.monotonic() + CAPTURE_TIMEOUT
        while time.monotonic() < deadline:
            row.stored = _captured(db, names)
            planted_captured = _captured(db, ["planted"])
            if row.acked <= row.stored and len(planted_captured) == 2:
                break
            time.sleep(0.1)
        took = time.monotonic() - started
        _, health = _request(worker.port, "GET", "/api/health")
    log(f"poison: {len(row.stored)} of {len(row.acked)} healthy events captured in {took:.1f} s")
    states = _states(db, planted)
    row.notes.append(f"healthy events captured in {took:.1f} s" if row.acked <= row.stored
                     else f"{len(row.acked - row.stored)} healthy events not captured after {took:.0f} s")
    status, body = answer
    detail = body.get("detail", "") if isinstance(body, dict) else ""
    row.notes.append(f"1e999 body: {status}" + (f" ({detail.split(' is not')[0]})" if status == 400 else ""))
    nan_status, nan_error = states["nan prompt"]
    row.notes.append("NaN row: set aside" if nan_status == "failed" and (nan_error or "").startswith("set aside")
                     else f"NaN row: {nan_status}")
    row.notes.append(f"Infinity prompt's session: {len(planted_captured)} of 2 tool events captured")
    row.notes.append(f"health {health.get('status') if isinstance(health, dict) else 'unanswered'}")
    return row
