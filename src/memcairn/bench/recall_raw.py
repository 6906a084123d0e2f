"""The anchor of ``memcairn bench recall``: plain BM25 over the raw transcripts, no compression at all.

One chunk per assistant step: an assistant message gives its text, the input of each of its tool calls and the
first 1,500 characters of each call's result. Claude Code writes one block a line, all lines of one API message
sharing its ``message.id``; a Codex rollout writes each item apart, so a step there is an assistant message with
the calls after it, and a call made after a result came back begins the next step (the model's next reply); a
Gemini CLI chat's ``gemini`` message holds its text and its answered ``toolCalls``. The model's reasoning and the
user's prompts are left out on every agent. Chunks go into an in-memory SQLite FTS5 table (``porter unicode61``),
each with the project of its transcript, and a question is matched with the query memcairn's own keyword leg
builds (``store.fts.build_match``), ranked by bm25, within the projects it is asked in.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memcairn.store.fts import build_match
from memcairn.transfer.transcript_files import transcript_shape

RESULT_CHARS = 1500


@dataclass
class _Step:
    texts: list[str] = field(default_factory=list)
    calls: list[tuple[str, str]] = field(default_factory=list)  # (tool_use_id, its input as text)


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b["text"] for b in content
                         if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str))
    return ""


def _input_text(name: Any, value: Any) -> str:
    shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return f"{name}: {shown}"


def steps_of(path: Path) -> list[str]:
    """The chunks of one transcript file (Claude Code, Codex or Gemini CLI), in the order its steps began."""
    shape = transcript_shape(path)
    if shape == "codex":
        return _chunks(_codex_steps(path))
    if shape == "gemini-cli":
        return _gemini_steps(path)
    return _claude_steps(path)


def _chunks(steps: Iterable[tuple[_Step, dict[str, str]]]) -> list[str]:
    chunks = []
    for step, results in steps:
        parts = list(step.texts)
        for call_id, shown in step.calls:
            parts.append(shown)
            if results.get(call_id):
                parts.append(results[call_id][:RESULT_CHARS])
        text = "\n".join(p for p in parts if p.strip())
        if text:
            chunks.append(text)
    return chunks


def _codex_output(value: Any) -> str:
    if isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            value = json.loads(value)
        except ValueError:
            return value
    if isinstance(value, dict):
        value = value.get("output", value)
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _codex_text(content: Any) -> str:
    """A Codex message's text: its ``output_text`` (``input_text``) blocks."""
    if isinstance(content, str):
        return content
    return "\n".join(b["text"] for b in content or () if isinstance(b, dict) and isinstance(b.get("text"), str))


def _codex_steps(path: Path) -> Iterable[tuple[_Step, dict[str, str]]]:
    steps: list[_Step] = []
    results: dict[str, str] = {}
    answered = False  # a result came back since the current step began
    with open(path, encoding="utf-8", errors="replace") as fh:
        for raw in fh:
            try:
                entry = json.loads(raw)
            except ValueError:
                continue
            item = entry.get("payload") if isinstance(entry, dict) and entry.get("type") == "response_item" else None
            if not isinstance(item, dict):
                continue
            kind = item.get("type")
            if kind == "message" and item.get("role") == "assistant":
                steps.append(_Step(texts=[_codex_text(item.get("content"))]))
                answered = False
            elif kind in ("function_call", "custom_tool_call", "local_shell_call"):
                if not steps or answered:
                    steps.append(_Step())
                    answered = False
                shown = item.get("arguments") if kind == "function_call" else item.get(
                    "input" if kind == "custom_tool_call" else "action")
                steps[-1].calls.append((str(item.get("call_id")), _input_text(item.get("name") or "shell", shown)))
            elif kind in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
                results[str(item.get("call_id"))] = _codex_output(item.get("output"))
                answered = True
    return [(step, results) for step in steps]


def _gemini_steps(path: Path) -> list[str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except ValueError:
        return []
    steps: list[tuple[_Step, dict[str, str]]] = []
    for message in data.get("messages") or () if isinstance(data, dict) else ():
        if not isinstance(message, dict) or message.get("type") not in ("gemini", "model", "assistant"):
            continue
        content = message.get("content")
        step = _Step(texts=[content if isinstance(content, str) else _result_text(content)])
        results: dict[str, str] = {}
        for n, call in enumerate(message.get("toolCalls") or ()):
            if isinstance(call, dict):
                step.calls.append((str(n), _input_text(call.get("name"), call.get("args"))))
                results[str(n)] = _gemini_result(call)
        steps.append((step, results))
    return _chunks(steps)


def _gemini_result(call: dict[str, Any]) -> str:
    if isinstance(call.get("resultDisplay"), str) and call["resultDisplay"].strip():
        return call["resultDisplay"]
    for part in call.get("result") or ():
        response = part.get("functionResponse", {}).get("response") if isinstance(part, dict) else None
        if isinstance(response, dict):
            return _codex_output(response)
    return ""


def _claude_steps(path: Path) -> list[str]:
    steps: dict[str, _Step] = {}
    results: dict[str, str] = {}
    with open(path, encoding="utf-8", errors="replace") as fh:
        for number, raw in enumerate(fh):
            try:
                entry = json.loads(raw)
            except ValueError:
                continue
            message = entry.get("message") if isinstance(entry, dict) else None
            if not isinstance(message, dict) or not isinstance(message.get("content"), list | str):
                continue
            content = message["content"]
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
            if entry.get("type") == "assistant":
                key = message.get("id") if isinstance(message.get("id"), str) else f"line{number}"
                step = steps.setdefault(key, _Step())
                for block in blocks:
                    if not isinstance(block, dict):
                        continue
                    if block.get("type") == "text" and isinstance(block.get("text"), str):
                        step.texts.append(block["text"])
                    elif block.get("type") == "tool_use":
                        step.calls.append((str(block.get("id")), _input_text(block.get("name"), block.get("input"))))
            elif entry.get("type") == "user":
                for block in blocks:
                    if isinstance(block, dict) and block.get("type") == "tool_result":
                        results[str(block.get("tool_use_id"))] = _result_text(block.get("content"))
    return _chunks((step, results) for step in steps.values())


class RawIndex:
    """BM25 over the chunks of some transcripts, in memory; ``paths`` maps each file to its project (a plain
    list of files puts them all in one project, ``""``)."""

    def __init__(self, paths: Iterable[Path] | Mapping[Path, str]) -> None:
        projects = paths if isinstance(paths, Mapping) else dict.fromkeys(paths, "")
        self.conn = sqlite3.connect(":memory:")
        self.conn.execute("CREATE VIRTUAL TABLE chunks USING fts5(text, project UNINDEXED, "
                          "tokenize = 'porter unicode61')")
        self.chunks: list[str] = []
        self.projects: list[str] = []
        for path, project in projects.items():
            found = steps_of(path)
            self.chunks += found
            self.projects += [project] * len(found)
        self.conn.executemany("INSERT INTO chunks(rowid, text, project) VALUES (?, ?, ?)",
                              [(i + 1, t, p) for i, (t, p) in enumerate(zip(self.chunks, self.projects, strict=True))])

    def top(self, query: str, k: int = 5, projects: Sequence[str] | None = None) -> list[str]:
        """The ``k`` best chunks for ``query``, of ``projects`` only when given."""
        match = build_match(query)
        if match is None:
            return []
        where = f" AND project IN ({', '.join('?' * len(projects))})" if projects else ""
        rows = self.conn.execute(f"SELECT rowid FROM chunks WHERE chunks MATCH ?{where} ORDER BY bm25(chunks) "
                                 "LIMIT ?", (match, *(projects or ()), k)).fetchall()
        return [self.chunks[r[0] - 1] for r in rows]

    def text_of(self, projects: Sequence[str] | None = None) -> str:
        """Every chunk of ``projects`` (of all when not given), one text."""
        return "\n".join(c for c, p in zip(self.chunks, self.projects, strict=True) if not projects or p in projects)

    def close(self) -> None:
        self.conn.close()

