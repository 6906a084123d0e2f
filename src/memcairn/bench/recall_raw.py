"""The anchor of ``memcairn bench recall``: plain BM25 over the raw transcripts, no compression at all.

One chunk per assistant step: an assistant message (Claude Code writes one block a line, all lines of one API
message share its ``message.id``) gives its text, the input of each of its tool calls and the first 1,500
characters of each call's result. Chunks go into an in-memory SQLite FTS5 table (``porter unicode61``) and a
question is matched with the query memcairn's own keyword leg builds (``store.fts.build_match``), ranked by bm25.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memcairn.store.fts import build_match

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
    """The chunks of one transcript file, in the order its assistant messages began."""
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
    chunks = []
    for step in steps.values():
        parts = list(step.texts)
        for call_id, shown in step.calls:
            parts.append(shown)
            if results.get(call_id):
                parts.append(results[call_id][:RESULT_CHARS])
        text = "\n".join(p for p in parts if p.strip())
        if text:
            chunks.append(text)
    return chunks


class RawIndex:
    """BM25 over the chunks of some transcripts, in memory."""

    def __init__(self, paths: Iterable[Path]) -> None:
        self.conn = sqlite3.connect(":memory:")
        self.conn.execute("CREATE VIRTUAL TABLE chunks USING fts5(text, tokenize = 'porter unicode61')")
        self.chunks: list[str] = []
        for path in paths:
            self.chunks.extend(steps_of(path))
        self.conn.executemany("INSERT INTO chunks(rowid, text) VALUES (?, ?)",
                              [(i + 1, t) for i, t in enumerate(self.chunks)])

    def top(self, query: str, k: int = 5) -> list[str]:
        match = build_match(query)
        if match is None:
            return []
        rows = self.conn.execute("SELECT rowid FROM chunks WHERE chunks MATCH ? ORDER BY bm25(chunks) LIMIT ?",
                                 (match, k)).fetchall()
        return [self.chunks[r[0] - 1] for r in rows]

    def close(self) -> None:
        self.conn.close()

