"""The offline compressor: files, types, outcomes and facts from tool calls of every agent, and turn summaries."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from offline_turns import CWD, PROMPT, load_transcript, make_turn

from memcairn.capture.offline import FACT_MAX, FACTS_MAX, SUBTITLE_MAX, TITLE_MAX, OfflineExtractor
from memcairn.capture.records import CONCEPTS, Compressor, Observation, ToolCall, Turn
from memcairn.core.models import OBSERVATION_TYPES

# ------------------------------------------------------------------------------------------------------- helpers


def observe(calls: list[ToolCall], **kw: Any) -> list[Observation]:
    """Observe ``calls`` as one batch of a turn whose tools are exactly those calls."""
    return OfflineExtractor().observe(make_turn(calls, **kw), calls).observations


def incremental(calls: list[ToolCall], **kw: Any) -> list[list[Observation]]:
    """Observe each call alone, as it arrives, with the turn so far in ``turn.tools``."""
    out = []
    for position, call in enumerate(calls):
        out.append(OfflineExtractor().observe(make_turn(calls[: position + 1], **kw), [call]).observations)
    return out


def bash(command: str, stdout: str = "", stderr: str = "", *, code: int = 0, cid: str | None = None) -> ToolCall:
    """A Claude Code Bash call: a dict response on success, the ``Error: Exit code N`` string on failure."""
    if code:
        response: Any = f"Error: Exit code {code}\n{stdout}{stderr}"
    else:
        response = {"stdout": stdout, "stderr": stderr, "interrupted": False, "isImage": False}
    return ToolCall(name="Bash", input={"command": command}, response=response, tool_use_id=cid)


def edit(path: str, old: str = "x = 1", new: str = "x = 2", cid: str | None = None) -> ToolCall:
    return ToolCall(
        name="Edit", input={"file_path": path, "old_string": old, "new_string": new},
        response={"filePath": path, "oldString": old, "newString": new}, tool_use_id=cid,
    )


def read(path: str) -> ToolCall:
    return ToolCall(name="Read", input={"file_path": path}, response={"type": "text", "file": {"content": "x = 1\n"}})


def assert_well_formed(observations: list[Observation]) -> None:
    for obs in observations:
        assert obs.type in OBSERVATION_TYPES
        assert obs.title and len(obs.title) <= TITLE_MAX
        assert obs.subtitle is None or len(obs.subtitle) <= SUBTITLE_MAX
        assert obs.narrative is None or len(obs.narrative) <= 1000
        assert len(obs.facts) <= FACTS_MAX
        assert all(isinstance(f, str) and 0 < len(f) <= FACT_MAX for f in obs.facts)
        assert set(obs.concepts) <= set(CONCEPTS)
        assert len(set(obs.files_read)) == len(obs.files_read)
        assert len(set(obs.files_modified)) == len(obs.files_modified)


def only(observations: list[Observation]) -> Observation:
    assert len(observations) == 1, [o.title for o in observations]
    return observations[0]


# ------------------------------------------------------------------------------------------------- the protocol


def test_implements_the_compressor_protocol() -> None:
    extractor: Compressor = OfflineExtractor()
    assert extractor.name == "offline"
    result = extractor.observe(make_turn(), [])
    assert result.observations == [] and result.usage == [] and result.summary is None


# ------------------------------------------------------------------------------------------- Claude Code tools


def test_read_is_a_discovery_with_relative_path() -> None:
    obs = only(observe([read("/repo/src/app.py")]))
    assert obs.type == "discovery"
    assert obs.files_read == ("src/app.py",) and obs.files_modified == ()
    assert "how-it-works" in obs.concepts
    assert obs.title == "Read src/app.py"
    assert obs.subtitle == "Fix the retry bug in src/app.py."


def test_edit_is_a_change_with_a_hint_of_what_changed() -> None:
    new = "def fetch(url):\n    return retry(get, url)\n\n\ndef retry(fn, *args):\n    return fn(*args)"
    obs = only(observe([edit("/repo/src/app.py", "def fetch(url):\n    return get(url)", new)]))
    assert obs.type == "change"
    assert obs.files_modified == ("src/app.py",)
    assert "edited src/app.py: added retry" in obs.facts  # which definition it added, not a line count
    assert "new text: return retry(get, url) ⏎ def retry(fn, *args): ⏎ return fn(*args)" in obs.facts
    assert obs.title == "Edited src/app.py: added retry"
    assert obs.concepts == ("what-changed",)
    assert obs.narrative and obs.narrative.startswith('For the request "Fix the retry bug in src/app.py."')


def test_write_of_a_new_file_is_a_feature_and_an_overwrite_is_a_change() -> None:
    created = ToolCall(name="Write", input={"file_path": "/repo/src/new.py", "content": "class Cache:\n    pass\n"},
                       response={"type": "create", "filePath": "/repo/src/new.py"})
    overwritten = ToolCall(name="Write", input={"file_path": "/repo/src/old.py", "content": "x = 1\n"},
                           response={"type": "update", "filePath": "/repo/src/old.py"})
    first, second = (only(observe([call])) for call in (created, overwritten))
    assert (first.type, first.title, first.files_modified) == ("feature", "Created src/new.py: added Cache",
                                                               ("src/new.py",))
    assert "created src/new.py (3 lines): added Cache" in first.facts
    assert (second.type, second.files_modified) == ("change", ("src/old.py",))


def test_write_without_a_telling_response_is_new_unless_the_turn_touched_the_file() -> None:
    write = ToolCall(name="Write", input={"file_path": "/repo/a.py", "content": "x"})
    assert only(observe([write])).type == "feature"
    assert observe([read("/repo/a.py"), write])[-1].type == "change"


def test_multiedit_and_notebookedit() -> None:
    multi = ToolCall(name="MultiEdit", input={"file_path": "/repo/a.py", "edits": [
        {"old_string": "a", "new_string": "b"}, {"old_string": "c", "new_string": "def helper():\n    pass"}]})
    notebook = ToolCall(name="NotebookEdit", input={"notebook_path": "/repo/nb.ipynb", "cell_id": "c1",
                                                    "new_source": "print(1)", "edit_mode": "replace"})
    first, second = (only(observe([call])) for call in (multi, notebook))
    assert first.type == "change" and first.files_modified == ("a.py",)
    assert "edited a.py (2 edits): added helper" in first.facts
    assert second.type == "change" and second.files_modified == ("nb.ipynb",)
    assert "replace notebook cell in nb.ipynb" in second.facts


def test_grep_glob_and_ls_give_the_searched_places() -> None:
    grep = ToolCall(name="Grep", input={"pattern": "def fetch", "path": "/repo/src"},
                    response={"mode": "files_with_matches", "filenames": ["/repo/src/app.py"], "numFiles": 1})
    glob = ToolCall(name="Glob", input={"pattern": "**/*.py", "path": "/repo/tests"},
                    response={"filenames": [], "numFiles": 0})
    listing = ToolCall(name="LS", input={"path": "/repo/docs"}, response="- /repo/docs/\n  - a.md\n")
    obs = only(observe([grep, glob, listing]))
    assert obs.type == "discovery"
    assert obs.files_read == ("src", "tests/**/*.py", "docs")
    assert "searched for `def fetch` in src → 1 files" in obs.facts
    assert "glob `**/*.py` → 0 files" in obs.facts
    assert "listed docs" in obs.facts


def test_paths_outside_the_project_stay_absolute_and_relative_ones_are_resolved() -> None:
    calls = [read("/etc/hosts"), read("notes.md"), read("../other/x.py"), read("/repo")]
    obs = only(observe(calls))
    assert obs.files_read == ("/etc/hosts", "notes.md", "/other/x.py")


def test_the_calls_own_cwd_anchors_relative_paths() -> None:
    call = ToolCall(name="Read", input={"file_path": "b.py"}, response="x", cwd="/repo/pkg")
    assert only(observe([call])).files_read == ("pkg/b.py",)


def test_consecutive_lookups_merge_and_lists_are_capped() -> None:
    calls = [read(f"/repo/src/m{i}.py") for i in range(7)]
    obs = only(observe(calls))
    assert obs.title == "Read src/m0.py, src/m1.py, src/m2.py (+4 more)"
    assert len(obs.files_read) == 7
    assert len(obs.facts) <= FACTS_MAX


def test_lookups_and_the_edit_between_them_are_one_episode() -> None:
    obs = only(observe([read("/repo/a.py"), edit("/repo/a.py"), read("/repo/b.py")]))
    assert (obs.type, obs.title, obs.files_read) == ("change", "Edited a.py", ("a.py", "b.py"))
    assert obs.facts[0] == "edited a.py"  # what changed first, what was looked at after
    assert "read a.py" in obs.facts and "read b.py" in obs.facts


def test_task_and_web_tools() -> None:
    task = ToolCall(name="Task", input={"description": "Explore the API", "prompt": "Look around"},
                    response={"content": [{"type": "text", "text": "The API lives in api.py. It has 3 routes."}]})
    search = ToolCall(name="WebSearch", input={"query": "httpx retry"}, response="results...")
    first, second = (only(observe([call])) for call in (task, search))
    assert first.title == "Delegated: Explore the API"
    assert "result: The API lives in api.py. It has 3 routes." in first.facts
    assert second.type == "discovery" and "web search: httpx retry" in second.facts


# --------------------------------------------------------------------------------------------------- the shell


@pytest.mark.parametrize(
    ("command", "reads", "writes"),
    [
        ("echo hi > out.txt", (), ("out.txt",)),
        ("echo hi >> /repo/log/a.log 2>&1", (), ("log/a.log",)),
        ("cat a.txt | tee b.txt", ("a.txt",), ("b.txt",)),
        ("touch new.py", (), ("new.py",)),
        ("rm -rf build/ old.py", (), ("build", "old.py")),
        ("cp src/a.py src/b.py", ("src/a.py",), ("src/b.py",)),
        ("sed -i 's/x/y/' src/app.py", (), ("src/app.py",)),
        ("sed -n '1,20p' src/app.py", ("src/app.py",), ()),
        ("head -n 5 README.md", ("README.md",), ()),
        ("grep -rn 'error:' src tests", ("src", "tests"), ()),
        ("python scripts/gen.py --out x", ("scripts/gen.py",), ()),
        ("python -m pytest tests/test_x.py::test_a -q", ("tests/test_x.py",), ()),
        ("cd sub && cat notes.md", ("sub/notes.md",), ()),
        ("cat <<'EOF' > conf.ini\n[a]\nrm -rf precious\nEOF", (), ("conf.ini",)),
        ("perl -pi -e 's/a/b/' lib.pl", (), ("lib.pl",)),
        ("bash -c 'echo x > inner.txt'", (), ("inner.txt",)),
        ("FOO=1 sudo tee /repo/etc.conf < input.txt", ("input.txt",), ("etc.conf",)),
        ("./scripts/run.sh --fast", ("scripts/run.sh",), ()),
        ("/usr/local/bin/tool --x", (), ()),
        ("ls -la 2>/dev/null", (), ()),
    ],
)
def test_shell_commands_that_touch_files(command: str, reads: tuple[str, ...], writes: tuple[str, ...]) -> None:
    obs = only(observe([bash(command, stdout="done")]))
    assert obs.files_read == reads
    assert obs.files_modified == writes
    assert obs.type == ("change" if writes else "discovery")


def test_moves_only_are_a_refactor() -> None:
    for command in ("mv src/old.py src/new.py", "git mv a.py b.py"):
        obs = only(observe([bash(command)]))
        assert obs.type == "refactor", command
        assert len(obs.files_modified) == 2
        assert obs.title.startswith("Moved ")


def test_deleting_files_is_a_change_titled_deleted() -> None:
    obs = only(observe([bash("rm /repo/a.py /repo/b.py")]))
    assert obs.type == "change" and obs.title == "Deleted a.py, b.py"
    assert "deleted a.py, b.py" in obs.facts


def test_displayed_commands_drop_the_project_directory_and_fold_commit_heredocs() -> None:
    command = "git add /repo/a.py && git commit -m \"$(cat <<'EOF'\nAdd a\n\nBody\nEOF\n)\""
    obs = only(observe([bash(command, stdout="[main 1a2b3c] Add a\n 1 file changed")]))
    assert obs.type == "change" and obs.title == "Committed: Add a"  # the message, not the command line
    assert "committed: Add a" in obs.facts
    assert 'ran `git add a.py && git commit -m "Add a"`' in obs.narrative


def test_read_only_shell_commands_join_the_lookups() -> None:
    obs = only(observe([read("/repo/a.py"), bash("grep -n x a.py", stdout="3: x = 1"), bash("ls src", "a.py")]))
    assert obs.type == "discovery"
    assert "ran `grep -n x a.py` → ok: 3: x = 1" in obs.facts


# ------------------------------------------------------------------------------------------ outcomes and facts


@pytest.mark.parametrize(
    ("command", "output", "label", "failed"),
    [
        ("pytest -q", "..F\nFAILED tests/test_a.py::test_x - assert 1 == 2\n1 failed, 2 passed in 0.12s",
         "1 failed, 2 passed", True),
        ("pytest", "============ 5 passed, 1 skipped in 1.01s ============", "5 passed, 1 skipped", False),
        ("cargo test", "test result: ok. 29 passed; 0 failed; 0 ignored\ntest result: ok. 5 passed; 0 failed;",
         "34 passed", False),
        ("cargo test", "test result: FAILED. 3 passed; 2 failed; 0 ignored", "2 failed, 3 passed", True),
        ("npx jest", "Tests:       1 failed, 4 passed, 5 total", "1 failed, 4 passed", True),
        ("go test ./...", "ok  \texample.com/a\t0.01s\n--- FAIL: TestB (0.00s)\nFAIL\texample.com/b\t0.02s",
         "go test: 2 FAIL, 1 ok", True),
        ("python -m unittest", "....\n----\nRan 4 tests in 0.001s\n\nOK", "4 passed", False),
    ],
)
def test_test_runner_summaries(command: str, output: str, label: str, failed: bool) -> None:
    call = bash(command, stdout=output, code=1 if failed else 0)
    obs = only(observe([call]))
    assert obs.type == "discovery"
    assert any(fact.endswith(f"→ {label}") for fact in obs.facts), obs.facts
    assert ("tests failed" if failed else "tests passed") in obs.facts


def test_failing_test_names_are_facts() -> None:
    output = "FAILED tests/test_a.py::test_x - AssertionError\n1 failed in 0.1s"
    obs = only(observe([bash("pytest", stdout=output, code=1)]))
    assert "failing tests: tests/test_a.py::test_x" in obs.facts


@pytest.mark.parametrize(
    ("response", "error"),
    [
        ("Error: Exit code 1\nTraceback (most recent call last):\n  File \"x.py\", line 1\nValueError: bad value",
         "ValueError: bad value"),
        ("Error: Exit code 127\nbash: line 1: foo: command not found", "bash: line 1: foo: command not found"),
        ({"stdout": "", "stderr": "error: could not compile `x`", "exit_code": 101}, "error: could not compile `x`"),
        ({"output": "npm ERR! missing script: build", "metadata": {"exit_code": 1}}, "npm ERR! missing script: build"),
        ("Exit code: 2\nWall time: 0.1 seconds\nOutput:\nmake: *** No rule to make target", None),
        ({"stdout": "Traceback (most recent call last):\n  File \"a\"\nKeyError: 'k'", "stderr": ""}, "KeyError: 'k'"),
    ],
)
def test_command_failures_and_their_first_error(response: Any, error: str | None) -> None:
    obs = only(observe([ToolCall(name="Bash", input={"command": "run it"}, response=response)]))
    assert obs.type == "discovery"
    assert obs.title.startswith("Command failed")
    if error:
        assert f"error: {error}" in obs.facts


def test_a_warning_makes_a_gotcha() -> None:
    out = "DeprecationWarning: pkg_resources is deprecated as an API\n3 passed in 0.2s"
    obs = only(observe([bash("pytest", stdout=out)]))
    assert "gotcha" in obs.concepts
    assert any(fact.startswith("warning: DeprecationWarning") for fact in obs.facts)


def test_a_read_file_that_mentions_failures_is_not_a_failure() -> None:
    content = "Traceback (most recent call last):\n1 failed in 0.1s\nDeprecationWarning: x"
    call = ToolCall(name="Read", input={"file_path": "/repo/log.txt"}, response={"file": {"content": content}})
    obs = only(observe([call]))
    assert not any(f.startswith(("error", "warning")) for f in obs.facts)
    assert "gotcha" not in obs.concepts


# ------------------------------------------------------------------------------------------------- the bugfix rule


def test_failing_test_then_edit_then_passing_test_is_a_bugfix_in_one_batch() -> None:
    failing = bash("pytest -q", stdout="FAILED tests/test_app.py::test_retry\n1 failed, 4 passed in 0.3s", code=1)
    fix = edit("/repo/src/app.py", "return get(url)", "return retry(get, url)")
    passing = bash("pytest -q", stdout="5 passed in 0.2s")
    observations = observe([failing, fix, passing])
    assert_well_formed(observations)
    bugfix = only(observations)  # one episode: the failure, the fix and the run that verified it
    assert bugfix.type == "bugfix"
    assert "ran `pytest -q` → 1 failed, 4 passed → 5 passed" in bugfix.facts
    assert bugfix.title == "Fixed src/app.py after failing `pytest -q`; tests 1 failed, 4 passed → 5 passed"
    assert bugfix.files_modified == ("src/app.py",)
    assert bugfix.concepts == ("what-changed", "problem-solution")
    assert "after failure: `pytest -q` → 1 failed, 4 passed" in bugfix.facts
    assert "verified: `pytest -q` → 5 passed" in bugfix.facts
    assert "tests passed" in bugfix.facts
    assert "fixes failing tests: tests/test_app.py::test_retry" in bugfix.facts
    assert "passed afterwards" in (bugfix.narrative or "")


def test_the_same_sequence_observed_call_by_call() -> None:
    calls = [
        bash("pytest tests/test_app.py", stdout="1 failed in 0.1s", code=1, cid="t1"),
        edit("/repo/src/app.py", cid="t2"),
        bash("pytest -q", stdout="5 passed in 0.2s", cid="t3"),
    ]
    first, second, third = incremental(calls)
    assert only(first).type == "discovery"
    candidate = only(second)
    assert candidate.type == "bugfix"  # a failing test, not yet re-run: the edit is taken as its fix
    assert "it has not been re-run since" in (candidate.narrative or "")
    run = only(third)
    assert run.type == "discovery" and "tests passed" in run.facts
    assert {"problem-solution", "what-changed"} <= set(run.concepts)


def test_an_edit_whose_rerun_still_fails_is_a_change() -> None:
    calls = [bash("pytest", stdout="1 failed in 0.1s", code=1), edit("/repo/a.py"),
             bash("pytest", stdout="1 failed in 0.1s", code=1)]
    assert [o.type for o in observe(calls)] == ["change"]
    assert "ran `pytest` → 1 failed" in only(observe(calls)).facts  # two runs, one outcome: said once


def test_a_failure_already_resolved_before_the_edit_does_not_count() -> None:
    calls = [bash("pytest", stdout="1 failed in 0.1s", code=1), bash("pytest", stdout="2 passed in 0.1s"),
             edit("/repo/a.py")]
    assert observe(calls)[-1].type == "change"


def test_a_failing_non_test_command_needs_a_passing_rerun() -> None:
    build_fails = bash("make build", stderr="error: missing semicolon", code=2)
    alone = observe([build_fails, edit("/repo/a.c")])
    assert alone[-1].type == "change"
    confirmed = only(observe([build_fails, edit("/repo/a.c"), bash("make build", stdout="built")]))
    assert confirmed.type == "bugfix"
    assert "fixes error: error: missing semicolon" in confirmed.facts


def test_runs_of_the_same_runner_count_as_the_same_check() -> None:
    calls = [bash("pytest tests/test_a.py", stdout="1 failed in 0.1s", code=1), edit("/repo/a.py"),
             bash("python -m pytest -q", stdout="9 passed in 0.5s")]
    assert only(observe(calls)).type == "bugfix"


def test_earlier_turn_history_counts_when_only_new_calls_are_observed() -> None:
    history = [bash("cargo test", stdout="test result: FAILED. 1 passed; 1 failed;", code=101)]
    fix = edit("/repo/src/lib.rs")
    rerun = bash("cargo test", stdout="test result: ok. 2 passed; 0 failed;")
    turn = make_turn([*history, fix, rerun])
    observations = OfflineExtractor().observe(turn, [fix, rerun]).observations
    assert [o.type for o in observations] == ["bugfix"]


def test_shell_edit_after_a_failing_test_is_a_bugfix() -> None:
    calls = [bash("pytest", stdout="1 failed in 0.1s", code=1), bash("sed -i 's/a/b/' src/app.py"),
             bash("pytest", stdout="3 passed in 0.1s")]
    observation = only(observe(calls))
    assert observation.type == "bugfix"
    assert observation.files_modified == ("src/app.py",)


# ------------------------------------------------------------------------------------------- skipping and keeping


def test_trivial_tools_are_skipped() -> None:
    calls = [
        ToolCall(name="TodoWrite", input={"todos": [{"content": "x"}]}, response="Todos have been modified"),
        ToolCall(name="AskUserQuestion", input={"questions": []}, response="answered"),
        ToolCall(name="ExitPlanMode", input={}, response="ok"),
        ToolCall(name="mcp__memcairn__search", input={"query": "x"}, response="results"),
        bash("true"),
    ]
    assert observe(calls) == []


def test_plan_text_makes_a_decision() -> None:
    plan = "Use exponential backoff for retries.\n\n1. Add retry()\n2. Wrap fetch()"
    obs = only(observe([ToolCall(name="ExitPlanMode", input={"plan": plan})]))
    assert obs.type == "decision"
    assert obs.title == "Plan: Use exponential backoff for retries."
    assert obs.facts == ("Add retry()", "Wrap fetch()")


def test_edits_writes_and_failing_commands_are_never_dropped() -> None:
    calls = [
        ToolCall(name="Edit", input=None),
        ToolCall(name="Write", input="not json"),
        ToolCall(name="MultiEdit", input={}, response=""),
        ToolCall(name="apply_patch", input=""),
        ToolCall(name="Edit", input={"file_path": "/repo/a.py"}, response="Error: String to replace not found"),
        ToolCall(name="Bash", input={"command": "false"}, response="Error: Exit code 1\n"),
        ToolCall(name="replace", input={"file_path": "/repo/b.py"}),
    ]
    for call in calls:
        noise = ToolCall(name="TodoWrite", input={"todos": []}, response="ok")
        assert len(observe([noise, call, noise])) == 1, call
    rejected = observe([calls[4]])[0]
    assert rejected.type == "discovery" and rejected.title == "Edit of a.py failed"
    assert "error: Error: String to replace not found" in rejected.facts


def test_an_unknown_tool_with_output_is_kept_and_without_output_skipped() -> None:
    kept = only(observe([ToolCall(name="mcp__github__get_issue", input={"n": 3}, response="Issue 3: crash")]))
    assert kept.type == "discovery" and kept.title == "Used mcp__github__get_issue"
    assert "mcp__github__get_issue returned: Issue 3: crash" in kept.facts
    assert observe([ToolCall(name="mcp__x__y", input={}, response={"content": []})]) == []


# ------------------------------------------------------------------------------------------------ Codex and Gemini


PATCH = """*** Begin Patch
*** Update File: src/app.py
@@ def fetch(url):
-    return get(url)
+    return retry(get, url)
*** Add File: src/retry.py
+def retry(fn, *args):
+    return fn(*args)
*** Delete File: src/legacy.py
*** Update File: src/old_name.py
*** Move to: src/new_name.py
*** End Patch"""


def test_apply_patch_lists_all_three_line_forms_and_moves() -> None:
    obs = only(observe([ToolCall(name="apply_patch", input=PATCH, response="Success.")]))
    assert obs.type == "change"
    assert obs.files_modified == ("src/app.py", "src/retry.py", "src/legacy.py", "src/old_name.py",
                                  "src/new_name.py")
    assert "updated src/app.py (+1/-1)" in obs.facts
    assert "added src/retry.py (+2)" in obs.facts
    assert "deleted src/legacy.py" in obs.facts
    assert "moved src/old_name.py → src/new_name.py" in obs.facts
    assert "added retry" in obs.facts


def test_apply_patch_types_and_input_shapes() -> None:
    added = "*** Begin Patch\n*** Add File: a.py\n+x = 1\n*** End Patch"
    moved = "*** Begin Patch\n*** Update File: a.py\n*** Move to: b.py\n*** End Patch"
    assert only(observe([ToolCall(name="apply_patch", input={"input": added})])).type == "feature"
    assert only(observe([ToolCall(name="apply_patch", input={"patch": moved})])).type == "refactor"
    via_shell = ToolCall(name="shell", input={"command": ["apply_patch", PATCH]}, response="Done!")
    assert only(observe([via_shell])).files_modified[0] == "src/app.py"


def test_codex_shell_and_exec_command() -> None:
    shell = ToolCall(name="shell", input={"command": ["bash", "-lc", "cat src/app.py"], "workdir": "/repo/pkg"},
                     response={"output": "x = 1", "metadata": {"exit_code": 0}})
    exec_failing = ToolCall(name="exec_command", input={"cmd": "pytest -q"},
                            response="Exit code: 1\nWall time: 0.4 seconds\nOutput:\n2 failed, 1 passed in 0.3s")
    first, second = (only(observe([call])) for call in (shell, exec_failing))
    assert first.files_read == ("pkg/src/app.py",)
    assert second.title == "Ran `pytest -q`: 2 failed, 1 passed"
    assert "ran `pytest -q` → 2 failed, 1 passed" in second.facts


def test_gemini_tools() -> None:
    calls = [
        ToolCall(name="read_file", input={"absolute_path": "/repo/a.py"},
                 response={"llmContent": "x", "returnDisplay": ""}),
        ToolCall(name="read_many_files", input={"paths": ["/repo/b.py", "c.py"]}, response={"llmContent": "..."}),
        ToolCall(name="glob", input={"pattern": "*.md", "dir_path": "/repo/docs"}, response={"llmContent": "Found 2"}),
        ToolCall(name="search_file_content", input={"pattern": "TODO", "dir_path": "/repo/src"},
                 response={"llmContent": "Found 3 matches"}),
        ToolCall(name="list_directory", input={"dir_path": "/repo/tests"}, response={"llmContent": "x.py"}),
        ToolCall(name="write_file", input={"file_path": "/repo/n.py", "content": "def n():\n    pass\n"},
                 response={"llmContent": "Successfully created and wrote to new file: /repo/n.py."}),
        ToolCall(name="replace", input={"file_path": "/repo/a.py", "old_string": "x", "new_string": "y"},
                 response={"llmContent": "Successfully modified file: /repo/a.py (1 replacements)."}),
        ToolCall(name="run_shell_command", input={"command": "python run.py", "directory": "tools"},
                 response={"llmContent": "Command: python run.py\nStdout: boom\nError: (none)\nExit Code: 3"}),
    ]
    lookups, created, replaced, shell = (only(observe(group)) for group in (calls[:5], *([c] for c in calls[5:])))
    assert lookups.files_read == ("a.py", "b.py", "c.py", "docs/*.md", "src", "tests")
    assert (created.type, created.files_modified) == ("feature", ("n.py",))
    assert (replaced.type, replaced.files_modified) == ("change", ("a.py",))
    assert shell.files_read == ("tools/run.py",)
    assert shell.title.startswith("Command failed (exit 3)")
    episode = only(observe(calls))  # the whole batch: one episode of work
    assert (episode.type, episode.files_modified) == ("feature", ("n.py", "a.py"))
    assert "error: Stdout: boom" in episode.facts


def test_gemini_error_field_marks_a_failure() -> None:
    call = ToolCall(name="read_file", input={"file_path": "/repo/missing.py"},
                    response={"llmContent": "", "error": {"message": "File not found: /repo/missing.py"}})
    obs = only(observe([call]))
    assert "error: File not found: /repo/missing.py" in obs.facts


# ------------------------------------------------------------------------------------------------ weird inputs


WEIRD_CALLS = [
    ToolCall(name="Bash", input=None, response=None),
    ToolCall(name="Bash", input=["echo", "hi"], response=b"hi"),
    ToolCall(name="Bash", input={"command": "echo \"unbalanced > out.txt"}, response="x"),
    ToolCall(name="Bash", input={"command": "cat '"}, response=12),
    ToolCall(name="Bash", input={"command": "x" * 300_000 + " > f"}, response="y" * 3_000_000),
    ToolCall(name="Bash", input={"command": ")(&&|;<<>>"}, response=[1, None, {"is_error": True}]),
    ToolCall(name="Bash", input={"command": "cat <<EOF\nunterminated heredoc"}, response={"stdout": None}),
    ToolCall(name="Bash", input={"command": 42}, response=object()),
    ToolCall(name="apply_patch", input="*** Update File:\n@@\n+++\n*** Move to:\n garbage", response=None),
    ToolCall(name="apply_patch", input={"input": ["*** Add File: x.py", "+a"]}, response={"error": True}),
    ToolCall(name="Edit", input={"file_path": 7, "old_string": None, "new_string": ["a"]}, response="?"),
    ToolCall(name="MultiEdit", input={"file_path": "/repo/a", "edits": [None, 3, {"old_string": 1}]}),
    ToolCall(name="Write", input={"file_path": None, "content": None}, response={"type": 5}),
    ToolCall(name="Read", input=3.5, response={"file": {"content": {"nested": ["deep"]}}}),
    ToolCall(name="Grep", input={"pattern": None, "path": ["a"]}, response={"numFiles": True}),
    ToolCall(name="Task", input="{not json", response={"content": "z" * 50_000}),
    ToolCall(name="", input=None, response="something"),
    ToolCall(name="Read", input={"file_path": "C:\\repo\\a.py"}, response="x"),
    ToolCall(name="Read", input={"file_path": "/repo/a\x00b"}, response="x"),
    ToolCall(name="exec_command", input={"cmd": ["bash", "-lc"]}, response={"metadata": {"exit_code": "1"}}),
    ToolCall(name="ExitPlanMode", input={"plan": "#" * 5000}, response=None),
    ToolCall(name="Bash", input={"command": "pytest"}, response={"stdout": "F" * 100_000 + "\n1 failed in 1s"}),
    # Shapes that make naive regular expressions backtrack for seconds.
    ToolCall(name="Bash", input={"command": "pytest"}, response={"stdout": "9" * 100_000, "stderr": " \n" * 50_000}),
    ToolCall(name="Bash", input={"command": "x"}, response="Error: Exit code 1\n" + "\n" * 100_000 + "a" * 100_000),
    ToolCall(name="Bash", input={"command": "(" * 100_000}, response="x"),
    ToolCall(name="Edit", input={"file_path": "/repo/a", "old_string": " " * 100_000, "new_string": "def " * 50_000}),
    ToolCall(name="apply_patch", input="*** Add File: a\n" + "+def x():\n" * 100_000),
]


@pytest.mark.parametrize("call", WEIRD_CALLS, ids=range(len(WEIRD_CALLS)))
@pytest.mark.parametrize("cwd", [CWD, None, "C:\\repo"])
def test_weird_inputs_never_raise(call: ToolCall, cwd: str | None) -> None:
    observations = observe([call], cwd=cwd)
    assert_well_formed(observations)
    for obs in observations:
        assert all(len(text or "") <= 1000 for text in (obs.narrative, obs.subtitle, obs.title))


def test_weird_turn_fields_never_raise() -> None:
    calls = list(WEIRD_CALLS)
    turn = make_turn(calls, prompt="p" * 100_000, last_assistant_message="m" * 100_000, cwd="")
    extractor = OfflineExtractor()
    observations = extractor.observe(turn, calls).observations
    assert_well_formed(observations)
    summary = extractor.summarize(turn, observations).summary
    assert summary is not None and len(summary.request or "") <= 300 and len(summary.notes or "") <= 400


# ---------------------------------------------------------------------------------------------- real transcripts


@pytest.mark.parametrize("name", ["coverage-test-fix", "hello-world-script", "python-to-rust-port"])
def test_real_transcripts_are_deterministic_and_well_formed(name: str) -> None:
    turn, calls = load_transcript(name)
    first = OfflineExtractor().observe(turn, calls)
    second = OfflineExtractor().observe(replace(turn), list(calls))
    assert first == second
    assert_well_formed(first.observations)
    summary = OfflineExtractor().summarize(turn, first.observations)
    assert summary == OfflineExtractor().summarize(turn, second.observations)
    # Compressing call by call is deterministic too.
    assert incremental_transcript(turn, calls) == incremental_transcript(turn, calls)


def incremental_transcript(turn: Turn, calls: list[ToolCall]) -> list[Observation]:
    out: list[Observation] = []
    for position, call in enumerate(calls):
        partial = replace(turn, tools=tuple(calls[: position + 1]))
        out.extend(OfflineExtractor().observe(partial, [call]).observations)
    return out


def test_coverage_fix_transcript() -> None:
    turn, calls = load_transcript("coverage-test-fix")
    # a commit ends an episode; the card of what its test edit added follows it
    committed, card, gitignore = OfflineExtractor().observe(turn, calls).observations
    assert (card.title, card.files_modified) == (
        "test_math_utils.py: added test_multiply_numbers", ("tests/test_math_utils.py",))
    assert (committed.type, committed.title) == ("change", "Committed: Add multiply_numbers function with test")
    assert committed.files_read == ("**/*.py", "src/math_utils.py", "tests/test_math_utils.py")
    assert committed.files_modified == ("src/math_utils.py", "tests/test_math_utils.py")
    assert committed.facts[:2] == (
        "committed: Add multiply_numbers function with test (6322cf4)",  # with git's short hash
        "ran `python -m pytest tests/test_math_utils.py -v` → 2 passed",  # how it was verified
    )
    # the commit's files rank low (the episode lists them already): after the edits, when the budget holds them
    assert not any(f.startswith("commit files: ") for f in committed.facts[:3])
    assert "edited src/math_utils.py: added multiply_numbers" in committed.facts
    assert gitignore.files_modified == (".gitignore",)
    assert "error: nothing to commit, working tree clean" in gitignore.facts


def test_hello_world_transcript() -> None:
    turn, calls = load_transcript("hello-world-script")
    created = only(OfflineExtractor().observe(turn, calls).observations)
    assert (created.type, created.title, created.files_modified) == ("feature", "Created hello.sh", ("hello.sh",))
    assert created.files_read == ("hello.sh",)
    assert "ran `chmod +x hello.sh && ./hello.sh` → ok: Hello world" in created.facts


def test_rust_port_transcript() -> None:
    turn, calls = load_transcript("python-to-rust-port")
    observations = OfflineExtractor().observe(turn, calls).observations
    ported = observations[0]  # one batch, one commit: one episode, then a card per file it wrote
    assert (ported.type, ported.title) == ("feature", "Committed: Port Python utility library to Rust")
    created = [f.split(" (")[0] for f in ported.facts if f.startswith("created ")]
    rust = {"src/string_utils.rs", "src/math_utils.rs", "src/list_utils.rs", "src/dict_utils.rs", "src/validation.rs"}
    cards = observations[1:]
    written = [*rust, "src/lib.rs", "Cargo.toml", "Justfile"]
    assert {card.files_modified for card in cards} <= {(path,) for path in written}
    assert all(len(card.steps) == 1 and set(card.steps) <= set(ported.steps) for card in cards)
    flatten = next(card for card in cards if card.files_modified == ("src/list_utils.rs",))
    assert flatten.title.startswith("list_utils.rs: NestedItem, flatten")
    assert set(created) <= {f"created {path}" for path in rust}  # as many as the episode's budget holds
    assert rust <= set(ported.files_modified)  # and each file is listed
    assert "src/validation.py" in ported.files_modified
    assert any(f.startswith("commit message: Replace the Python implementation") for f in ported.facts)
    steps = OfflineExtractor().observe(turn, calls[:20]).observations  # the pipeline's batches are smaller
    assert not any("Todo" in o.title for o in steps)
    assert steps[0].title == "Built Cargo.toml, src/lib.rs (+5 more); tests 34 passed"  # too many names to list
    assert "created src/string_utils.rs (39 lines): added reverse_string, tests, test_reverse_string (+2 more)" in (
        steps[0].facts)
    assert all(card.files_modified[0] in steps[0].files_modified for card in steps[1:])


# --------------------------------------------------------------------------------------------------- summaries


def test_summary_sections_from_a_real_transcript() -> None:
    turn, calls = load_transcript("coverage-test-fix")
    extractor = OfflineExtractor()
    observations = extractor.observe(turn, calls).observations
    result = extractor.summarize(turn, observations)
    summary = result.summary
    assert summary is not None and result.observations == [] and result.usage == []
    assert summary.request and summary.request.startswith("Add a function called multiply_numbers")
    assert summary.investigated and "src/math_utils.py" in summary.investigated
    assert summary.completed and "Committed: Add multiply_numbers function with test" in summary.completed
    # the failed commit is a run; the line git printed for it ("nothing to commit") is no lesson
    assert summary.learned and "2 passed" in summary.learned and "nothing to commit" not in summary.learned
    # the closing report leads what was done; its filler ("The task is complete.") is no summary
    assert summary.completed.startswith("The `.gitignore` was already committed (a hook or linter committed it).")
    assert "task is complete" not in summary.completed and summary.notes is None
    assert summary.next_steps is None
    assert summary.files_modified == ("src/math_utils.py", "tests/test_math_utils.py", ".gitignore")
    assert "src/math_utils.py" in summary.files_read


def test_summary_completed_and_next_steps_from_the_last_message() -> None:
    message = ("I added retry() to fetch. The flaky test is fixed. Next, the timeout should be configurable. "
               "Nothing else changed.")
    turn = make_turn(last_assistant_message=message)
    summary = OfflineExtractor().summarize(turn, []).summary
    assert summary is not None
    assert summary.next_steps == "Next, the timeout should be configurable."
    assert summary.completed == "I added retry() to fetch. The flaky test is fixed."
    assert summary.notes is None
    assert summary.request == PROMPT
    assert summary.investigated is None


def test_summary_of_a_bugfix_turn_records_what_was_learned() -> None:
    calls = [bash("pytest -q", stdout="1 failed in 0.1s", code=1), edit("/repo/src/app.py"),
             bash("pytest -q", stdout="2 passed in 0.1s")]
    extractor = OfflineExtractor()
    observations = extractor.observe(make_turn(calls), calls).observations
    summary = extractor.summarize(make_turn(calls), observations).summary
    assert summary is not None
    assert summary.completed and summary.completed.startswith("Fixed src/app.py")
    assert summary.learned and "verified: `pytest -q` → 2 passed" in summary.learned


def test_summary_is_none_for_an_empty_turn() -> None:
    turn = make_turn(prompt=None, last_assistant_message=None)
    assert OfflineExtractor().summarize(turn, []).summary is None
    assert OfflineExtractor().summarize(make_turn(prompt="   "), []).summary is None


def test_summary_request_and_notes_are_trimmed() -> None:
    long_prompt = "Please " + "do the thing " * 100
    message = "Done. " * 200
    summary = OfflineExtractor().summarize(make_turn(prompt=long_prompt, last_assistant_message=message), [])
    assert summary.summary is not None
    assert len(summary.summary.request or "") <= 300
    assert len(summary.summary.notes or "") <= 400


def test_observations_without_a_prompt_have_a_plain_narrative() -> None:
    obs = only(observe([read("/repo/a.py")], prompt=None))
    assert obs.subtitle is None
    assert obs.narrative == "The agent looked at a.py."


# ---------------------------------------------------------------------------------------- recorded hook payloads


HOOKS = Path(__file__).parent / "fixtures" / "hooks"


def hook_call(name: str) -> tuple[ToolCall, str]:
    payload = json.loads((HOOKS / name).read_text())
    call = ToolCall(name=payload["tool_name"], input=payload["tool_input"], response=payload.get("tool_response"),
                    tool_use_id=payload.get("tool_use_id"), cwd=payload["cwd"])
    return call, payload["cwd"]


@pytest.mark.parametrize(
    ("fixture", "kind", "files_read", "files_modified"),
    [
        ("post_tool_use_read.json", "discovery", ("src/math_utils.py",), ()),
        ("post_tool_use_edit.json", "change", (), ("src/math_utils.py",)),
        ("post_tool_use_bash.json", "discovery", ("tests/test_math_utils.py",), ()),
        ("gemini_after_tool.json", "discovery", ("src/math_utils.py",), ()),
    ],
)
def test_recorded_hook_payloads(fixture: str, kind: str, files_read: tuple[str, ...],
                                files_modified: tuple[str, ...]) -> None:
    call, cwd = hook_call(fixture)
    obs = only(observe([call], cwd=cwd))
    assert (obs.type, obs.files_read, obs.files_modified) == (kind, files_read, files_modified)
    assert_well_formed([obs])


def test_edit_hook_payload_names_the_added_function() -> None:
    call, cwd = hook_call("post_tool_use_edit.json")
    obs = only(observe([call], cwd=cwd))
    assert obs.title == "Edited src/math_utils.py: added multiply_numbers"


# ------------------------------------------------------------------------------------------------- more corners


def test_runner_wrappers_are_seen_through() -> None:
    obs = only(observe([bash("uv run --frozen python -m pytest tests/x.py -q", stdout="1 passed in 0.1s")]))
    assert obs.files_read == ("tests/x.py",)
    assert "tests passed" in obs.facts


def test_an_interrupted_command() -> None:
    call = ToolCall(name="Bash", input={"command": "sleep 100"}, response={"stdout": "", "interrupted": True})
    obs = only(observe([call]))
    assert obs.title == "Command interrupted: `sleep 100`"
    assert "ran `sleep 100` → interrupted" in obs.facts


def test_a_test_summary_line_is_not_repeated_as_the_error() -> None:
    obs = only(observe([bash("npm test", stdout="Tests:       1 failed, 2 passed, 3 total", code=1)]))
    assert "ran `npm test` → 1 failed, 2 passed" in obs.facts
    assert not any(fact.startswith("error:") for fact in obs.facts)


def test_identical_calls_without_ids_are_placed_at_the_end_of_the_turn() -> None:
    status = bash("git status", stdout="clean")
    turn = make_turn([bash("pytest", stdout="1 failed in 0.1s", code=1), status, edit("/repo/a.py"), status])
    run = bash("ls src", stdout="a.py")
    turn = make_turn([bash("pytest", stdout="1 failed in 0.1s", code=1), run, edit("/repo/a.py"), run])
    titles = [o.title for o in OfflineExtractor().observe(turn, [run]).observations]
    assert titles == ["Ran `ls src` → ok: a.py"]


def test_summary_accepts_observations_from_any_compressor() -> None:
    observations = [
        Observation(type="decision", title="Chose SQLite over Postgres", facts=("single file, no server",)),
        Observation(type="bugfix", title="Fixed off-by-one in pager", facts=("error: IndexError in page()",),
                    files_modified=("pager.py",)),
        Observation(type="discovery", title="Read the pager", files_read=("pager.py",)),
    ]
    summary = OfflineExtractor().summarize(make_turn(), observations).summary
    assert summary is not None
    assert summary.learned == "Chose SQLite over Postgres; Fixed off-by-one in pager; error: IndexError in page()"
    assert summary.completed == "Fixed off-by-one in pager"
    assert summary.investigated == "Read the pager"
    assert (summary.files_read, summary.files_modified) == (("pager.py",), ("pager.py",))


# ------------------------------------------------------------------------------------- defects found on real sessions


@pytest.mark.parametrize("response", [
    "User rejected tool use",  # Claude Code's toolUseResult when the user declines the call
    "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it was a file edit, "
    "the new_string was NOT written to the file).",
    "[Request interrupted by user for tool use]",
    "Error: [Request interrupted by user for tool use]",
])
def test_a_declined_or_interrupted_edit_changed_nothing(response: str) -> None:
    call = ToolCall(name="Edit", input={"file_path": "/repo/a.py", "old_string": "x", "new_string": "y"},
                    response=response)
    obs = only(observe([call]))
    assert obs.files_modified == ()
    assert obs.type == "discovery"
    assert not obs.title.startswith("Edited")


def test_a_declined_shell_command_is_not_reported_as_done() -> None:
    call = ToolCall(name="Bash", input={"command": "rm -rf build"}, response="User rejected tool use")
    obs = only(observe([call]))
    assert obs.files_modified == ()
    assert obs.title == "Command interrupted: `rm -rf build`"
    assert "ran `rm -rf build` → interrupted" in obs.facts


def test_ansi_colours_are_dropped_from_outcomes() -> None:
    colored = "\x1b[0m\x1b[1m\x1b[38;5;9merror[E0308]\x1b[0m\x1b[1m: mismatched types\x1b[0m\n"
    obs = only(observe([bash("cargo build", stderr=colored, code=101)]))
    assert "error: error[E0308]: mismatched types" in obs.facts
    jest = "\x1b[1mTests:\x1b[22m  \x1b[1m\x1b[31m1 failed\x1b[39m\x1b[22m, \x1b[1m\x1b[32m3 passed\x1b[39m\x1b[22m"
    obs = only(observe([bash("npx jest", stdout=jest, code=1)]))
    assert obs.title == "Ran `npx jest`: 1 failed, 3 passed"
    assert not any("\x1b" in fact for fact in obs.facts)


def test_tool_error_markup_is_not_kept_in_the_error_fact() -> None:
    call = ToolCall(name="Edit", input={"file_path": "/repo/a.py", "old_string": "x", "new_string": "y"},
                    response="<tool_use_error>String to replace not found in file.\nString: x</tool_use_error>")
    obs = only(observe([call]))
    assert "error: String to replace not found in file." in obs.facts
    assert not any("tool_use_error" in fact for fact in obs.facts)


def test_titles_are_not_cut_mid_word() -> None:
    command = "git add src/math_utils.py tests/test_math_utils.py && git diff --stat --cached"
    obs = only(observe([bash(command, stdout=" 2 files changed")]))
    assert len(obs.title) <= TITLE_MAX
    assert obs.title == "Ran `git add src/math_utils.py…`"
    names = "\n".join(f"fn {name}() {{}}" for name in ("is_valid_email", "test_is_valid_email_valid", "a", "b"))
    write = ToolCall(name="Write", input={"file_path": "/repo/src/validation.rs", "content": names},
                     response={"type": "create"})
    title = only(observe([write])).title
    assert len(title) <= TITLE_MAX
    assert title == "Created src/validation.rs: added is_valid_email (+3 more)"


def test_names_a_file_defines_are_not_taken_for_lessons() -> None:
    content = "struct NegativeInputError;\nimpl Error for NegativeInputError {}\nfn fmt() {}\n"
    write = ToolCall(name="Write", input={"file_path": "/repo/src/math.rs", "content": content},
                     response={"type": "create"})
    extractor = OfflineExtractor()
    turn = make_turn([write])
    summary = extractor.summarize(turn, extractor.observe(turn, [write]).observations).summary
    assert summary is not None
    assert summary.learned is None


def test_the_error_fact_of_a_failed_command_is_never_an_empty_harness_label() -> None:
    """Gemini's and Codex's shell results frame the output with labels (``Error: (none)``, ``Output:``); a
    failed command's error fact names a line of its output, or nothing, never such a label."""
    gemini = ToolCall(name="run_shell_command", input={"command": "make build"}, response={"llmContent": (
        "Command: make build\nDirectory: (root)\nOutput: make: *** No rule to make target 'build'.  Stop.\n"
        "Error: (none)\nExit Code: 2\nSignal: (none)\nBackground PIDs: (none)\nProcess Group PGID: 4242")})
    codex = ToolCall(name="shell_command", input={"command": "test -f missing.txt"},
                     response="Exit code: 1\nWall time: 0.1 seconds\nOutput:\n")
    made = only(observe([gemini]))
    assert made.title == "Command failed (exit 2): `make build`"
    assert "error: Output: make: *** No rule to make target 'build'. Stop." in made.facts
    assert not any("(none)" in fact or "PGID" in fact for fact in made.facts)
    assert not any(fact.startswith("error:") for fact in only(observe([codex])).facts)


def test_an_image_in_a_tool_result_is_named_not_stored_as_base64() -> None:
    """A screenshot from an MCP tool (MCP's ``{type: image, data, mimeType}`` block, or the API's with a
    ``source``) is an image, not text: its base64 never becomes a fact, a narrative or searchable text."""
    data = "iVBORw0KGgoAAAANSUhEUgAA" + "QUJDRA" * 400
    shapes: list[Any] = [
        [{"type": "image", "data": data, "mimeType": "image/png"}],
        {"content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}]},
    ]
    for response in shapes:
        made = only(observe([ToolCall(name="mcp__browser__screenshot", input={}, response=response)]))
        assert made.facts == ("mcp__browser__screenshot returned: [image]",)
        assert "iVBOR" not in json.dumps([made.title, made.narrative, made.facts])


# ------------------------------------------------------------------ where the turn ran, and what the harness did


def test_paths_stay_relative_to_the_project_when_the_turn_ends_in_a_subdirectory() -> None:
    """`cd assets && npx vitest` moves the turn's cwd; files written at the project's root keep their short
    project-relative paths, not absolute ones."""
    calls = [replace(edit(f"{CWD}/test/cart_test.exs", cid="e1"), cwd=CWD),
             replace(edit("lib/cart.ex", cid="e2"), cwd=CWD)]
    (obs,) = observe(calls, cwd=f"{CWD}/assets")
    assert obs.files_modified == ("test/cart_test.exs", "lib/cart.ex")
    assert CWD not in obs.title


def test_files_of_a_worktree_the_agent_works_in_are_relative_to_it() -> None:
    """The session's checkout is CWD, but the agent works in a git worktree beside it (Codex: `exec_command` with a
    `workdir`, then an absolute `apply_patch`): its files are written relative to that worktree, not absolute."""
    tree = f"{CWD}__worktrees/fix-merge-signal"
    run = ToolCall(name="exec_command", input={"cmd": "git status --short", "workdir": tree}, tool_use_id="x1",
                   response={"output": " M packages/core/src/sync.ts\n", "exit_code": 0})
    patch = ToolCall(name="apply_patch", tool_use_id="p1", response={"output": "Success."},
                     input=(f"*** Begin Patch\n*** Update File: {tree}/packages/core/src/sync.ts\n@@\n-a\n+b\n"
                            "*** End Patch"))
    observed = observe([run, patch])
    assert any(o.files_modified == ("packages/core/src/sync.ts",) for o in observed), observed
    assert not any(tree in (o.title or "") for o in observed)
    # a path in no directory the turn names stays absolute
    (lone,) = observe([replace(patch, input=patch.input.replace(tree, "/elsewhere"))])
    assert lone.files_modified == ("/elsewhere/packages/core/src/sync.ts",)


def test_a_skill_and_a_background_tasks_output_leave_no_memory_however_they_ended() -> None:
    skill = ToolCall(name="Skill", input={"skill": "team:commit"}, tool_use_id="s1",
                     response='Error: Bash command failed for pattern "!`git log main..HEAD`": [stderr] fatal')
    gone = ToolCall(name="Read", input={"file_path": "/tmp/claude-1000/tasks/b42.output"}, tool_use_id="r1",
                    response="<tool_use_error>File does not exist.</tool_use_error>")
    assert observe([skill, gone]) == []
    kept = observe([skill, edit(f"{CWD}/src/app.py", cid="e1")])
    assert kept and not any("Bash command failed" in " ".join((o.narrative or "", *o.facts)) for o in kept)


def test_an_episode_is_named_by_the_projects_files_before_a_plan_elsewhere() -> None:
    plan = ToolCall(name="Write", tool_use_id="w1",
                    input={"file_path": "/home/dev/.claude/plans/lucky-otter.md",
                           "content": "# Plan: Decimal totals\n\n## Context\nTotals drift by a cent on refunds.\n\n"
                                      + "".join(f"{n}. Step {n}: move `total_{n}` to Decimal and test it\n"
                                                for n in range(1, 16))},
                    response={"type": "create", "filePath": "/home/dev/.claude/plans/lucky-otter.md"})
    calls = [plan, edit(f"{CWD}/src/cart.py", cid="e1"), edit(f"{CWD}/src/order.py", cid="e2")]
    titles = [o.title for o in observe(calls)]
    assert titles[0].startswith("Built src/cart.py, src/order.py"), titles
    # the plan's own card is named by its heading, not by where the harness keeps it
    assert "lucky-otter.md: Plan: Decimal totals" in titles, titles


def test_lines_of_code_a_card_quotes_are_no_lesson_learned() -> None:
    card = Observation(type="feature", title="session_live.ex: SessionLive", narrative="Created session_live.ex.",
                       facts=('class="transcript-error-item"', "errors = load_errors(session_record)"))
    fix = Observation(type="change", title="Edited lib/parser.ex", narrative="Edited the parser.",
                      facts=("ran `mix test` → failed (exit 2)", "error: undefined function parse/2"))
    summary = OfflineExtractor().summarize(make_turn([]), [card, fix]).summary
    assert summary is not None and summary.learned is not None
    assert "undefined function parse/2" in summary.learned
    assert "transcript-error-item" not in summary.learned and "load_errors" not in summary.learned


def test_a_summary_learns_the_causes_found_out_before_the_constraints_named() -> None:
    narration = ("The assets directory is gitignored (build output). Tmux errors are safe, so LiveView tests "
                 "should work. The renderer test failed. The subagent fixture doesn't actually contain any "
                 "`agent-xxx` patterns. The fixture name is misleading — it refers to something else.",)
    summary = OfflineExtractor().summarize(make_turn([], narration=narration), []).summary
    assert summary is not None and summary.learned is not None
    learned = summary.learned
    # both findings, then what room is left, in the order they were said and within the same cap
    assert ("gitignored (build output). The subagent fixture doesn't actually contain any `agent-xxx` patterns. The "
            "fixture name is misleading") in learned, learned
    assert len(learned) <= 200 and "Tmux errors are safe" not in learned
