"""A resumed Claude Code session is told its context is earlier in the conversation only when a start of it
delivered one, and capture warnings never wait behind that one-line answer."""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import hook_helpers as hk
import pytest
import worker_app as api
from starlette.testclient import TestClient

from memcairn.core.models import NewItem
from memcairn.hooks.session_start import CONTEXT_TIMEOUT
from memcairn.store import Store
from memcairn.wire.protocol import DELIVERED_FIELD

MINUTE = 60_000
RESUMED = "resumed"


def _now() -> int:
    return int(time.time() * 1000)


def _start(client: TestClient, app: Any, session: str, ago_ms: int, **fields: Any) -> None:
    """A SessionStart of ``session`` recorded ``ago_ms`` ago, with the hook's fields ``fields``."""
    body = {"session_id": session, "project": "alpha", "platform_source": "claude-code", "event": "session_start",
            **fields}
    answer = client.post("/api/sessions/init", json=body)
    assert answer.status_code == 202, answer.text
    api.store_of(app)._conn.execute("UPDATE ingest_events SET created_at_epoch = ? WHERE id = ?",
                                    (_now() - ago_ms, answer.json()["event_id"]))


def _stored(app: Any, title: str, ago_ms: int) -> None:
    """An item of project alpha stored ``ago_ms`` ago (and created long before)."""
    item = api.add(app, kind="observation", title=title, project="alpha", created_at_epoch=1_000)
    api.store_of(app)._conn.execute("UPDATE memory_items SET updated_at_epoch = ? WHERE id = ?",
                                    (_now() - ago_ms, item))


def _resume(session: str) -> dict[str, str]:
    return {"project": "alpha", "source": "resume", "session": session, "agent": "claude-code"}


# -- worker: which starts count -------------------------------------------------------------------------
def test_a_start_whose_context_never_reached_the_agent_does_not_count(client: TestClient, app: Any) -> None:
    _stored(app, "Parser handles tabs", ago_ms=60 * MINUTE)
    _start(client, app, "s-failed", ago_ms=10 * MINUTE, **{DELIVERED_FIELD: False})
    answer = client.get("/api/context/inject", params=_resume("s-failed"))
    assert answer.headers["x-memcairn-context"] != RESUMED and "Parser handles tabs" in answer.text


def test_an_undelivered_resume_falls_back_to_the_last_delivered_start(client: TestClient, app: Any) -> None:
    """Start (delivered), news stored, a resume whose context timed out, a resume again: the news never reached
    the conversation, so the second resume gets the context."""
    _stored(app, "Parser handles tabs", ago_ms=60 * MINUTE)
    _start(client, app, "s-chain", ago_ms=30 * MINUTE, **{DELIVERED_FIELD: True})
    _stored(app, "Lexer keeps tabs", ago_ms=20 * MINUTE)
    _start(client, app, "s-chain", ago_ms=10 * MINUTE, source="resume", **{DELIVERED_FIELD: False})
    answer = client.get("/api/context/inject", params=_resume("s-chain"))
    assert answer.headers["x-memcairn-context"] != RESUMED and "Lexer keeps tabs" in answer.text


def test_a_resume_after_a_one_line_resume_stays_one_line(client: TestClient, app: Any) -> None:
    """A resume given the one-line answer delivered it: that answer rests on the earlier delivered start, whose
    context the transcript still replays."""
    _stored(app, "Parser handles tabs", ago_ms=60 * MINUTE)
    _start(client, app, "s-again", ago_ms=30 * MINUTE, **{DELIVERED_FIELD: True})
    first = client.get("/api/context/inject", params=_resume("s-again"))
    assert first.headers["x-memcairn-context"] == RESUMED
    _start(client, app, "s-again", ago_ms=10 * MINUTE, source="resume", **{DELIVERED_FIELD: True})
    second = client.get("/api/context/inject", params=_resume("s-again"))
    assert second.headers["x-memcairn-context"] == RESUMED
    _stored(app, "Lexer keeps tabs", ago_ms=0)  # news since: the context again
    third = client.get("/api/context/inject", params=_resume("s-again"))
    assert third.headers["x-memcairn-context"] != RESUMED and "Lexer keeps tabs" in third.text


def test_a_start_recorded_by_an_older_hook_counts_as_delivered(client: TestClient, app: Any) -> None:
    _stored(app, "Parser handles tabs", ago_ms=60 * MINUTE)
    _start(client, app, "s-old", ago_ms=10 * MINUTE)  # no context_delivered field
    assert client.get("/api/context/inject", params=_resume("s-old")).headers["x-memcairn-context"] == RESUMED
    store = api.store_of(app)
    assert store.earlier_session_start("claude-code", "s-old", _now()) is not None
    _start(client, app, "s-none", ago_ms=10 * MINUTE, **{DELIVERED_FIELD: False})
    assert store.earlier_session_start("claude-code", "s-none", _now()) is None


# -- worker: capture notices ----------------------------------------------------------------------------
def test_a_resume_with_pending_capture_notices_gets_the_full_context(client: TestClient, app: Any) -> None:
    _stored(app, "Parser handles tabs", ago_ms=60 * MINUTE)
    _start(client, app, "s-notice", ago_ms=10 * MINUTE, **{DELIVERED_FIELD: True})
    store = api.store_of(app)
    store.add_capture_notice("llm_config", "memory capture: the model is unreachable")
    peek = client.get("/api/context/inject", params=_resume("s-notice"))  # read-only: shown, left unshown
    assert "memory capture: the model is unreachable" in peek.text
    assert store.pending_capture_notices() == ["memory capture: the model is unreachable"]
    answer = client.post("/api/context/inject", params=_resume("s-notice"), json={})  # the SessionStart hook's
    assert answer.headers["x-memcairn-context"] != RESUMED
    assert "memory capture: the model is unreachable" in answer.text and "Parser handles tabs" in answer.text
    assert store.pending_capture_notices() == []  # shown, as a full context shows them
    # another project's warning is not this context's: it does not cost this resume its one line
    store.add_capture_notice("llm_config", "beta's model failed", project="beta")
    store._conn.execute("UPDATE capture_notices SET shown_at_epoch = shown_at_epoch - ? "
                        "WHERE shown_at_epoch IS NOT NULL", (2 * MINUTE,))
    assert client.post("/api/context/inject", params=_resume("s-notice"),
                       json={}).headers["x-memcairn-context"] == RESUMED
    assert store.pending_capture_notices() == ["beta's model failed"]


# -- through the real hook --------------------------------------------------------------------------------
class _FakeWorker:
    """A loopback server on which ``POST /api/context/inject`` is ``context`` (stall or fail) and
    ``POST /api/sessions/init`` is recorded, then answered by ``init`` (202, or passed on to a real worker)."""

    def __init__(self, context: str, forward_to: int | None = None) -> None:
        self.inits: list[bytes] = []
        self.release = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **(headers or {})}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(body)

            def _context(self) -> None:
                if context == "stall":
                    outer.release.wait(CONTEXT_TIMEOUT + 10)
                    return
                self._answer(503, b'{"error": "unavailable", "detail": "warming up"}')

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.path.startswith("/api/context/inject"):
                    self._context()
                    return
                outer.inits.append(body)
                if forward_to is None:
                    self._answer(202, b'{"status": "accepted", "event_id": 1, "duplicate": false}')
                    return
                conn = http.client.HTTPConnection("127.0.0.1", forward_to, timeout=10)
                try:
                    conn.request("POST", self.path, body=body, headers={"Content-Type": "application/json"})
                    reply = conn.getresponse()
                    self._answer(reply.status, reply.read())
                finally:
                    conn.close()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def port(self) -> int:
        return self.server.server_port

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_worker() -> Iterator[Callable[..., _FakeWorker]]:
    made: list[_FakeWorker] = []

    def make(context: str, forward_to: int | None = None) -> _FakeWorker:
        made.append(_FakeWorker(context, forward_to))
        return made[-1]

    yield make
    for fake in made:
        fake.close()


def test_the_hook_says_a_context_that_timed_out_was_not_delivered(env: dict[str, str], project: Path,
                                                                  fake_worker: Callable[..., _FakeWorker]) -> None:
    import json

    fake = fake_worker("stall")
    out, err = hk.hook({**env, "MEMCAIRN_PORT": str(fake.port)}, "session-start", hk.payload("session_start", project))
    assert out == {} and "in time" in err
    assert len(fake.inits) == 1
    init = json.loads(fake.inits[0])
    assert init["event"] == "session_start" and init[DELIVERED_FIELD] is False


def test_through_the_hook_a_resume_after_a_failed_start_gets_the_context(
        env: dict[str, str], project: Path, workers: hk.Workers, isolated_home: Path,
        fake_worker: Callable[..., _FakeWorker]) -> None:
    """The start's context request fails (the worker is busy) while its start event is recorded; the resume
    must get the whole context: nothing of it is in the transcript Claude Code replays."""
    hour_ago = _now() - 3_600_000
    hk.seed(isolated_home, NewItem(project="calc", kind="observation", type="bugfix", title="Division guarded",
                                   created_at_epoch=hour_ago))
    workers.start(env)
    fake = fake_worker("fail", forward_to=int(env["MEMCAIRN_PORT"]))
    start = hk.payload("session_start", project)
    out, _ = hk.hook({**env, "MEMCAIRN_PORT": str(fake.port)}, "session-start", start)
    assert out == {} and len(fake.inits) == 1
    starts = [e for e in hk.pending(isolated_home) if e.event_type == "session_init"]
    assert len(starts) == 1 and starts[0].payload[DELIVERED_FIELD] is False
    with Store(isolated_home / "memcairn.db") as store:  # that start was a while ago
        store._conn.execute("UPDATE ingest_events SET created_at_epoch = created_at_epoch - 600000")
        store._conn.execute("UPDATE memory_items SET updated_at_epoch = updated_at_epoch - 700000")

    resumed = {**start, "source": "resume"}
    out, _ = hk.hook(env, "session-start", resumed)
    assert "Division guarded" in out["hookSpecificOutput"]["additionalContext"]
    starts = [e for e in hk.pending(isolated_home) if e.event_type == "session_init"]
    assert [e.payload[DELIVERED_FIELD] for e in starts] == [False, True]

    with Store(isolated_home / "memcairn.db") as store:  # that resume, too, was a while ago
        store._conn.execute("UPDATE ingest_events SET created_at_epoch = created_at_epoch - 600000")
        store._conn.execute("UPDATE memory_items SET updated_at_epoch = updated_at_epoch - 700000")
    out, _ = hk.hook(env, "session-start", resumed)  # the delivered resume counts: one line
    line = out["hookSpecificOutput"]["additionalContext"]
    assert "no new memories since this session started" in line and "Division guarded" not in line
