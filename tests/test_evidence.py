"""The evidence behind the memories: each step kept (cleaned), found by a search, quoted as its matching lines
only, gone with its memory; a store without it (or evidence turned off) searches as before."""

from __future__ import annotations

import time
from typing import Any

from capture_queue import SESSION, body, send
from starlette.testclient import TestClient
from worker_app import store_of

from memcairn.capture.pipeline import CapturePipeline
from memcairn.search import SearchService
from memcairn.search.evidence import SNIPPET_CHARS, _line_matcher, shown_text, snippets, trim
from memcairn.store import Store
from memcairn.store.records import EvidenceHit, NewEvidence
from memcairn.wire.config import Settings

# What compression drops: the exact text deep inside a tool's output.
FAILURE = "\n".join([*(f"compiling module_{n}.ex" for n in range(40)),
                     "** (KeyError) key :retry_budget not found in: %{timeout: 5000}",
                     "    (spotter 0.1.0) lib/spotter/poller.ex:88: Spotter.Poller.schedule/1",
                     *(f"test line {n}" for n in range(40))])


def _captured(store: Store, settings: Settings) -> None:
    send(store, settings, "session_start")
    send(store, settings, "user_prompt", prompt="Why does the poller crash on start?")
    send(store, settings, "tool_use", tool_name="Bash", tool_use_id="t1", tool_input={"command": "mix test"},
         tool_response={"stdout": FAILURE, "exit_code": 1},
         narration="Running the suite to see where the poller crashes.")
    send(store, settings, "stop", last_assistant_message="The poller read :retry_budget from a config that "
                                                          "lacks it; it now defaults to 3.")
    CapturePipeline(store, settings).process_pending(flush=True)


def test_each_step_is_kept_tied_to_the_memory_it_fed(store: Store, settings: Settings) -> None:
    _captured(store, settings)
    rows = store._conn.execute("SELECT item_id, text FROM evidence ORDER BY id").fetchall()
    assert len(rows) == 2  # the call and the closing reply
    call, reply = rows
    assert call[1].startswith("Running the suite") and "mix test" in call[1] and ":retry_budget" in call[1]
    assert "test line 39" in call[1]  # the tail of a long output (the verdict) is kept, the middle is not
    assert reply[1].startswith("The poller read :retry_budget")
    kinds = {i.id: i.kind for i in store.get_items([call[0], reply[0]])}
    assert kinds == {call[0]: "observation", reply[0]: "summary"}
    # replaying the same steps adds nothing
    assert store.add_evidence([NewEvidence("demo", "claude-code", "x", "t1", "again", 1)]) in (0, 1)
    before = store.evidence_count()
    store.add_evidence([NewEvidence("demo", "claude-code", "x", "t1", "again", 1)])
    assert store.evidence_count() == before
    # deleting the memory deletes what stood behind it
    store.delete_items([call[0]])
    assert [r[0] for r in store._conn.execute("SELECT item_id FROM evidence")] == [reply[0]]


def test_evidence_off_keeps_nothing(store: Store, settings: Settings) -> None:
    _captured(store, Settings(**{**settings.__dict__, "capture_evidence": False}))
    assert store.evidence_count() == 0


def test_a_search_quotes_the_matching_lines_of_a_step(store: Store, settings: Settings) -> None:
    _captured(store, settings)
    found = SearchService(store, None, evidence_snippets=3).search(query="retry_budget KeyError poller")
    assert found.hits and found.evidence
    read = "\n".join([*(e.text.lower() for e in found.evidence), shown_text([h.item for h in found.hits])])
    assert "(keyerror) key :retry_budget not found" in read  # in a record, or quoted from the step
    assert "defaults to 3" in read  # the agent's own reason, in its closing reply
    assert all("compiling module_5.ex" not in e.text and len(e.text) <= SNIPPET_CHARS + 20 for e in found.evidence)
    assert SearchService(store, None).search(query="retry_budget KeyError poller").evidence == []
    # other projects' steps are not quoted; nothing is quoted without a hit
    assert SearchService(store, None, evidence_snippets=3).search(query="retry_budget",
                                                                  projects=["elsewhere"]).evidence == []
    assert SearchService(store, None, evidence_snippets=3).search(query="zzqx unrelated").evidence == []


def test_trimming_keeps_the_matching_lines_with_context_and_marks_gaps() -> None:
    text = "\n".join(f"line {n}" for n in range(20)).replace("line 3", "the Configuration failed").replace(
        "line 15", "configure again")
    matcher = _line_matcher("configuring")
    assert matcher is not None
    assert trim(text, matcher).splitlines() == ["line 1", "line 2", "the Configuration failed", "line 4",
                                                "line 5", "…", "line 13", "line 14", "configure again",
                                                "line 16", "line 17"]
    hits = [EvidenceHit(1, None, text, 0, 1.0), EvidenceHit(2, 7, text, 0, 0.5), EvidenceHit(3, 8, "none", 0, 0.1)]
    assert [s.item_id for s in snippets(hits, "configure", 5)] == [None]  # the same lines once; none empty


def test_through_the_worker_a_secret_never_reaches_the_evidence(client: TestClient, app: Any) -> None:
    base = {"session_id": "s-ev", "project": "demo", "platform_source": "claude-code"}
    assert client.post("/api/sessions/init", json={**base, "prompt": "deploy it"}).status_code in (200, 202)
    tool = {**base, "tool_name": "Bash", "tool_use_id": "tu-ev", "tool_input": {"command": "make deploy"},
            "tool_response": "deploy failed: AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY rejected"}
    assert client.post("/api/sessions/observations", json=tool).status_code == 202
    store = store_of(app)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not store.evidence_count():
        time.sleep(0.1)
    texts = [r[0] for r in store._conn.execute("SELECT text FROM evidence")]
    assert texts and "deploy failed" in texts[0]
    assert "wJalrXUtnFEMI" not in texts[0]
    index = client.get("/api/search", params={"query": "deploy failed", "format": "index"}).json()["text"]
    assert "#" in index and "wJalrXUtnFEMI" not in index


def test_a_call_read_before_its_result_keeps_its_step_once_answered(store: Store, settings: Settings) -> None:
    """An import can read a call before its result (queued without its tool_use_id, marked pending); the answered
    call replaces its memory later, and its step takes the output and stands behind the new memory."""
    send(store, settings, "session_start")
    send(store, settings, "user_prompt", prompt="Check the remote")
    call = {"tool_name": "Bash", "tool_input": {"command": "git config --get-all remote.origin.url"},
            "narration": "The remote config has duplicate remote.origin.url entries, the bad one first."}
    store.enqueue_ingest_event(SESSION, "claude-code", "observation",
                               body("tool_use", **call, tool_use_id="t9", tool_response_pending=True), None)
    CapturePipeline(store, settings).process_pending(flush=True)
    assert store.evidence_count() == 1
    send(store, settings, "tool_use", **call, tool_use_id="t9",
         tool_response="https://bad.example/agentv.git\nhttps://github.com/x/agentv.git")
    CapturePipeline(store, settings).process_pending(flush=True)
    rows = store._conn.execute("SELECT item_id, text FROM evidence").fetchall()
    assert len(rows) == 1
    item_id, text = rows[0]
    assert "duplicate remote.origin.url entries" in text and "https://bad.example/agentv.git" in text
    assert item_id is not None and store.get_items([item_id])


def test_a_line_the_hits_already_show_is_not_quoted_again(store: Store, settings: Settings) -> None:
    step = "Running the suite.\n** (KeyError) key :retry_budget not found\nfix: default retry_budget to 3"
    hits = [EvidenceHit(1, 7, step, 0, 1.0), EvidenceHit(2, 8, "retry_budget shown already", 0, 0.5)]
    shown = "the poller crashed: ** (keyerror) key :retry_budget not found\nretry_budget shown already"
    quoted = snippets(hits, "retry_budget", 3, shown)
    assert [s.text for s in quoted] == ["Running the suite.\nfix: default retry_budget to 3"]
    # in a search: the snippets leave out what the hits' records hold
    _captured(store, settings)
    found = SearchService(store, None, evidence_snippets=3).search(query="retry_budget KeyError poller")
    records = "\n".join(filter(None, (h.item.narrative for h in found.hits))).lower()
    for snippet in found.evidence:
        assert all(" ".join(line.lower().split()) not in records for line in snippet.text.splitlines()
                   if line != "…")


def test_a_steps_input_keeps_what_it_did_not_its_knobs() -> None:
    """Codex's exec_command carries an output cap and a wait, Claude Code's Bash a timeout and a background flag:
    the step keeps the command and where it ran, not those numbers and flags."""
    from memcairn.capture.evidence import call_text
    from memcairn.capture.records import ToolCall

    call = ToolCall(name="exec_command", input={"cmd": "git fetch origin", "workdir": "/src/app",
                                                "max_output_tokens": 12000, "yield_time_ms": 30000,
                                                "run_in_background": False},
                    response={"output": "fatal: repository not found", "exit_code": 128})
    text = call_text(call)
    assert "cmd: git fetch origin" in text and "workdir: /src/app" in text and "repository not found" in text
    assert "12000" not in text and "30000" not in text and "run_in_background" not in text
