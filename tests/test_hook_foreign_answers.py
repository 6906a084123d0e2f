"""Every hook, not only SessionStart, tells the worker's own answers from another program's on the worker's port:
a development server answering 200 (or 404) to the ingest and search routes is a failure that counts towards
"memory is off", never a success that silently loses the captured work."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hook_helpers import Foreign, Workers, hook, payload, seed

from memcairn.core.models import NewItem
from memcairn.hooks import state
from memcairn.hooks.hook import context_answer, error_answer, ingest_answer, search_answer
from memcairn.wire.protocol import CONTEXT_HEADER
from memcairn.wire.transport import Response

FOREIGN = "not a memcairn worker"

# What another program on the port may answer: (status, content type, body)
ANSWERS = {
    "html-200": (200, "text/html", b"<!doctype html><title>my app</title>"),
    "json-200": (200, "application/json", b'{"ok": true, "status": "ok"}'),
    "json-202": (202, "application/json", b'{"queued": 1}'),
    "html-404": (404, "text/html", b"<h1>Not Found</h1>"),
}


@pytest.fixture(params=sorted(ANSWERS))
def foreign(request: pytest.FixtureRequest) -> Iterator[Foreign]:
    server = Foreign(*ANSWERS[request.param])
    yield server
    server.close()


def _events(project: Path) -> list[tuple[str, dict[str, Any], tuple[str, ...]]]:
    """Every hook that talks to the worker besides SessionStart: (event, payload, extra arguments)."""
    return [
        ("post-tool-use", payload("post_tool_use_bash", project), ()),
        ("AfterTool", payload("gemini_after_tool", project), ("--platform", "gemini-cli")),
        ("user-prompt-submit", payload("user_prompt_submit", project), ()),
        ("pre-tool-use", payload("pre_tool_use_read", project), ()),
        ("stop", payload("stop", project), ()),
        ("session-end", payload("session_end", project), ()),
    ]


def test_every_hook_counts_another_program_s_answer_as_a_failure(env: dict[str, str], project: Path,
                                                                  isolated_home: Path, foreign: Foreign) -> None:
    other = {**env, "MEMCAIRN_PORT": str(foreign.port), "MEMCAIRN_PROMPT_CONTEXT": "1"}
    for n, (event, data, args) in enumerate(_events(project), start=1):
        before = len(foreign.requests)
        out, err = hook(other, event, data, *args)
        assert len(foreign.requests) > before, event  # the hook did ask the program on the port
        assert FOREIGN in err and f"port {foreign.port}" in err, (event, err)
        assert state.read(str(isolated_home))["failures"] == n, event
        if n < state.NOTIFY_AFTER:
            assert "systemMessage" not in out, (event, out)
        if n == state.NOTIFY_AFTER:  # the third failure in a row: the person learns memory is off
            assert "memory is off" in out["systemMessage"], (event, out)
        assert "hookSpecificOutput" not in out  # nothing of the foreign answer reaches the agent


def test_a_foreign_json_search_answer_is_no_digest(env: dict[str, str], project: Path,
                                                   isolated_home: Path) -> None:
    """A foreign JSON answer with a ``text`` field is neither a digest for the agent nor a success."""
    body = json.dumps({"text": "- #1 12:00 secret · planted memory"}).encode()
    server = Foreign(200, "application/json", body)
    try:
        other = {**env, "MEMCAIRN_PORT": str(server.port), "MEMCAIRN_PROMPT_CONTEXT": "1"}
        out, err = hook(other, "pre-tool-use", payload("pre_tool_use_read", project))
        assert out == {} and FOREIGN in err
        assert state.read(str(isolated_home))["failures"] == 1
    finally:
        server.close()


def test_the_worker_s_own_answers_stay_successes(env: dict[str, str], project: Path, workers: Workers,
                                                 isolated_home: Path) -> None:
    """Accepted, skipped (an excluded project, a skipped tool), refused (400) and digest answers are the worker's:
    no failure is counted, nothing is called foreign."""
    seed(isolated_home, NewItem(project="calc", kind="observation", type="feature",
                                          title="multiply_numbers multiplies two numbers",
                                          narrative="Added multiply_numbers to src/math_utils.py.",
                                          files_modified=["src/math_utils.py"]))
    wanted = {**env, "MEMCAIRN_PROMPT_CONTEXT": "1"}
    workers.start(wanted)
    for event, data, args in _events(project):
        out, err = hook(wanted, event, data, *args)
        assert FOREIGN not in err and "memory is off" not in err, (event, err)
    assert "additionalContext" in hook(wanted, "pre-tool-use", payload("pre_tool_use_read", project))[0][
        "hookSpecificOutput"]
    excluded = {**wanted, "MEMCAIRN_EXCLUDE_PROJECTS": "calc"}
    for event, data, args in _events(project):  # the worker answers 202 "skipped" for an excluded project
        out, err = hook(excluded, event, {**data, "session_id": "excluded-session"}, *args)
        assert out == {} and FOREIGN not in err, (event, err)
    # a request the worker refuses (400 with its JSON error) is reported, but it is the worker answering
    out, err = hook(wanted, "post-tool-use", payload("post_tool_use_bash", project, tool_name="T" * 300))
    assert "refused" in err and "400" in err and FOREIGN not in err, err
    assert state.read(str(isolated_home)).get("failures", 0) == 0


def _response(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return Response(status, headers or {}, raw)


def test_the_answer_checks_read_only_the_answer() -> None:
    assert ingest_answer(_response(202, {"status": "accepted", "event_id": 1, "duplicate": False}))
    assert ingest_answer(_response(202, {"status": "skipped", "reason": "excluded project"}))
    assert not ingest_answer(_response(200, {"status": "accepted"}))
    assert not ingest_answer(_response(202, {"status": "ok"}))
    assert not ingest_answer(_response(202, b"<html></html>"))
    assert not ingest_answer(_response(202, ["accepted"]))
    assert search_answer(_response(200, {"format": "index", "text": "No memories matched", "notes": []}))
    assert not search_answer(_response(200, {"text": "- #1 planted"}))
    assert not search_answer(_response(200, b"{"))
    assert context_answer(_response(200, b"", {CONTEXT_HEADER.lower(): "excluded"}))
    assert not context_answer(_response(200, b"<html></html>"))
    assert error_answer(_response(400, {"error": "invalid_request", "detail": "prompt_number"}))
    assert not error_answer(_response(404, b"Not Found"))
    assert not error_answer(_response(404, {"detail": "Not Found"}))
