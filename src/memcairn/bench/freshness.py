"""``memcairn bench freshness``: how true the imported memories stay as the code moves on, against git alone.

The sessions are imported (in process, offline extractor) with the project checked out at the last commit before
``at``; the checkout then moves to the last commit at or before each step (+1 day, +1 week, HEAD of the default
branch), each memory with tracked anchored files is labelled from git (``freshness_git``), and a fresh
``FreshnessChecker`` says what memcairn shows. "Not shown as current" means shown ``changed`` or ``stale``
(``unknown`` is shown without a mark, as a current memory is).
"""

from __future__ import annotations

import json
import re
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from memcairn.bench.freshness_git import (
    Label,
    Tree,
    checkout,
    clone,
    commit_at,
    commit_time,
    deleted_since,
    label,
    renamed_since,
)
from memcairn.context.build import render_context
from memcairn.context.freshness_check import FreshnessChecker
from memcairn.core.models import ItemFilter, MemoryItem
from memcairn.search import SearchService
from memcairn.search.freshness import CHANGED, CURRENT, STALE, Freshness
from memcairn.store import Store
from memcairn.transfer.importer import import_transcripts
from memcairn.transfer.transcript_files import transcripts_under
from memcairn.wire.config import load_settings

DEFAULT_STEPS = ("1d", "1w", "HEAD")
RUNS = 5  # timings are the median of this many
MAX_ITEMS = 100_000
_STEP = re.compile(r"^(\d+)([hdw])$")
_UNITS = {"h": timedelta(hours=1), "d": timedelta(days=1), "w": timedelta(weeks=1)}
_DIGEST_ROW = re.compile(r"^#(\d+) ")
_SESSION_HEADING = re.compile(r"^### .*\(#(\d+)\)(?: \[[^\]]*\])?$")  # a session block, by its newest summary


class _NoCheck:
    """A SessionStart without freshness: no memory's state is known."""

    def check(self, items: Iterable[MemoryItem]) -> dict[int, Freshness]:
        return {}


def parse_steps(value: str) -> list[str]:
    """``1d,1w,HEAD`` checked: each a count of hours, days or weeks after the base, or HEAD."""
    steps = [s.strip() for s in value.split(",") if s.strip()]
    bad = [s for s in steps if s != "HEAD" and not _STEP.match(s)]
    if not steps or bad:
        raise ValueError(f"steps must be like 12h, 1d, 2w or HEAD, got {value!r}")
    return steps


def session_files(paths: Sequence[Path]) -> list[Path]:
    out: list[Path] = []
    for path in paths:
        out += transcripts_under(path) if path.is_dir() else [path]
    return out


def newest_time(files: Sequence[Path]) -> datetime | None:
    """The newest ``timestamp`` recorded in the sessions' lines (JSON Lines and Gemini chats)."""
    found: list[datetime] = []
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        for stamp in re.findall(r'"timestamp"\s*:\s*"([^"]+)"', text):
            try:
                when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
            except ValueError:
                continue
            if when.tzinfo is not None:
                found.append(when)
    return max(found) if found else None


def run(sessions: Sequence[Path], repo: str, *, at: datetime | None = None, steps: Sequence[str] = DEFAULT_STEPS,
        runs: int = RUNS, query: str | None = None) -> dict[str, Any]:
    files = session_files(sessions)
    if not files:
        raise ValueError("no session files found")
    at = at or newest_time(files)
    if at is None:
        raise ValueError("the sessions record no timestamps: give --at")
    with tempfile.TemporaryDirectory(prefix="memcairn-bench-freshness-") as tmp:
        work = Path(tmp) / "checkout"
        head = clone(repo, work)
        base = commit_at(work, head, at)
        if base is None:
            raise ValueError(f"no commit of {repo} is older than {at.isoformat()}")
        checkout(work, base)
        base_time = commit_time(work, base)
        settings = load_settings(Path(tmp) / "home", environ={})
        store = Store(settings.db_path)
        try:
            report = import_transcripts(store, settings, files, root=work)
            items = [i for i in store.list_items(ItemFilter(), limit=MAX_ITEMS) if i.anchors]
            base_tree = Tree.of(work, base)
            result: dict[str, Any] = {
                "repo": repo, "at": at.isoformat(), "base": base[:12], "base_time": base_time.isoformat(),
                "sessions": len(files), "memories": report.observations + report.summaries,
                "anchored": len(items), "steps": []}
            for step in steps:
                when = None if step == "HEAD" else base_time + int(step[:-1]) * _UNITS[step[-1]]
                commit = head if when is None else commit_at(work, head, when) or base
                checkout(work, commit)
                step_tree = Tree.of(work, commit)
                gone = deleted_since(work, base, commit)
                renamed = renamed_since(work, base, commit)
                labels = {i.id: lab for i in items
                          if (lab := label(i.anchors, work, base_tree, step_tree, gone, renamed)) is not None}
                states = FreshnessChecker().check(items)
                row = {"step": step, "commit": commit[:12], "commit_time": commit_time(work, commit).isoformat(),
                       **score(labels, states)}
                row.update(digest(store, settings, labels))
                row.update(costs(store, settings, items, runs, query))
                result["steps"].append(row)
        finally:
            store.close()
    return result


def score(labels: dict[int, Label], states: dict[int, Freshness]) -> dict[str, Any]:
    def shown(i: int) -> str:
        return states[i].state if i in states else "unknown"

    stale = [i for i, lab in labels.items() if lab.state == STALE]
    current = [i for i, lab in labels.items() if lab.state == CURRENT]
    flagged = [i for i in stale if shown(i) in (CHANGED, STALE)]
    as_stale = [i for i in stale if shown(i) == STALE]
    named = [i for i in as_stale if _names_why(labels[i], states[i].reasons)]
    false = [i for i in current if shown(i) in (CHANGED, STALE)]
    moved = [i for i, lab in labels.items() if lab.state == CHANGED and lab.moved]
    said_moved = [i for i in moved if shown(i) == CHANGED and any(" moved to " in r for r in states[i].reasons)]
    counts = {s: sum(1 for lab in labels.values() if lab.state == s) for s in (STALE, CHANGED, CURRENT)}
    return {"labelled": len(labels), **{f"label_{s}": n for s, n in counts.items()},
            "stale_not_current": _share(flagged, stale), "stale_shown_stale": _share(as_stale, stale),
            "stale_with_reason": _share(named, stale), "current_flagged": _share(false, current),
            "label_moved": len(moved), "moved_said": _share(said_moved, moved),
            "shown": {s: sum(1 for i in labels if shown(i) == s) for s in (CURRENT, CHANGED, STALE, "unknown")}}


def _names_why(lab: Label, reasons: Sequence[str]) -> bool:
    said = " ".join(reasons)
    return any(path in said for path in lab.deleted) or any(f"`{name}`" in said for name in lab.lost)


def _share(part: Sequence[int], whole: Sequence[int]) -> float | None:
    return round(len(part) / len(whole), 3) if whole else None


def digest(store: Store, settings: Any, labels: dict[int, Label]) -> dict[str, int]:
    """Labelled-stale memories in the SessionStart digest (observation rows and session blocks, whose heading
    names the newest summary): shown without a mark (as current), and in all."""
    text = render_context(store, settings, freshness=FreshnessChecker())
    rows = {}
    for line in text.splitlines():
        found = _DIGEST_ROW.match(line) or _SESSION_HEADING.match(line)
        if found:
            rows.setdefault(int(found.group(1)), line)
    stale = [i for i, lab in labels.items() if lab.state == STALE and i in rows]
    unmarked = [i for i in stale if "[stale:" not in rows[i] and "[changed since]" not in rows[i]]
    return {"digest_stale_rows": len(stale), "digest_stale_as_current": len(unmarked)}


def _median_ms(call: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 2)


def costs(store: Store, settings: Any, items: Sequence[MemoryItem], runs: int, query: str | None) -> dict[str, Any]:
    """SessionStart and search time without and with a checker (a warm one, as a worker's is; and the first,
    cold check of every anchored memory)."""
    warm = FreshnessChecker()
    cold_ms = _median_ms(lambda: FreshnessChecker().check(items), 1)
    without = _median_ms(lambda: render_context(store, settings, freshness=_NoCheck()), runs)
    render_context(store, settings, freshness=warm)
    with_check = _median_ms(lambda: render_context(store, settings, freshness=warm), runs)
    words = query or _query(items)
    plain, checked = SearchService(store), SearchService(store, freshness=warm)
    checked.search(query=words, limit=20)
    search_without = _median_ms(lambda: plain.search(query=words, limit=20), runs)
    search_with = _median_ms(lambda: checked.search(query=words, limit=20), runs)
    return {"first_check_ms": cold_ms, "session_start_ms": without, "session_start_fresh_ms": with_check,
            "session_start_added_ms": round(with_check - without, 2),
            "search_added_ms": round(search_with - search_without, 2)}


def _query(items: Sequence[MemoryItem]) -> str:
    for item in items:
        words = re.findall(r"[A-Za-z]{4,}", item.title or "")
        if words:
            return " ".join(words[:3])
    return "file"


COLUMNS = (("step", "step"), ("commit", "commit"), ("labelled", "labelled"), ("label_stale", "stale"),
           ("label_changed", "changed"), ("label_current", "current"), ("stale_not_current", "stale not current"),
           ("stale_shown_stale", "stale shown stale"), ("stale_with_reason", "stale w/ reason"),
           ("current_flagged", "current flagged"), ("label_moved", "renamed, names kept"),
           ("moved_said", "… shown moved"), ("digest_stale_rows", "stale in digest"),
           ("digest_stale_as_current", "… as current"),
           ("session_start_ms", "SessionStart ms"), ("session_start_added_ms", "+freshness ms"),
           ("search_added_ms", "search +ms"), ("first_check_ms", "first check ms"))


SHARES = frozenset({"stale_not_current", "stale_shown_stale", "stale_with_reason", "current_flagged", "moved_said"})


def _cell(key: str, value: Any) -> str:
    if value is None:
        return "–"
    return f"{value:.0%}" if key in SHARES else str(value)


def render(result: dict[str, Any]) -> str:
    head = (f"{result['sessions']} sessions, {result['memories']} memories ({result['anchored']} anchored), "
            f"base {result['base']} ({result['base_time']}), sessions end {result['at']}\n\n")
    lines = ["| " + " | ".join(title for _, title in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in result["steps"]:
        lines.append("| " + " | ".join(_cell(key, row.get(key)) for key, _ in COLUMNS) + " |")
    shown = "\n".join(f"- {row['step']}: shown {json.dumps(row['shown'])}" for row in result["steps"])
    return head + "\n".join(lines) + "\n\n" + shown
