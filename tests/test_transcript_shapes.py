"""Every transcript shape imports, and the report names each file with its counts and why anything was left out:
a real Claude Code session with its subagent and compaction files, lines without ``sessionId``, ``summary``
title lines, Codex rollouts and Gemini CLI session files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from transcript_builder import CWD, SID, Transcript
from transcript_builder import kinds as _kinds
from transcript_builder import parse as _parse

from memcairn.capture.compaction import compaction_sections, compaction_text
from memcairn.cli.app import run as cli
from memcairn.core.models import ItemFilter
from memcairn.store import Store
from memcairn.transfer.importer import import_transcripts
from memcairn.transfer.transcript_files import transcripts_under
from memcairn.wire.config import Settings

SPOTTER = Path(__file__).parent / "fixtures" / "transcripts" / "spotter"
SPOTTER_SID = "258c7280-ae70-4798-800f-63464d01a85d"


def test_a_session_with_its_subagent_and_compaction_files_imports_as_one_session(
        store: Store, settings: Settings, tmp_path: Path) -> None:
    files = transcripts_under(SPOTTER)
    assert [f.name for f in files] == [f"{SPOTTER_SID}.jsonl", "agent-a881341.jsonl", "agent-acompact-fffbd0.jsonl"]
    report = import_transcripts(store, settings, files)
    main, subagent, compaction = report.file_reports
    assert (main["shape"], subagent["shape"], compaction["shape"]) == (
        "claude-code", "claude-code subagent", "claude-code compaction")
    assert main["sessions"] == subagent["sessions"] == compaction["sessions"] == [SPOTTER_SID]
    assert main["prompts"] == 1 and main["compactions"] == 1 and compaction["compactions"] == 1
    # the subagent's own calls (two web fetches) are the parent session's; its task is no prompt of it
    assert subagent["tool_uses"] == 2 and subagent["prompts"] == 0 and subagent["events"] >= 2
    assert subagent["left_out"] == {"'progress' lines (no message of the conversation)": 2}
    sessions = {i.session for i in store.list_items(ItemFilter(), limit=500)}
    assert sessions == {SPOTTER_SID}
    # the compaction summary is written twice (the session's own line, the compaction agent's file): one memory
    compacted = [i for i in store.list_items(ItemFilter(kinds=["summary"]), limit=50) if i.metadata.get("compaction")]
    assert len(compacted) == 1 and compaction["summaries"] == 0
    summary = compacted[0]
    assert summary.title.startswith("Compacted: ") and "spotter-gqc" in summary.title
    assert "AnnotationMessageRef" in (summary.learned or "") + (summary.completed or "")
    assert summary.next_steps and "All user messages" not in " ".join(
        f or "" for f in (summary.request, summary.learned, summary.completed, summary.next_steps, summary.notes))
    assert store.ingest_counts()["failed"] == 0

    again = import_transcripts(store, settings, files)
    assert again.events == 0 and [f["events"] for f in again.file_reports] == [0, 0, 0]


def test_compaction_text_is_the_same_from_both_places() -> None:
    main = [json.loads(line) for line in (SPOTTER / f"{SPOTTER_SID}.jsonl").read_text().splitlines()]
    line = next(e for e in main if e.get("isCompactSummary"))
    agent = [json.loads(x) for x in (SPOTTER / SPOTTER_SID / "subagents" / "agent-acompact-fffbd0.jsonl")
             .read_text().splitlines()]
    reply = next(e for e in agent if e["type"] == "assistant")
    content = line["message"]["content"]
    text = content if isinstance(content, str) else content[0]["text"]
    from_line, from_agent = compaction_text(text), compaction_text(reply["message"]["content"][0]["text"])
    assert from_line == from_agent and from_line.startswith("1. Primary Request and Intent")
    assert "Please continue the conversation" not in from_line
    sections = compaction_sections(from_line)
    assert set(sections) >= {"request", "learned", "completed", "next_steps"}
    assert all(len(v) < 3_200 for v in sections.values())


def test_lines_without_a_session_id_take_the_session_from_the_file_name(tmp_path: Path) -> None:
    path = (Transcript()
            .prompt("an old release wrote no sessionId")
            .text("Answered.")
            .write(tmp_path / "0f0e0d0c-old-session.jsonl"))
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({k: v for k, v in e.items() if k != "sessionId"}) + "\n" for e in lines))
    events, stats = _parse(path)
    assert _kinds(events) == ["session_start", "user_prompt", "stop", "session_end"]
    assert {e.body["session_id"] for e in events} == {"0f0e0d0c-old-session"} and stats.skipped_lines == 0


def test_summary_title_lines_are_kept_when_their_message_is_in_the_file(tmp_path: Path) -> None:
    path = (Transcript()
            .add({"type": "summary", "summary": "Cart totals rounding fix", "leafUuid": f"u-{SID[:4]}-2"})
            .add({"type": "summary", "summary": "Some other conversation", "leafUuid": "elsewhere"})
            .prompt("fix the rounding")
            .text("Fixed.")
            .write(tmp_path / "titled.jsonl"))
    events, stats = _parse(path)
    titles = [e.body["summary"] for e in events if e.body["event"] == "compaction"]
    assert titles == ["Cart totals rounding fix"] and stats.compactions == 1
    assert stats.left_out == {"'summary' title lines naming a message of another file": 1}


def _codex_line(kind: str, payload: dict[str, Any], second: int) -> str:
    return json.dumps({"timestamp": f"2026-03-01T10:00:{second:02d}.000Z", "type": kind, "payload": payload})


def test_a_codex_rollout_replays_as_prompts_calls_and_turns(store: Store, settings: Settings, tmp_path: Path) -> None:
    folder = tmp_path / "sessions" / "2026" / "03" / "01"
    folder.mkdir(parents=True)
    path = folder / "rollout-2026-03-01T10-00-00-c0dec0de.jsonl"
    call = {"command": ["bash", "-lc", "pytest -q"], "workdir": CWD}
    path.write_text("\n".join([
        _codex_line("session_meta", {"id": "c0dec0de-1", "cwd": CWD, "cli_version": "0.46.0"}, 0),
        _codex_line("response_item", {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "<environment_context>\n  <cwd>/x</cwd>\n</environment_context>"}]}, 1),
        _codex_line("response_item", {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "make the cart tests pass"}]}, 2),
        _codex_line("event_msg", {"type": "user_message", "message": "make the cart tests pass"}, 2),
        _codex_line("turn_context", {"cwd": CWD, "model": "gpt-5-codex"}, 3),
        _codex_line("response_item", {"type": "reasoning", "summary": [], "encrypted_content": "..."}, 4),
        _codex_line("response_item", {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "Running the tests to see what fails."}]}, 5),
        _codex_line("response_item", {"type": "function_call", "name": "shell", "arguments": json.dumps(call),
                                      "call_id": "call_1"}, 6),
        _codex_line("response_item", {"type": "function_call_output", "call_id": "call_1", "output": json.dumps(
            {"output": "FAILED test_cart.py::test_total - assert 0.30000000000000004 == 0.3",
             "metadata": {"exit_code": 1, "duration_seconds": 0.4}})}, 7),
        _codex_line("response_item", {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "The total uses floats; switched it to Decimal."}]}, 8),
        _codex_line("response_item", {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "continue"}]}, 9),
        _codex_line("compacted", {"message": "Summary: the cart total now uses Decimal."}, 10),
    ]) + "\n")
    events, stats = _parse(path)
    assert _kinds(events) == ["session_start", "user_prompt", "tool_use", "compaction", "stop", "session_end"]
    prompt, tool = events[1].body, events[2].body
    assert prompt["prompt"] == "make the cart tests pass" and prompt["platform_source"] == "codex"
    assert tool["tool_name"] == "shell" and tool["tool_input"] == call and tool["is_error"] is True
    assert tool["narration"] == "Running the tests to see what fails." and tool["tool_use_id"] == "call_1"
    assert events[4].body["last_assistant_message"] == "The total uses floats; switched it to Decimal."
    assert stats.shape == "codex" and stats.left_out == {
        "'event_msg' lines (the terminal's copy of the conversation)": 1,
        "'reasoning' items (the model's reasoning or other internals)": 1,
        "prompts that are no request (a notice, a bare 'continue')": 1,
        "user messages Codex writes itself (environment, instructions)": 1}

    report = import_transcripts(store, settings, transcripts_under(tmp_path / "sessions"))
    assert report.files == 1 and report.prompts == 1 and report.observations >= 1
    assert {i.platform_source for i in store.list_items(ItemFilter(), limit=50)} == {"codex"}


def _gemini_session(chats: Path, name: str) -> Path:
    chats.mkdir(parents=True)
    path = chats / name
    path.write_text(json.dumps({
        "sessionId": "9e9e9e9e-gem", "projectHash": "79b6fa86e3c0d31765c7", "startTime": "2026-03-01T10:00:00Z",
        "lastUpdated": "2026-03-01T10:01:00Z",
        "messages": [
            {"id": "m1", "timestamp": "2026-03-01T10:00:01Z", "type": "user", "content": "list the python files"},
            {"id": "m2", "timestamp": "2026-03-01T10:00:02Z", "type": "gemini", "content": "Listing them.",
             "thoughts": [{"subject": "plan", "description": "use ls"}],
             "toolCalls": [{"id": "ls-1", "name": "run_shell_command", "args": {"command": "ls *.py"},
                            "status": "success", "timestamp": "2026-03-01T10:00:03Z",
                            "resultDisplay": "cart.py\ntest_cart.py",
                            "result": [{"functionResponse": {"id": "ls-1", "name": "run_shell_command",
                                                             "response": {"output": "cart.py\ntest_cart.py"}}}]}]},
            {"id": "m3", "timestamp": "2026-03-01T10:00:04Z", "type": "info", "content": "Request cancelled."},
            {"id": "m4", "timestamp": "2026-03-01T10:00:05Z", "type": "gemini", "content": "Two files: cart.py, "
             "test_cart.py."},
        ]}))
    return path


def test_a_gemini_session_file_replays_and_finds_its_directory(tmp_path: Path) -> None:
    path = _gemini_session(tmp_path / "tmp" / "shop" / "chats", "session-2026-03-01T10-00-9e9e9e9e.json")
    (tmp_path / "tmp" / "shop" / ".project_root").write_text("/home/dev/shop\n")
    events, stats = _parse(path)
    assert _kinds(events) == ["session_start", "user_prompt", "tool_use", "stop", "session_end"]
    assert {e.body["platform_source"] for e in events} == {"gemini-cli"} and events[0].body["cwd"] == "/home/dev/shop"
    tool = events[2].body
    assert tool["tool_input"] == {"command": "ls *.py"} and tool["tool_response"] == "cart.py\ntest_cart.py"
    assert tool["narration"] == "Listing them." and "is_error" not in tool
    assert events[3].body["last_assistant_message"] == "Two files: cart.py, test_cart.py."
    assert stats.left_out == {"'info' messages (notices of the CLI, not the conversation)": 1}


def test_the_import_command_reports_each_file_and_why_something_was_left_out(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "mixed"
    _gemini_session(folder / "gem" / "chats", "session-2026-03-01T10-00-9e9e9e9e.json")  # no .project_root
    (folder / "gem" / "chats" / "session-notes.json").write_text(json.dumps({"notes": []}))
    shutil.copytree(SPOTTER, folder / "claude")
    assert cli(["import", "transcripts", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "imported 4 transcript files" in out and "1 unreadable file" in out
    assert f"{SPOTTER_SID}.jsonl (claude-code): 1 prompt, " in out
    assert "agent-a881341.jsonl (claude-code subagent): 0 prompts, 2 tool calls" in out
    assert "left out: 2 'progress' lines (no message of the conversation)" in out
    assert "session-2026-03-01T10-00-9e9e9e9e.json (gemini-cli): 1 prompt, 1 tool call," in out
    assert "working directory not recorded" in out
    assert "session-notes.json: not imported: session-notes.json: JSON, but not a Gemini CLI session" in out


def test_a_gemini_chat_copied_under_another_name_is_found_in_a_folder(tmp_path: Path) -> None:
    """A chat kept outside Gemini's chats/session-*.json (as more-sessions ships its sample) is still a session;
    other JSON files (settings, a package manifest) are not taken for one."""
    folder = tmp_path / "sessions"
    _gemini_session(folder / "gemini-copies", "entire-cli-gemini-ab2b.json")
    (folder / "settings.json").write_text('{"theme": "dark"}')
    (folder / "package.json").write_text('{"name": "x", "messages": []}')
    assert [p.name for p in transcripts_under(folder)] == ["entire-cli-gemini-ab2b.json"]


def test_a_codex_exec_result_keeps_what_the_command_printed_and_how_it_ended(store: Store, settings: Settings,
                                                                             tmp_path: Path) -> None:
    """Codex CLI writes exec_command results as text with a header (chunk id, wall time, exit code, token count);
    the header is how the call ended, not its output: no memory is titled by it."""
    path = tmp_path / "rollout-2026-03-01T10-00-00-e3ec0de0.jsonl"
    failing = ("Chunk ID: 671c5a\nWall time: 0.3186 seconds\nProcess exited with code 128\nOriginal token count: 19\n"
               "Output:\nremote: Not Found\nfatal: repository 'https://github.com/..git/' not found\n")
    passing = "Chunk ID: 39af76\nWall time: 0.0000 seconds\nProcess exited with code 0\nOutput:\nall 12 tests passed\n"
    path.write_text("\n".join([
        _codex_line("session_meta", {"id": "e3ec0de0-1", "cwd": CWD, "cli_version": "0.142.0"}, 0),
        _codex_line("response_item", {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "fetch and run the tests"}]}, 1),
        _codex_line("response_item", {"type": "function_call", "name": "exec_command", "call_id": "c1",
                                      "arguments": json.dumps({"cmd": "git fetch origin"})}, 2),
        _codex_line("response_item", {"type": "function_call_output", "call_id": "c1", "output": failing}, 3),
        _codex_line("response_item", {"type": "function_call", "name": "exec_command", "call_id": "c2",
                                      "arguments": json.dumps({"cmd": "bun test"})}, 4),
        _codex_line("response_item", {"type": "function_call_output", "call_id": "c2", "output": passing}, 5),
        _codex_line("response_item", {"type": "function_call_output", "call_id": "c9", "output": "plain text"}, 6),
    ]) + "\n")
    events, _ = _parse(path)
    tools = [e.body for e in events if e.body["event"] == "tool_use"]
    assert [t["tool_response"] for t in tools] == [
        {"output": "remote: Not Found\nfatal: repository 'https://github.com/..git/' not found\n", "exit_code": 128},
        {"output": "all 12 tests passed\n", "exit_code": 0}]
    assert [t.get("is_error") is True for t in tools] == [True, False]
    import_transcripts(store, settings, [path])
    titles = [i.title or "" for i in store.list_items(ItemFilter(kinds=["observation"]))]
    assert titles and not any("Chunk ID" in t or "Wall time" in t for t in titles), titles
