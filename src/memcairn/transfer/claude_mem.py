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

import sqlite3
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from memcairn.capture.admission import project_excluded, scrub_item
from memcairn.core.clock import now_ms
from memcairn.core.errors import NotFoundError, ValidationError
from memcairn.core.models import ARRAY_FIELDS, TEXT_FIELDS, NewItem
from memcairn.store.transfer_state import TransferSession
from memcairn.store.validation import validate_item
from memcairn.transfer.claude_mem_rows import (
    _OBSERVATION_COLUMNS,
    _PROMPT_COLUMNS,
    _SUMMARY_COLUMNS,
    DEFAULT_PLATFORM,
    UNKNOWN_PROJECT,
    ClaudeMemReport,
    Excluded,
    _Context,
    _name,
    _no_exclusions,
    _observation,
    _prompt,
    _SessionRef,
    _summary,
    normalize_platform,
    to_ms,
)
from memcairn.transfer.claude_mem_source import BATCH_SIZE, TABLES, _expr, _have, _reading, _select, database_key

if TYPE_CHECKING:
    from memcairn.store.protocols import ImportStore
    from memcairn.wire.config import Settings

STATUSES = ("active", "completed", "failed")
_SESSION_COLUMNS = ("content_session_id", "memory_session_id", "project", "platform_source", "started_at_epoch",
                    "completed_at_epoch", "started_at", "completed_at", "status")


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


# -- sessions -------------------------------------------------------------------------------------
def _import_sessions(ctx: _Context, source: sqlite3.Connection,
                     tables: set[str]) -> tuple[dict[str, _SessionRef], dict[str, _SessionRef]]:
    """Create the sessions; return them by memory_session_id and by content_session_id, as stored. Sessions of
    excluded projects are not created; their ids are kept in the context so that their rows are left out too."""
    store, report = ctx.store, ctx.report
    now = now_ms()
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
