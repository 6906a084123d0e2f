"""What the code no longer supports: the memories whose files say they are stale (or changed), for
``memcairn stale``, ``GET /api/stale`` and the MCP ``search`` tool's ``stale`` flag, each listing them with a way
to forget them in one step.

Every anchored memory of the projects is checked (a file read only when its size or mtime moved since the
process last read it), newest first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memcairn.core.clock import now_ms
from memcairn.core.corrections import state_of
from memcairn.core.models import ItemFilter, MemoryItem
from memcairn.search.freshness import CHANGED, STALE, Freshness, FreshnessCheck, age
from memcairn.search.result import display_title
from memcairn.store.protocols import ItemReader
from memcairn.wire.fence import clean_line

MAX_CHECKED = 100_000  # memories read at most
LISTED_STATES = (STALE, CHANGED)
TITLE_CHARS = 100
REASON_CHARS = 160
MAX_REASONS = 3  # shown a memory in text; JSON has them all


@dataclass(frozen=True)
class Unsupported:
    item: MemoryItem
    freshness: Freshness

    def to_dict(self, now: int) -> dict[str, Any]:
        return {"id": self.item.id, "kind": self.item.kind, "type": self.item.type, "project": self.item.project,
                "title": display_title(self.item), "created_at_epoch": self.item.created_at_epoch,
                "age": age(self.item.created_at_epoch, now), "state": self.freshness.state,
                "reasons": list(self.freshness.reasons)}


def unsupported(store: ItemReader, check: FreshnessCheck, projects: Sequence[str] | None = None,
                states: Sequence[str] = (STALE,)) -> list[Unsupported]:
    """The memories of ``projects`` (every project when None) whose freshness is one of ``states``, newest
    first; a memory already said not to hold (``memcairn correct``) is not listed again."""
    wanted = set(states)
    if not wanted <= set(LISTED_STATES):
        raise ValueError(f"states are {' and '.join(LISTED_STATES)}, not {', '.join(sorted(wanted))}")
    items = [i for i in store.list_items(ItemFilter(projects=list(projects) if projects else None),
                                         limit=MAX_CHECKED) if i.anchors and state_of(i) is None]
    states_of = check.check(items) if items else {}
    return [Unsupported(i, f) for i in items if (f := states_of.get(i.id)) is not None and f.state in wanted]


def answer(found: Sequence[Unsupported], now: int | None = None) -> dict[str, Any]:
    """The JSON every door gives: the memories, and the command that forgets them all."""
    now = now_ms() if now is None else now
    ids = [u.item.id for u in found]
    return {"memories": [u.to_dict(now) for u in found], "count": len(ids),
            "forget": forget_command(ids) if ids else None}


def forget_command(ids: Sequence[int]) -> str:
    return "memcairn forget " + " ".join(str(i) for i in ids)


def render_text(answer_: dict[str, Any], *, forget_hint: str | None = None) -> str:
    """One line a memory (``#12 3 d ago  title  [stale: …]``), its reasons under it, then how to forget them
    all (``forget_hint`` with ``{ids}`` for another door's wording, e.g. the MCP tool's)."""
    rows = answer_.get("memories") or []
    if not rows:
        return "No memory is contradicted by the code now (memories without anchors, or whose project directory " \
               "is not on this machine, are not checked).\n"
    lines = [f"{len(rows)} memor{'y' if len(rows) == 1 else 'ies'} the code no longer supports, newest first:"]
    for row in rows:
        title = clean_line(row["title"], TITLE_CHARS)
        lines.append(f"#{row['id']} {row['age']}  {title}  [{row['state']}] ({clean_line(row['project'])})")
        lines += [f"    {clean_line(reason, REASON_CHARS)}" for reason in row["reasons"][:MAX_REASONS]]
        if len(row["reasons"]) > MAX_REASONS:
            lines.append(f"    … and {len(row['reasons']) - MAX_REASONS} more")
    ids = " ".join(str(row["id"]) for row in rows)
    hint = ("Forget them all: memcairn stale --forget (or: memcairn forget {ids}); or say what replaced one: "
            "memcairn correct ID --why ... [--by NEWER_ID]" if forget_hint is None
            else forget_hint).format(ids=ids, ids_json="[" + ", ".join(str(row["id"]) for row in rows) + "]")
    if hint:
        lines.append(hint)
    return "\n".join(lines) + "\n"
