"""The SessionStart context for ``GET /api/context/inject``: for now a plain digest of recent memories.

Everything the route knows is passed to ``render_context``, so a richer renderer can replace this
module's one function without touching the route.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from memcairn.config import Settings
from memcairn.models import ItemFilter, MemoryItem
from memcairn.search.render import display_title


def _line(item: MemoryItem) -> str:
    when = datetime.fromtimestamp(item.created_at_epoch / 1000).strftime("%Y-%m-%d %H:%M")
    return f"- #{item.id} {when} {item.type} · {display_title(item)}"


def render_context(store: Any, settings: Settings, *, projects: Sequence[str] | None = None,
                   platform_source: str | None = None, colors: bool = False, full: bool = False) -> str:
    """Recent summaries and observations of ``projects`` (every project when None), newest first, as
    plain text within ``settings.context_token_budget`` tokens (chars / 4). ``colors`` and ``full`` are
    accepted for the renderer that replaces this one; the digest ignores them."""
    del colors, full
    names = list(projects) if projects else None
    summaries = store.list_items(ItemFilter(projects=names, kinds=["summary"], platform_source=platform_source),
                                 limit=settings.context_summaries)
    observations = store.list_items(
        ItemFilter(projects=names, kinds=["observation", "manual"], platform_source=platform_source),
        limit=settings.context_observations,
    )
    scope = ", ".join(names) if names else "all projects"
    if not summaries and not observations:
        return f"# memcairn: no memories yet for {scope}\n"
    budget = max(200, settings.context_token_budget * 4)
    lines = [f"# memcairn: recent memory for {scope}"]
    used = len(lines[0])
    for heading, items in (("## Recent sessions", summaries), ("## Recent observations", observations)):
        if not items:
            continue
        block = ["", heading]
        for item in items:
            row = _line(item)
            if used + len(row) + len(heading) + 2 > budget:
                break
            block.append(row)
            used += len(row) + 1
        if len(block) > 2:
            lines += block
            used += len(heading) + 2
    lines += ["", "Search with the memcairn tools for details; fetch full records only for the ids you need."]
    return "\n".join(lines) + "\n"
