"""Shell calls in the offline extractor: the agent's own description of a command (``tool_input.description``)
and how a command ended (exit codes, ``is_error``, ``interrupted``) as each agent reports them.

Shapes come from the agent-integration reference and the recorded fixtures: Claude Code's Bash
``tool_response`` ``{stdout, stderr, interrupted, isImage}`` (reference §1.4, ``tests/fixtures/hooks/
post_tool_use_bash.json``), its failed Bash result ``"Error: Exit code N\\n…"`` (``toolUseResult`` in
``tests/fixtures/transcripts/claude-reliability__coverage-test-fix.jsonl``), Codex's ``{output, metadata:
{exit_code}}`` and Gemini's ``{llmContent}`` with ``Exit Code: N`` (the shapes ``tests/test_offline_extractor.py``
already uses; the reference leaves their inner shape undocumented)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from memcairn.capture.admission import admit
from memcairn.capture.offline import FACT_MAX, FACTS_MAX, TITLE_MAX, OfflineExtractor
from memcairn.capture.pipeline import CapturePipeline
from memcairn.capture.records import Observation, ToolCall, Turn
from memcairn.core.models import ItemFilter
from memcairn.store import Store
from memcairn.wire.config import Settings, load_settings

HOOKS = Path(__file__).parent / "fixtures" / "hooks"
CWD = "/tmp/tmpqwh7888i"  # the working directory of the python-to-rust-port transcript the commands come from
COVERAGE = (
    "tests/test_math_utils.py ....                                            [100%]\n"
    "FAIL Required test coverage of 100% not reached. Total coverage: 93.10%\n"
    "============================== 4 passed in 0.31s ==============================="
)


def observe(calls: list[ToolCall], prompt: str | None = "Port the library and keep coverage at 100%"
            ) -> list[Observation]:
    turn = Turn(session_id="s", platform_source="claude-code", project="p", prompt=prompt, cwd=CWD,
                tools=tuple(calls))
    return OfflineExtractor().observe(turn, calls).observations


def only(observations: list[Observation]) -> Observation:
    assert len(observations) == 1, [o.title for o in observations]
    return observations[0]


def claude_bash(command: str, description: str | None, stdout: str = "", *, code: int = 0,
                interrupted: bool = False) -> ToolCall:
    """Claude Code's Bash: the documented dict response, or the ``Error: Exit code N`` result of a failed run."""
    tool_input: dict[str, Any] = {"command": command}
    if description is not None:
        tool_input["description"] = description
    response: Any = (f"Error: Exit code {code}\n{stdout}" if code else
                     {"stdout": stdout, "stderr": "", "interrupted": interrupted, "isImage": False})
    return ToolCall(name="Bash", input=tool_input, response=response, cwd=CWD)


def edit(path: str) -> ToolCall:
    return ToolCall(name="Edit", input={"file_path": path, "old_string": "x = 1", "new_string": "x = 2"},
                    response={"filePath": path, "oldString": "x = 1", "newString": "x = 2"}, cwd=CWD)


def assert_bounded(observations: list[Observation]) -> None:
    for obs in observations:
        assert 0 < len(obs.title) <= TITLE_MAX
        assert len(obs.facts) <= FACTS_MAX and all(0 < len(fact) <= FACT_MAX for fact in obs.facts)


# ------------------------------------------------------------------------------------------------ the description


def test_a_recorded_bash_payload_keeps_its_command_title_and_gains_the_purpose_fact() -> None:
    """A short command is its own best title; the agent's sentence for it is kept as a fact."""
    payload = json.loads((HOOKS / "post_tool_use_bash.json").read_text())
    call = ToolCall(name=payload["tool_name"], input=payload["tool_input"], response=payload["tool_response"],
                    tool_use_id=payload["tool_use_id"], cwd=payload["cwd"])
    turn = Turn(session_id=payload["session_id"], platform_source="claude-code", project="p", prompt=None,
                cwd=payload["cwd"], tools=(call,))
    obs = only(OfflineExtractor().observe(turn, [call]).observations)
    assert obs.title == "Ran `python -m pytest tests/test_math_utils.py -v`: 2 passed"
    assert obs.facts[:2] == ("ran `python -m pytest tests/test_math_utils.py -v` → 2 passed",
                             "purpose: Run tests to verify they pass")


def test_a_long_lookup_is_titled_by_its_description() -> None:
    command = (f"find {CWD} -type f \\( -name \"*.rs\" -o -name \"Cargo.toml\" -o -name \"Justfile\" -o -name "
               "\".gitignore\" \\) | head -20")
    call = claude_bash(command, "List Rust project files", f"{CWD}/Justfile\n{CWD}/Cargo.toml\n{CWD}/src/lib.rs")
    obs = only(observe([call]))
    assert obs.type == "discovery"
    assert obs.title == "List Rust project files"
    assert "purpose: List Rust project files" in obs.facts
    assert any(fact.startswith("ran `find ") and fact.endswith(f"→ ok: {CWD}/Justfile … {CWD}/src/lib.rs")
               for fact in obs.facts)  # what it printed first and last


def test_a_multi_line_command_is_titled_by_its_description() -> None:
    script = "python - <<'EOF'\nimport tomllib\nprint(tomllib.load(open('pyproject.toml', 'rb'))['project'])\nEOF"
    obs = only(observe([claude_bash(script, "show the project table of pyproject.toml", "{'name': 'x'}")]))
    assert obs.title == "Show the project table of pyproject.toml"
    assert "purpose: show the project table of pyproject.toml" in obs.facts
    assert "ran `python - <<'EOF'` → ok: {'name': 'x'}" in obs.facts


def test_a_described_command_that_failed_is_titled_as_failed() -> None:
    command = "cargo llvm-cov --fail-under-lines 100 --ignore-filename-regex 'tests?/' 2>&1"
    failing = claude_bash(command, "Run coverage check with 100% threshold",
                          "error: 93.10% of lines are covered, below the threshold of 100%", code=1)
    obs = only(observe([failing]))
    assert obs.title == "Command failed (exit 1): Run coverage check with 100% threshold"
    assert f"ran `{command[:40]}" in obs.facts[0] and obs.facts[0].endswith("→ failed (exit 1)")
    assert "purpose: Run coverage check with 100% threshold" in obs.facts


def test_a_shell_edit_keeps_its_purpose() -> None:
    command = f"rm {CWD}/src/dict_utils.py {CWD}/src/__init__.py {CWD}/src/math_utils.py"
    obs = only(observe([claude_bash(command, "Delete Python source files")]))
    assert obs.type == "change" and obs.title.startswith("Deleted src/dict_utils.py")
    assert obs.files_modified == ("src/dict_utils.py", "src/__init__.py", "src/math_utils.py")
    assert obs.facts[1] == "purpose: Delete Python source files"


def test_the_purpose_is_not_taken_for_a_lesson() -> None:
    call = claude_bash("grep -rn errors src/", "Check why the build fails on the errors module",
                       "src/errors.rs:3: pub mod errors;")
    extractor = OfflineExtractor()
    turn = Turn(session_id="s", platform_source="claude-code", project="p", prompt="Why?", cwd=CWD, tools=(call,))
    observations = extractor.observe(turn, [call]).observations
    assert "purpose: Check why the build fails on the errors module" in observations[0].facts
    summary = extractor.summarize(turn, observations).summary
    assert summary is not None and "why the build fails" not in (summary.learned or "")


@pytest.mark.parametrize("description", ["x" * 5000, "Run\nthe\n\ntests  " * 300, 42, None, ["a"], "   "])
def test_descriptions_of_any_shape_stay_bounded(description: Any) -> None:
    command = "uv run --frozen python -m pytest tests/ -q -x --maxfail=1 -p no:cacheprovider --durations=5"
    calls = [claude_bash(command, "unused"), claude_bash(command, "unused", "3 passed in 0.1s")]
    calls = [replace(call, input={"command": command, "description": description}) for call in calls]
    observations = [o for call in calls for o in observe([call])]  # each run alone keeps the agent's account
    assert_bounded(observations)
    assert_bounded(observe(calls))
    purposes = [fact for obs in observations for fact in obs.facts if fact.startswith("purpose: ")]
    if isinstance(description, str) and description.strip():
        assert purposes and all(len(fact) <= len("purpose: ") + 120 for fact in purposes)
        assert all(len(obs.title) <= TITLE_MAX for obs in observations)
    else:
        assert not purposes
        assert all(obs.title.startswith("Ran `uv run") for obs in observations)


def test_the_description_goes_through_the_privacy_path(store: Store, tmp_path: Path) -> None:
    """The description is read from the admitted event, so secrets in it are redacted like the command's."""
    settings: Settings = replace(load_settings(home=tmp_path, environ={}), capture_batch_wait_seconds=0)
    key = "sk-ant-" + "api03-" + "Q" * 40
    base = {"session_id": "s1", "cwd": "/work/shop", "project": "shop", "projects": ["shop"],
            "platform_source": "claude-code"}
    events = [
        ("session_init", {**base, "event": "user_prompt", "prompt": "Check the deploy key"}),
        ("observation", {**base, "event": "tool_use", "tool_name": "Bash", "tool_use_id": "toolu_1",
                         "tool_input": {"command": "curl -s https://api.example.com/v1/keys | jq '.keys[] | "
                                                   ".id' | sort | uniq -c | sort -rn | head",
                                        "description": f"List key ids <private>prod cluster</private> for {key}"},
                         "tool_response": {"stdout": "3 k1", "stderr": "", "interrupted": False, "isImage": False}}),
    ]
    for event_type, body in events:
        admitted = admit(event_type, body, settings)
        assert admitted.body is not None
        store.enqueue_ingest_event("s1", "claude-code", event_type, admitted.body, body.get("tool_use_id"))
    CapturePipeline(store, settings).process_pending()
    observation = only([o for o in store.list_items(ItemFilter(kinds=["observation"]), limit=10)])
    stored = json.dumps(observation.to_dict())
    assert key not in stored and "prod cluster" not in stored
    assert any(fact.startswith("purpose: List key ids") for fact in observation.facts)


# --------------------------------------------------------------------------------------------- how a command ended


@pytest.mark.parametrize(
    ("name", "tool_input", "response"),
    [
        ("Bash", {"command": "pytest --cov=src --cov-fail-under=100"}, f"Error: Exit code 1\n{COVERAGE}"),
        ("exec_command", {"cmd": "pytest --cov=src --cov-fail-under=100"},
         {"output": COVERAGE, "metadata": {"exit_code": 1}}),
        ("run_shell_command", {"command": "pytest --cov=src --cov-fail-under=100"},
         {"llmContent": f"Command: pytest --cov=src --cov-fail-under=100\nDirectory: (root)\nOutput: {COVERAGE}\n"
                        "Error: (none)\nExit Code: 1\nSignal: (none)\nBackground PIDs: (none)"}),
    ],
    ids=["claude-code", "codex", "gemini"],
)
def test_passing_counts_of_a_failed_run_never_read_as_a_success(name: str, tool_input: dict[str, Any],
                                                                response: Any) -> None:
    """A coverage gate fails the run while every test passed: the outcome says the run failed."""
    obs = only(observe([ToolCall(name=name, input=tool_input, response=response, cwd=CWD)]))
    assert obs.title == "Command failed (exit 1): `pytest --cov=src --cov-fail-under=100`"
    assert "ran `pytest --cov=src --cov-fail-under=100` → 4 passed; failed (exit 1)" in obs.facts
    assert "tests passed" not in obs.facts
    assert "Outcome: 4 passed; failed (exit 1)." in (obs.narrative or "")
    assert "error: FAIL Required test coverage of 100% not reached. Total coverage: 93.10%" in obs.facts


def test_an_interrupted_run_with_passing_counts_reads_interrupted() -> None:
    call = claude_bash("pytest -q", None, "....\n4 passed in 0.30s", interrupted=True)
    obs = only(observe([call]))
    assert obs.title == "Command interrupted: `pytest -q`"
    assert "ran `pytest -q` → 4 passed; interrupted" in obs.facts
    assert "tests interrupted" in obs.facts and "tests passed" not in obs.facts and "tests failed" not in obs.facts


def test_a_failed_run_with_passing_counts_is_the_failure_a_bugfix_names() -> None:
    calls = [
        claude_bash("pytest --cov=src --cov-fail-under=100", "Run tests with the coverage gate", COVERAGE, code=1),
        edit(f"{CWD}/tests/test_math_utils.py"),
        claude_bash("pytest --cov=src --cov-fail-under=100", "Run tests with the coverage gate",
                    "============================== 5 passed in 0.33s =============================="),
    ]
    failed, fixed = only(observe(calls[:1])), only(observe(calls))
    assert failed.title == "Command failed (exit 1): `pytest --cov=src --cov-fail-under=100`"
    assert fixed.type == "bugfix"
    assert "after failure: `pytest --cov=src --cov-fail-under=100` → 4 passed; failed (exit 1)" in fixed.facts
    assert "verified: `pytest --cov=src --cov-fail-under=100` → 5 passed" in fixed.facts
    assert "had failed (4 passed; failed (exit 1)) before this edit" in (fixed.narrative or "")


@pytest.mark.parametrize(
    "failing",
    [
        {"stdout": "collected 4 items\n", "stderr": "", "interrupted": True, "isImage": False},  # Claude Code
        "Error: Exit code 2\nERROR tests/test_math_utils.py - ImportError: cannot import name 'mul'",  # Claude Code
        [{"type": "text", "text": "ImportError: cannot import name 'mul'"}, {"is_error": True}],  # content blocks
        {"output": "ImportError: cannot import name 'mul'", "metadata": {"exit_code": 2}},  # Codex
        {"llmContent": "Command: pytest -q\nOutput: ImportError: cannot import name 'mul'\nExit Code: 2"},  # Gemini
    ],
    ids=["interrupted", "exit-code-text", "is_error", "codex-exit_code", "gemini-exit-code"],
)
def test_a_structured_failure_then_edit_then_pass_is_a_bugfix(failing: Any) -> None:
    """A guard for what already held before the description and label changes: every agent's failure signal,
    not only output text, is the failing run of the bugfix rule, and it is never recorded as a success."""
    calls = [
        ToolCall(name="Bash", input={"command": "pytest -q"}, response=failing, cwd=CWD),
        edit(f"{CWD}/src/math_utils.py"),
        claude_bash("pytest -q", None, "4 passed in 0.20s"),
    ]
    fixed = only(observe(calls))  # one episode: the failure, the fix, the passing run
    assert fixed.type == "bugfix"
    after = next(fact for fact in fixed.facts if fact.startswith("after failure: `pytest -q` → "))
    assert not after.endswith("→ ok")
    assert not any(fact.endswith("→ ok") for fact in only(observe(calls[:1])).facts)
    assert only(observe(calls[:1])).title.startswith(("Command failed", "Command interrupted"))


DECLINED = ("Error: The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it "
            "was a file edit, the new_string was NOT written to the file). STOP what you are doing and wait for the "
            "user to tell you how to proceed.")


@pytest.mark.parametrize("declined", ["User rejected tool use", DECLINED])
def test_a_declined_run_is_no_failure_a_bugfix_can_name(declined: str) -> None:
    """A call the user declined never ran: an edit and a passing run after it are a change, not a bugfix."""
    calls = [
        ToolCall(name="Bash", input={"command": "pytest -q"}, response=declined, cwd=CWD),
        edit(f"{CWD}/src/math_utils.py"),
        claude_bash("pytest -q", None, "4 passed in 0.20s"),
    ]
    observations = observe(calls)
    assert "bugfix" not in [o.type for o in observations]
    assert only(observe(calls[:1])).title.startswith("Command interrupted")  # still never told as a success


@pytest.mark.parametrize("code", ["1", " 2 "])
def test_an_exit_code_given_as_text_is_read(code: str) -> None:
    response = {"output": "", "metadata": {"exit_code": code}}
    calls = [ToolCall(name="Bash", input={"command": "make check"}, response=response, cwd=CWD)]
    obs = only(observe(calls))
    assert obs.title.startswith(f"Command failed (exit {int(code)})"), obs.title


@pytest.mark.parametrize("output", ["Tests: 3 passed, 3 total", "3 passed in 0.12s"])
def test_a_result_line_right_after_gemini_s_output_label_is_read(output: str) -> None:
    """Gemini CLI's run_shell_command puts the first line of the output after ``Output: ``."""
    response = {"llmContent": f"Command: npm test\nDirectory: (root)\nOutput: {output}\nExit Code: 0"}
    obs = only(observe([ToolCall(name="run_shell_command", input={"command": "npm test"}, response=response, cwd=CWD)]))
    assert "3 passed" in obs.title, obs.title


def test_mix_test_counts_failing_test_names_and_first_error_are_read() -> None:
    failing = (
        "  1) test closes all open annotations (SpotterWeb.ProjectReviewLiveTest)\n"
        "     test/spotter_web/live/project_review_live_test.exs:99\n"
        "     ** (MatchError) no match of right hand side value: nil\n\n"
        "Finished in 1.6 seconds (0.00s async, 1.6s sync)\n5 tests, 5 failures"
    )
    obs = only(observe([claude_bash("mix test test/x_test.exs", None, failing, code=2)]))
    assert obs.title == "Ran `mix test test/x_test.exs`: 5 failed"
    assert "failing tests: closes all open annotations" in obs.facts
    assert "error: ** (MatchError) no match of right hand side value: nil" in obs.facts
    passing = "Finished in 1.5 seconds\n14 doctests, 65 tests, 0 failures"
    assert only(observe([claude_bash("mix test", None, passing)])).title == "Ran `mix test`: 79 passed"


def test_a_commit_keeps_its_message_body_and_files_without_trailers() -> None:
    command = ("git add lib/a.ex config/test.exs && git commit -m \"$(cat <<'EOF'\nfeat: add review page (gqc.5)\n\n"
               "New ReviewLive page at /projects/:id/review lists open annotations.\n\n"
               "Co-Authored-By: Someone <a@b.c>\nEOF\n)\" 2>&1")
    output = ("[gqc bb53fb4] feat: add review page (gqc.5)\n 7 files changed, 274 insertions(+)\n"
              " create mode 100644 lib/review_live.ex\n")
    obs = only(observe([claude_bash(command, "Commit", output)]))
    assert obs.title == "Committed: feat: add review page (gqc.5)"
    assert "commit message: New ReviewLive page at /projects/:id/review lists open annotations." in obs.facts
    assert ("commit files: lib/review_live.ex, lib/a.ex, config/test.exs (7 files changed, 274 insertions(+))"
            in obs.facts)
    assert not any("Co-Authored" in fact for fact in obs.facts)
    plain_commit = claude_bash('git commit -am "fix: guard" -m "Bind first."', None, "[main 1a2b3] fix: guard")
    plain = only(observe([plain_commit]))
    assert "commit message: Bind first." in plain.facts
