"""``apply_patch`` envelopes: the files a patch adds, updates, deletes or moves, and what they define."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from memcairn.capture.offline.edits import change


@dataclass
class _PatchFile:
    path: str
    action: str  # add, update, delete
    added: int = 0
    removed: int = 0
    moved_to: str | None = None
    names: list[str] = field(default_factory=list)
    gist: list[str] = field(default_factory=list)


def patch_text(value: Any) -> str:
    """The envelope a call's input carries (a string, lines, or under a usual key), else an empty string."""
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple):
        return "\n".join(part for part in value if isinstance(part, str))
    if isinstance(value, dict):
        for key in ("input", "patch", "command", "cmd", "content", "diff"):
            text = patch_text(value.get(key))
            if "*** " in text:
                return text
    return ""


def _parse_patch(text: str) -> list[_PatchFile]:
    """Files of an ``apply_patch`` envelope (``*** Add/Update/Delete File:``, ``*** Move to:``)."""
    files: list[_PatchFile] = []
    added_lines: list[str] = []
    for line in text[:200_000].splitlines():
        header = re.match(r"\*\*\* (Add|Update|Delete) File:\s*(.+?)\s*$", line)
        if header:
            _close_patch_file(files, added_lines)
            files.append(_PatchFile(path=header.group(2), action=header.group(1).lower()))
        elif files and (move := re.match(r"\*\*\* Move to:\s*(.+?)\s*$", line)):
            files[-1].moved_to = move.group(1)
        elif files and line.startswith("+"):
            files[-1].added += 1
            added_lines.append(line[1:])
        elif files and line.startswith("-"):
            files[-1].removed += 1
    _close_patch_file(files, added_lines)
    return files


def _close_patch_file(files: list[_PatchFile], added_lines: list[str]) -> None:
    if files and added_lines:
        found = change("", "\n".join(added_lines), budget=160)
        files[-1].names = found.added
        files[-1].gist = found.gist
    added_lines.clear()
