"""Noise out: prompts the harness wrote (task notifications, slash commands, system reminders, hook feedback) and
bare "continue" prompts are neither stored as prompts nor a summary's request or title; filler that opens the
agent's last message ("I have fully completed the task.") is no summary."""

from __future__ import annotations

from pathlib import Path

import pytest
from capture_queue import edit, send
from transcript_builder import CWD, Transcript
from transcript_builder import kinds as _kinds
from transcript_builder import parse as _parse

from memcairn.capture.noise import request_text, without_filler
from memcairn.capture.pipeline import CapturePipeline
from memcairn.core.models import ItemFilter
from memcairn.store import Store
from memcairn.transfer.importer import import_transcripts
from memcairn.wire.config import Settings

HELLO = Path(__file__).parent / "fixtures" / "transcripts" / "claude-reliability__hello-world-script.jsonl"
NOTICE = ("<task-notification>\n<task-id>b0be39e</task-id>\n<status>completed</status>\n"
          "<summary>Background command \"mix test\" completed (exit code 0)</summary>\n</task-notification>\n"
          "Read the output file to retrieve the result: /tmp/tasks/b0be39e.output")


@pytest.mark.parametrize("prompt", [NOTICE, "continue", "Continue.", "go on please", "yes", "ok",
                                    "<command-message>review</command-message>\n<command-name>/review</command-name>",
                                    "<system-reminder>The date changed.</system-reminder>",
                                    "Stop hook feedback:\nkeep going", "[Request interrupted by user for tool use]"])
def test_prompts_the_harness_wrote_or_that_only_say_go_on_are_no_request(prompt: str) -> None:
    assert request_text(prompt) is None


def test_a_request_keeps_its_words_without_its_system_reminders() -> None:
    assert request_text("fix the cart\n<system-reminder>Todo list empty.</system-reminder>") == "fix the cart"
    assert request_text("yes, but use Decimal for the total") == "yes, but use Decimal for the total"
    assert request_text("continue with the Decimal refactor") == "continue with the Decimal refactor"


def test_a_wrapper_apps_instruction_blocks_ahead_of_the_request_are_dropped() -> None:
    """A wrapper app (Conductor) or the agent itself (Codex) puts tagged instruction blocks ahead of the person's
    words; the request is the words. Tags that name no instructions (a pasted <div>) are the person's."""
    wrapped = ("<system_instruction>\nYou are working inside Conductor, a Mac app.\n</system_instruction>\n\n\n"
               "<system-instruction>\nRename the branch using `git branch -m`.\n</system-instruction>\n\n"
               "implement Rec 01: Typed Flag Parser")
    assert request_text(wrapped) == "implement Rec 01: Typed Flag Parser"
    assert request_text("<user_instructions>be brief</user_instructions>\nfix the cart total") == "fix the cart total"
    assert request_text("<environment_context><cwd>/x</cwd></environment_context>") is None
    assert request_text("<div>hi</div> why is this red?") == "<div>hi</div> why is this red?"
    assert request_text("why does <system_instruction> leak into titles?") == (
        "why does <system_instruction> leak into titles?")


def test_filler_opening_a_last_message_is_dropped_and_nothing_else() -> None:
    assert without_filler("I have fully completed the task.\n\n**Summary:** Created hello.sh.") == (
        "**Summary:** Created hello.sh.")
    assert without_filler("Done. The total now uses Decimal.") == "The total now uses Decimal."
    assert without_filler("The task is complete!") is None and without_filler("Done") is None
    assert without_filler("I have completed the migration of cart.py to Decimal.") == (
        "I have completed the migration of cart.py to Decimal.")
    assert without_filler("Doner kebab recipe added.") == "Doner kebab recipe added."


def test_an_import_takes_no_notice_or_continue_for_a_prompt(store: Store, settings: Settings, tmp_path: Path) -> None:
    """A background task's notice ends the turn before it (whose last message stays its own) and begins one of its
    own; a turn that only talks back to the notice leaves no summary; "continue" begins no turn."""
    path = (Transcript()
            .prompt("fix the cart total")
            .text("Fixing.")
            .prompt(NOTICE)
            .text("The background tests passed.")
            .prompt("continue")
            .text("Committed the fix.")
            .write(tmp_path / "noisy.jsonl"))
    events, _ = _parse(path)
    assert _kinds(events) == ["session_start", "user_prompt", "stop", "user_prompt", "stop", "session_end"]
    assert events[2].body["last_assistant_message"] == "Fixing."
    assert events[3].body["prompt"] == NOTICE and events[4].body["last_assistant_message"] == "Committed the fix."
    import_transcripts(store, settings, [path])
    prompts = [i.text for i in store.list_items(ItemFilter(kinds=["prompt"]), limit=10)]
    summaries = store.list_items(ItemFilter(kinds=["summary"]), limit=10)
    assert prompts == ["fix the cart total"] and [s.title for s in summaries] == ["fix the cart total"]
    assert "background tests" not in " ".join(filter(None, (summaries[0].completed, summaries[0].notes)))


def test_work_done_after_a_notice_keeps_its_summary(store: Store, settings: Settings, tmp_path: Path) -> None:
    path = (Transcript()
            .prompt("fix the cart total")
            .text("Fixing.")
            .prompt(NOTICE)
            .text("The background run found a failing test; fixing it.")
            .tool("e1", "Edit", {"file_path": f"{CWD}/cart.py", "old_string": "total = 0",
                                 "new_string": "total = Decimal(0)"})
            .result("e1", "The file has been updated.")
            .text("Fixed the failing total test in cart.py.")
            .write(tmp_path / "worked.jsonl"))
    import_transcripts(store, settings, [path])
    summaries = store.list_items(ItemFilter(kinds=["summary"]), limit=10)
    assert any("cart.py" in " ".join(filter(None, (s.completed, s.title, *s.files_modified))) for s in summaries)


def test_live_notice_prompts_are_not_stored_nor_a_title_and_filler_is_no_summary(
        store: Store, settings: Settings) -> None:
    send(store, settings, "user_prompt", prompt=NOTICE, prompt_number=1)
    send(store, settings, "tool_use", **edit("t1"))
    send(store, settings, "stop", last_assistant_message="I have fully completed the task.")
    CapturePipeline(store, settings).drain()
    assert store.list_items(ItemFilter(kinds=["prompt"]), limit=10) == []
    (summary,) = store.list_items(ItemFilter(kinds=["summary"]), limit=10)
    assert not summary.title.startswith("<") and summary.request is None
    assert "completed the task" not in " ".join(filter(None, (summary.notes, summary.next_steps, summary.title)))


def test_the_recorded_stop_hook_session_keeps_its_real_summary(store: Store, settings: Settings) -> None:
    import_transcripts(store, settings, [HELLO])
    summaries = store.list_items(ItemFilter(kinds=["summary"]), limit=10)
    assert summaries and all("fully completed the task" not in (s.notes or "") for s in summaries)
    assert any("hello.sh" in (s.completed or "") for s in summaries)  # the closing report is what was done
