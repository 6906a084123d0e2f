"""Turns for the offline extractor's tests: one built from fields, or a recorded Claude Code transcript as one
turn."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memcairn.capture.records import ToolCall, Turn

TRANSCRIPTS = Path(__file__).parent / "fixtures" / "transcripts"
CWD = "/repo"
PROMPT = "Fix the retry bug in src/app.py. Keep the tests green."


def make_turn(tools: tuple[ToolCall, ...] | list[ToolCall] = (), **kw: Any) -> Turn:
    fields: dict[str, Any] = {
        "session_id": "s1", "platform_source": "claude-code", "project": "repo", "prompt": PROMPT, "cwd": CWD,
        "tools": tuple(tools),
    }
    fields.update(kw)
    return Turn(**fields)


def load_transcript(name: str) -> tuple[Turn, list[ToolCall]]:
    """A recorded Claude Code transcript as one turn: tool_use blocks paired with their results by id."""
    uses: list[dict[str, Any]] = []
    results: dict[str, Any] = {}
    cwd = prompt = last = None
    for line in (TRANSCRIPTS / f"claude-reliability__{name}.jsonl").read_text().splitlines():
        entry = json.loads(line)
        cwd = cwd or entry.get("cwd")
        content = (entry.get("message") or {}).get("content")
        if entry.get("type") == "user" and isinstance(content, str) and prompt is None:
            prompt = content
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "tool_use":
                uses.append(block)
            elif block.get("type") == "tool_result":
                results[block["tool_use_id"]] = entry.get("toolUseResult", block.get("content"))
            elif block.get("type") == "text" and entry.get("type") == "assistant":
                last = block["text"]
    calls = [
        ToolCall(name=use["name"], input=use["input"], response=results.get(use["id"]), tool_use_id=use["id"],
                 cwd=cwd)
        for use in uses
    ]
    turn = Turn(session_id="s", platform_source="claude-code", project="p", prompt=prompt, cwd=cwd,
                tools=tuple(calls), last_assistant_message=last)
    return turn, calls
