"""The agent's own text around its tool calls reaches the compressors: an import reads it from the transcript, the
worker reads it live from the end of the file a PostToolUse names, and the pipeline hands each call its narration
and a summary the whole turn's."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from capture_queue import send
from starlette.testclient import TestClient
from transcript_builder import SID, Transcript
from transcript_builder import parse as _parse
from worker_app import store_of

from memcairn.capture.pipeline import CapturePipeline
from memcairn.capture.records import Compressed, Observation, Summary, ToolCall, Turn
from memcairn.store import Store
from memcairn.transfer.transcript_tail import narration_before
from memcairn.wire.config import Settings


def _session(tmp_path: Path) -> Path:
    """Two turns: a call with text before it, a line of two calls at once, a call with no text of its own."""
    return (Transcript()
            .prompt("Fix the guard")
            .text("The guard fails because Access.get/2 can't be used inside a guard.", message_id="m1")
            .assistant({"type": "thinking", "thinking": "hmm"}, message_id="m1")
            .text("I'll bind it first.", message_id="m1")
            .tool("t1", "Edit", {"file_path": "/w/a.ex"}, message_id="m1")
            .add({"type": "progress", "sessionId": "x", "data": {}})
            .result("t1")
            .assistant({"type": "text", "text": "Now both tests."},
                       {"type": "tool_use", "id": "t2", "name": "Bash", "input": {"command": "mix test a"}},
                       {"type": "tool_use", "id": "t3", "name": "Bash", "input": {"command": "mix test b"}},
                       message_id="m2")
            .result("t2").result("t3")
            .tool("t4", "Bash", {"command": "git status"}, message_id="m3")
            .result("t4")
            .text("Done: the guard binds first.", message_id="m4")
            .prompt("and push")
            .text("Pushing now.", message_id="m5")
            .tool("t5", "Bash", {"command": "git push"}, message_id="m5")
            .result("t5")
            .write(tmp_path / "s.jsonl"))


EXPECTED = {
    "t1": "The guard fails because Access.get/2 can't be used inside a guard.\n\nI'll bind it first.",
    "t2": "Now both tests.", "t3": None, "t4": None, "t5": "Pushing now.",
}


def test_an_import_gives_each_call_the_text_written_before_it(tmp_path: Path) -> None:
    events, _ = _parse(_session(tmp_path))
    calls = {e.body["tool_use_id"]: e.body.get("narration") for e in events if e.body["event"] == "tool_use"}
    assert calls == EXPECTED
    stops = [e.body.get("last_assistant_message") for e in events if e.body["event"] == "stop"]
    assert stops == ["Done: the guard binds first.", "Pushing now."]


def test_the_live_read_finds_the_same_text_and_fails_soft(tmp_path: Path) -> None:
    path = str(_session(tmp_path))
    assert {tid: narration_before(path, tid) for tid in EXPECTED} == EXPECTED
    assert narration_before(path, "no-such-call") is None
    assert narration_before(str(tmp_path / "missing.jsonl"), "t1") is None
    other = tmp_path / "s.txt"
    other.write_text(Path(path).read_text())
    assert narration_before(str(other), "t1") is None  # only a transcript file is read
    # bounded: a call further from the end than the window is not looked for
    size = Path(path).stat().st_size
    assert narration_before(path, "t1", max_bytes=size // 4) is None
    Path(path).write_text("not json\n" + Path(path).read_text())
    assert narration_before(path, "t5") == "Pushing now."


def test_the_worker_stores_the_narration_it_reads_scrubbed(client: TestClient, app: Any,  # noqa: F811
                                                           tmp_path: Path) -> None:
    path = (Transcript()
            .prompt("deploy")
            .text("The deploy failed: password=hunter2hunter2 was wrong in .env, so I reset it.", message_id="m1")
            .tool("tu-9", "Bash", {"command": "make deploy"}, message_id="m1")
            .write(tmp_path / "live.jsonl"))
    tool = {"session_id": "s9", "project": "demo", "tool_name": "Bash", "tool_use_id": "tu-9",
            "transcript_path": str(path), "tool_input": {"command": "make deploy"}, "tool_response": "ok"}
    assert client.post("/api/sessions/observations", json=tool).status_code == 202
    given = {**tool, "tool_use_id": "tu-10", "narration": "Given by the hook."}
    assert client.post("/api/sessions/observations", json=given).status_code == 202
    missing = {**tool, "tool_use_id": "tu-11", "transcript_path": str(tmp_path / "gone.jsonl")}
    assert client.post("/api/sessions/observations", json=missing).status_code == 202
    events = {e.tool_use_id: e.payload for e in store_of(app).session_events("unknown", "s9")}
    said = events["tu-9"]["narration"]
    assert said.startswith("The deploy failed:") and "so I reset it." in said and "hunter2" not in said
    assert events["tu-10"]["narration"] == "Given by the hook."
    assert "narration" not in events["tu-11"]
    assert client.post("/api/sessions/observations", json={**tool, "narration": 5}).status_code == 400


class Recording:
    """A compressor that keeps what it was given and answers like the offline extractor would, minimally."""

    name = "recording"

    def __init__(self) -> None:
        self.observed: list[tuple[Turn, list[ToolCall]]] = []
        self.summarized: list[Turn] = []

    def observe(self, turn: Turn, calls: Sequence[ToolCall]) -> Compressed:
        self.observed.append((turn, list(calls)))
        return Compressed(observations=[Observation(type="change", title=f"call {c.tool_use_id}") for c in calls])

    def summarize(self, turn: Turn, observations: Sequence[Observation]) -> Compressed:
        self.summarized.append(turn)
        return Compressed(summary=Summary(request=turn.prompt))


def test_the_pipeline_hands_calls_and_summaries_their_narration(store: Store, settings: Settings) -> None:  # noqa: F811
    send(store, settings, "session_start")
    send(store, settings, "user_prompt", prompt="Fix the guard")
    send(store, settings, "tool_use", tool_name="Edit", tool_use_id="t1", tool_input={"file_path": "/w/a.ex"},
         tool_response="ok", narration="The guard fails because Access.get/2 can't be used in a guard.")
    send(store, settings, "tool_use", tool_name="Bash", tool_use_id="t2", tool_input={"command": "mix test"},
         tool_response="ok")
    compressor = Recording()
    CapturePipeline(store, settings, compressor=compressor).process_pending(flush=True)
    send(store, settings, "tool_use", tool_name="Bash", tool_use_id="t3", tool_input={"command": "git push"},
         tool_response="ok", narration="Pushing.")
    send(store, settings, "stop", last_assistant_message="Pushed the guard fix.")
    CapturePipeline(store, settings, compressor=compressor).process_pending(flush=True)
    given = [(c.tool_use_id, c.narration) for _, calls in compressor.observed for c in calls]
    assert given == [("t1", "The guard fails because Access.get/2 can't be used in a guard."), ("t2", None),
                     ("t3", "Pushing.")]
    later_turn = compressor.observed[-1][0]
    assert [c.narration for c in later_turn.tools] == [given[0][1], None]
    assert later_turn.narration == (given[0][1],)
    summary_turn = compressor.summarized[-1]
    assert summary_turn.narration == (given[0][1], "Pushing.")
    assert summary_turn.last_assistant_message == "Pushed the guard fix."


def _with_housekeeping(tmp_path: Path) -> Path:
    """The text before a todo-list update is the next observed call's, as is the call's own."""
    return (Transcript()
            .prompt("Fix the guard")
            .text("The guard fails because Access.get/2 can't be used inside a guard.", message_id="m1")
            .tool("h1", "TodoWrite", {"todos": []}, message_id="m1")
            .result("h1", "Todos updated")
            .text("I'll bind it first.", message_id="m2")
            .tool("t1", "Edit", {"file_path": "/w/a.ex"}, message_id="m2")
            .result("t1")
            .write(tmp_path / "h.jsonl"))


def test_the_text_before_an_unobserved_call_goes_to_the_next_observed_one(tmp_path: Path, store: Store,
                                                                         settings: Settings) -> None:  # noqa: F811
    from memcairn.capture.admission import skipped_tool
    from memcairn.transfer.importer import import_transcripts

    path = str(_with_housekeeping(tmp_path))
    both = "The guard fails because Access.get/2 can't be used inside a guard.\n\nI'll bind it first."
    assert narration_before(path, "t1", unobserved=lambda name: skipped_tool(name, settings)) == both
    assert narration_before(path, "t1") == "I'll bind it first."  # without the rule, the todo call ends it
    import_transcripts(store, settings, [Path(path)])
    events = [e for e in store.session_events("claude-code", SID) if e.kind == "tool_use"]
    assert [(e.payload["tool_name"], e.payload.get("narration")) for e in events] == [("Edit", both)]
