"""``memcairn bench recall`` on several data sets at once: how a set is given, how its sessions are filed into
projects, the raw anchor over Codex rollouts and Gemini CLI chats, and a whole run on the three sample sessions
split into two sets (a real worker process, the imports as their own processes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from processes import mentioning, processes_of

from memcairn.bench.recall_raw import RawIndex, steps_of
from memcairn.bench.recall_sets import DataSet, parse_set, prepare
from memcairn.cli.app import run as cli

pytestmark = pytest.mark.slow  # a real PostgreSQL, server processes or a worker per test

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "src" / "memcairn" / "assets" / "transcripts"
SAMPLES_QA = ROOT / "bench" / "samples-qa.json"
COVERAGE = SAMPLES / "claude-reliability__coverage-test-fix.jsonl"
HELLO = SAMPLES / "claude-reliability__hello-world-script.jsonl"
RUST = SAMPLES / "claude-reliability__python-to-rust-port.jsonl"
RUST_SID = "c7d3d95c-57f0-4359-8f4b-926a9bef5a3f"  # the session id recorded inside RUST


def _split_samples(tmp_path: Path) -> tuple[Path, Path]:
    """bench/samples-qa.json as two sets: the coverage and hello sessions, and the Rust port; the second also
    asks about the hello script under an id the first set uses, in the Rust port's project, where it is not."""
    questions = json.loads(SAMPLES_QA.read_text())["questions"]
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    first.write_text(json.dumps({"questions": [q for q in questions if not q["id"].startswith("s3")]}))
    elsewhere = {"id": "s1-q1", "session": RUST.name, "kind": "what-changed",
                 "question": "what does the shell script that was written print?", "facts": [["hello world"]]}
    second.write_text(json.dumps({"questions": [q for q in questions if q["id"].startswith("s3")] + [elsewhere]}))
    return first, second


def test_a_set_is_qa_files_a_colon_and_transcripts_named_or_not() -> None:
    one = parse_set("bench/a.json,/x/b.json:/data/dir,/data/one.jsonl")
    assert one.name == "a" and one.qa == [Path("bench/a.json"), Path("/x/b.json")]
    assert one.transcripts == [Path("/data/dir"), Path("/data/one.jsonl")]
    named = parse_set("spotter=/x/qa.json:/data/dir")
    assert named.name == "spotter" and named.qa == [Path("/x/qa.json")]
    for bad in ("/x/qa.txt:/data", "/x/qa.json", "/x/qa.json:"):
        with pytest.raises(ValueError, match=r"expected QA.json\[,QA2.json\]:TRANSCRIPTS"):
            parse_set(bad)


def test_each_session_gets_its_own_project_named_by_its_questions(tmp_path: Path) -> None:
    first, second = _split_samples(tmp_path)
    named = tmp_path / "named.json"
    named.write_text(json.dumps({"questions": [
        {"id": "n1", "session": RUST_SID, "project": "rust-port", "question": "how?", "facts": [["x"]]},
        {"id": "n2", "project": "rust-port", "question": "never?", "facts": []},
        {"id": "n3", "question": "anywhere?", "facts": []}]}))
    a, b = prepare([DataSet("a", [first], [COVERAGE, HELLO]), DataSet("b", [second], [RUST])])
    (c,) = prepare([DataSet("c", [named], [SAMPLES])])
    # a session named by its recorded id or its file name, and one no question names: each under its file's name
    assert a.projects == {COVERAGE: COVERAGE.stem, HELLO: HELLO.stem}
    assert [q.project for q in b.questions] == [RUST.stem] * 4 and {q.dataset for q in b.questions} == {"b"}
    # the question's project names the session's project; a question naming none is asked in every project
    assert c.projects[RUST] == "rust-port" and c.projects[HELLO] == HELLO.stem
    assert [q.project for q in c.questions] == ["rust-port", "rust-port", None]
    assert c.project_names == sorted([COVERAGE.stem, HELLO.stem, "rust-port"])

    lost = tmp_path / "lost.json"
    lost.write_text(json.dumps({"questions": [{"id": "l", "session": "nowhere", "question": "?", "facts": []}]}))
    with pytest.raises(ValueError, match="set lost, question l: session 'nowhere' is in none of its transcripts"):
        prepare([DataSet("lost", [lost], [SAMPLES])])
    torn = tmp_path / "torn.json"
    torn.write_text(json.dumps({"questions": [
        {"id": "t1", "session": RUST.name, "project": "one", "question": "?", "facts": []},
        {"id": "t2", "session": RUST_SID, "project": "two", "question": "?", "facts": []}]}))
    with pytest.raises(ValueError, match="filed under 'one' by another question, not 'two'"):
        prepare([DataSet("torn", [torn], [RUST])])
    with pytest.raises(ValueError, match="in two sets under different projects"):
        prepare([DataSet("b", [second], [RUST]), DataSet("c", [named], [RUST])])
    with pytest.raises(ValueError, match="two data sets share a name"):
        prepare([DataSet("x", [first], [HELLO]), DataSet("x", [second], [RUST])])


def _codex(path: Path, *items: dict[str, Any]) -> Path:
    lines = [{"timestamp": "2026-06-26T10:00:00.000Z", "type": "session_meta",
              "payload": {"id": "019e-codex", "cwd": "/home/dev/agentv", "cli_version": "0.142.0"}}]
    lines += [{"timestamp": "2026-06-26T10:00:01.000Z", "type": "response_item", "payload": item} for item in items]
    lines.append({"timestamp": "2026-06-26T10:00:09.000Z", "type": "event_msg",
                  "payload": {"type": "agent_message", "message": "terminal copy, not read"}})
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


def test_the_raw_anchor_reads_codex_rollouts_and_gemini_chats_by_step(tmp_path: Path) -> None:
    patch = "*** Begin Patch\n*** Update File: src/sync.ts\n+export const MERGE_SIGNAL = 'merged';\n*** End Patch"
    rollout = _codex(
        tmp_path / "rollout.jsonl",
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "sync the results repo"}]},
        {"type": "reasoning", "summary": [], "encrypted_content": "opaque"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking the remote."}]},
        {"type": "function_call", "name": "exec_command", "call_id": "c1",
         "arguments": json.dumps({"cmd": "git ls-remote origin"})},
        {"type": "function_call_output", "call_id": "c1",
         "output": "Process exited with code 128\nOutput:\nfatal: repository 'https://github.com/..git/' not found"},
        {"type": "custom_tool_call", "name": "apply_patch", "call_id": "c2", "input": patch},
        {"type": "custom_tool_call_output", "call_id": "c2",
         "output": json.dumps({"output": "Success. Updated the following files:\nM src/sync.ts", "metadata": {}})})
    first, second = steps_of(rollout)
    assert "Checking the remote." in first and "exec_command:" in first and "git ls-remote origin" in first
    assert "repository 'https://github.com/..git/' not found" in first
    # a call made after a result came back is the model's next step: the patch body and its result
    assert "MERGE_SIGNAL" in second and "Success. Updated the following files" in second
    assert "sync the results repo" not in first + second and "terminal copy" not in first + second

    chat = tmp_path / "session-1.json"
    chat.write_text(json.dumps({"sessionId": "gem-1", "messages": [
        {"id": "m1", "type": "user", "content": "merge blue into color"},
        {"id": "m2", "type": "gemini", "content": "I'll append docs/blue.md to docs/color.md.",
         "toolCalls": [{"id": "t1", "name": "run_shell_command", "args": {"command": "cat docs/blue.md"},
                        "result": [{"functionResponse": {"response": {"output": "blue is a colour"}}}]}]},
        {"id": "m3", "type": "info", "content": "Request cancelled."}]}))
    (only,) = steps_of(chat)
    assert "docs/color.md" in only and "cat docs/blue.md" in only and "blue is a colour" in only

    index = RawIndex({rollout: "agentv", chat: "entire-cli"})
    try:
        assert index.top("repository not found", 5) and index.top("repository not found", 5, ["entire-cli"]) == []
        assert "blue is a colour" in index.text_of(["entire-cli"]) and "MERGE_SIGNAL" not in index.text_of(
            ["entire-cli"])
    finally:
        index.close()


def test_bench_recall_reports_each_set_and_overall_in_one_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = _split_samples(tmp_path)
    out, home = tmp_path / "out.json", tmp_path / "home"
    code = cli(["bench", "recall", "--set", f"one={first}:{COVERAGE},{HELLO}", "--set", f"{second}:{RUST}",
                "--model", "hash", "--home", str(home), "--json", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    result = json.loads(out.read_text())
    assert result["import"]["report"]["files"] == 3 and result["import"]["failed_events"] == 0
    assert set(result["context_tokens"]) == {COVERAGE.stem, HELLO.stem, RUST.stem}

    by_set, raw_by_set = result["totals_by_set"], result["raw"]["totals_by_set"]
    assert list(by_set) == ["one", "second"] and list(raw_by_set) == ["one", "second"]
    assert (by_set["one"]["questions"], by_set["one"]["unanswerable"]) == (4, 0)
    assert (by_set["second"]["questions"], by_set["second"]["unanswerable"]) == (3, 1)
    assert result["totals"]["questions"] == 7 and result["raw"]["totals"]["questions"] == 7
    rows = {(r["set"], r["id"]): r for r in result["questions"]}
    # the hello script, asked in the Rust port's project: neither memcairn nor the raw anchor looks elsewhere
    hello_there, hello_here = rows[("second", "s1-q1")], rows[("one", "s2-q1")]
    assert hello_there["project"] == RUST.stem and hello_here["project"] == HELLO.stem
    assert hello_here["stored"] == 1.0 and hello_here["raw"]["stored"] == 1.0 and hello_here["raw"]["top5"] is True
    assert hello_there["stored"] == 0.0 and hello_there["top5"] is False and hello_there["digest"] == 0.0
    assert hello_there["raw"]["stored"] == 0.0 and hello_there["raw"]["top5"] is False
    chunks = result["raw"]["chunks_by_set"]
    assert chunks["one"] + chunks["second"] == result["raw"]["chunks"] and min(chunks.values()) > 0
    budgets = result["raw_at_budget"][0]["tokens_by_set"]
    assert budgets == {"one": by_set["one"]["tokens_median"], "second": by_set["second"]["tokens_median"]}

    for line in ("| one | memcairn | 4 + 0 |", f"| second | raw BM25 ({chunks['second']:,} chunks) |",
                 "| second | memcairn | 3 + 1 |", "| overall | memcairn | 7 + 1 |",
                 f"| one | raw BM25 at 2x memcairn's tokens ({2 * budgets['one']:,} tokens) |",
                 "| overall | raw BM25 at 1x memcairn's tokens (each set's) |",
                 "top5 gap between the best and the worst set (memcairn): ", "| second | s1-q1 | what-changed |"):
        assert line in captured.out
    assert processes_of(home, mentioning(b"memcairn")) == []


def test_bench_recall_refuses_a_set_it_cannot_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["bench", "recall", "--set", f"{tmp_path / 'missing.json'}:{SAMPLES}", "--model", "hash"]) == 1
    assert "missing.json: not a readable JSON file" in capsys.readouterr().err
    assert cli(["bench", "recall", "--set", f"{SAMPLES_QA}", "--model", "hash"]) == 1
    assert "expected QA.json" in capsys.readouterr().err
    assert cli(["bench", "recall", "--model", "hash"]) != 0
    assert "give QA and TRANSCRIPTS, or one --set" in capsys.readouterr().err
