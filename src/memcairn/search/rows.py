"""One search hit as structured fields, for a door that lays rows out itself (the hooks' digests) instead of
reading rendered Markdown back: the id as every door takes it back (``#12``, or ``team#12`` for a team server's
memory), its day and time in the caller's zone, type, title, project (when the rows span several), what its full
record costs and whether it is a weak match. ``render_index`` prints the same values."""

from __future__ import annotations

from datetime import datetime, tzinfo
from typing import Any

from memcairn.core.models import MemoryItem
from memcairn.search.records import record_tokens
from memcairn.search.result import SearchResult, display_title
from memcairn.wire.fence import clean_line


def index_row(item: MemoryItem, tz: tzinfo | None, *, ref: str | None = None, project: bool = False,
              weak: bool = False) -> dict[str, Any]:
    when = datetime.fromtimestamp(item.created_at_epoch / 1000, tz)
    return {"id": ref or f"#{item.id}", "day": f"{when:%Y-%m-%d}", "time": f"{when:%H:%M}",
            "type": clean_line(item.type), "title": display_title(item),
            "project": clean_line(item.project) if project else None, "tokens": record_tokens(item, tz),
            "weak": weak}


def result_rows(result: SearchResult, tz: tzinfo | None) -> list[dict[str, Any]]:
    """The rows of a local search result, in its order."""
    several = len({h.item.project for h in result.hits}) > 1
    return [index_row(h.item, tz, project=several, weak=h.weak) for h in result.hits]


def row_text(row: dict[str, Any], *, with_day: bool = True) -> str:
    """``#12 2026-12-01 14:03 bugfix · Title · ~120 tok`` (without the day: as a row under its day's heading)."""
    head = " ".join(str(v) for v in (row["id"], row["day"] if with_day else "", row["time"], row["type"]) if v)
    parts = [head, row["title"], *([row["project"]] if row.get("project") else []), f"~{row['tokens']} tok",
             *(["weak"] if row.get("weak") else [])]
    return " · ".join(parts)
