"""Issue-tracker commands: a ticket filed is work left for later, found by itself; status moves fold away."""

from __future__ import annotations

from typing import Any

from memcairn.capture.offline import OfflineExtractor
from memcairn.capture.offline.trackers import is_tracker, is_tracker_chore, tracker_fact
from memcairn.capture.records import Observation, ToolCall, Turn

FILED = "✓ Created issue: app-5\n  Title: load_messages drops agent_id, breaking subagent badges\n  Priority: P3\n"


def bash(command: str, stdout: str, cid: str, narration: str | None = None) -> ToolCall:
    return ToolCall(name="Bash", input={"command": command}, tool_use_id=cid, narration=narration,
                    response={"stdout": stdout, "stderr": "", "interrupted": False})


def edit(path: str, cid: str) -> ToolCall:
    return ToolCall(name="Edit", input={"file_path": f"/repo/{path}", "old_string": "a = 1", "new_string": "a = 2"},
                    response={"filePath": f"/repo/{path}"}, tool_use_id=cid)


def turn(calls: list[ToolCall], **kw: Any) -> Turn:
    return Turn(session_id="s1", platform_source="claude-code", project="repo", prompt="Add tests for the panel.",
                cwd="/repo", tools=tuple(calls), **kw)


def observe(calls: list[ToolCall]) -> list[Observation]:
    return OfflineExtractor().observe(turn(calls), calls).observations


def work() -> list[ToolCall]:
    return [
        bash("bd update app-4 --status in_progress", "✓ Updated issue: app-4\n", "t1"),
        edit("test/panel_test.exs", "t2"),
        bash("mix test", "12 tests, 0 failures\n", "t3"),
        bash('cd /repo && bd create --title="load_messages drops agent_id" --type=bug', FILED, "t4",
             narration="This is a real bug in the panel code, but not one to fix in a test task: I'll file it."),
        bash('bd close app-4 --reason="Added 12 panel tests"', "✓ Closed app-4: Added 12 panel tests\n", "t5"),
    ]


def test_tracker_commands_are_told_apart() -> None:
    assert is_tracker("cd /repo && bd create --title=x") and is_tracker("gh issue create --title x")
    assert is_tracker("gh pr create --fill") and not is_tracker("git commit -m 'bd create'")
    assert not is_tracker("ghostscript issue create")
    assert is_tracker_chore("bd update app-4 --status in_progress") and is_tracker_chore("bd close app-4")
    assert not is_tracker_chore('bd close app-4 --reason="done"') and not is_tracker_chore("bd create --title=x")
    assert tracker_fact("bd create --title=x", FILED) == (
        "filed: `bd create --title=x` → Created issue: app-5 — Title: load_messages drops agent_id, breaking "
        "subagent badges — Priority: P3")
    assert tracker_fact("gh issue close 7 -c 'dup'", "").startswith("tracker: ")


def test_a_ticket_filed_mid_episode_is_an_observation_of_its_own_and_work_left_in_the_summary() -> None:
    observations = observe(work())
    episode, ticket = observations
    assert ticket.type == "discovery" and ticket.steps == ("t4",)
    assert ticket.title.startswith("Filed: Created issue: app-5 — Title: load_messages drops agent_id")
    assert ticket.narrative.startswith("This is a real bug in the panel code")
    # in the episode: the filing ranks with commits, the close keeps its reason, the status move is gone
    assert episode.facts[0].startswith("filed: `cd /repo && bd create")
    assert any(f.startswith("tracker: `bd close app-4") and "Added 12 panel tests" in f for f in episode.facts)
    assert not any("bd update" in f for f in episode.facts)
    summary = OfflineExtractor().summarize(turn(work()), observations).summary
    assert summary is not None and summary.next_steps
    assert summary.next_steps.startswith("filed Created issue: app-5 — Title: load_messages drops agent_id")


def test_a_filing_alone_is_titled_by_what_the_tracker_said() -> None:
    (only,) = observe([bash("gh issue create --title 'Flaky login test'",
                            "https://github.com/acme/app/issues/12\n", "t1")])
    assert only.title == "Filed: https://github.com/acme/app/issues/12"
    assert only.facts[0] == "filed: `gh issue create --title 'Flaky login test'` → https://github.com/acme/app/issues/12"
