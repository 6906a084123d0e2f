"""The files and errors named in the summary an agent wrote when compacting its conversation, as observations.

A compaction summary (``capture.compaction``: "1. Primary Request and Intent: ... 3. Files and Code Sections:
... 4. Errors and fixes: ...") is the richest account of the work a transcript holds, written by the agent at
no cost to us. The pipeline stores it whole as a session summary; :func:`recap_observations` also makes one
observation per file it names (what changed there and how) and per error it lists (the cause and the fix):
small records a search can hit one by one, where the whole summary would cost a reader thousands of tokens.

The numbered sections are recognised by words in their titles, not by their numbers or exact names, so another
release's wording still reads. Code blocks are left out (the observations of the edits hold the code).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from memcairn.capture.records import Observation

RECAP_MAX_CHARS = 60_000  # of one recap, kept in the stop's body
_SECTION = re.compile(r"^\s*(?:#+\s*(?:\d+[.)]\s+)?|\d+[.)]\s+)\**([A-Z][A-Za-z /&-]{2,60}?)\**:?\**\s*(?::\s*(.*))?$")
_FENCE = re.compile(r"```.*?(?:```|\Z)", re.S)
_BULLET = re.compile(r"^(\s*)(?:[-*+•]|\d+[.)])\s+(.*)$")
_PATH = re.compile(r"`([^`\s]+)`|\*\*([^*\s]+)\*\*|^([\w./-]+\.\w+)\b")
_HEADING_LINE = re.compile(r"^\s*#{1,6}\s+(.*\S)\s*$")
_NUMBERED = re.compile(r"^(?:error|issue|problem|bug|fix)\s*#?\d+\s*[:.)-]\s*(?=\S)", re.I)  # "Error 2: ..."
_LABEL_ONLY = re.compile(r"^[\w ()/&'-]{1,40}:$")
_LEAD = re.compile(r"^[\s*`]*(?:[—–:-]+\s*)?")
_ROLES = (
    ("pending", re.compile(r"pending|remaining|todo|unfinished|open", re.I)),
    ("request", re.compile(r"request|intent|goal", re.I)),
    ("messages", re.compile(r"user message|prompts", re.I)),
    ("files", re.compile(r"\bfiles?\b|code section", re.I)),
    ("errors", re.compile(r"error|fix|bug|issue", re.I)),
    ("problems", re.compile(r"problem|solv|decision", re.I)),
    ("concepts", re.compile(r"concept|technical|context", re.I)),
    ("current", re.compile(r"current", re.I)),
    ("next", re.compile(r"next", re.I)),
)
TITLE_MAX = 80
TEXT_MAX = 1000
FACT_MAX = 240
FACTS_MAX = 8


@dataclass
class _Item:
    head: str
    details: list[str] = field(default_factory=list)


def _clip(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[: limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,;:") + "…"


def _plain(text: str) -> str:
    return " ".join(text.replace("**", "").split())


def _sections(text: str) -> dict[str, list[str]]:
    """The recap's lines by section role; lines before any section (and the analysis) are dropped."""
    body = text
    marker = re.search(r"^\s*Summary:\s*$", text, re.M)
    if marker:
        body = text[marker.end():]
    body = _FENCE.sub("", body)
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in body.splitlines():
        found = _SECTION.match(line) if len(line) - len(line.lstrip()) <= 3 else None
        role = next((name for name, cue in _ROLES if cue.search(found.group(1))), None) if found else None
        if found and (role is not None or not _BULLET.match(line)):
            current = sections.setdefault(role or "other", [])
            if (found.group(2) or "").strip():
                current.append(found.group(2))
            continue
        if current is not None:
            current.append(line)
    return sections


def _items(lines: list[str]) -> list[_Item]:
    """Top-level bullets with their nested bullets and continuation lines; where the section is cut by headings
    (``### Error 2: Double fallback`` then ``- **Fix**: …`` bullets), each heading with the bullets under it."""
    items: list[_Item] = []
    top: int | None = None
    headed = False
    for line in lines:
        if not line.strip():
            continue
        heading = _HEADING_LINE.match(line)
        if heading:
            items.append(_Item(_NUMBERED.sub("", _plain(heading.group(1)))))
            headed, top = True, None
            continue
        bullet = _BULLET.match(line)
        indent = len(line) - len(line.lstrip())
        if bullet and not headed and (top is None or indent <= top):
            top = indent
            items.append(_Item(_plain(bullet.group(2))))
        elif items:
            detail = _plain(bullet.group(2) if bullet else line)
            if not _LABEL_ONLY.match(detail):  # "Key Code:" over a code block (left out): says nothing
                items[-1].details.append(detail)
        else:
            items.append(_Item(_plain(line)))
    return items


def _file_observation(item: _Item) -> Observation | None:
    found = _PATH.search(item.head)
    path = next((g for g in found.groups() if g), None) if found else None
    if not path or "/" not in path and "." not in path:
        return None
    rest = _LEAD.sub("", item.head[found.end():] if found else item.head)
    details = list(item.details)
    lead = rest
    if (not lead or lead.startswith("(")) and details:  # "(MODIFIED - task 3)": the first detail says more
        lead = details.pop(0)
    created = bool(re.match(r"(?:new|created|adds? a new)\b", lead, re.I))
    # the lead is the narrative and each detail a fact: a reader pays for every line once
    return Observation(
        type="feature" if created else "change", title=_clip(f"{path}: {lead}" if lead else path, TITLE_MAX),
        narrative=_clip(lead.rstrip(".") + ".", TEXT_MAX) if lead else None,
        facts=tuple(_clip(d, FACT_MAX) for d in details[:FACTS_MAX]), concepts=("what-changed",),
        files_modified=(path,),
    )


def _error_observation(item: _Item) -> Observation:
    return Observation(
        type="bugfix", title=_clip(item.head, TITLE_MAX), narrative=_clip(item.head.rstrip(".") + ".", TEXT_MAX),
        facts=tuple(_clip(d, FACT_MAX) for d in item.details[:FACTS_MAX]), concepts=("problem-solution",),
    )


def recap_observations(text: str | None) -> list[Observation]:
    """An observation per file and per error a compaction summary's sections name; [] when it has none."""
    if not text or not text.strip():
        return []
    sections = _sections(text[:RECAP_MAX_CHARS])
    files = [o for o in (_file_observation(i) for i in _items(sections.get("files", []))) if o is not None]
    return files + [_error_observation(i) for i in _items(sections.get("errors", []))]


def _prose(lines: list[str] | None, limit: int) -> str | None:
    """A section's bullets as one text: each item's head, its details after it in brackets."""
    parts = [i.head + (f" ({'; '.join(i.details)})" if i.details else "") for i in _items(lines or [])]
    text = "; ".join(p.rstrip(".;") for p in parts if p)
    return _clip(text + "." if text and text[-1] not in ".!?…)" else text, limit) or None


def lean_fields(text: str | None, observations: list[Observation]) -> dict[str, str] | None:
    """A session summary's fields from a compaction summary whose files and errors are stored as ``observations``
    of their own: the request, the current work and the files' headlines, the errors' headlines, what was solved
    and the concepts, what is pending; about a third of the whole. None when the summary has no sections."""
    sections = _sections((text or "")[:RECAP_MAX_CHARS])
    if not sections:
        return None
    files = "; ".join(o.title for o in observations if o.files_modified)
    errors = "; ".join(o.title for o in observations if o.type == "bugfix")
    fields = {
        "request": _prose(sections.get("request"), 200),
        "completed": _clip(" ".join(p for p in (_prose(sections.get("current"), 300),
                                                f"Files: {files}." if files else "") if p), 550) or None,
        "learned": _clip(" ".join(p for p in (f"Errors fixed: {errors}." if errors else "",
                                              _prose(sections.get("problems"), 250),
                                              _prose(sections.get("concepts"), 150)) if p), 550) or None,
        "next_steps": _prose(sections.get("pending", []) + sections.get("next", []), 300),
        "notes": _prose(sections.get("other"), 150),
    }
    return {name: value for name, value in fields.items() if value}
