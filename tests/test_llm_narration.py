"""The model backends read what the offline extractor reads: each call with the agent's narration before it, and
for a summary the turn's narration and closing message, and they are asked for the week-later fields."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from llm_stubs import (
    GOOD,
    SUMMARY,
    MemoryLedger,
    Stub,
    anthropic_body,
    anthropic_compressor,
    cli_compressor,
    edit_call,
    openai_body,
    openai_compressor,
    turn_with,
)

from memcairn.capture.llm.prompt import observe_messages, summary_messages
from memcairn.capture.records import Observation

pytestmark = pytest.mark.usefixtures("no_proxies")

WHY = "The pager drops the last page because `page_count` uses floor division & rounds down."
SAID = ("I'll switch to ceiling division rather than adding one, so exact multiples stay right.", WHY)


def test_the_observe_prompt_gives_each_call_its_narration() -> None:
    call = replace(edit_call(), narration=WHY)
    system, user = observe_messages(turn_with(call), [call, edit_call()], 500)
    assert user.count("<narration>") == 1  # only the call that has one
    assert "<narration>The pager drops the last page because `page_count` uses floor division &amp; rounds down." \
           "</narration>" in user
    assert user.index("<narration>") < user.index("<input>")
    assert "<narration>" in system and "the why" in system


def test_the_summary_prompt_asks_for_the_week_later_fields_and_holds_the_turns_narration() -> None:
    turn = replace(turn_with(edit_call()), narration=SAID)
    system, user = summary_messages(turn, [Observation(type="bugfix", title="Pager rounds up")], 500)
    for words in ("root cause", "unfinished", "decisions and their reasons", "how to run or verify",
                  "naming the files, functions", "Filler"):
        assert words in system
    assert f"<narration>{SAID[0]}\n\n" in user and "&amp; rounds down" in user
    assert user.index("<narration>") < user.index("<last_assistant_message>")
    long = replace(turn, narration=("x" * 10_000, "TAIL of the turn"))
    _, bounded = summary_messages(long, [], 500)
    assert "TAIL of the turn" in bounded and "x" * 4_100 not in bounded  # the latest part, bounded


def test_anthropic_and_openai_requests_carry_the_narration(stub: Stub, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    call = replace(edit_call(), narration=WHY)
    stub.reply(anthropic_body(GOOD))
    anthropic_compressor(stub, tmp_path, MemoryLedger(), monkeypatch).observe(turn_with(call), [call])
    stub.reply(anthropic_body(SUMMARY))
    turn = replace(turn_with(call), narration=SAID)
    anthropic_compressor(stub, tmp_path, MemoryLedger(), monkeypatch).summarize(turn, [])
    stub.reply(openai_body(GOOD))
    openai_compressor(stub, tmp_path, MemoryLedger()).observe(turn_with(call), [call])
    anthropic_observe, anthropic_summary, openai_observe = stub.requests
    assert "floor division &amp; rounds down" in anthropic_observe["body"]["messages"][0]["content"]
    assert SAID[0] in anthropic_summary["body"]["messages"][0]["content"]
    assert "floor division &amp; rounds down" in json.dumps(openai_observe["body"])


def test_the_claude_cli_reads_the_narration(tmp_path: Path, fake_claude,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    script, log = fake_claude("ok")
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    call = replace(edit_call(), narration=WHY)
    cli_compressor(tmp_path, MemoryLedger(), "claude").observe(turn_with(call), [call])
    assert "<narration>The pager drops the last page" in json.loads(log.read_text(encoding="utf-8"))["stdin"]
