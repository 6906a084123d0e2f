"""Markdown for agents and humans: a cheap index first, a timeline for context, full records on demand.

- ``render_index``: one header line (hits per kind, strategy, fallback reason), the notes, then rows
  grouped by day (``### 2026-12-01``), days in the order their first hit appears (so relevance order
  survives), one compact row per hit: ``- #12 14:03 bugfix · Title · ~120 tok``. ``~N tok`` is what the
  full record costs to read through ``get_observations`` (``search.records.record_tokens``). A row costs
  ~20-40 tokens, never more than ~100. A hit whose files moved on since has a mark after its title
  (``[changed since]``, ``[stale: lib/x.ex deleted]``; ``search.freshness``).
- ``render_timeline``: grouped by day, then by file (first modified file, else first file read, else
  ``(no file)``) in runs, so summaries and prompts stay interleaved in time order; the anchor row ends
  with ``<- ANCHOR``.
- ``render_full``: the full records as a JSON list, in the order given.

Every renderer takes ``tz`` (None = local time), so output is deterministic for a given zone. Stored text
(titles, types, projects, file names, notes naming them) is printed as one printable line
(``fence.clean_line``): an ANSI escape saved in a title must not reach a terminal or pass for markup.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, tzinfo

from memcairn.core.errors import ValidationError
from memcairn.core.models import KINDS, MemoryItem
from memcairn.search.freshness import Freshness, with_mark
from memcairn.search.records import record_tokens
from memcairn.search.result import SearchHit, SearchResult, Timeline, display_title
from memcairn.wire.fence import clean_line

NO_FILE = "(no file)"
_KIND_WORDS = {
    "observation": ("observation", "observations"),
    "summary": ("summary", "summaries"),
    "prompt": ("prompt", "prompts"),
    "manual": ("manual note", "manual notes"),
}
WEAK_ONLY = "No strong match: these only resemble the query (weak); memory may not hold the answer."
EVIDENCE_HEAD = "### Matching lines of the sessions' steps (evidence behind the memories)"
NEXT_STEP = "Next: a timeline around an #id shows what happened then; fetch full records only for the ids you need."


def _dt(epoch_ms: int, tz: tzinfo | None) -> datetime:
    return datetime.fromtimestamp(epoch_ms / 1000, tz)


def _row(item: MemoryItem, tz: tzinfo | None, *, project: bool = False, anchor: bool = False,
         weak: bool = False, freshness: Freshness | None = None) -> str:
    parts = [f"- #{item.id} {_dt(item.created_at_epoch, tz):%H:%M} {clean_line(item.type)}",
             with_mark(display_title(item), freshness)]
    if project:
        parts.append(clean_line(item.project))
    parts.append(f"~{record_tokens(item, tz)} tok")
    if weak:
        parts.append("weak")
    return " · ".join(parts) + (" <- ANCHOR" if anchor else "")


def _weak(hit: SearchHit) -> bool:
    """Shown above the floor but short of a match (``search.relevance``)."""
    return hit.weak


def describe_counts(counts: dict[str, int]) -> str:
    words = []
    for kind in (*KINDS, *(k for k in counts if k not in KINDS)):
        n = counts.get(kind, 0)
        if n:
            one, many = _KIND_WORDS.get(kind, (kind, kind + "s"))
            words.append(f"{n} {one if n == 1 else many}")
    return ", ".join(words)


def _strategy(strategy: str | None, reason: str | None) -> str:
    if strategy is None:
        return ""
    return f"strategy: {strategy}" + (f" (fallback: {reason})" if reason else "")


def _notes(notes: Sequence[str]) -> list[str]:
    return [f"Note: {clean_line(n)}" for n in notes]


def render_index(result: SearchResult, *, tz: tzinfo | None = None) -> str:
    """The compact index of a search result (see the module docstring)."""
    strategy = _strategy(result.strategy, result.fallback_reason)
    if not result.hits and result.hidden:
        weaker = f"{result.hidden} weaker {'match' if result.hidden == 1 else 'matches'}"
        return "\n".join([f"No memory matches the query ({strategy}); {weaker} hidden: a relevance floor of 0 "
                          "shows them (min_score=0; on the command line --min-score 0).", *_notes(result.notes)]) + "\n"
    if not result.hits:
        return "\n".join([f"No memories matched ({strategy}).", *_notes(result.notes)]) + "\n"
    total = len(result.hits)
    lines = [f"{total} {'memory' if total == 1 else 'memories'} ({describe_counts(result.counts)}) · {strategy}"]
    if all(_weak(h) for h in result.hits):
        lines.append(WEAK_ONLY)
    lines += _notes(result.notes)
    show_project = len({h.item.project for h in result.hits}) > 1
    days: dict[str, list[str]] = {}
    for hit in result.hits:
        day = f"{_dt(hit.item.created_at_epoch, tz):%Y-%m-%d}"
        days.setdefault(day, []).append(_row(hit.item, tz, project=show_project, weak=_weak(hit),
                                             freshness=hit.freshness))
    for day, rows in days.items():
        lines += ["", f"### {day}", *rows]
    if result.evidence:
        lines += ["", EVIDENCE_HEAD, *_evidence_rows(result, tz)]
    lines += ["", NEXT_STEP]
    return "\n".join(lines) + "\n"


def _evidence_rows(result: SearchResult, tz: tzinfo | None) -> list[str]:
    """Each snippet under where it came from: the memory it fed (``#12``, or ``step`` when none was made) and
    when; its lines indented, cleaned like every stored line."""
    rows = []
    for snippet in result.evidence:
        source = f"#{snippet.item_id}" if snippet.item_id is not None else "step"
        rows.append(f"- {source} {_dt(snippet.created_at_epoch, tz):%Y-%m-%d %H:%M}:")
        rows += [f"  {clean_line(line)}" for line in snippet.text.splitlines()]
    return rows


def file_of(item: MemoryItem) -> str:
    if item.files_modified:
        return item.files_modified[0]
    if item.files_read:
        return item.files_read[0]
    return NO_FILE


def render_timeline(timeline: Timeline, *, tz: tzinfo | None = None) -> str:
    """The timeline as Markdown (see the module docstring)."""
    items = timeline.items
    ids = [i.id for i in items]
    strategy = _strategy(timeline.strategy, timeline.fallback_reason)
    if timeline.anchor_id is not None and timeline.anchor_id in ids:
        at = ids.index(timeline.anchor_id)
        head = f"Timeline around #{timeline.anchor_id}"
        if timeline.anchor_label:
            head += f" ({timeline.anchor_label})"
        head += f" · {at} before, {len(items) - at - 1} after"
    elif items:
        head = f"Timeline with no anchor · {len(items)} before"
    else:
        head = "Timeline: nothing to show"
    if strategy:
        head += f" · {strategy}"
    lines = [head, *_notes(timeline.notes)]
    show_project = len({i.project for i in items}) > 1
    day = current_file = None
    for item in items:
        this_day = f"{_dt(item.created_at_epoch, tz):%Y-%m-%d}"
        if this_day != day:
            day, current_file = this_day, None
            lines += ["", f"### {day}"]
        this_file = file_of(item)
        if this_file != current_file:
            current_file = this_file
            lines.append(f"**{clean_line(this_file) or NO_FILE}**")
        lines.append(_row(item, tz, project=show_project, anchor=item.id == timeline.anchor_id))
    return "\n".join(lines) + "\n"


def render_full(items: Sequence[MemoryItem]) -> str:
    """Full records as a JSON list, in the order given.

    Raises:
        ValidationError: no items (full records are fetched only for ids a search or timeline returned).
    """
    if not items:
        raise ValidationError("ids are required: fetch full records only for ids a search or timeline returned")
    return json.dumps([i.to_dict() for i in items], ensure_ascii=False, indent=2)
