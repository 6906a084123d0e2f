from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from transcript_builder import CWD, SID, Transcript
from transcript_builder import kinds as _kinds
from transcript_builder import parse as _parse

from memcairn.transfer.replay_events import timestamp_ms
from memcairn.transfer.transcript_files import default_transcript_paths
from memcairn.wire.protocol import HOOK_BODY_BYTES as MAX_BODY_BYTES

FIXTURES = Path(__file__).parent / "fixtures" / "transcripts"
FIXTURE_FILES = sorted(FIXTURES.glob("*.jsonl"))
QUEUE_EVENT = {"session_start": "session_init", "user_prompt": "session_init", "tool_use": "observation",
               "stop": "summarize", "session_end": "summarize"}
BASE_FIELDS = ("event", "session_id", "cwd", "project", "projects", "platform_source", "transcript_path",
               "timestamp_ms")


def _raw_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _direct_counts(path: Path) -> tuple[int, set[str], set[str]]:
    """Typed prompts, tool_use ids and tool_result ids, counted straight from the file (no sidechain)."""
    prompts, uses, results = 0, set(), set()
    for entry in _raw_lines(path):
        if entry.get("isSidechain") or entry.get("type") not in ("user", "assistant"):
            continue
        content = entry["message"]["content"]
        if entry["type"] == "user" and isinstance(content, str) and not entry.get("isMeta"):
            prompts += 1
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "tool_use":
                uses.add(block["id"])
            elif block.get("type") == "tool_result":
                results.add(block["tool_use_id"])
    return prompts, uses, results


# -- the recorded transcripts ------------------------------------------------------------------------------
@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.stem)
def test_fixture_counts_and_pairing(path: Path) -> None:
    events, stats = _parse(path)
    prompts, uses, results = _direct_counts(path)
    kinds = Counter(_kinds(events))
    assert kinds["user_prompt"] == prompts == stats.prompts
    assert kinds["tool_use"] == len(uses) == stats.tool_uses
    assert uses == results
    tool_events = [e for e in events if e.body["event"] == "tool_use"]
    assert {e.body["tool_use_id"] for e in tool_events} == uses
    assert all(e.body["tool_response"] is not None for e in tool_events)
    assert stats.unanswered_tool_uses == 0
    assert stats.events == len(events)
    assert stats.skipped_lines == 0
    assert stats.lines == len(_raw_lines(path))
    assert len(stats.sessions) == 1


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.stem)
def test_fixture_order_and_shape(path: Path) -> None:
    events, _ = _parse(path)
    kinds = _kinds(events)
    assert kinds[0] == "session_start"
    assert kinds[-1] == "session_end"
    assert kinds[-2] == "stop"
    assert kinds.count("session_start") == kinds.count("session_end") == 1
    # every prompt after the first is preceded by the stop of the turn before it
    for i, kind in enumerate(kinds):
        if kind == "user_prompt" and i > 1:
            assert kinds[i - 1] == "stop"
    assert kinds.count("stop") == kinds.count("user_prompt")
    numbers = [e.body["prompt_number"] for e in events if e.body["event"] == "user_prompt"]
    assert numbers == list(range(1, len(numbers) + 1))
    cwd = _raw_lines(path)[1]["cwd"]
    for event in events:
        assert event.event_type == QUEUE_EVENT[event.body["event"]]
        for name in BASE_FIELDS:
            assert name in event.body
        assert event.body["platform_source"] == "claude-code"
        assert event.body["cwd"] == cwd
        # the recorded directory is gone; the identity falls back to its basename
        assert event.body["project"] == Path(cwd).name
        assert event.body["projects"] == [Path(cwd).name]
        assert event.body["transcript_path"] == str(path.absolute())
    assert events[-1].body["reason"] == "transcript_import"


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.stem)
def test_fixture_timestamps_in_milliseconds(path: Path) -> None:
    events, _ = _parse(path)
    stamps = [timestamp_ms(e["timestamp"]) for e in _raw_lines(path)]
    low, high = min(s for s in stamps if s is not None), max(s for s in stamps if s is not None)
    for event in events:
        assert isinstance(event.at_epoch, int)
        assert event.body["timestamp_ms"] == event.at_epoch
        assert low <= event.at_epoch <= high
    assert [e.at_epoch for e in events] == sorted(e.at_epoch for e in events)
    assert 1_700_000_000_000 < events[0].at_epoch < 1_900_000_000_000  # milliseconds, not seconds


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.stem)
def test_fixture_source_keys_unique_and_stable(path: Path) -> None:
    first, _ = _parse(path)
    second, _ = _parse(path)
    keys = [e.source_key for e in first]
    assert len(set(keys)) == len(keys)
    assert keys == [e.source_key for e in second]
    assert first == second
    session = first[0].body["session_id"]
    assert all(k.startswith("transcript:") and k.endswith(":" + e.body["event"])
               for k, e in zip(keys, first, strict=True))
    # a session's own start and end name it; a line's events are named by its uuid (or the call's id) alone,
    # so that a resumed or forked file repeating the line under another session id repeats the key
    for key, event in zip(keys, first, strict=True):
        per_session = event.body["event"] in ("session_start", "session_end")
        assert key.startswith(f"transcript:{session}:") == per_session
        assert event.legacy_key == (None if per_session else key.replace("transcript:", f"transcript:{session}:", 1))


def test_hello_world_details() -> None:
    events, _ = _parse(FIXTURES / "claude-reliability__hello-world-script.jsonl")
    assert _kinds(events) == ["session_start", "user_prompt", "tool_use", "tool_use", "stop", "session_end"]
    prompt = events[1].body
    assert prompt["prompt"] == 'Write a shell script called hello.sh that prints "Hello world" and run it.'
    assert prompt["prompt_number"] == 1
    write, bash = events[2].body, events[3].body
    assert write["tool_name"] == "Write"
    assert write["tool_input"]["file_path"].endswith("hello.sh")
    assert write["tool_response"]["type"] == "create"
    assert bash["tool_name"] == "Bash"
    assert bash["tool_response"] == {"stdout": "Hello world", "stderr": "", "interrupted": False, "isImage": False}
    assert "is_error" not in bash
    # the Stop hook feedback (isMeta) is no prompt; the turn's last message is the reply after it
    assert events[4].body["last_assistant_message"].startswith("I have fully completed the task.")
    assert events[4].at_epoch == timestamp_ms("2026-01-21T06:20:44.516Z") == 1768976444516


def test_error_result_and_task_result() -> None:
    events, _ = _parse(FIXTURES / "claude-reliability__coverage-test-fix.jsonl")
    errors = [e.body for e in events if e.body.get("is_error")]
    assert len(errors) == 1
    assert errors[0]["tool_name"] == "Bash"
    assert errors[0]["tool_response"].startswith("Error: Exit code 1")
    port, _ = _parse(FIXTURES / "claude-reliability__python-to-rust-port.jsonl")
    task = next(e.body for e in port if e.body.get("tool_name") == "Task")
    assert task["tool_response"]["status"] == "completed"


# -- synthetic transcripts (transcript_builder.Transcript) -------------------------------------------------
def test_synthetic_turns(tmp_path: Path) -> None:
    path = (Transcript()
            .add({"type": "queue-operation", "operation": "dequeue", "sessionId": SID,
                  "timestamp": "2026-03-01T10:00:00.000Z"})
            .prompt("first question")
            .assistant({"type": "thinking", "thinking": "hmm"}, message_id="m1")
            .text("Looking.", message_id="m1")
            .tool("t1", message_id="m1")
            .result("t1", "listing", is_error=False, rich={"stdout": "listing", "stderr": ""})
            .text("Part one.", message_id="m2")
            .assistant({"type": "thinking", "thinking": "more"}, message_id="m2")
            .text("Part two.", message_id="m2")
            .add({"type": "system", "subtype": "stop_hook_summary", "sessionId": SID, "cwd": CWD})
            .prompt("second question")
            .text("Answer two.")
            .write(tmp_path / "t.jsonl"))
    events, stats = _parse(path)
    assert _kinds(events) == ["session_start", "user_prompt", "tool_use", "stop", "user_prompt", "stop",
                              "session_end"]
    assert events[2].body["tool_response"] == {"stdout": "listing", "stderr": ""}
    assert events[3].body["last_assistant_message"] == "Part one.\n\nPart two."
    assert events[5].body["last_assistant_message"] == "Answer two."
    assert [e.body["prompt_number"] for e in events if e.body["event"] == "user_prompt"] == [1, 2]
    assert events[0].at_epoch == timestamp_ms("2026-03-01T10:00:01.250Z")
    assert events[3].at_epoch < events[4].at_epoch
    assert events[0].body["project"] == "demo-project"
    assert stats.lines == 12 and stats.skipped_lines == 0 and stats.events == 7


def test_malformed_lines_are_counted_not_fatal(tmp_path: Path) -> None:
    path = (Transcript()
            .raw("{not json")
            .raw("[1, 2, 3]")
            .raw('"a string"')
            .raw("")
            .prompt("hello")
            .raw('{"type": "user", "sessionId": "x", "cwd": "/a"}')  # no message
            .raw('{"type": "user", "sessionId": "new-session", "message": {"content": "no cwd"}}')
            .text("hi")
            .raw('{"truncated": ')
            .write(tmp_path / "bad.jsonl"))
    events, stats = _parse(path)
    assert stats.skipped_lines == 6
    assert stats.left_out["message lines without a message object"] == 1
    assert stats.left_out["message lines before any line naming the working directory"] == 1
    assert stats.lines == 8
    assert _kinds(events) == ["session_start", "user_prompt", "stop", "session_end"]
    assert stats.sessions == {SID}


def test_meta_and_command_lines_are_not_prompts(tmp_path: Path) -> None:
    path = (Transcript()
            .prompt("<command-name>/clear</command-name>\n<command-message>clear</command-message>")
            .prompt("<local-command-stdout></local-command-stdout>")
            .prompt("Caveat: the messages below were generated by local commands", isMeta=True)
            .prompt("real prompt")
            .text("Working.")
            .prompt("Stop hook feedback:\nkeep going", isMeta=True)
            .prompt([{"type": "text", "text": "[Request interrupted by user]"}])
            .prompt("This session is being continued from a previous conversation...", isCompactSummary=True)
            .prompt([{"type": "text", "text": "<ide_opened_file>x.py</ide_opened_file>"},
                     {"type": "image", "source": {}},
                     {"type": "text", "text": "look at this"}])
            .write(tmp_path / "meta.jsonl"))
    events, stats = _parse(path)
    prompts = [e.body["prompt"] for e in events if e.body["event"] == "user_prompt"]
    assert prompts == ["real prompt", "look at this"]
    assert stats.prompts == 2
    assert _kinds(events) == ["session_start", "user_prompt", "stop", "user_prompt", "stop", "session_end"]


def test_tool_use_without_result(tmp_path: Path) -> None:
    path = (Transcript()
            .prompt("run it")
            .tool("t1")
            .tool("t2", name="Read", tool_input={"file_path": "/x"})
            .result("t1", [{"type": "text", "text": "line one"}, {"type": "text", "text": "line two"}])
            .write(tmp_path / "cut.jsonl"))
    events, stats = _parse(path)
    assert _kinds(events) == ["session_start", "user_prompt", "tool_use", "tool_use", "stop", "session_end"]
    answered, unanswered = events[2].body, events[3].body
    assert answered["tool_use_id"] == "t1" and answered["tool_response"] == "line one\nline two"
    assert unanswered["tool_use_id"] == "t2" and unanswered["tool_response"] is None
    assert unanswered["tool_input"] == {"file_path": "/x"}
    assert stats.tool_uses == 2 and stats.unanswered_tool_uses == 1
    assert "last_assistant_message" not in events[4].body


def test_interrupted_turn(tmp_path: Path) -> None:
    path = (Transcript()
            .prompt("do a long thing")
            .text("Starting.")
            .tool("t1", tool_input={"command": "sleep 100"})
            .result("t1", "The user doesn't want to proceed with this tool use.", is_error=True,
                    rich="Error: [Request interrupted by user for tool use]")
            .prompt([{"type": "text", "text": "[Request interrupted by user for tool use]"}])
            .tool("t9")  # never answered, then the person moved on
            .prompt("never mind, do something else")
            .text("Done instead.")
            .write(tmp_path / "interrupted.jsonl"))
    events, stats = _parse(path)
    assert _kinds(events) == ["session_start", "user_prompt", "tool_use", "tool_use", "stop", "user_prompt",
                              "stop", "session_end"]
    assert events[2].body["is_error"] is True
    assert events[2].body["tool_response"] == "Error: [Request interrupted by user for tool use]"
    assert events[3].body["tool_use_id"] == "t9" and events[3].body["tool_response"] is None
    assert events[4].body["last_assistant_message"] == "Starting."
    assert events[5].body["prompt_number"] == 2
    assert events[6].body["last_assistant_message"] == "Done instead."
    assert stats.unanswered_tool_uses == 1


def test_multiple_sessions(tmp_path: Path) -> None:
    other = "99999999-8888-7777-6666-555555555555"
    first = Transcript().prompt("a1").text("r1").tool("ta").result("ta")
    second = Transcript(session_id=other, cwd="/elsewhere/other-repo")
    second.second = 30
    second.prompt("b1").text("s1").prompt("b2").text("s2")
    path = tmp_path / "two.jsonl"
    path.write_text("\n".join(first.lines + second.lines) + "\n", encoding="utf-8")
    events, stats = _parse(path)
    assert stats.sessions == {SID, other}
    by_session = {sid: [e for e in events if e.body["session_id"] == sid] for sid in (SID, other)}
    assert _kinds(by_session[SID]) == ["session_start", "user_prompt", "tool_use", "stop", "session_end"]
    assert _kinds(by_session[other]) == ["session_start", "user_prompt", "stop", "user_prompt", "stop",
                                         "session_end"]
    assert [e.body["prompt_number"] for e in by_session[other] if e.body["event"] == "user_prompt"] == [1, 2]
    assert {e.body["project"] for e in by_session[other]} == {"other-repo"}
    assert {e.body["project"] for e in by_session[SID]} == {"demo-project"}
    # the session that went quiet first is ended first
    ends = [e.body["session_id"] for e in events if e.body["event"] == "session_end"]
    assert ends == [SID, other]
    keys = [e.source_key for e in events]
    assert len(keys) == len(set(keys))


def test_empty_and_blank_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n\n   \n", encoding="utf-8")
    for path in (empty, blank):
        events, stats = _parse(path)
        assert events == []
        assert stats.lines == 0 and stats.skipped_lines == 0 and stats.events == 0 and not stats.sessions


def test_non_utf8_bytes(tmp_path: Path) -> None:
    path = Transcript().prompt("cafPLACEHOLDER").text("ok").write(tmp_path / "latin.jsonl")
    data = path.read_bytes().replace(b"PLACEHOLDER", b"\xe9 \xff\xfe bytes")  # Latin-1, then junk
    path.write_bytes(b"\x80\x81 garbage line\n" + data + b"\xc0\n")
    events, stats = _parse(path)
    assert stats.skipped_lines == 2
    prompt = next(e.body["prompt"] for e in events if e.body["event"] == "user_prompt")
    assert prompt == "caf\ufffd \ufffd\ufffd bytes"
    assert _kinds(events) == ["session_start", "user_prompt", "stop", "session_end"]


def test_sidechain_lines_are_skipped(tmp_path: Path) -> None:
    path = (Transcript()
            .prompt("main prompt")
            .tool("task1", name="Task", tool_input={"prompt": "explore"})
            .prompt("explore", isSidechain=True)
            .tool("side1", isSidechain=True)
            .result("side1", isSidechain=True)
            .text("sub report", isSidechain=True)
            .result("task1", [{"type": "text", "text": "report"}])
            .text("Done.")
            .write(tmp_path / "side.jsonl"))
    events, _ = _parse(path)
    assert _kinds(events) == ["session_start", "user_prompt", "tool_use", "stop", "session_end"]
    assert events[2].body["tool_name"] == "Task" and events[2].body["tool_response"] == "report"
    assert events[3].body["last_assistant_message"] == "Done."
    only_side = (Transcript().prompt("explore", isSidechain=True).text("x", isSidechain=True)
                 .write(tmp_path / "agent-1.jsonl"))
    assert _parse(only_side)[0] == []


def test_repeated_lines_and_result_attribution(tmp_path: Path) -> None:
    script = Transcript().prompt("go")
    script.tool("t1").tool("t2")
    script.result("t1")
    repeated = script.lines[:]
    script.lines.extend(repeated)  # the same lines written twice (same uuids and tool ids)
    two_results = {"type": "user", "sessionId": SID, "cwd": CWD, "uuid": "both",
                   "timestamp": "2026-03-01T10:01:00Z", "toolUseResult": {"stdout": "ambiguous"},
                   "message": {"role": "user", "content": [
                       {"type": "tool_result", "tool_use_id": "t2", "content": "two"},
                       {"type": "tool_result", "tool_use_id": "t1", "content": "late duplicate"}]}}
    path = script.add(two_results).write(tmp_path / "dup.jsonl")
    events, _ = _parse(path)
    assert Counter(_kinds(events)) == {"session_start": 1, "user_prompt": 1, "tool_use": 2, "stop": 1,
                                       "session_end": 1}
    t2 = next(e.body for e in events if e.body.get("tool_use_id") == "t2")
    assert t2["tool_response"] == "two"  # several results on one line: the block's own content
    keys = [e.source_key for e in events]
    assert len(keys) == len(set(keys))


def test_own_tools_left_out_and_large_bodies_cut(tmp_path: Path) -> None:
    big = "x" * (MAX_BODY_BYTES + 10_000)
    path = (Transcript()
            .prompt("search memory")
            .tool("m1", name="mcp__memcairn__search", tool_input={"query": "q"})
            .result("m1")
            .tool("r1", name="Read", tool_input={"file_path": "/big"})
            .result("r1", big)
            .write(tmp_path / "big.jsonl"))
    events, stats = _parse(path)
    tools = [e.body for e in events if e.body["event"] == "tool_use"]
    assert [t["tool_name"] for t in tools] == ["Read"]
    assert stats.tool_uses == 1
    assert len(json.dumps(tools[0], ensure_ascii=False).encode("utf-8")) <= MAX_BODY_BYTES
    assert tools[0]["tool_response"].startswith("xxx")


def test_project_identity_from_an_existing_checkout(tmp_path: Path) -> None:
    repo = tmp_path / "my-repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "src").mkdir()
    path = Transcript(cwd=str(repo / "src")).prompt("hi").write(tmp_path / "git.jsonl")
    events, _ = _parse(path)
    assert {e.body["project"] for e in events} == {"my-repo"}


def test_timestamp_ms() -> None:
    assert timestamp_ms("1970-01-01T00:00:01.500Z") == 1500
    assert timestamp_ms("2026-01-21T06:20:44.516Z") == 1768976444516
    assert timestamp_ms("2026-01-21T07:20:44.516+01:00") == 1768976444516
    assert timestamp_ms("2026-01-21T06:20:44.516") == 1768976444516
    assert timestamp_ms(1768976444516) == 1768976444516
    assert timestamp_ms(1768976444) == 1768976444000
    for bad in (None, "", "yesterday", True, [], {}):
        assert timestamp_ms(bad) is None


def test_missing_timestamps_fall_back(tmp_path: Path) -> None:
    path = tmp_path / "nots.jsonl"
    lines = [{"type": "user", "sessionId": SID, "cwd": CWD, "message": {"content": "p"}},
             {"type": "assistant", "sessionId": SID, "cwd": CWD, "timestamp": "garbage",
              "message": {"content": [{"type": "text", "text": "r"}]}}]
    path.write_text("\n".join(json.dumps(x) for x in lines), encoding="utf-8")
    events, _ = _parse(path)
    assert [e.at_epoch for e in events] == [0, 0, 0, 0]
    # the stop is named by the line that began its turn, the session end by the session's last line
    assert [e.source_key.split(":")[2] for e in events] == ["line1", "line1", "line1", "line2"]
    assert events[2].body["last_assistant_message"] == "r"


def test_default_transcript_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert default_transcript_paths(tmp_path) == []
    projects = tmp_path / ".claude" / "projects"
    (projects / "-b-repo" / "sid" / "subagents").mkdir(parents=True)
    (projects / "-a-repo").mkdir()
    files = [projects / "-b-repo" / "s2.jsonl", projects / "-a-repo" / "s1.jsonl",
             projects / "-b-repo" / "sid" / "subagents" / "agent-1.jsonl"]
    for f in files:
        f.write_text("", encoding="utf-8")
    (projects / "-a-repo" / "notes.txt").write_text("", encoding="utf-8")
    (projects / "-a-repo" / "dir.jsonl").mkdir()
    assert default_transcript_paths(tmp_path) == sorted(files)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / ".claude"))
    assert default_transcript_paths() == sorted(files)


def test_lone_surrogate_escapes_become_replacement_characters(tmp_path: Path) -> None:
    """A JSON-escaped lone surrogate (half of a cut emoji) cannot be stored; it must not stop the import."""
    from memcairn.store import Store
    from memcairn.transfer.importer import import_transcripts
    from memcairn.wire.config import Settings

    path = Transcript().prompt("cut emoji PLACEHOLDER here").text("ok").write(tmp_path / "surrogate.jsonl")
    path.write_text(path.read_text(encoding="utf-8").replace("PLACEHOLDER", "\\ud83d and \\udc00 and \\ud83d\\ude00"),
                    encoding="utf-8")
    events, stats = _parse(path)
    assert stats.skipped_lines == 0
    prompt = next(e.body["prompt"] for e in events if e.body["event"] == "user_prompt")
    assert prompt == "cut emoji \ufffd and \ufffd and \U0001f600 here"
    store = Store(tmp_path / "memcairn.db")
    try:
        report = import_transcripts(store, Settings(home=tmp_path), [path])
        assert report.files == 1 and report.prompts == 1 and report.summaries == 1
        assert store.ingest_counts()["failed"] == 0 and store.ingest_counts()["pending"] == 0
    finally:
        store.close()


def test_a_turn_read_again_after_the_file_grew_keeps_its_stop_key(tmp_path: Path) -> None:
    """A live session imported, then imported again once it went on: the turn open at the first import ends
    with the same ``stop`` key, so the queue takes no second stop (and the turn no second summary)."""
    script = Transcript().prompt("first question").text("Looking.").tool("t1").result("t1", "listing")
    early, _ = _parse(script.write(tmp_path / "early.jsonl"))
    script.tool("t2").result("t2", "more").text("Done.").prompt("second question").text("ok")
    later, _ = _parse(script.write(tmp_path / "later.jsonl"))
    early_stops = [e.source_key for e in early if e.body["event"] == "stop"]
    later_stops = [e.source_key for e in later if e.body["event"] == "stop"]
    assert len(early_stops) == 1 and len(later_stops) == 2
    assert later_stops[0] == early_stops[0]


def test_a_secret_where_a_large_body_is_cut_is_redacted_whole(tmp_path: Path) -> None:
    """Cutting an oversized output must not leave the head of a token that redaction no longer knows."""
    token = "ghp_" + "A1b2C3d4E5" * 4
    output = "x" * 15_970 + " " + token + " " + "y" * (MAX_BODY_BYTES + 10_000)
    path = (Transcript().prompt("dump it").tool("b1", tool_input={"command": "env"})
            .result("b1", output).write(tmp_path / "secret.jsonl"))
    events, _ = _parse(path)
    response = next(e.body for e in events if e.body["event"] == "tool_use")["tool_response"]
    assert "ghp_" not in response and "A1b2C3" not in response
    assert "[REDACTED:github_token]" in response


def test_timestamps_no_store_could_hold_are_ignored(tmp_path: Path) -> None:
    """Infinity and NaN (which Python's JSON reader accepts) and times outside 1970..9999 are no time at all:
    parsing must not raise, and no event may carry a time the store would refuse (its items would be lost)."""
    for bad in (float("inf"), float("-inf"), float("nan"), 10 ** 20, -5, "0001-01-01T00:00:00Z"):
        assert timestamp_ms(bad) is None, bad
    path = tmp_path / "odd-times.jsonl"
    path.write_text('{"type": "user", "sessionId": "s1", "cwd": "/w/p", "uuid": "u1", "timestamp": Infinity, '
                    '"message": {"role": "user", "content": "hi"}}\n', encoding="utf-8")
    events, stats = _parse(path)
    assert _kinds(events) == ["session_start", "user_prompt", "stop", "session_end"]
    assert stats.skipped_lines == 0 and all(e.at_epoch == 0 for e in events)


def test_import_without_claude_transcripts_says_where_it_looked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    from memcairn.cli.app import run

    monkeypatch.setenv("HOME", str(tmp_path / "fresh-home"))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    assert run(["import", "transcripts"]) == 0
    out, err = capsys.readouterr()
    assert f"{tmp_path / 'fresh-home' / '.claude' / 'projects'} does not exist" in err
    assert out == "imported 0 transcript files: 0 prompts, 0 observations, 0 summaries (0 new events, " \
                  "0 malformed lines skipped)\n"


def test_one_of_each_is_said_in_the_singular(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from memcairn.cli.app import run

    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps({"type": "user", "uuid": "u1", "sessionId": "s1", "cwd": str(tmp_path),
                               "timestamp": "2026-12-01T10:00:00Z",
                               "message": {"role": "user", "content": "Fix the login bug"}}) + "\n{broken\n")
    assert run(["import", "transcripts", str(one), "--project", "demo"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("imported 1 transcript file: 1 prompt, ") and "1 malformed line skipped" in out
