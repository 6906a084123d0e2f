"""Claude Code transcripts for tests: built line by line, the recorded ones, read and written back as lines, and
replayed into their hook events."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memcairn.transfer.replay_events import ParseStats, ReplayEvent
from memcairn.transfer.transcript_files import replay_transcript

RECORDED = Path(__file__).parent / "fixtures" / "transcripts"
HELLO = RECORDED / "claude-reliability__hello-world-script.jsonl"
COVERAGE = RECORDED / "claude-reliability__coverage-test-fix.jsonl"

SID = "11111111-2222-3333-4444-555555555555"
CWD = "/nowhere/recorded/demo-project"


class Transcript:
    """Builds a transcript line by line with increasing timestamps."""

    def __init__(self, session_id: str = SID, cwd: str = CWD) -> None:
        self.lines: list[str] = []
        self.session_id, self.cwd = session_id, cwd
        self.second = 0

    def _base(self, kind: str, **extra: Any) -> dict[str, Any]:
        self.second += 1
        return {"type": kind, "sessionId": self.session_id, "cwd": self.cwd, "isSidechain": False,
                "uuid": f"u-{self.session_id[:4]}-{len(self.lines)}",
                "timestamp": f"2026-03-01T10:00:{self.second:02d}.250Z", **extra}

    def raw(self, text: str) -> Transcript:
        self.lines.append(text)
        return self

    def add(self, entry: dict[str, Any]) -> Transcript:
        return self.raw(json.dumps(entry))

    def prompt(self, content: Any, **extra: Any) -> Transcript:
        return self.add(self._base("user", message={"role": "user", "content": content}, **extra))

    def assistant(self, *blocks: dict[str, Any], message_id: str | None = None, **extra: Any) -> Transcript:
        message = {"role": "assistant", "id": message_id or f"msg-{len(self.lines)}", "content": list(blocks)}
        return self.add(self._base("assistant", message=message, **extra))

    def text(self, text: str, **kw: Any) -> Transcript:
        return self.assistant({"type": "text", "text": text}, **kw)

    def tool(self, tool_id: str, name: str = "Bash", tool_input: Any = None, **kw: Any) -> Transcript:
        return self.assistant({"type": "tool_use", "id": tool_id, "name": name,
                               "input": tool_input if tool_input is not None else {"command": "ls"}}, **kw)

    def result(self, tool_id: str, content: Any = "ok", *, is_error: bool | None = None,
               rich: Any = None, **extra: Any) -> Transcript:
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_id, "content": content}
        if is_error is not None:
            block["is_error"] = is_error
        if rich is not None:
            extra["toolUseResult"] = rich
        return self.prompt([block], **extra)

    def write(self, path: Path) -> Path:
        path.write_text("\n".join(self.lines) + "\n", encoding="utf-8")
        return path


def parse(path: Path) -> tuple[list[ReplayEvent], ParseStats]:
    stats = ParseStats()
    return list(replay_transcript(path, stats)), stats


def kinds(events: list[ReplayEvent]) -> list[str]:
    return [e.body["event"] for e in events]


def lines(path: Path) -> list[str]:
    """A transcript's non-blank lines."""
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path
