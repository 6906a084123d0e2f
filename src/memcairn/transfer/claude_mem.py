"""Import a claude-mem database (default ``~/.claude-mem/claude-mem.db``) into the store.

The source is opened read-only (``mode=ro``), so its file is never modified; SQLite may create the ``-wal`` and
``-shm`` companions of a WAL database while reading it, as claude-mem itself does.

Mapping:

- ``sdk_sessions`` become sessions keyed by (platform_source, content_session_id), the agent's own session id.
  claude-mem's platform names map to memcairn's ("claude" -> "claude-code"); NULL means "claude-code".
- ``observations`` become kind ``observation``; ``session_summaries`` kind ``summary`` (files_edited ->
  files_modified); ``user_prompts`` kind ``prompt``, in the project of their session. Observations and summaries
  find their session through ``memory_session_id``.
- ``merged_into_project`` becomes ``Store.merge_project(project, into)``, unless the project is already merged
  elsewhere (the first answer is kept and a note says so).
- Every row keeps its provenance in memory_sources as ("claude-mem", table, "<database key>:<id>"): importing
  again adds nothing. Row ids only mean something inside one database, so the key (``database_key``, a digest
  of the database's oldest row) keeps a second claude-mem database (another machine, or claude-mem started
  afresh) from looking imported already.
- The privacy rules of live capture apply: ``<private>`` parts are removed and secrets replaced by typed
  placeholders in every stored text (``capture.admission.scrub_item``); a row with nothing left is skipped.
  Rows of projects matching ``exclude_projects`` (with the settings given) are not imported and are counted in
  ``skipped_excluded``; so are rows that only belong to such a project through their session.

Odd rows: epochs are milliseconds, and a value below 1e11 is taken as seconds; an ISO 8601 string (UTC unless it
names a zone) is read as such. A NULL epoch falls back to the row's ISO ``created_at`` (``started_at``,
``completed_at``), then to the start of the row's session, or the time of the import when it has none. A NULL
project becomes the session's project, or "unknown". A JSON array column that does not parse keeps its text as a
one-element list, and an unusable type falls back to the kind's default; both are counted in ``warnings``. A row
with no content, or one that validation refuses (a field over 256 KiB), is counted in ``skipped``. When an
observation's project differs from the project its session lives in, it is stored without the session (kept as
``metadata.claude_mem_session``).

This works on the store file directly, also while a worker runs (SQLite WAL); the worker's vector mirror picks
the new items up through its watermark, since they get ids above it.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memcairn.capture.admission import project_excluded, scrub_item
from memcairn.core.errors import NotFoundError, ValidationError
from memcairn.core.models import ARRAY_FIELDS, DEFAULT_TYPES, LONE_SURROGATE, TEXT_FIELDS, NewItem
from memcairn.store.transfer_state import TransferSession
from memcairn.store.validation import MAX_EPOCH_MS, validate_item
from memcairn.wire.protocol import PLATFORM_ALIASES, platform_key

if TYPE_CHECKING:
    from memcairn.store.protocols import ImportStore
    from memcairn.wire.config import Settings

DEFAULT_PATH = Path("~/.claude-mem/claude-mem.db")
TABLES = ("sdk_sessions", "observations", "session_summaries", "user_prompts")
SOURCE_TYPE = "claude-mem"
DEFAULT_PLATFORM = "claude-code"
UNKNOWN_PROJECT = "unknown"
BATCH_SIZE = 500
STATUSES = ("active", "completed", "failed")
_SECONDS_BELOW = 100_000_000_000  # 1e11 ms is 1973; 1e11 s is the year 5138
_MAX_INT = 2**63 - 1  # the largest integer SQLite stores
_TYPE_JUNK = re.compile(r"[^a-z0-9_-]+")
_MAX_REASONS = 5
# Column names before claude-mem's migration 17 renamed them.
_LEGACY_NAMES = {"content_session_id": "claude_session_id", "memory_session_id": "sdk_session_id"}

_SESSION_COLUMNS = ("content_session_id", "memory_session_id", "project", "platform_source", "started_at_epoch",
                    "completed_at_epoch", "started_at", "completed_at", "status")
_OBSERVATION_COLUMNS = ("memory_session_id", "project", "text", "type", "title", "subtitle", "facts", "narrative",
                        "concepts", "files_read", "files_modified", "prompt_number", "merged_into_project",
                        "created_at_epoch", "created_at")
_SUMMARY_COLUMNS = ("memory_session_id", "project", "request", "investigated", "learned", "completed", "next_steps",
                    "files_read", "files_edited", "notes", "prompt_number", "merged_into_project", "created_at_epoch",
                    "created_at")
_PROMPT_COLUMNS = ("content_session_id", "prompt_number", "prompt_text", "created_at_epoch", "created_at")
# What identifies a database: the first of these rows it holds (its oldest), columns later writes do not change.
_KEY_ROWS = (("sdk_sessions", ("content_session_id", "started_at_epoch", "started_at")),
             ("observations", ("memory_session_id", "created_at_epoch", "created_at")),
             ("session_summaries", ("memory_session_id", "created_at_epoch", "created_at")),
             ("user_prompts", ("content_session_id", "created_at_epoch", "created_at")))


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
    now: int = field(default_factory=lambda: int(time.time() * 1000))
    key: str = ""  # database_key of the source: the prefix of every provenance id

    def source(self, table: str, row_id: Any) -> tuple[str, str, str]:
        return SOURCE_TYPE, table, f"{self.key}:{row_id}"


def open_source(path: Path | str | None = None) -> sqlite3.Connection:
    """Open a claude-mem database read-only and check that it looks like one.

    Raises:
        ValidationError: the file is missing, is not a SQLite database, or has none of claude-mem's tables.
    """
    target = Path(path or DEFAULT_PATH).expanduser()
    if not target.exists():
        raise ValidationError(f"no claude-mem database at {target}; pass its path (default {DEFAULT_PATH})")
    if not target.is_file():
        raise ValidationError(f"{target} is not a file; pass the path of claude-mem.db")
    conn: sqlite3.Connection | None = None
    try:
        conn = sqlite3.connect(f"{target.resolve().as_uri()}?mode=ro", uri=True)
        conn.row_factory = sqlite3.Row
        # text claude-mem wrote that is not valid UTF-8 (half of a cut emoji) is read with replacement characters
        # rather than stopping the import at that row
        conn.text_factory = _decode_text
        conn.execute("PRAGMA query_only = ON")
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as exc:
        if conn is not None:
            conn.close()
        raise ValidationError(f"{target} is not a readable SQLite database ({exc}); nothing was imported") from None
    if not names & set(TABLES[1:]):
        conn.close()
        raise ValidationError(f"{target} does not look like a claude-mem database: it has none of the tables "
                              f"{', '.join(TABLES[1:])}; nothing was imported")
    return conn


def import_claude_mem(store: ImportStore, source: sqlite3.Connection,
                      settings: Settings | None = None) -> ClaudeMemReport:
    """Import every session, observation, summary and prompt of ``source`` (from ``open_source``).

    With ``settings``, rows of projects matching its ``exclude_projects`` are left out (``skipped_excluded``).
    """
    report = ClaudeMemReport()
    tables = {r[0] for r in source.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for table in TABLES:
        if table not in tables:
            report.notes.append(f"no {table} table (an older claude-mem?): skipped")
    ctx = _Context(store, report, {}, {}, excluded=_exclusion(settings), key=database_key(source, tables))
    ctx.by_memory, ctx.by_content = _import_sessions(ctx, source, tables)
    if "observations" in tables:
        _import_table(ctx, source, "observations", _OBSERVATION_COLUMNS, "observations", _observation)
    if "session_summaries" in tables:
        _import_table(ctx, source, "session_summaries", _SUMMARY_COLUMNS, "summaries", _summary)
    if "user_prompts" in tables:
        _import_table(ctx, source, "user_prompts", _PROMPT_COLUMNS, "prompts", _prompt)
    _apply_merges(store, ctx.merges, report)
    return report


def _exclusion(settings: Settings | None) -> Excluded:
    if settings is None or not settings.exclude_projects.strip():
        return _no_exclusions

    def excluded(names: Iterable[str | None]) -> bool:
        return project_excluded([n for n in names if n], settings)

    return excluded


# -- reading the source ---------------------------------------------------------------------------
@contextmanager
def _reading(table: str) -> Iterator[None]:
    """An SQLite error while reading the source is about the claude-mem file, not the store: say so (the CLI
    would otherwise describe it as a damaged memcairn.db)."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        raise ValidationError(
            f"cannot read {table} of the claude-mem database ({exc}); the rows read before were imported and "
            "the memcairn store is fine. Repair a copy of the claude-mem file (sqlite3's .recover) and import "
            "that: rows already imported are not added twice"
        ) from None


def database_key(conn: sqlite3.Connection, tables: set[str] | None = None) -> str:
    """12 hex digits naming this claude-mem database, from its oldest row (its first session's id and start), so
    the same database gives the same key on every run while another one, reusing the same row ids, does not."""
    if tables is None:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for table, columns in _KEY_ROWS:
        if table not in tables:
            continue
        have = _have(conn, table)
        exprs = ", ".join(_expr(have, c) for c in ("id", *columns))
        with _reading(table):
            row = conn.execute(f"SELECT {exprs} FROM {table} ORDER BY {_expr(have, 'id')} LIMIT 1").fetchone()
        if row is not None:
            return hashlib.sha256(json.dumps([table, *row], default=str).encode()).hexdigest()[:12]
    return "empty"


def _expr(have: set[str], name: str) -> str:
    """SQL for a column: itself, its pre-rename name, or NULL when this claude-mem never had it."""
    if name in have:
        return name
    if name == "id":
        return "rowid"
    legacy = _LEGACY_NAMES.get(name)
    return legacy if legacy in have else "NULL"


def _decode_text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def _have(conn: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}


def _select(conn: sqlite3.Connection, table: str, wanted: Sequence[str]) -> Iterator[sqlite3.Row]:
    """Rows in id order with the wanted columns; a column an older claude-mem lacks reads as NULL."""
    have = _have(conn, table)
    cols = ", ".join(f"{_expr(have, c)} AS {c}" for c in ("id", *wanted))
    with _reading(table):
        cursor = conn.execute(f"SELECT {cols} FROM {table} ORDER BY id")
        while rows := cursor.fetchmany(BATCH_SIZE):
            yield from rows


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


# -- sessions -------------------------------------------------------------------------------------
def _import_sessions(ctx: _Context, source: sqlite3.Connection,
                     tables: set[str]) -> tuple[dict[str, _SessionRef], dict[str, _SessionRef]]:
    """Create the sessions; return them by memory_session_id and by content_session_id, as stored. Sessions of
    excluded projects are not created; their ids are kept in the context so that their rows are left out too."""
    store, report = ctx.store, ctx.report
    now = int(time.time() * 1000)
    records: list[TransferSession] = []
    links: list[tuple[str | None, tuple[str, str], int]] = []
    if "sdk_sessions" in tables:
        for row in _select(source, "sdk_sessions", _SESSION_COLUMNS):
            agent = _name(row["content_session_id"])
            if agent is None:
                report.skip("sdk_sessions", row["id"], "no content_session_id")
                continue
            if ctx.excluded([_name(row["project"]) or UNKNOWN_PROJECT]):
                report.skipped_excluded += 1
                ctx.excluded_content.add(agent)
                memory = _name(row["memory_session_id"])
                if memory is not None:
                    ctx.excluded_memory.add(memory)
                continue
            platform = normalize_platform(row["platform_source"])
            ended = to_ms(row["completed_at_epoch"]) or to_ms(row["completed_at"])
            started = to_ms(row["started_at_epoch"]) or to_ms(row["started_at"]) or ended or now
            status = row["status"] if row["status"] in STATUSES else ("completed" if ended else "active")
            records.append(TransferSession(_name(row["project"]) or UNKNOWN_PROJECT, {
                "agent_session_id": agent, "platform_source": platform, "started_at_epoch": started,
                "ended_at_epoch": ended, "status": status,
            }))
            links.append((_name(row["memory_session_id"]), (platform, agent), started))
    known = {key[1] for _, key, _ in links}
    if "user_prompts" in tables:  # prompts whose session claude-mem no longer has still name a real session
        have = _have(source, "user_prompts")
        agent_col, created_col, id_col = (_expr(have, c) for c in ("content_session_id", "created_at_epoch", "id"))
        with _reading("user_prompts"):
            firsts = source.execute(
                f"SELECT {agent_col}, MIN({created_col}) FROM user_prompts WHERE {agent_col} IS NOT NULL "
                f"GROUP BY {agent_col} ORDER BY MIN({id_col})"
            ).fetchall()
        for agent, first in firsts:
            agent = _name(agent)
            if agent is None or agent in known or agent in ctx.excluded_content or ctx.excluded([UNKNOWN_PROJECT]):
                continue
            known.add(agent)
            started = to_ms(first) or now
            records.append(TransferSession(UNKNOWN_PROJECT, {
                "agent_session_id": agent, "platform_source": DEFAULT_PLATFORM, "started_at_epoch": started,
                "ended_at_epoch": None, "status": "active",
            }))
            links.append((None, (DEFAULT_PLATFORM, agent), started))
    for start in range(0, len(records), BATCH_SIZE):
        chunk = records[start:start + BATCH_SIZE]
        for record, outcome in zip(chunk, store.import_records(chunk), strict=True):
            if outcome.status == "created":
                report.sessions += 1
            elif outcome.status == "rejected":
                report.skip("sdk_sessions", record.key[1], outcome.detail or "refused by the store")
    projects = store.session_projects([key for _, key, _ in links])
    by_memory: dict[str, _SessionRef] = {}
    by_content: dict[str, _SessionRef] = {}
    for memory_id, key, started in links:
        if key not in projects:
            continue
        ref = _SessionRef(key[1], key[0], projects[key], started)
        if memory_id is not None:
            by_memory.setdefault(memory_id, ref)
        current = by_content.get(key[1])
        if current is None or (current.platform != DEFAULT_PLATFORM and key[0] == DEFAULT_PLATFORM):
            by_content[key[1]] = ref
    return by_memory, by_content


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


def _has_content(item: NewItem) -> bool:
    return any(getattr(item, f) for f in TEXT_FIELDS) or any(
        v.strip() for f in ARRAY_FIELDS for v in getattr(item, f) if isinstance(v, str))


def _import_table(ctx: _Context, source: sqlite3.Connection, table: str, columns: Sequence[str], counter: str,
                  build: Callable[[sqlite3.Row, _Context], NewItem | None]) -> None:
    pending: list[NewItem] = []
    try:
        for row in _select(source, table, columns):
            item = build(row, ctx)
            if item is None:  # a row of an excluded project
                ctx.report.skipped_excluded += 1
                continue
            clean = scrub_item(item)  # <private> parts and secrets never reach the store
            if _has_content(item) and not _has_content(clean):
                ctx.report.skip(table, row["id"], "nothing is left once its <private> parts are removed")
                continue
            pending.append(clean)
            if len(pending) >= BATCH_SIZE:
                _add(ctx, table, counter, pending)
    except ValidationError:  # the source cannot be read further: keep what was read before
        _add(ctx, table, counter, pending)
        raise
    _add(ctx, table, counter, pending)


def _add(ctx: _Context, table: str, counter: str, pending: list[NewItem]) -> None:
    """Add a batch in one transaction. When it is refused (nothing of it was written), drop the rows validation
    refuses and retry; if the store still refuses, add row by row and skip the refused rows."""
    if not pending:
        return
    try:
        results = ctx.store.add_items(pending)
    except ValidationError:
        valid = []
        for item in pending:
            try:
                valid.append(validate_item(item))
            except ValidationError as exc:
                ctx.report.skip(table, _row_id(item), str(exc))
        try:
            results = ctx.store.add_items(valid)
        except ValidationError:
            results = []
            for item in valid:
                try:
                    results.extend(ctx.store.add_items([item]))
                except ValidationError as exc:
                    ctx.report.skip(table, _row_id(item), str(exc))
    for result in results:
        if result.created:
            setattr(ctx.report, counter, getattr(ctx.report, counter) + 1)
        elif result.forgotten:
            ctx.report.forgotten += 1
        else:
            ctx.report.existing += 1
    pending.clear()


def _row_id(item: NewItem) -> str:
    return item.source[2].rpartition(":")[2] if item.source else "?"


def _apply_merges(store: ImportStore, merges: dict[str, str], report: ClaudeMemReport) -> None:
    if not merges:
        return
    current = {p.name: p.merged_into_project for p in store.projects()}
    for source, into in merges.items():
        if source not in current or current[source] == into:
            continue
        if current[source] is not None:
            report.notes.append(f"project {source} stays merged into {current[source]} (claude-mem says {into})")
            continue
        name, hops = into, 0
        while name is not None and name != source and hops < 32:
            name, hops = current.get(name), hops + 1
        if name == source:
            report.notes.append(f"project {source} not merged into {into}: that would make a cycle")
            continue
        try:
            store.merge_project(source, into)
        except (NotFoundError, ValidationError) as exc:
            report.notes.append(f"project {source} not merged into {into}: {exc}")
            continue
        current[source] = into
        report.notes.append(f"project {source} merged into {into}")
