"""Durable ingest under SIGKILL: a real worker on a loopback port is killed at random moments while hook
events stream in; after restarts, every acknowledged event became exactly one result and none was lost."""

from __future__ import annotations

import http.client
import json
import os
import random
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from processes import free_port

from memcairn.wire import lifecycle
from memcairn.wire.config import Settings, load_settings

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not Path("/proc/self").exists(), reason="process checks read /proc")]

EVENTS = 120
KILLS = 3


@pytest.fixture
def cfg(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    monkeypatch.setenv("MEMCAIRN_PORT", str(free_port()))
    monkeypatch.setenv("MEMCAIRN_VECTOR_BACKEND", "none")  # restarts stay fast; the queue is what is tested
    monkeypatch.setenv("MEMCAIRN_CAPTURE_BATCH_WAIT_SECONDS", "0")
    settings = load_settings()
    yield settings
    lifecycle.stop(settings, timeout=10)
    info = lifecycle.read_pid_file(settings)
    if info and lifecycle.process_alive(info["pid"]):
        os.kill(info["pid"], signal.SIGKILL)


def post(port: int, path: str, body: dict[str, object]) -> dict[str, object] | None:
    """One hook-style request; None when the worker is down or died mid-request (not acknowledged)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        data = response.read()
    except OSError:
        return None
    finally:
        conn.close()
    if response.status != 202:
        return None
    return json.loads(data)


def event(i: int) -> tuple[str, dict[str, object], str]:
    """The i-th event: every fifth a prompt (numbered by the sender), the rest edits of distinct files."""
    base = {"session_id": "crash-session", "cwd": "/work/crash", "project": "crash", "projects": ["crash"],
            "platform_source": "claude-code"}
    if i % 5 == 0:
        n = i // 5 + 1
        return "/api/sessions/init", {**base, "event": "user_prompt", "prompt": f"prompt number {n}",
                                      "prompt_number": n}, f"prompt number {n}"
    path = f"/work/crash/module_{i}.py"
    return "/api/sessions/observations", {
        **base, "event": "tool_use", "tool_name": "Write", "tool_use_id": f"toolu_{i}",
        "tool_input": {"file_path": path, "content": f"VALUE = {i}\n"},
        "tool_response": {"type": "create", "filePath": path}}, f"module_{i}.py"


def kill_worker(settings: Settings) -> int:
    info = lifecycle.read_pid_file(settings)
    assert info and lifecycle.process_alive(info["pid"]), "no worker to kill"
    os.kill(info["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 10
    while lifecycle.process_alive(info["pid"]) and time.monotonic() < deadline:
        time.sleep(0.02)
    return info["pid"]


def test_sigkill_while_events_stream_in_loses_and_duplicates_nothing(cfg: Settings) -> None:
    rng = random.Random(20261202)
    kill_at = set(rng.sample(range(10, EVENTS - 5), KILLS))
    lifecycle.start(cfg)
    acknowledged: list[str] = []
    killed: set[int] = set()
    refused = 0
    for i in range(EVENTS):
        path, body, marker = event(i)
        if i in kill_at:
            time.sleep(rng.random() * 0.05)  # sometimes mid-processing, sometimes idle
            killed.add(kill_worker(cfg))
        answer = post(cfg.port, path, body)
        while answer is None:  # the hook would give up; the test resends until acknowledged
            refused += 1
            lifecycle.start(cfg)
            answer = post(cfg.port, path, body)
        acknowledged.append(marker)
    assert len(killed) == KILLS and refused >= KILLS  # three different workers died, each was replaced
    deadline = time.monotonic() + 60
    while True:
        conn = http.client.HTTPConnection("127.0.0.1", cfg.port, timeout=5)
        try:
            conn.request("GET", "/api/stats")
            stats = json.loads(conn.getresponse().read())
        finally:
            conn.close()
        if stats["ingest"]["pending"] == 0:
            break
        assert time.monotonic() < deadline, f"queue not drained: {stats['ingest']}"
        time.sleep(0.2)
    assert stats["ingest"]["failed"] == 0
    lifecycle.stop(cfg, timeout=10)

    db = sqlite3.connect(cfg.db_path)
    events = db.execute("SELECT COUNT(*), COUNT(DISTINCT COALESCE(tool_use_id, payload)) FROM ingest_events").fetchone()
    assert events[0] == events[1] == EVENTS  # each acknowledged event queued once, retries recognised
    prompts = [r[0] for r in db.execute("SELECT text FROM memory_items WHERE kind = 'prompt'")]
    observed = [json.loads(r[0]) for r in db.execute(
        "SELECT files_modified FROM memory_items WHERE kind = 'observation'")]
    for marker in acknowledged:
        if marker.startswith("prompt"):
            assert prompts.count(marker) == 1, marker
        else:
            holders = [files for files in observed if any(f.endswith(marker) for f in files)]
            assert len(holders) == 1, (marker, holders)
