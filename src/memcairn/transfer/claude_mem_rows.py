"""What a claude-mem row becomes: its values cleaned, the memory item built, and the counts of one import."""

from __future__ import annotations

import json
import math
import re
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from memcairn.core.clock import now_ms
from memcairn.core.models import DEFAULT_TYPES, LONE_SURROGATE, NewItem
from memcairn.store.validation import MAX_EPOCH_MS
from memcairn.wire.protocol import PLATFORM_ALIASES, platform_key

if TYPE_CHECKING:
    from memcairn.store.protocols import ImportStore

SOURCE_TYPE = "claude-mem"
DEFAULT_PLATFORM = "claude-code"
UNKNOWN_PROJECT = "unknown"
_SECONDS_BELOW = 100_000_000_000  # 1e11 ms is 1973; 1e11 s is the year 5138
_MAX_INT = 2**63 - 1  # the largest integer SQLite stores
_TYPE_JUNK = re.compile(r"[^a-z0-9_-]+")
_MAX_REASONS = 5

_OBSERVATION_COLUMNS = ("memory_session_id", "project", "text", "type", "title", "subtitle", "facts", "narrative",
                        "concepts", "files_read", "files_modified", "prompt_number", "merged_into_project",
                        "created_at_epoch", "created_at")
_SUMMARY_COLUMNS = ("memory_session_id", "project", "request", "investigated", "learned", "completed", "next_steps",
                    "files_read", "files_edited", "notes", "prompt_number", "merged_into_project", "created_at_epoch",
                    "created_at")
_PROMPT_COLUMNS = ("content_session_id", "prompt_number", "prompt_text", "created_at_epoch", "created_at")


@dataclass
class ClaudeMemReport:
    """Counts of one import: sessions and items created, ``existing`` rows already in the store (imported before,
    or the same content as a stored memory), ``forgotten`` rows whose content the user deleted from this store
    (they stay deleted), ``skipped`` rows that could not be imported, ``skipped_excluded``
    rows of excluded projects left out on purpose, ``warnings`` values that were repaired, and ``notes`` for
    the reader (missing tables, merges, why rows were skipped)."""

    sessions: int = 0
    observations: int = 0
    summaries: int = 0
    prompts: int = 0
    skipped: int = 0
    skipped_excluded: int = 0
    warnings: int = 0
    existing: int = 0
    forgotten: int = 0
    notes: list[str] = field(default_factory=list)
    _reasons: int = field(default=0, repr=False)

    def skip(self, table: str, row_id: Any, reason: str) -> None:
        self.skipped += 1
        if self._reasons < _MAX_REASONS:
            self._reasons += 1
            self.notes.append(f"skipped {table} #{row_id}: {reason}")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("_reasons")
        return data


@dataclass(frozen=True)
class _SessionRef:
    agent_id: str
    platform: str
    project: str  # the project the session lives in, in the store
    started: int


Excluded = Callable[[Iterable[str | None]], bool]


def _no_exclusions(_names: Iterable[str | None]) -> bool:
    return False


@dataclass
class _Context:
    store: ImportStore
    report: ClaudeMemReport
    by_memory: dict[str, _SessionRef]
    by_content: dict[str, _SessionRef]
    excluded: Excluded = _no_exclusions
    excluded_memory: set[str] = field(default_factory=set)  # memory_session_ids of excluded sessions
    excluded_content: set[str] = field(default_factory=set)  # content_session_ids of excluded sessions
    merges: dict[str, str] = field(default_factory=dict)
    now: int = field(default_factory=now_ms)
    key: str = ""  # database_key of the source: the prefix of every provenance id

    def source(self, table: str, row_id: Any) -> tuple[str, str, str]:
        return SOURCE_TYPE, table, f"{self.key}:{row_id}"


def to_ms(value: Any) -> int | None:
    """Epoch milliseconds from a stored epoch; seconds (below 1e11) are converted, an ISO 8601 string is read
    (UTC unless it names a zone), junk, NULL and times before 1970 or after 9999 give None."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return _iso_ms(value)
    if not math.isfinite(number) or number < 0:
        return None
    ms = round(number * 1000) if number < _SECONDS_BELOW else int(number)
    return ms if ms <= MAX_EPOCH_MS else None  # the store's own bound: a later time would be refused there


def _iso_ms(value: Any) -> int | None:
    text = _text(value)
    if not text or not text.strip():
        return None
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    ms = round(moment.timestamp() * 1000)
    return ms if ms >= 0 else None


def normalize_platform(value: Any) -> str:
    text = _text(value)
    if not text or not text.strip():
        return DEFAULT_PLATFORM
    text = text.strip().lower()
    return PLATFORM_ALIASES.get(platform_key(text), text[:100])


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def _name(value: Any) -> str | None:
    text = _text(value)
    return text.strip() if text and text.strip() else None


def _array(value: Any, report: ClaudeMemReport) -> list[str]:
    """A JSON array column as strings. JavaScript writes half of a cut emoji as a ``\\ud83d`` escape, which parses
    to a lone surrogate that cannot be stored: it becomes a replacement character, as in the text columns."""
    text = _text(value)
    if text is None or not text.strip():
        return []
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
        report.warnings += 1
        return [text]
    if parsed is None:
        return []
    if not isinstance(parsed, list):
        parsed = [parsed]
    values = [v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) for v in parsed if v is not None]
    return [LONE_SURROGATE.sub("\ufffd", v) for v in values]


def _type(value: Any, kind: str, report: ClaudeMemReport) -> str:
    text = _text(value)
    if text is None or not text.strip():
        return DEFAULT_TYPES[kind]
    cleaned = _TYPE_JUNK.sub("-", text.strip().lower()).strip("-")[:40]
    if cleaned != text:
        report.warnings += 1
    return cleaned if cleaned[:1].isalpha() else DEFAULT_TYPES[kind]


def _prompt_number(value: Any) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if 0 <= number <= _MAX_INT else None


def _link(ref: _SessionRef | None, project: str) -> tuple[str | None, str | None, dict[str, Any]]:
    """(session, platform_source, metadata) of an item in ``project`` that belongs to ``ref``."""
    if ref is None:
        return None, None, {}
    if ref.project == project:
        return ref.agent_id, ref.platform, {}
    return None, ref.platform, {"claude_mem_session": ref.agent_id}


# -- rows to items --------------------------------------------------------------------------------
def _excluded_row(row: sqlite3.Row, ctx: _Context) -> bool:
    """An observation or summary of an excluded project: by its own project (or the one it was merged into),
    or, when it names none, by the excluded session it belongs to."""
    own = _name(row["project"])
    if own is None:
        return (_name(row["memory_session_id"]) or "") in ctx.excluded_memory
    return ctx.excluded([own, _name(row["merged_into_project"])])


def _observation(row: sqlite3.Row, ctx: _Context) -> NewItem | None:
    if _excluded_row(row, ctx):
        return None
    ref = ctx.by_memory.get(_name(row["memory_session_id"]) or "")
    project = _name(row["project"]) or (ref.project if ref else UNKNOWN_PROJECT)
    session, platform, metadata = _link(ref, project)
    _note_merge(ctx, project, row["merged_into_project"])
    return NewItem(
        project=project, kind="observation", type=_type(row["type"], "observation", ctx.report),
        title=_text(row["title"]), subtitle=_text(row["subtitle"]), text=_text(row["text"]),
        narrative=_text(row["narrative"]), facts=_array(row["facts"], ctx.report),
        concepts=_array(row["concepts"], ctx.report), files_read=_array(row["files_read"], ctx.report),
        files_modified=_array(row["files_modified"], ctx.report), metadata=metadata,
        prompt_number=_prompt_number(row["prompt_number"]), session=session, platform_source=platform,
        created_at_epoch=_created(row, ref, ctx), source=ctx.source("observations", row["id"]),
    )


def _summary(row: sqlite3.Row, ctx: _Context) -> NewItem | None:
    if _excluded_row(row, ctx):
        return None
    ref = ctx.by_memory.get(_name(row["memory_session_id"]) or "")
    project = _name(row["project"]) or (ref.project if ref else UNKNOWN_PROJECT)
    session, platform, metadata = _link(ref, project)
    _note_merge(ctx, project, row["merged_into_project"])
    return NewItem(
        project=project, kind="summary", type="summary", request=_text(row["request"]),
        investigated=_text(row["investigated"]), learned=_text(row["learned"]), completed=_text(row["completed"]),
        next_steps=_text(row["next_steps"]), notes=_text(row["notes"]),
        files_read=_array(row["files_read"], ctx.report), files_modified=_array(row["files_edited"], ctx.report),
        metadata=metadata, prompt_number=_prompt_number(row["prompt_number"]), session=session,
        platform_source=platform, created_at_epoch=_created(row, ref, ctx),
        source=ctx.source("session_summaries", row["id"]),
    )


def _prompt(row: sqlite3.Row, ctx: _Context) -> NewItem | None:
    agent = _name(row["content_session_id"])
    ref = ctx.by_content.get(agent or "")
    project = ref.project if ref else UNKNOWN_PROJECT
    if (agent or "") in ctx.excluded_content or ctx.excluded([project]):
        return None
    session, platform, metadata = _link(ref, project)
    if ref is None and agent is not None:
        metadata = {"claude_mem_session": agent}
    return NewItem(
        project=project, kind="prompt", type="prompt", text=_text(row["prompt_text"]), metadata=metadata,
        prompt_number=_prompt_number(row["prompt_number"]), session=session, platform_source=platform,
        created_at_epoch=_created(row, ref, ctx), source=ctx.source("user_prompts", row["id"]),
    )


def _created(row: sqlite3.Row, ref: _SessionRef | None, ctx: _Context) -> int:
    return to_ms(row["created_at_epoch"]) or to_ms(row["created_at"]) or (ref.started if ref else ctx.now)


def _note_merge(ctx: _Context, project: str, into: Any) -> None:
    target = _name(into)
    if target and target != project:
        ctx.merges.setdefault(project, target)
