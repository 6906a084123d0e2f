"""What the agent wrote becomes the substance of its memories: the decisive sentences of its narration lead the
observations and fill the summary's sections (causes, decisions, what was done, what is left), and the summary
Claude Code writes when it compacts a conversation names files and errors that become small observations."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from capture_queue import send
from transcript_builder import Transcript

from memcairn.capture.offline import OfflineExtractor
from memcairn.capture.offline.narration import CAUSE, DECISION, DONE, RESULT, TODO, decisive, read
from memcairn.capture.offline.summary import report_observation
from memcairn.capture.pipeline import CapturePipeline
from memcairn.capture.recap import lean_fields, recap_observations
from memcairn.capture.records import ToolCall, Turn
from memcairn.core.models import ItemFilter
from memcairn.store import Store
from memcairn.wire.config import Settings

WORK = [
    "Let me check the router first.",
    "Good.",
    "The guard fails because `Access.get/2` can't be used inside a guard.",
    "I'll bind the value first instead of calling it in the guard, to avoid the compile error.",
    "Now let me run the tests.",
]
REPORT = """All done. Here's the summary:

## Changes
- Added `Checkout.total/2` in `lib/shop/checkout.ex`, rounding with `Decimal`
- **12 tests pass**, 0 failures

| Commit | What |
|---|---|
| `3bb8701` | Fixed the guard in `cart_live.ex` |

```
$ mix test
12 tests, 0 failures
```

Still open: `shop-7.2` — the refund path drops `currency`, filed for later."""


def test_sentences_are_told_by_what_they_say() -> None:
    said = {s.text: s for s in read(" ".join(WORK))}
    assert CAUSE in said["The guard fails because `Access.get/2` can't be used inside a guard."].kinds
    decision = said["I'll bind the value first instead of calling it in the guard, to avoid the compile error."]
    assert DECISION in decision.kinds and decision.decisive
    assert not said["Let me check the router first."].decisive and not said["Good."].decisive
    assert not said["Now let me run the tests."].decisive
    report = {s.text: s for s in read(REPORT)}
    assert not report["All done."].decisive
    assert DONE in report["Added `Checkout.total/2` in `lib/shop/checkout.ex`, rounding with `Decimal`"].kinds
    assert RESULT in report["12 tests pass, 0 failures"].kinds
    assert "`3bb8701` — Fixed the guard in `cart_live.ex`" in report  # a table row, cells joined
    assert not any("$ mix test" in text for text in report)  # fenced output is the tool's, not the agent's
    assert TODO in report["Still open: `shop-7.2` — the refund path drops `currency`, filed for later."].kinds


def test_decisive_keeps_order_and_budget() -> None:
    kept = decisive(WORK, 500)
    assert kept == [WORK[2], WORK[3]]
    assert decisive(WORK, len(WORK[2]) + 1) == [WORK[2]]
    assert decisive(WORK, 500, kinds=[DECISION]) == [WORK[3]]
    assert decisive([*WORK, WORK[2]], 500) == kept  # said twice, kept once


def _turn(**kw: object) -> Turn:
    fields: dict[str, object] = {"session_id": "s", "platform_source": "claude-code", "project": "shop",
                                 "prompt": "Fix the cart guard"}
    fields.update(kw)
    return Turn(**fields)  # type: ignore[arg-type]


def test_a_summary_is_made_of_the_agents_narration() -> None:
    turn = _turn(narration=tuple(WORK), last_assistant_message=REPORT)
    summary = OfflineExtractor().summarize(turn, []).summary
    assert summary is not None and summary.request == "Fix the cart guard"
    assert summary.learned and "`Access.get/2` can't be used inside a guard" in summary.learned
    assert summary.notes and "instead of calling it in the guard, to avoid the compile error" in summary.notes
    assert summary.completed and summary.completed.startswith("Added `Checkout.total/2` in `lib/shop/checkout.ex`")
    assert "12 tests pass" in summary.completed and "3bb8701" in summary.completed
    assert summary.next_steps and "`shop-7.2` — the refund path drops `currency`" in summary.next_steps
    for section in (summary.learned, summary.notes, summary.completed, summary.next_steps):
        assert "All done" not in section and "Let me" not in section and "mix test" not in section


def test_filler_alone_is_no_summary_section() -> None:
    summary = OfflineExtractor().summarize(_turn(last_assistant_message="All done! The task is complete."), [])
    assert summary.summary is not None
    assert summary.summary.completed is None and summary.summary.notes is None


def test_an_observation_leads_with_the_narration_of_its_calls() -> None:
    todo = ToolCall(name="TodoWrite", input={"todos": []}, tool_use_id="t0",
                    narration="The migration uses `ALTER TABLE ... modify`, which SQLite doesn't support.")
    write = ToolCall(name="Write", input={"file_path": "/repo/priv/m.exs", "content": "defmodule M do\nend\n"},
                     response={"type": "create"}, tool_use_id="t1",
                     narration="Let me rewrite it. I'll recreate the table instead, so nullability can change.")
    turn = _turn(tools=(todo, write), cwd="/repo")
    observations = OfflineExtractor().observe(turn, [todo, write]).observations
    assert len(observations) == 1  # the skipped call's narration goes with the next observation
    narrative = observations[0].narrative or ""
    assert narrative.startswith("The migration uses `ALTER TABLE ... modify`, which SQLite doesn't support. "
                                "I'll recreate the table instead, so nullability can change.")
    assert "Let me rewrite it" not in narrative and "Fix the cart guard" not in narrative
    plain = OfflineExtractor().observe(_turn(tools=(write,)), [ToolCall(name="Write", input=write.input,
                                                                         response=write.response)])
    assert (plain.observations[0].narrative or "").startswith('For the request "Fix the cart guard"')


RECAP = """This session is being continued from a previous conversation that ran out of context. The summary \
below covers the earlier portion of the conversation.

Analysis:
1. **User's request**: noise that repeats the summary below.

Summary:
1. Primary Request and Intent:
   The user asked to add refunds to the shop.

2. Key Technical Concepts:
   - Ecto sandbox `{:shared, self()}` mode for LiveView tests

3. Files and Code Sections:
   - **`lib/shop/refund.ex`** — New module computing refunds.
     ```elixir
     defmodule Shop.Refund do
     end
     ```
   - **`lib/shop_web/router.ex`** — Added route: `live("/refunds/:id", RefundLive)`

4. Errors and fixes:
   - **LiveView test: sandbox isolation**: LiveView runs in another process. Fixed with `{:shared, self()}`.

5. Pending Tasks:
   - `shop-9.3`: refund emails

6. Current Work:
   Writing tests for `RefundLive`.
"""


def test_a_compaction_summary_names_files_and_errors_as_small_observations() -> None:
    observations = recap_observations(RECAP)
    files = {o.files_modified: o for o in observations if o.files_modified}
    assert list(files) == [("lib/shop/refund.ex",), ("lib/shop_web/router.ex",)]
    assert files[("lib/shop/refund.ex",)].type == "feature"
    assert files[("lib/shop/refund.ex",)].title == "lib/shop/refund.ex: New module computing refunds."
    assert "defmodule" not in (files[("lib/shop/refund.ex",)].narrative or "")
    assert 'live("/refunds/:id", RefundLive)' in files[("lib/shop_web/router.ex",)].title
    fixes = [o for o in observations if o.type == "bugfix"]
    assert len(fixes) == 1 and fixes[0].title.startswith("LiveView test: sandbox isolation: LiveView runs")
    assert (fixes[0].narrative or "").endswith("Fixed with `{:shared, self()}`.")
    assert not any("noise" in str(o) or "shop-9.3" in str(o) for o in observations)
    assert recap_observations("  ") == [] and recap_observations("Just prose, no sections.") == []


def test_an_imported_compaction_is_stored_whole_and_in_small_observations(tmp_path: Path, store: Store,
                                                                         settings: Settings) -> None:  # noqa: F811
    path = (Transcript()
            .prompt("Add refunds")
            .tool("t1", "Bash", {"command": "mix test"}).result("t1", "3 tests, 0 failures")
            .prompt([{"type": "text", "text": RECAP}], isCompactSummary=True, isVisibleInTranscriptOnly=True)
            .text("Done: refunds work.")
            .write(tmp_path / "r.jsonl"))
    from memcairn.transfer.importer import import_transcripts

    import_transcripts(store, settings, [path])
    items = store.list_items(ItemFilter(), limit=100)
    compaction = [i for i in items if i.metadata.get("compaction")]
    assert sum(i.kind == "summary" for i in compaction) == 1
    small = [i for i in compaction if i.kind == "observation"]
    assert sorted(i.files_modified for i in small if i.files_modified) == [["lib/shop/refund.ex"],
                                                                           ["lib/shop_web/router.ex"]]
    assert any(i.type == "bugfix" and "sandbox isolation" in (i.title or "") for i in small)
    CapturePipeline(store, settings).drain()
    assert len(store.list_items(ItemFilter(), limit=100)) == len(items)


def test_a_closing_report_is_an_observation_of_its_own() -> None:
    turn = _turn(narration=tuple(WORK), last_assistant_message=REPORT)
    result = OfflineExtractor().summarize(turn, [])
    (report,) = result.observations
    assert report.title == "Added `Checkout.total/2` in `lib/shop/checkout.ex`, rounding with `Decimal`"
    assert report.narrative and "12 tests pass, 0 failures." in report.narrative
    assert "`shop-7.2` — the refund path drops `currency`" in report.narrative and "All done" not in report.narrative
    assert result.summary is not None and result.summary.completed  # the summary keeps its head too
    short = OfflineExtractor().summarize(_turn(last_assistant_message="Pushed the fix to `main`."), [])
    assert short.summary is not None and short.observations == []


def test_a_stop_that_goes_on_replaces_its_report_with_its_summary(store: Store, settings: Settings) -> None:  # noqa: F811
    send(store, settings, "session_start")
    send(store, settings, "user_prompt", prompt="Fix the cart guard")
    send(store, settings, "tool_use", tool_name="Bash", tool_use_id="t1", tool_input={"command": "mix test"},
         tool_response="12 tests, 0 failures")
    send(store, settings, "stop", last_assistant_message=REPORT)
    CapturePipeline(store, settings).drain()
    again = REPORT.replace("12 tests pass", "14 tests pass")
    send(store, settings, "stop", last_assistant_message=again, stop_hook_active=True)
    CapturePipeline(store, settings).drain()
    items = store.list_items(ItemFilter(), limit=100)
    ends = [i for i in items if i.metadata.get("turn_end")]
    assert len(ends) == 1 and "14 tests pass" in (ends[0].narrative or "")
    assert ends[0].kind == "observation" and ends[0].prompt_number == 1
    (summary,) = [i for i in items if i.kind == "summary"]
    assert "14 tests pass" in (summary.completed or "")


def test_a_compaction_summary_with_files_and_errors_keeps_their_headlines_not_their_details() -> None:
    observations = recap_observations(RECAP)
    fields = lean_fields(RECAP, observations)
    assert fields is not None
    assert fields["request"] == "The user asked to add refunds to the shop."
    assert fields["completed"].startswith("Writing tests for `RefundLive`. Files: lib/shop/refund.ex: New module")
    assert fields["learned"].startswith("Errors fixed: LiveView test: sandbox isolation")
    assert "{:shared, self()}" in fields["learned"]  # the concepts
    assert fields["next_steps"] == "`shop-9.3`: refund emails."
    assert lean_fields("no sections at all", []) is None


def test_a_report_between_two_calls_is_an_observation_of_its_own() -> None:
    longer = REPORT + ("\n\n- Added `Refund.issue/3`, which books the refund and emails the customer\n"
                       "- Added `RefundLive` at `/refunds/:id`, listing a refund's lines with their taxes\n"
                       "- Removed `Cart.legacy_total/1`; nothing called it since the checkout moved to `Decimal`\n")
    report = ToolCall(name="Bash", input={"command": "git status"}, response={"stdout": "clean"}, tool_use_id="t2",
                      narration=longer)
    run = ToolCall(name="Bash", input={"command": "mix test"}, response={"stdout": "12 tests, 0 failures"},
                   tool_use_id="t1", narration="Let me run the tests. The cart guard needs `Decimal` now.")
    observations = OfflineExtractor().observe(_turn(tools=(run, report)), [run, report]).observations
    reports = [o for o in observations if "12 tests pass" in (o.narrative or "")]
    assert len(reports) == 1 and reports[0].title.startswith("Added `Checkout.total/2`")
    assert not any("12 tests pass" in (o.narrative or "") for o in observations if o is not reports[0])
    short = replace(report, narration=REPORT)  # a shorter one goes with its call
    (only,) = OfflineExtractor().observe(_turn(tools=(short,)), [short]).observations
    assert only.title.startswith("Ran `git status`") and "12 tests pass" in (only.narrative or "")


def test_what_the_agent_was_about_to_do_is_no_next_step() -> None:
    work = ["Now check if the epic has any remaining tasks, then close it and push.",
            "Let me apply all remaining changes in one batch to avoid intermediate compile warnings.",
            "Run full suite and credo.",
            "Discovered a bug: `load_session_messages` drops `agent_id`; filed as `spotter-fum.5`."]
    summary = OfflineExtractor().summarize(_turn(narration=tuple(work)), []).summary
    assert summary is not None and summary.next_steps == work[3]
    assert summary.notes == work[1]  # an intention with its reason is a decision
    assert not any(s.decisive for s in read(work[2]))


def test_a_reports_title_is_what_was_done_not_its_first_list_item() -> None:
    message = ("- string_utils - `reverse_string()` function\n"
               "- math_utils - `factorial()` with `NegativeInputError`\n\n"
               "All 5 modules are implemented with 100% line coverage, tests pass, and the changes are committed. "
               "Used `Result<T, E>` instead of raising exceptions for `factorial()`.")
    report = report_observation(message, "Port this project to Rust")
    assert report is not None and report.title.startswith("All 5 modules are implemented with 100% line coverage")


def test_an_interjection_opening_a_sentence_is_not_kept() -> None:
    said = [s.text for s in read("Good — Tmux errors are safe, so LiveView tests should work. "
                                           "Right-click opens the menu.")]
    assert said == ["Tmux errors are safe, so LiveView tests should work.", "Right-click opens the menu."]


def test_a_label_is_not_an_instruction() -> None:
    # "Test counts:" heads a result; "Test the refund path." is what the agent meant to do
    report = ("All 4 tasks completed and pushed.\n\n**Test counts:** 141 Elixir (127 tests + 14 doctests) + "
              "16 Vitest = **157 total tests**, all passing.")
    said = {s.text: s for s in read(report)}
    counts = said["Test counts: 141 Elixir (127 tests + 14 doctests) + 16 Vitest = 157 total tests, all passing."]
    assert counts.decisive and not counts.intent and RESULT in counts.kinds
    assert "141 Elixir" in (report_observation(report + " " + "Closed `shop-7` with its epic.", None,
                                               minimum=0).narrative or "")
    assert read("Test the refund path next.")[0].intent and read("Run: mix test")[0].text == "Run: mix test"


def test_a_sentence_may_begin_with_a_number() -> None:
    # "All done." is filler; the count after it is a sentence of its own, not swallowed with it
    said = [s.text for s in read("All done. 87 tests pass. Credo clean.") if s.decisive]
    assert said == ["87 tests pass."]


def test_a_summary_says_how_the_tests_were_left_in_the_agents_words() -> None:
    # the count stood in the narration before the close, not in the closing report
    work = ("All 19 tests pass.", "87 tests + 14 doctests, 0 failures. Credo clean. Now close the bead and push.",
            "I'll run the 90 tests again to make sure they pass.")
    report = "The epic is fully implemented and pushed. " + " ".join(
        f"Added the `handler_{n}` event in `review_live.ex` for step {n}." for n in range(12))
    summary = OfflineExtractor().summarize(_turn(narration=work, last_assistant_message=report), []).summary
    assert summary is not None and summary.completed is not None
    assert summary.completed.startswith("The epic is fully implemented and pushed.")
    assert summary.completed.endswith("87 tests + 14 doctests, 0 failures.")  # the newest result, not an intention
    assert len(summary.completed) <= 400 and "All 19 tests" not in summary.completed
    # a report that says it already is not repeated
    told = OfflineExtractor().summarize(_turn(narration=work, last_assistant_message="Pushed. 87 tests + 14 "
                                              "doctests, 0 failures."), []).summary
    assert told is not None and told.completed == "Pushed. 87 tests + 14 doctests, 0 failures."


def test_markdown_emphasis_goes_but_names_holding_underscores_and_stars_stay() -> None:
    said = [s.text for s in read("**Fixed** the worktree at `/home/me/agentv__worktrees/av-5` and __init__.py. "
                                 "Pass **kwargs through; 2**10 is __the limit we chose__.")]
    assert said == ["Fixed the worktree at `/home/me/agentv__worktrees/av-5` and __init__.py.",
                    "Pass **kwargs through; 2**10 is the limit we chose."]
