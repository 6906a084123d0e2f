"""Slips of the SessionStart digest seen on real sessions: a line a command printed taken as a lesson, lines of
code a file card quotes taken as lessons, a doubled ``;`` where a part that ends in one is joined."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from offline_turns import load_transcript, make_turn

from memcairn.capture.offline import OfflineExtractor
from memcairn.capture.records import Observation
from memcairn.context.build import render_context
from memcairn.core.models import NewItem
from memcairn.store import Store
from memcairn.wire.config import Settings

NOW = int(datetime(2026, 12, 3, 14, 0, tzinfo=UTC).timestamp() * 1000)


def learned_of(name: str) -> str:
    turn, calls = load_transcript(name)
    extractor = OfflineExtractor()
    summary = extractor.summarize(turn, extractor.observe(turn, calls).observations).summary
    assert summary is not None
    return summary.learned or ""


def test_a_line_a_failed_command_printed_is_no_lesson_unless_it_names_a_problem() -> None:
    # real: `git commit` exited 1 printing "nothing to commit, working tree clean"
    learned = learned_of("coverage-test-fix")
    assert "nothing to commit" not in learned and "2 passed" in learned
    # the same for any tool's status line; a line naming a problem in its own words stays, as does a fix's error
    quiet = ["error: Everything up-to-date", "error: Already up to date.", "error: ok  example.com/pkg 0.487s",
             "warning: nothing added to commit but untracked files present",
             "error: hint: Disable this message with \"git config set advice.addIgnoredFile false\""]
    loud = ["error: TypeError: Cannot read properties of undefined (reading 'id')",
            "error: ** (CompileError) lib/parser.ex:3: undefined function parse/2",
            "error: grep: state.go: No such file or directory", "error: IndexError in page()",
            "fixes error: session_state.go:10:2: \"paths\" imported and not used"]
    observation = Observation(type="change", title="Edited lib/parser.ex", facts=tuple(quiet + loud))
    summary = OfflineExtractor().summarize(make_turn([]), [observation]).summary
    assert summary is not None and summary.learned is not None
    assert not [fact for fact in quiet if fact in summary.learned], summary.learned
    assert [fact for fact in loud if fact in summary.learned] == loud


@pytest.mark.parametrize("line", [
    "use std::error::Error;",  # Rust (real: python-to-rust-port)
    "cargo clippy -- -D warnings",  # a Justfile's recipe (real: python-to-rust-port)
    "cargo llvm-cov --fail-under-lines 100",
    "if err != nil { return fmt.Errorf(\"read failed: %w\", err) }",  # Go
    "func Open(path string) (string, error) {",
    "} catch (IOException e) {",  # Java
    "-- raise an error when the row is missing",  # SQL comment
    "### Error 1: Linter nolint directive unused",  # a Markdown heading
])
def test_lines_of_code_in_any_language_are_no_lesson(line: str) -> None:
    card = Observation(type="feature", title="lib.rs: Error", facts=(line,), files_modified=("src/lib.rs",))
    said = Observation(type="change", title="Retried the fetch", facts=("the fetch fails when the token expired",))
    summary = OfflineExtractor().summarize(make_turn([]), [card, said]).summary
    assert summary is not None and summary.learned == "the fetch fails when the token expired"


def test_the_rust_port_learns_no_line_of_its_code() -> None:
    learned = learned_of("python-to-rust-port")
    assert "use std::" not in learned and "clippy" not in learned and ";;" not in learned


def test_a_part_ending_in_a_semicolon_is_not_joined_with_another() -> None:
    fix = Observation(type="bugfix", title="Close the socket before the retry;", facts=("ran `make` → failed",))
    summary = OfflineExtractor().summarize(make_turn([]), [fix]).summary
    assert summary is not None and summary.learned == "Close the socket before the retry; ran `make` → failed"


def test_a_stored_doubled_semicolon_is_not_shown(mem_store: Store, tmp_path: Path) -> None:
    # a summary stored before the extractor joined its parts so
    mem_store.add_item(NewItem(project="rusty", kind="summary", session="s1", request="Port to Rust",
                               learned="The `?` operator cannot fail here; use std::error::Error;; cargo test",
                               created_at_epoch=NOW - 3_600_000, platform_source="claude-code"))
    text = render_context(mem_store, Settings(home=tmp_path), projects=["rusty"], now_ms=NOW, tz=UTC)
    assert "Learned: The `?` operator cannot fail here; use std::error::Error; cargo test" in text
    assert ";;" not in text
