"""No hook event is lost when the worker cannot take it: real hook processes, a real worker, real restarts.

A hook that gets no acknowledgement (nothing listens, 503 while the worker starts or stops, no answer in time)
writes its event to ``$MEMCAIRN_HOME/spool``; the worker drains the spool into its queue at start and while it
runs, recognising an event that both reached it and was spooled by the hook's ``event_key``.

``MEMCAIRN_TEST_SPOOL_EVENTS`` / ``MEMCAIRN_TEST_SPOOL_RESTARTS`` raise the restart test to the full campaign
(300 events during 5 restarts); the default is a quick version of it.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hook_helpers import HOOK, Workers, hook, payload
from processes import free_port, wait_for

from memcairn.hooks import state
from memcairn.wire import spool
from memcairn.wire.client import WorkerClient

EVENTS = int(os.environ.get("MEMCAIRN_TEST_SPOOL_EVENTS", "60"))
RESTARTS = int(os.environ.get("MEMCAIRN_TEST_SPOOL_RESTARTS", "2"))

pytestmark = pytest.mark.skipif(not Path("/proc/self").exists(), reason="process checks read /proc")


def tool_event(project: Path, n: int, session: str = "spool-session") -> dict[str, Any]:
    return payload("post_tool_use_bash", project, session_id=session, tool_use_id=f"toolu_spool_{n:04d}",
                   tool_input={"command": f"echo step {n}", "description": f"step {n}"},
                   tool_response={"stdout": f"step {n}\n", "stderr": "", "interrupted": False})


def queued_tool_ids(home: Path) -> list[str]:
    with sqlite3.connect(home / "memcairn.db") as conn:
        return [r[0] for r in conn.execute(
            "SELECT tool_use_id FROM ingest_events WHERE event_type = 'observation' ORDER BY id")]


def spooled(home: Path) -> list[str]:
    return list(spool.pending(str(home)))


def restart(env: dict[str, str]) -> None:
    done = subprocess.run([sys.executable, "-m", "memcairn", "worker", "restart"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr


# -- 23.3: worker restarts ----------------------------------------------------------------------------------
@pytest.mark.slow
def test_events_fired_during_worker_restarts_are_all_stored_once(env: dict[str, str], project: Path,
                                                                 workers: Workers, isolated_home: Path) -> None:
    workers.start(env)
    firing = threading.Event()
    errors: list[str] = []
    spooled_by_hooks = Counter()

    def fire(numbers: list[int]) -> None:
        for n in numbers:
            try:
                out, err = hook(env, "post-tool-use", tool_event(project, n))
                assert out == {}, out
                if "kept in" in err or "waits in" in err:
                    spooled_by_hooks["events"] += 1
            except AssertionError as exc:  # pragma: no cover - reported below
                errors.append(str(exc))
            time.sleep(0.02)

    def restarts() -> None:
        firing.wait()
        for _ in range(RESTARTS):
            time.sleep(0.3)
            restart(env)

    numbers = list(range(EVENTS))
    shooters = [threading.Thread(target=fire, args=(numbers[i::4],)) for i in range(4)]
    restarter = threading.Thread(target=restarts)
    restarter.start()
    started = time.monotonic()
    for t in shooters:
        t.start()
    firing.set()
    for t in shooters:
        t.join()
    restarter.join()
    fired_in = time.monotonic() - started
    assert errors == []
    # some events were fired while the worker was down or not ready: the spool was used, and is drained
    wait_for(lambda: not spooled(isolated_home), what="the worker to drain the spool")
    ids = wait_for(lambda: (lambda got: got if len(set(got)) == EVENTS else None)(queued_tool_ids(isolated_home)),
                   what=f"{EVENTS} queued events")
    duplicates = [k for k, v in Counter(ids).items() if v > 1]
    print(f"\n{EVENTS} PostToolUse hook processes during {RESTARTS} worker restarts ({fired_in:.1f} s): "
          f"{len(set(ids))} stored, {len(duplicates)} duplicates, {spooled_by_hooks['events']} went through the spool")
    assert sorted(set(ids)) == [f"toolu_spool_{n:04d}" for n in numbers] and duplicates == []
    assert spooled_by_hooks["events"] > 0  # the restarts did cost the worker events: the spool took them
    assert not (isolated_home / "spool" / spool.REJECTED_DIR).exists()


def test_events_spooled_while_no_worker_runs_are_queued_when_one_starts(env: dict[str, str], project: Path,
                                                                        workers: Workers,
                                                                        isolated_home: Path) -> None:
    told = []
    for n in range(3):
        out, err = hook(env, "post-tool-use", tool_event(project, n))
        assert "kept in" in err
        told.append(out.get("systemMessage"))
    assert told[:2] == [None, None] and "events wait in its spool" in told[2]  # no worker at all is an outage
    prompt, err = hook(env, "user-prompt-submit", payload("user_prompt_submit", project, session_id="spool-session"))
    assert "kept in" in err
    assert len(spooled(isolated_home)) == 4
    assert state.read(str(isolated_home))["failures"] == 4
    workers.start(env)
    wait_for(lambda: not spooled(isolated_home), what="the spool drained")
    assert queued_tool_ids(isolated_home) == [f"toolu_spool_{n:04d}" for n in range(3)]
    with sqlite3.connect(isolated_home / "memcairn.db") as conn:
        keys = [r[0] for r in conn.execute("SELECT event_key FROM ingest_events ORDER BY id")]
    assert len(keys) == 4 and all(isinstance(k, str) and len(k) == 32 for k in keys)


def test_a_spooled_event_the_worker_already_queued_is_stored_once(env: dict[str, str], project: Path,
                                                                  workers: Workers, isolated_home: Path) -> None:
    """The worker committed the event but its answer came too late: the hook spooled it too."""
    workers.start(env)
    out, _ = hook(env, "post-tool-use", tool_event(project, 1))
    with sqlite3.connect(isolated_home / "memcairn.db") as conn:
        body = json.loads(conn.execute("SELECT payload FROM ingest_events").fetchone()[0])
    raw = json.dumps({**tool_event(project, 1), "event": "tool_use", "project": "calc", "event_key": body["event_key"],
                      "platform_source": "claude-code"}).encode()
    spool.write(str(isolated_home), "/api/sessions/observations", raw)
    wait_for(lambda: not spooled(isolated_home), what="the spool drained")
    assert queued_tool_ids(isolated_home) == ["toolu_spool_0001"]


def test_a_file_in_the_spool_that_is_no_event_is_set_aside_by_name(env: dict[str, str], project: Path,
                                                                   workers: Workers, isolated_home: Path) -> None:
    folder = isolated_home / "spool"
    folder.mkdir(parents=True)
    (folder / "00000000000000000001-1-aaaa.event").write_bytes(b"garbage that is no event")
    (folder / "00000000000000000002-1-bbbb.event").write_bytes(spool.encode("/api/sessions/observations", b"{not json"))
    (folder / "00000000000000000003-1-cccc.event").write_bytes(
        spool.encode("/api/sessions/observations", json.dumps({"cwd": str(project)}).encode()))  # no session
    good = spool.write(str(isolated_home), "/api/sessions/observations", json.dumps(
        {**tool_event(project, 7), "event": "tool_use", "platform_source": "claude-code"}).encode())
    workers.start(env)
    wait_for(lambda: not spooled(isolated_home), what="the spool drained")
    assert queued_tool_ids(isolated_home) == ["toolu_spool_0007"]
    rejected = sorted(p.name for p in (folder / spool.REJECTED_DIR).iterdir())
    assert rejected == ["00000000000000000001-1-aaaa.event", "00000000000000000002-1-bbbb.event",
                        "00000000000000000003-1-cccc.event"]
    assert not (folder / good).exists()
    log = (isolated_home / "logs" / "worker.log").read_text()
    assert "00000000000000000001-1-aaaa.event is no event" in log and "session_id is required" in log
    time.sleep(1.5)  # another pass of the drainer: nothing is retried or moved again
    assert sorted(p.name for p in (folder / spool.REJECTED_DIR).iterdir()) == rejected
    assert log.count("aaaa.event") == (isolated_home / "logs" / "worker.log").read_text().count("aaaa.event")


# -- 21.8: a held write lock ----------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_held_write_lock_is_no_outage(env: dict[str, str], project: Path, workers: Workers,
                                        isolated_home: Path) -> None:
    """Another connection holds ``BEGIN IMMEDIATE``: the worker acknowledges each event once it is in the spool
    (no "memory is off", no hook waiting out its timeout), and every one is queued once after the lock is
    released (the insert that waited, and the spooled copy, are one event)."""
    workers.start(env)
    hook(env, "post-tool-use", tool_event(project, 0))  # the worker is warm; the queue exists
    holder = sqlite3.connect(isolated_home / "memcairn.db", timeout=30)
    holder.execute("BEGIN IMMEDIATE")
    try:
        took, messages = [], []
        for n in range(1, 4):
            started = time.monotonic()
            out, err = hook(env, "user-prompt-submit", payload("user_prompt_submit", project, session_id="locked",
                                                               prompt=f"prompt number {n}, the password is hunter{n}q"))
            took.append(time.monotonic() - started)
            messages.append(out.get("systemMessage"))
            started = time.monotonic()
            out, err = hook(env, "post-tool-use", tool_event(project, n))
            took.append(time.monotonic() - started)
            assert out == {} and "memory is off" not in err
        assert len(spooled(isolated_home)) == 6  # the worker kept each event in the spool and acknowledged it
        # ... without the secrets the route would have removed before queueing them
        assert not any(b"hunter" in p.read_bytes() for p in (isolated_home / "spool").glob("*.event"))
    finally:
        holder.rollback()
        holder.close()
    print(f"\nhooks under a held write lock took {', '.join(f'{t:.2f}' for t in took)} s")
    assert messages == [None, None, None]  # a slow write is not an outage: nobody is told memory is off
    assert max(took) < 1.4  # acknowledged once durable, not after the hook's own 1.5 s wait
    assert state.read(str(isolated_home)) == {}
    wait_for(lambda: not spooled(isolated_home), what="the spool drained")
    ids = wait_for(lambda: (lambda got: got if len(got) >= 4 else None)(queued_tool_ids(isolated_home)))
    assert sorted(ids) == [f"toolu_spool_{n:04d}" for n in range(4)]
    with sqlite3.connect(isolated_home / "memcairn.db") as conn:
        prompts = [r[0] for r in conn.execute("SELECT json_extract(payload, '$.prompt') FROM ingest_events "
                                              "WHERE session_id = 'locked' ORDER BY id")]
    assert sorted(p.split(",")[0] for p in prompts) == ["prompt number 1", "prompt number 2", "prompt number 3"]
    assert not any("hunter" in p for p in prompts)


# -- 23.4: a hook cancelled before its answer --------------------------------------------------------------
def test_a_hook_ended_by_a_signal_before_the_answer_spools_its_event(env: dict[str, str], project: Path,
                                                                     workers: Workers, isolated_home: Path) -> None:
    """Claude Code cancels an async PostToolUse hook when ``claude -p`` exits: the event is durable first."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # connections complete, nobody ever answers
    try:
        mute = {**env, "MEMCAIRN_PORT": str(silent.getsockname()[1])}
        proc = subprocess.Popen([*HOOK, "hook", "post-tool-use"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=mute)
        proc.stdin.write(json.dumps(tool_event(project, 42)).encode())
        proc.stdin.close()
        conn, _ = silent.accept()  # the hook has sent its event and waits for the answer
        conn.settimeout(5)
        assert b"toolu_spool_0042" in conn.recv(65536)
        proc.terminate()
        proc.wait(timeout=10)
        out = proc.stdout.read()
        proc.stdout.close()
        proc.stderr.close()
        conn.close()
    finally:
        silent.close()
    assert proc.returncode == 0 and json.loads(out) == {}
    assert len(spooled(isolated_home)) == 1
    workers.start(env)
    wait_for(lambda: not spooled(isolated_home), what="the spool drained")
    assert queued_tool_ids(isolated_home) == ["toolu_spool_0042"]


def test_the_spool_writes_whole_events_only(tmp_path: Path) -> None:
    home = str(tmp_path)
    name = spool.write(home, "/api/sessions/init", b'{"a": 1}')
    (tmp_path / "spool" / ".tmp-00000000000000000009-1-dddd.event").write_bytes(b"half an ev")
    assert [os.path.basename(p) for p in spool.pending(home)] == [name]
    route, body = spool.decode((tmp_path / "spool" / name).read_bytes())
    assert (route, body) == ("/api/sessions/init", b'{"a": 1}')
    assert spool.oldest_age(home) is not None and spool.oldest_age(home) < 60
    with pytest.raises(spool.SpoolError):
        spool.decode(b"memcairn-spool 1\nnot a route\n{}")
    assert free_port() > 0


# -- 23.5: the agents' housekeeping and memcairn's own tools ----------------------------------------------------
def test_housekeeping_and_own_tools_are_not_captured(env: dict[str, str], project: Path, workers: Workers,
                                                     isolated_home: Path) -> None:
    """Claude Code's ``ToolSearch`` became memories ("Used ToolSearch"); memcairn's own MCP tools, in each
    agent's spelling, must not either. The setting lists the housekeeping tools; emptying it captures them."""
    workers.start(env)
    names = ["ToolSearch", "WaitForMcpServers", "TodoWrite", "update_plan", "write_todos",
             "mcp__memcairn__search", "mcp__plugin_memcairn_memcairn__timeline", "mcp_memcairn_get_observations",
             "MCP__MEMCAIRN__SEARCH", "Bash"]
    for n, name in enumerate(names):
        data = tool_event(project, n)
        data["tool_name"] = name
        data["tool_input"] = {"query": "select:mcp__memcairn__search"} if name == "ToolSearch" else data["tool_input"]
        assert hook(env, "post-tool-use", data)[0] == {}
    assert queued_tool_ids(isolated_home) == [f"toolu_spool_{len(names) - 1:04d}"]  # only Bash
    # the worker itself refuses them too (an older hook, another client, an import):
    client = WorkerClient(port=int(env["MEMCAIRN_PORT"]), token="")
    body = {**tool_event(project, 99), "tool_name": "toolsearch", "event": "tool_use"}
    assert client.post_json("/api/sessions/observations", body) == {"status": "skipped", "reason": "skipped_tool"}
    workers.stop_all()
    (isolated_home / "settings.json").write_text(json.dumps({"housekeeping_tools": []}))  # observe them after all
    workers.start(env)
    for n, name in ((100, "ToolSearch"), (101, "mcp__memcairn__search")):
        data = tool_event(project, n)
        data["tool_name"] = name
        assert hook(env, "post-tool-use", data)[0] == {}
    assert queued_tool_ids(isolated_home)[-1] == "toolu_spool_0100"  # memcairn's own tools never


def test_a_restart_is_never_taken_for_an_outage(env: dict[str, str], workers: Workers, isolated_home: Path) -> None:
    """From before the stop until the new worker is ready, a worker of the home is seen coming or going (the
    start lock is held across the restart), so a hook refused in between does not count toward the notice."""
    from memcairn.hooks.hook import _worker_coming_or_going

    workers.start(env)
    gaps, done = [], threading.Event()

    def watch() -> None:
        while not done.is_set():
            if not _worker_coming_or_going(str(isolated_home)):
                gaps.append(time.monotonic())
            time.sleep(0.002)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        restart(env)
    finally:
        done.set()
        watcher.join()
    assert gaps == []
    assert not _worker_coming_or_going(str(isolated_home / "elsewhere"))  # no worker ever: an outage
