"""The summary an agent writes of its conversation when it compacts it, read into a session summary's sections.

Claude Code writes it twice: as the final message of ``<session>/subagents/agent-acompact-*.jsonl``
(``<analysis>…</analysis><summary>…</summary>``) and as the ``isCompactSummary`` prompt of the session's own file
("This session is being continued…", then ``Analysis:`` and ``Summary:``, then how to go on). Both come down to
the same text here (:func:`compaction_text`), so the two make one memory (the store's content hash). Its numbered
sections ("1. Primary Request and Intent:", "4. Errors and fixes:", "7. Pending Tasks:"…) are mapped onto a
summary's fields (:func:`compaction_sections`); the list of the user's messages is left out (the prompts are
stored) and each field is cut, so the record stays readable.
"""

from __future__ import annotations

import re

from memcairn.capture.truncate import cut

SECTION_CHARS = 1_500  # one section of the agent's summary, at most
FIELD_CHARS = 3_000  # one field of the stored summary, at most
_SUMMARY_TAG = re.compile(r"<summary>(.*?)(?:</summary>|\Z)", re.S)
_SUMMARY_LABEL = re.compile(r"(?:^|\n)Summary:[ \t]*\n(.*)", re.S)
_PREAMBLE = re.compile(r"\AThis session is being continued from a previous conversation[^\n]*(?:\n+|\Z)")
_TAIL = re.compile(r"\n\s*(?:If you need specific details from before compaction|Please continue the conversation "
                   r"from where we left)")
_HEADING = re.compile(r"^\s*(?:#+\s*)?\d+\.\s+\**([A-Z][^:\n]{2,60}?)\**:\s*", re.M)
# Words of a section heading -> the summary field it feeds (first match wins); None: left out.
_FIELDS: tuple[tuple[str, str | None], ...] = (
    ("user message", None), ("primary request", "request"), ("intent", "request"), ("pending", "next_steps"),
    ("next step", "next_steps"), ("current work", "completed"), ("files", "completed"), ("error", "learned"),
    ("fix", "learned"), ("problem", "learned"), ("concept", "learned"),
)


def compaction_text(text: str) -> str:
    """The summary proper: without the analysis before it and the instructions to go on after it."""
    text = (text or "").strip()
    found = _SUMMARY_TAG.search(text) or _SUMMARY_LABEL.search(text)
    core = found.group(1) if found else _PREAMBLE.sub("", text)
    return _TAIL.split(core, maxsplit=1)[0].strip()


def compaction_sections(summary: str) -> dict[str, str]:
    """``request``, ``learned``, ``completed``, ``next_steps`` and ``notes`` from a compaction summary's numbered
    sections (a summary without them is all ``notes``)."""
    heads = list(_HEADING.finditer(summary))
    if not heads:
        return {"notes": cut(summary, FIELD_CHARS)}
    parts: dict[str, list[str]] = {}
    lead = summary[:heads[0].start()].strip()
    if lead:
        parts.setdefault("notes", []).append(lead)
    for n, head in enumerate(heads):
        end = heads[n + 1].start() if n + 1 < len(heads) else len(summary)
        body = summary[head.end():end].strip()
        name = head.group(1).strip().lower()
        field = next((f for words, f in _FIELDS if words in name), "notes")
        if field is None or not body:
            continue
        parts.setdefault(field, []).append(f"{head.group(1).strip()}: {cut(body, SECTION_CHARS)}")
    return {f: cut("\n\n".join(texts), FIELD_CHARS) for f, texts in parts.items()}
