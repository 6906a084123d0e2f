"""One request must never stop all capture: numbers JSON cannot carry (NaN, Infinity, -Infinity, 1e999) are refused
at the worker's door by name, kept as text where an event is read for keeping (a hook's stdin, a transcript), and a
row already in the queue that SQLite cannot read as JSON is set aside alone while every other session is captured.
``/api/health`` names a stuck queue and a damaged store in its top-level status; ``memcairn doctor`` names both
kinds of events with the command that fixes them. Real SQLite files, real worker processes, real hook processes."""

from __future__ import annotations

import http.client
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from processes import free_port as _free_port
from processes import wait_for

from memcairn.capture.pipeline import CapturePipeline
from memcairn.core.errors import ValidationError
from memcairn.core.models import NewItem
from memcairn.store import Store
from memcairn.wire import fastjson, spool
from memcairn.wire.config import Settings, load_settings
from memcairn.wire.json_depth import loads_bounded

POISON_BODIES = {
    "1e999": ('{"x": 1e999}', "x"),
    "-1e999": ('{"x": -1e999}', "x"),
    "NaN": ('{"x": NaN}', "x"),
    "Infinity": ('{"x": Infinity}', "x"),
    "-Infinity": ('{"x": -Infinity}', "x"),
    "deep exponent": ('{"tool_input": {"rows": [1, 2.5, {"v": [0, 3E+400]}]}}', "tool_input.rows[2].v[1]"),
}


# -- the readers ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", POISON_BODIES)
def test_the_readers_refuse_by_name_or_keep_as_text(name: str) -> None:
    body, where = POISON_BODIES[name]
    number = name.split()[0] if name != "deep exponent" else "3E+400"
    for data in (body, body.encode(), b"\xef\xbb\xbf" + body.encode()):  # a BOM goes through json's own reader
        with pytest.raises(fastjson.NonFiniteNumber) as refused:
            fastjson.loads(data, nonfinite="refuse")
        assert refused.value.number == number and refused.value.where == where
        assert f"the number {number} at {where} is not a finite number" in str(refused.value)
        kept = fastjson.loads(data, nonfinite="text")
        assert number in json.dumps(kept, allow_nan=False)  # still JSON, the number kept as it was sent
    kept = loads_bounded(body)  # a hook's stdin, a transcript line: kept, as text
    assert json.loads(json.dumps(kept, allow_nan=False)) == kept
    with pytest.raises(fastjson.NonFiniteNumber):
        loads_bounded(body, nonfinite="refuse")


def test_finite_numbers_read_as_before() -> None:
    text = '{"a": [1.5, -0.0, 1e308, 1e-999, 12345678901234567890, 2.5E+3]}'
    assert fastjson.loads(text, nonfinite="refuse") == json.loads(text) == fastjson.loads(text, nonfinite="text")
    assert repr(fastjson.loads("[NaN, 1e999]")) == "[nan, inf]"  # the default is json's own
    deep = '{"a": ' + "[" * 5000 + "1e999" + "]" * 5000 + ', "b": 1e999}'  # past json's recursion
    assert loads_bounded(deep)["b"] == "1e999"
    with pytest.raises(fastjson.NonFiniteNumber):
        loads_bounded(deep, nonfinite="refuse")


def test_the_store_never_writes_an_infinity(tmp_path: Path) -> None:
    with Store(tmp_path / "q.db") as store:
        with pytest.raises(ValidationError, match="tool_input.n"):
            store.enqueue_ingest_event("s", "claude-code", "observation", {"tool_input": {"n": float("inf")}})
        assert store.ingest_counts()["pending"] == 0


# -- a real worker ----------------------------------------------------------------------------------------------
class Worker:
    def __init__(self, home: Path) -> None:
        self.home, self.port = home, _free_port()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCAIRN_")}
        self.env.update(MEMCAIRN_HOME=str(home), MEMCAIRN_PORT=str(self.port), MEMCAIRN_VECTOR_BACKEND="none",
                        MEMCAIRN_CAPTURE_BACKEND="offline", MEMCAIRN_WORKER_AUTOSTART="0",
                        MEMCAIRN_CAPTURE_BATCH_WAIT_SECONDS="0", MEMCAIRN_EMBEDDING_MODEL="hash")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Worker:
        self.proc = subprocess.Popen([sys.executable, "-m", "memcairn", "worker", "run"], env=self.env,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: self.request("GET", "/api/readiness")[0] == 200 or self.proc.poll() is not None, 60,
                 "the worker to be ready")
        assert self.proc.poll() is None, "the worker exited while starting"
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def request(self, method: str, path: str, body: str | bytes | None = None) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
            response = conn.getresponse()
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
        except OSError:
            return 0, None
        finally:
            conn.close()

    def post(self, path: str, body: dict[str, Any] | str) -> tuple[int, Any]:
        return self.request("POST", path, body if isinstance(body, str) else json.dumps(body))


@pytest.fixture
def home(isolated_home: Path) -> Path:
    isolated_home.mkdir(parents=True, exist_ok=True)
    return isolated_home


@pytest.fixture
def worker(home: Path) -> Iterator[Worker]:
    w = Worker(home)
    yield w
    w.stop()


def tool_event(session: str, n: int) -> dict[str, Any]:
    return {"session_id": session, "project": "poison", "platform_source": "claude-code", "tool_name": "Bash",
            "tool_use_id": f"{session}-call-{n}", "hook_event_name": "PostToolUse",
            "tool_input": {"command": f"pytest tests/test_step_{n}.py", "description": f"step {n} of {session}"},
            "tool_response": {"stdout": f"1 passed in 0.{n}s\n", "stderr": "", "interrupted": False}}


def prompt_event(session: str, text: str) -> dict[str, Any]:
    return {"session_id": session, "project": "poison", "platform_source": "claude-code", "prompt": text,
            "hook_event_name": "UserPromptSubmit"}


def rows(home: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(home / "memcairn.db")
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def captured(home: Path, session: str) -> int:
    """Events of ``session`` processed (done), read straight from the file."""
    return rows(home, "SELECT COUNT(*) FROM ingest_events WHERE session_id = ? AND status = 'done'", session)[0][0]


def plant(home: Path, session: str, payload: str, *, status: str = "pending", event_type: str = "session_init",
          tool_use_id: str | None = None) -> int:
    """A row as an earlier release (or a hand) wrote it, straight into the queue."""
    now = int(time.time() * 1000)
    conn = sqlite3.connect(home / "memcairn.db")
    try:
        with conn:
            return conn.execute(
                "INSERT INTO ingest_events(session_id, platform_source, event_type, tool_use_id, payload, status, "
                "created_at_epoch, updated_at_epoch) VALUES (?, 'claude-code', ?, ?, ?, ?, ?, ?)",
                (session, event_type, tool_use_id, payload, status, now, now)).lastrowid
    finally:
        conn.close()


@pytest.mark.parametrize("route", ["/api/sessions/init", "/api/sessions/observations", "/api/sessions/summarize"])
def test_the_worker_refuses_each_poison_number_by_name(worker: Worker, home: Path, route: str) -> None:
    worker.start()
    base = json.dumps(tool_event("door", 1))[:-1]  # the body without its closing brace
    for name, (body, where) in POISON_BODIES.items():
        number = name.split()[0] if name != "deep exponent" else "3E+400"
        status, answer = worker.post(route, base + ", " + body[1:])
        assert status == 400, (name, answer)
        assert answer["error"] == "invalid_request" and f"the number {number} at {where}" in answer["detail"]
    status, _ = worker.post("/api/memory/save", '{"project": "poison", "text": "a note", "x": [1e999]}')
    assert status == 400
    assert rows(home, "SELECT COUNT(*) FROM ingest_events")[0][0] == 0
    assert worker.post(route, tool_event("door", 2) | {"prompt": "go"})[0] == 202  # the door is not shut


def test_poison_rows_in_the_queue_are_set_aside_and_every_other_session_is_captured(worker: Worker,
                                                                                    home: Path) -> None:
    """The reported state: a prompt stored with Infinity (done, as the prompt itself was processed) and the
    session's tool events after it; a pending row with 1e999 in another session; healthy sessions beside them."""
    Store(home / "memcairn.db").close()  # the schema, as a worker made it
    plant(home, "poisoned", '{"event": "user_prompt", "project": "poison", "prompt": "run the tests", '
                            '"session_id": "poisoned", "x": Infinity}', status="done")
    for n in range(3):
        plant(home, "poisoned", json.dumps(tool_event("poisoned", n)), event_type="observation",
              tool_use_id=f"poisoned-call-{n}")
    bad = plant(home, "pending-poison", '{"project": "poison", "prompt": "hello", "session_id": "pending-poison", '
                                        '"nested": {"v": [1, -Infinity]}}')
    # SQLite reads 1e999 (as its own infinity): such a row is no poison, and is captured, the number as text
    big = plant(home, "big-number", '{"project": "poison", "prompt": "compute 1e999", "session_id": "big-number", '
                                    '"ratio": 1e999}')
    garbage = plant(home, "garbage", "{not json at all")
    worker.start()
    started = time.monotonic()
    for session in ("healthy-a", "healthy-b"):
        assert worker.post("/api/sessions/init", prompt_event(session, f"fix the parser of {session}"))[0] == 202
        for n in range(3):
            assert worker.post("/api/sessions/observations", tool_event(session, n))[0] == 202
    wait_for(lambda: captured(home, "healthy-a") == 4 and captured(home, "healthy-b") == 4, 15,
             "the healthy sessions' events to be captured")
    wait_for(lambda: captured(home, "poisoned") == 4, 15, "the tool events after the poisoned prompt")
    assert time.monotonic() - started < 15
    for event_id, number, where in ((bad, "-Infinity", "nested.v[1]"), (garbage, None, None)):
        status, error, payload = rows(home, "SELECT status, error, payload FROM ingest_events WHERE id = ?",
                                      event_id)[0]
        assert status == "failed" and error.startswith("set aside: ")
        assert json.loads(payload) is not None  # readable by SQLite again: no query over its session fails
        if number:
            assert f"the number {number} at {where}" in error and json.loads(payload)["nested"]["v"][1] == number
        else:
            assert json.loads(payload) == {"_raw": "{not json at all"}
    assert rows(home, "SELECT COUNT(*) FROM ingest_events WHERE NOT json_valid(payload) AND status != 'done'") == [(0,)]
    assert rows(home, "SELECT status FROM ingest_events WHERE id = ?", big) == [("done",)]
    _, health = worker.request("GET", "/api/health")
    assert health["status"] == "ok" and health["queue"]["state"] == "ok" and health["queue"]["failed"] == 2
    # a poison row planted while the worker runs is set aside at the next pass, others still captured
    late = plant(home, "late-poison", '{"project": "poison", "prompt": "x", "session_id": "late-poison", "n": NaN}')
    assert worker.post("/api/sessions/observations", tool_event("healthy-c", 0))[0] == 202
    wait_for(lambda: captured(home, "healthy-c") == 1, 10, "the event after the late poison row")
    assert rows(home, "SELECT status FROM ingest_events WHERE id = ?", late) == [("failed",)]


def test_a_spooled_poison_event_is_set_aside_and_the_rest_queued(worker: Worker, home: Path) -> None:
    good = json.dumps(tool_event("spooled", 1)).encode()
    poison = json.dumps(tool_event("spooled", 2))[:-1].encode() + b', "n": 1e999}'
    spool.write(str(home), "/api/sessions/observations", poison)
    spool.write(str(home), "/api/sessions/observations", good)
    worker.start()
    wait_for(lambda: captured(home, "spooled") == 1, 15, "the good spooled event")
    wait_for(lambda: not list(spool.pending(str(home))), 10, "the spool to be drained")
    rejected = home / "spool" / spool.REJECTED_DIR
    assert len(list(rejected.iterdir())) == 1
    assert rows(home, "SELECT tool_use_id FROM ingest_events") == [("spooled-call-1",)]


def test_a_hook_keeps_an_agents_overflowing_number_as_text(worker: Worker, home: Path, tmp_path: Path) -> None:
    from memcairn.bench.hooks import hook_command

    worker.start()
    event = tool_event("hooked", 1) | {"cwd": str(tmp_path), "transcript_path": str(tmp_path / "t.jsonl")}
    event["tool_input"]["timeout"] = "__BIG__"
    raw = json.dumps(event).replace('"__BIG__"', "1e999").encode()
    done = subprocess.run([*hook_command(), "hook", "post-tool-use"], input=raw, capture_output=True,
                          env=worker.env | {"MEMCAIRN_HOOK_TIMEOUT_MS": "5000"}, timeout=30, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    wait_for(lambda: captured(home, "hooked") == 1, 15, "the hook's event to be captured")
    (payload,) = rows(home, "SELECT payload FROM ingest_events WHERE session_id = 'hooked'")[0]
    assert json.loads(payload)["tool_input"]["timeout"] == "1e999"  # kept, as the text it was sent as


def test_health_names_a_stuck_queue_and_a_damaged_store(worker: Worker, home: Path) -> None:
    """Passes that fail (here: a trigger refusing every change of the queue's rows) make the queue stuck once
    ``FAILED_PASSES`` in a row failed with events pending; health stays 200 (a liveness probe) but says so."""
    from memcairn.capture.background import FAILED_PASSES

    worker.start()
    _, health = worker.request("GET", "/api/health")
    assert health["status"] == "ok" and health["problems"] == [] and health["queue"]["state"] == "ok"
    conn = sqlite3.connect(home / "memcairn.db")
    with conn:
        conn.execute("CREATE TRIGGER block_capture BEFORE UPDATE ON ingest_events "
                     "BEGIN SELECT RAISE(ABORT, 'capture blocked by the test'); END")
    conn.close()
    for n in range(FAILED_PASSES + 1):  # each accepted event nudges a pass
        assert worker.post("/api/sessions/observations", tool_event("stuck", n))[0] == 202
        time.sleep(0.3)

    def stuck() -> Any:
        status, body = worker.request("GET", "/api/health")
        return body if status == 200 and body["status"] != "ok" else None

    health = wait_for(stuck, 15, "health to name the stuck queue")
    queue = health["queue"]
    assert health["status"] == "degraded" and health["problems"] == ["capture queue stuck"]
    assert queue["state"] == "stuck" and queue["pending"] == FAILED_PASSES + 1
    assert "capture blocked by the test" in queue["detail"] and "memcairn doctor" in queue["fix"]
    worker.stop()

    from memcairn.bench.damage import corrupt_page

    with Store(home / "memcairn.db") as store:
        store.add_items([NewItem(project="p", kind="manual", text=f"note {n} " + "x" * 400) for n in range(60)])
    corrupt_page(home / "memcairn.db")
    damaged = Worker(home).start()
    try:
        status, health = damaged.request("GET", "/api/health")
        assert status == 200 and health["store"]["state"] == "damaged"
        assert health["status"] == "degraded" and "store damaged" in health["problems"]
        running = subprocess.run([sys.executable, "-m", "memcairn", "worker", "status", "--json"], env=damaged.env,
                                 capture_output=True, text=True, timeout=60)
        assert running.returncode == 0 and json.loads(running.stdout)["ready"] is True  # a worker, answering
    finally:
        damaged.stop()


def test_doctor_names_poison_stuck_and_failed_events_with_the_fix(home: Path) -> None:
    with Store(home / "memcairn.db") as store:
        store.enqueue_ingest_event("ok", "claude-code", "session_init", {"prompt": "hi", "project": "p"})
    plant(home, "bad", '{"prompt": "hi", "project": "p", "x": Infinity}', status="done")
    conn = sqlite3.connect(home / "memcairn.db")
    with conn:  # pending for an hour: no worker took it
        conn.execute("UPDATE ingest_events SET created_at_epoch = created_at_epoch - 3600000 WHERE session_id = 'ok'")
    conn.close()
    env = {k: v for k, v in os.environ.items()} | {"MEMCAIRN_VECTOR_BACKEND": "none"}

    def doctor(*args: str) -> dict[str, Any]:
        done = subprocess.run([sys.executable, "-m", "memcairn", "doctor", "--json", *args], env=env,
                              capture_output=True, text=True, timeout=120)
        return {c["name"]: c for c in json.loads(done.stdout)["checks"]}

    checks = doctor()
    assert checks["unreadable capture events"]["status"] == "problem"
    assert "Infinity" in checks["unreadable capture events"]["detail"]
    assert "memcairn doctor --fix" in checks["unreadable capture events"]["detail"]
    queue = checks["capture queue"]
    assert queue["status"] == "problem" and "60 min" in queue["detail"] and "memcairn worker" in queue["detail"]
    checks = doctor("--fix")
    assert checks["unreadable capture events"]["status"] == "fixed"
    assert rows(home, "SELECT COUNT(*) FROM ingest_events WHERE NOT json_valid(payload)") == [(0,)]
    assert "unreadable capture events" not in doctor()


# -- the pipeline and the runner ----------------------------------------------------------------------------
class FailingTurnStore(Store):
    """A real store whose turn lookup fails for one session, as a query over an unreadable row did."""

    def last_prompt_event(self, platform_source: str, session_id: str, before_id: int, **kwargs: Any) -> Any:
        if session_id == "broken":
            raise sqlite3.OperationalError("malformed JSON")
        return super().last_prompt_event(platform_source, session_id, before_id, **kwargs)


def test_a_session_whose_turn_cannot_be_read_does_not_stop_the_others(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    with FailingTurnStore(tmp_path / "p.db") as store:
        for session in ("broken", "fine"):
            for n in range(2):
                store.enqueue_ingest_event(session, "claude-code", "observation",
                                           tool_event(session, n) | {"event": "tool_use", "cwd": "/work/poison"},
                                           tool_use_id=f"{session}-{n}")
        report = CapturePipeline(store, settings).process_pending(flush=True)
        assert report.failed == 2 and report.events == 2
        statuses = dict(store._conn.execute(
            "SELECT tool_use_id, status FROM ingest_events ORDER BY id").fetchall())
        assert statuses == {"broken-0": "pending", "broken-1": "pending", "fine-0": "done", "fine-1": "done"}
        assert store.stats()["items"] > 0


def _settings(tmp_path: Path) -> Settings:
    from dataclasses import replace

    return replace(load_settings(home=tmp_path, environ={}), capture_batch_wait_seconds=0)


def test_the_runner_says_stuck_only_without_progress(tmp_path: Path) -> None:
    from memcairn.capture.background import STUCK_SECONDS, CaptureRunner

    now = [1_000_000.0]
    with Store(tmp_path / "r.db") as store:
        runner = CaptureRunner(CapturePipeline(store, _settings(tmp_path)), clock=lambda: now[0])
        runner.start()
        try:
            oldest = int((now[0] - 10) * 1000)
            assert runner.queue_state(5, oldest)["state"] == "ok"
            now[0] += STUCK_SECONDS + 1
            state = runner.queue_state(5, oldest)
            assert state["state"] == "stuck" and "no event processed" in state["detail"]
            assert runner.queue_state(0, None)["state"] == "ok"
        finally:
            runner.stop()
        assert runner.queue_state(1, oldest)["detail"].endswith("the capture thread is not running")
