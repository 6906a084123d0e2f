"""Episodes, not steps: a batch's calls toward one goal become one observation, housekeeping is skipped,
reruns fold into one trajectory, a commit ends an episode, and each episode names the calls it covers."""

from __future__ import annotations

from typing import Any

from memcairn.capture.offline import FACT_MAX, FACTS_MAX, TITLE_MAX, OfflineExtractor
from memcairn.capture.offline.episodes import FACTS_BUDGET
from memcairn.capture.records import Observation, ToolCall, Turn

CWD = "/work/app"


def observe(calls: list[ToolCall]) -> list[Observation]:
    turn = Turn(session_id="s", platform_source="claude-code", project="app", prompt="Fix the guard", cwd=CWD,
                tools=tuple(calls))
    return OfflineExtractor().observe(turn, calls).observations


def bash(cid: str, command: str, stdout: str = "", code: int = 0) -> ToolCall:
    response: Any = f"Error: Exit code {code}\n{stdout}" if code else {"stdout": stdout, "stderr": ""}
    return ToolCall(name="Bash", input={"command": command}, response=response, tool_use_id=cid, cwd=CWD)


def edit(cid: str, path: str, old: str, new: str) -> ToolCall:
    return ToolCall(name="Edit", input={"file_path": f"{CWD}/{path}", "old_string": old, "new_string": new},
                    response={"filePath": f"{CWD}/{path}"}, tool_use_id=cid, cwd=CWD)


def read(cid: str, path: str) -> ToolCall:
    return ToolCall(name="Read", input={"file_path": f"{CWD}/{path}"}, response="defmodule X do\nend",
                    tool_use_id=cid, cwd=CWD)


FAILING = "  1) test renders lines (App.ComponentsTest)\n     ** (CompileError) cannot use Access.get in guard\n" \
          "\nFinished in 0.4 seconds\n410 tests, 3 failures"
PASSING = "Finished in 0.5 seconds\n410 tests, 0 failures"


def test_look_fix_rerun_and_commit_are_one_episode_with_its_steps() -> None:
    calls = [
        read("r1", "lib/components.ex"),
        bash("t1", "mix test 2>&1 | tail -20", FAILING, code=2),
        edit("e1", "lib/components.ex", "  defp kind(msg) when msg[:type] == :tool do",
             "  defp kind(%{type: type}) when type == :tool do"),
        bash("t2", "mix test 2>&1 | tail -5", PASSING),
        bash("s1", "git status", "On branch main"),
        bash("c1", 'git commit -am "fix: bind the type before the guard"',
             "[main 1a2b3c4] fix: bind the type before the guard\n 1 file changed, 1 insertion(+)"),
    ]
    episode = only(observe(calls))
    assert episode.type == "bugfix"
    assert episode.title == "Committed: fix: bind the type before the guard"
    assert episode.steps == ("r1", "t1", "e1", "t2", "c1")  # git status was housekeeping: no step of it
    assert episode.facts[0] == "committed: fix: bind the type before the guard (1a2b3c4)"
    assert "after failure: `mix test 2>&1 | tail -20` → 3 failed, 407 passed" in episode.facts
    assert "fixes failing tests: renders lines" in episode.facts
    # two runs of one check (their `| tail` variants), one trajectory
    assert "ran `mix test 2>&1 | tail -5` → 3 failed, 407 passed → 410 passed" in episode.facts
    assert episode.files_read == ("lib/components.ex",) and episode.files_modified == ("lib/components.ex",)


def test_a_commit_ends_an_episode_and_the_next_one_starts() -> None:
    calls = [
        edit("e1", "lib/a.ex", "def a, do: 1", "def a, do: 2"),
        bash("c1", 'git commit -am "feat: a"', "[main 1a2b3c4] feat: a"),
        edit("e2", "lib/b.ex", "x", "def b(x), do: x"),
        bash("t1", "mix test", PASSING),
    ]
    first, second = observe(calls)
    assert (first.title, first.steps) == ("Committed: feat: a", ("e1", "c1"))
    assert (second.title, second.steps) == ("Edited lib/b.ex: added b; tests 410 passed", ("e2", "t1"))


def test_housekeeping_alone_is_skipped_and_a_failure_is_never_housekeeping() -> None:
    calls = [
        bash("s1", "git status"), bash("s2", "git log --oneline -5", "1a2b3c4 feat: a"),
        bash("s3", "tail -30 /tmp/tasks/b1.output", "compiling"),
        ToolCall(name="ToolSearch", input={"query": "select:Read"}, response="found", tool_use_id="h1"),
        ToolCall(name="TaskOutput", input={"task_id": "b1"}, response="still running", tool_use_id="h2"),
    ]
    assert observe(calls) == []
    failed = only(observe([bash("s4", "git status", "fatal: not a git repository", code=128)]))
    assert failed.title.startswith("Command failed (exit 128)")
    tests_seen = only(observe([bash("s5", "tail -5 /tmp/tasks/b1.output", PASSING)]))
    assert tests_seen.steps == ("s5",)  # a background run's results are news, not housekeeping


def test_an_episode_stays_within_its_caps_and_keeps_every_file_s_account() -> None:
    body = "\n".join(f"  def handler_{i}(conn, params), do: render(conn, :page_{i}, params: params)" for i in range(30))
    calls = [edit(f"e{i}", f"lib/web/controller_{i}.ex", "x", body) for i in range(10)]
    episode, *cards = observe(calls)
    # each file's new definitions and lines that the episode could not hold are in a card of its own
    assert [card.files_modified for card in cards] == [(f"lib/web/controller_{i}.ex",) for i in range(10)]
    assert len(episode.title) <= TITLE_MAX and len(episode.facts) <= FACTS_MAX
    assert all(len(fact) <= FACT_MAX for fact in episode.facts)
    assert sum(len(fact) for fact in episode.facts) <= FACTS_BUDGET + FACT_MAX
    accounts = [fact for fact in episode.facts if fact.startswith("edited lib/web/controller_")]
    # one line per file, as many as the budget holds, before any file's quoted lines; every file still listed
    assert len(accounts) >= min(10, FACTS_MAX, FACTS_BUDGET // max(len(a) for a in accounts))
    assert len(accounts) == 10 or not any(fact.startswith("new text: ") for fact in episode.facts)
    assert {f"lib/web/controller_{i}.ex" for i in range(10)} <= set(episode.files_modified)


def only(observations: list[Observation]) -> Observation:
    assert len(observations) == 1, [o.title for o in observations]
    return observations[0]
