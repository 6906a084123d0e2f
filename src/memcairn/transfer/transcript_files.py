"""Transcript files: where an agent keeps them, which agent wrote one, and its replay by that agent's reader."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from memcairn.transfer.replay_events import ParseStats, ReplayEvent
from memcairn.transfer.transcripts import PLATFORM, _Replayer
from memcairn.transfer.transcripts_other import replay_codex, replay_gemini
from memcairn.wire.json_depth import loads_bounded


def default_transcript_root(home: Path | None = None) -> Path:
    """``<claude dir>/projects``, where Claude Code keeps its transcripts. The Claude directory is
    ``home/.claude`` when ``home`` is given, else ``$CLAUDE_CONFIG_DIR`` or ``~/.claude``."""
    if home is not None:
        base = Path(home) / ".claude"
    else:
        configured = os.environ.get("CLAUDE_CONFIG_DIR")
        base = Path(configured).expanduser() if configured else Path.home() / ".claude"
    return base / "projects"


def default_transcript_paths(home: Path | None = None) -> list[Path]:
    """Every ``*.jsonl`` under ``default_transcript_root`` (recursively), sorted."""
    root = default_transcript_root(home)
    try:
        return sorted(p for p in root.rglob("*.jsonl") if p.is_file())
    except OSError:
        return []


def transcripts_under(directory: Path) -> list[Path]:
    """The session files under ``directory``: JSON Lines (Claude Code, Codex) and Gemini CLI's chats (its
    ``chats/session-*.json``, or any ``.json`` file that reads as one: a chat copied elsewhere keeps no name),
    sorted by path text, so that a session's file comes before its ``<session>/subagents/`` files (``.`` sorts
    before ``/``) and they find their session started."""
    found = [p for p in directory.rglob("*.jsonl") if p.is_file()]
    found += [p for p in directory.rglob("*.json") if p.is_file() and _gemini_chat(p)]
    return sorted(found, key=str)


def _gemini_chat(path: Path) -> bool:
    if path.parent.name == "chats" and path.name.startswith("session-"):
        return True
    try:
        return transcript_shape(path) == "gemini-cli"
    except (OSError, UnsupportedTranscript):
        return False


class UnsupportedTranscript(ValueError):
    """A file no agent's transcript format fits."""


CODEX_LINE_TYPES = ("session_meta", "response_item", "turn_context", "event_msg", "compacted")


def transcript_shape(path: Path) -> str:
    """Which agent wrote ``path``: ``claude-code`` (JSON Lines of messages), ``codex`` (JSON Lines of
    ``{timestamp, type, payload}``, ``~/.codex/sessions/**/rollout-*.jsonl``) or ``gemini-cli`` (one JSON object
    with ``sessionId`` and ``messages``, ``~/.gemini/tmp/<project>/chats/session-*.json``).

    Raises:
        OSError: the file cannot be read.
        UnsupportedTranscript: a ``.json`` file that is not a Gemini CLI session.
    """
    with open(path, encoding="utf-8", errors="replace") as fh:
        if path.suffix == ".json":
            head = fh.read(65536)
            if '"sessionId"' in head and '"messages"' in head:
                return "gemini-cli"
            raise UnsupportedTranscript(f"{path.name}: JSON, but not a Gemini CLI session (no sessionId and messages)")
        line = next((raw for raw in fh if raw.strip()), "")
    try:
        first = loads_bounded(line) if line else None
    except ValueError:
        first = None
    if isinstance(first, dict) and first.get("type") in CODEX_LINE_TYPES and "payload" in first:
        return "codex"
    return PLATFORM


def replay_transcript(path: Path, stats: ParseStats | None = None) -> Iterator[ReplayEvent]:
    """The events the hooks would have sent for the session(s) recorded in ``path``, in order.

    ``stats``, when given, is updated as the iterator advances. A file that cannot be opened raises
    ``OSError`` at the first ``next``; nothing in its content does."""
    counts = stats if stats is not None else ParseStats()
    shape = transcript_shape(Path(path))
    if shape != PLATFORM:
        yield from (replay_codex if shape == "codex" else replay_gemini)(Path(path), counts)
        return
    replayer = _Replayer(Path(path), counts)
    with open(path, encoding="utf-8", errors="replace") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            counts.lines += 1
            yield from replayer.line(number, raw)
    yield from replayer.finish()
