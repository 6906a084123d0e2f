"""Store methods for hook events the worker accepted but has not processed yet (table ``ingest_events``).

An event is committed before the worker answers 202, so an accepted event survives a crash or a restart.
Mixed into ``Store`` so the store stays the only owner of connections and SQL.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Sequence
from typing import Any

from memcairn.core.clock import now_ms
from memcairn.core.errors import ValidationError
from memcairn.core.models import AddResult, NewItem
from memcairn.store.db import atomic
from memcairn.store.records import IngestEvent, event_kind  # noqa: F401 - event_kind: re-exported
from memcairn.store.validation import validate_item
from memcairn.wire.fastjson import NonFiniteNumber, loads, nonfinite_path

NOTICE_REPEAT_MS = 60_000
PROMPT_DEDUPE_MS = 60_000  # the same prompt text again within a minute is a retried hook, not a new prompt

INGEST_STATUSES: tuple[str, ...] = ("pending", "done", "failed")
SET_ASIDE = "set aside"  # how the error of an event whose payload was no JSON SQLite reads begins

log = logging.getLogger("memcairn.store")


def _json_field(path: str, function: str = "json_extract") -> str:
    """SQL reading ``path`` of a row's payload, NULL for a payload SQLite cannot read as JSON (a row an earlier
    release wrote with ``Infinity``, or one written by hand): such a row must not fail every query over its
    session (``malformed JSON``), which stopped all capture."""
    return f"CASE WHEN json_valid(payload) THEN {function}(payload, '{path}') END"


def _failed_where(matching: str | None) -> tuple[str, tuple[str, ...]]:
    if matching is None:
        return "status = 'failed'", ()
    return "status = 'failed' AND instr(error, ?) > 0", (matching,)


def _row_to_event(row: sqlite3.Row) -> IngestEvent:
    try:
        payload = loads(row["payload"], nonfinite="text")  # never an infinity the pipeline would write back
    except (TypeError, ValueError, RecursionError):
        payload = {"_raw": row["payload"]}
    return IngestEvent(
        id=row["id"], session_id=row["session_id"], platform_source=row["platform_source"],
        event_type=row["event_type"], tool_use_id=row["tool_use_id"],
        payload=payload if isinstance(payload, dict) else {"_raw": payload}, status=row["status"],
        attempts=row["attempts"], created_at_epoch=row["created_at_epoch"], updated_at_epoch=row["updated_at_epoch"],
        source_key=row["source_key"], error=row["error"],
    )


def _first_nonfinite(value: Any) -> float | None:
    stack = [value]
    while stack:
        current = stack.pop()
        if isinstance(current, float) and current - current != 0.0:
            return current
        if isinstance(current, dict):
            stack.extend(reversed(list(current.values())))
        elif isinstance(current, list | tuple):
            stack.extend(reversed(current))
    return None


def _readable(text: Any) -> tuple[str, str]:
    """A payload SQLite cannot read, as JSON it can, and what was wrong with it."""
    try:
        loads(text, nonfinite="refuse")
    except NonFiniteNumber as exc:
        kept = loads(text, nonfinite="text")
        why = f"its payload held the number {exc.number} at {exc.where}, which is no JSON; kept as text"
        return json.dumps(kept, ensure_ascii=False, sort_keys=True), why
    except (TypeError, ValueError, RecursionError) as exc:
        why = f"its payload is not JSON ({str(exc)[:200]}); kept whole as text under _raw"
        return json.dumps({"_raw": text if isinstance(text, str) else repr(text)}), why
    # Python reads it but SQLite does not (deeper than SQLite's 2,000 levels, say): kept whole as text
    return json.dumps({"_raw": text}), "its payload is JSON SQLite cannot read; kept whole as text under _raw"


class IngestStateMixin:
    _conn: sqlite3.Connection

    def enqueue_ingest_event(self, session_id: str, platform_source: str, event_type: str,
                             payload: dict[str, Any], tool_use_id: str | None = None,
                             source_key: str | None = None, event_key: str | None = None) -> tuple[int, bool]:
        """Record an event as pending; return (id, created). A repeat is recognised and returns the id
        recorded first with ``created`` False: the same tool call (session, event type, ``tool_use_id``), the
        same replayed line (``source_key``), the same hook event (``event_key``: sent, answered too late, and
        spooled), or the same prompt text of a session within a minute."""
        now = now_ms()
        try:
            body = json.dumps(payload, ensure_ascii=False, sort_keys=True, default=str, allow_nan=False)
        except ValueError:  # NaN or an infinity: json would write Infinity, which no JSON reader takes back
            raise ValidationError(str(NonFiniteNumber(repr(_first_nonfinite(payload)), nonfinite_path(payload))))\
                from None
        with atomic(self._conn) as conn:
            prompt = payload.get("prompt") if event_kind(event_type, payload) == "user_prompt" else None
            if isinstance(prompt, str) and source_key is None:
                same = conn.execute(
                    "SELECT id FROM ingest_events WHERE platform_source = ? AND session_id = ? AND event_type = ? "
                    f"AND created_at_epoch >= ? AND {_json_field('$.prompt')} = ? ORDER BY id DESC LIMIT 1",
                    (platform_source, session_id, event_type, now - PROMPT_DEDUPE_MS, prompt),
                ).fetchone()
                if same is not None:
                    return same[0], False
            if event_key is not None:
                same = conn.execute("SELECT id FROM ingest_events WHERE event_key = ?", (event_key,)).fetchone()
                if same is not None:
                    return same[0], False
            row = conn.execute(
                "INSERT INTO ingest_events(session_id, platform_source, event_type, tool_use_id, payload, "
                "source_key, event_key, created_at_epoch, updated_at_epoch) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT DO NOTHING RETURNING id",
                (session_id, platform_source, event_type, tool_use_id, body, source_key, event_key, now, now),
            ).fetchone()
            if row is not None:
                return row[0], True
            existing = conn.execute(
                "SELECT id FROM ingest_events WHERE (source_key IS NOT NULL AND source_key = ?) "
                "OR (event_key IS NOT NULL AND event_key = ?) "
                "OR (session_id = ? AND event_type = ? AND tool_use_id = ?) ORDER BY id LIMIT 1",
                (source_key, event_key, session_id, event_type, tool_use_id),
            ).fetchone()
        return existing[0], False

    def pending_ingest_events(self, limit: int = 100) -> list[IngestEvent]:
        """The oldest pending events. One whose payload SQLite cannot read as JSON is set aside first
        (``set_aside_malformed_ingest``): failed with the reason, never handed on."""
        rows = self._conn.execute(
            "SELECT *, json_valid(payload) AS sound FROM ingest_events WHERE status = 'pending' ORDER BY id LIMIT ?",
            (int(limit),)).fetchall()
        unsound = [r["id"] for r in rows if not r["sound"]]
        if unsound:
            self.set_aside_malformed_ingest(unsound)
        return [_row_to_event(r) for r in rows if r["sound"]]

    def set_aside_malformed_ingest(self, ids: Sequence[int] | None = None) -> list[str]:
        """Events whose payload SQLite cannot read as JSON (those of ``ids``, else every one: a scan of the
        queue): the payload is rewritten as JSON (a number no JSON holds, ``Infinity`` or ``1e999``, kept as its
        text; what is no JSON at all kept whole under ``_raw``), and a pending one is failed with the reason,
        so ``memcairn doctor --fix`` can queue it again. Returns what was done, one line per event."""
        sql = "SELECT id, status, payload FROM ingest_events WHERE NOT json_valid(payload)"
        params: list[int] = []
        if ids is not None:
            params = [int(i) for i in ids]
            sql += f" AND id IN ({','.join('?' * len(params))})"
        done: list[str] = []
        with atomic(self._conn) as conn:
            for event_id, status, text in conn.execute(sql, params).fetchall():
                body, why = _readable(text)
                reason = f"{SET_ASIDE}: {why}; `memcairn doctor --fix` queues it again"
                conn.execute(
                    "UPDATE ingest_events SET payload = ?, status = CASE WHEN status = 'pending' THEN 'failed' "
                    "ELSE status END, error = ?, updated_at_epoch = ? WHERE id = ?",
                    (body, reason, now_ms(), event_id))
                done.append(f"event {event_id} ({status}): {why}")
        for line in done:
            log.warning("hook event set aside: %s", line)
        return done

    def describe_malformed_ingest(self, limit: int = 3) -> list[str]:
        """What is wrong with the first events whose payload SQLite cannot read as JSON (a scan; changes nothing)."""
        rows = self._conn.execute(
            "SELECT id, status, payload FROM ingest_events WHERE NOT json_valid(payload) ORDER BY id LIMIT ?",
            (int(limit),)).fetchall()
        return [f"event {r[0]} ({r[1]}): {_readable(r[2])[1]}" for r in rows]

    def oldest_pending_ingest(self) -> dict[str, Any] | None:
        """The oldest pending event's id, type, attempts and last error (``memcairn doctor``)."""
        row = self._conn.execute(
            "SELECT id, event_type, attempts, error, created_at_epoch FROM ingest_events WHERE status = 'pending' "
            "ORDER BY id LIMIT 1").fetchone()
        return None if row is None else {"id": row[0], "event_type": row[1], "attempts": row[2], "error": row[3],
                                         "created_at_epoch": row[4]}

    def malformed_ingest_count(self) -> int:
        """Events whose payload SQLite cannot read as JSON (a scan of the queue: ``memcairn doctor``)."""
        return self._conn.execute("SELECT COUNT(*) FROM ingest_events WHERE NOT json_valid(payload)").fetchone()[0]

    def ingest_backlog(self) -> dict[str, Any]:
        """Pending and failed counts and the oldest pending event's time: seeks on the status index, cheap
        enough for ``/api/health``."""
        pending = self._conn.execute("SELECT COUNT(*) FROM ingest_events WHERE status = 'pending'").fetchone()[0]
        failed = self._conn.execute("SELECT COUNT(*) FROM ingest_events WHERE status = 'failed'").fetchone()[0]
        oldest = self._conn.execute(
            "SELECT created_at_epoch FROM ingest_events WHERE status = 'pending' ORDER BY id LIMIT 1").fetchone()
        return {"pending": pending, "failed": failed, "oldest_pending_epoch": oldest[0] if oldest else None}

    def mark_ingest_event(self, event_id: int, status: str, error: str | None = None) -> None:
        """Set an event's status (``done`` or ``failed``, or back to ``pending``) and count the attempt."""
        if status not in INGEST_STATUSES:
            raise ValueError(f"unknown ingest status {status!r}; use one of {', '.join(INGEST_STATUSES)}")
        with atomic(self._conn) as conn:
            conn.execute(
                "UPDATE ingest_events SET status = ?, attempts = attempts + 1, updated_at_epoch = ?, error = ? "
                "WHERE id = ?",
                (status, now_ms(), error, int(event_id)),
            )

    def complete_ingest(self, event_ids: Sequence[int], items: Sequence[NewItem], *,
                        prompt_session: tuple[str, str, str] | None = None,
                        end_session: tuple[str, str, str, int] | None = None,
                        replaces: Sequence[int] = ()) -> list[AddResult] | None:
        """Store what a batch of events produced and mark the events done, in one transaction.

        This is what makes processing exactly-once: the items and the ``done`` marks commit together, and
        when another processor finished any of these events first, nothing is written and None is returned.
        ``prompt_session`` (platform, agent session id, project) counts a prompt on its session.
        ``end_session`` (platform, agent session id, project, ended at epoch ms) marks the session completed,
        creating it when it was never seen, in the same transaction: a session end is never done without it.
        ``replaces`` names items the new ones supersede (a continued turn's earlier summary): they are deleted in
        the same transaction, unless one of them is what an item deduplicated to.
        """
        checked = [validate_item(item) for item in items]
        ids = [int(i) for i in event_ids]
        now = now_ms()
        results: list[AddResult] = []
        deleted: list[int] = []
        try:
            with atomic(self._conn) as conn:
                marks = ",".join("?" * len(ids))
                pending = conn.execute(
                    f"SELECT COUNT(*) FROM ingest_events WHERE status = 'pending' AND id IN ({marks})", ids
                ).fetchone()[0]
                if pending != len(set(ids)):
                    return None
                if prompt_session is not None:
                    platform, session, project = prompt_session
                    self._session_id(conn, self._project_id(conn, project), session, platform, now)
                    conn.execute(
                        "UPDATE sessions SET prompt_count = prompt_count + 1 WHERE platform_source = ? "
                        "AND agent_session_id = ?", (platform, session))
                for item in checked:
                    results.append(self._insert(conn, item))
                kept = {r.id for r in results}
                heir = results[0].id if results else None
                for old in dict.fromkeys(int(i) for i in replaces):
                    if old in kept:
                        continue
                    # the steps behind a superseded memory stand behind its successor (a delete would cascade)
                    conn.execute("UPDATE evidence SET item_id = ? WHERE item_id = ?", (heir, old))
                    if conn.execute("DELETE FROM memory_items WHERE id = ?", (old,)).rowcount:
                        deleted.append(old)
                if end_session is not None:
                    platform, session, project, ended = end_session
                    self._session_id(conn, self._project_id(conn, project), session, platform, ended)
                    self._close_session(conn, session, platform, "completed", ended)
                conn.execute(
                    f"UPDATE ingest_events SET status = 'done', attempts = attempts + 1, updated_at_epoch = ? "
                    f"WHERE id IN ({marks})", [now, *ids])
        except BaseException:
            self._project_ids.clear()
            raise
        if deleted:
            self._notify("deleted", deleted)
        self._notify("added", [r.id for r in results if r.created])
        return results

    def session_prompt_count(self, platform_source: str, session_id: str) -> int:
        row = self._conn.execute(
            "SELECT prompt_count FROM sessions WHERE platform_source = ? AND agent_session_id = ?",
            (platform_source, session_id),
        ).fetchone()
        return int(row[0]) if row else 0

    def session_project(self, platform_source: str, session_id: str) -> str | None:
        """The project a session was recorded in (its first event's), None when it has no row yet."""
        row = self._conn.execute(
            "SELECT p.name FROM sessions s JOIN projects p ON p.id = s.project_id "
            "WHERE s.platform_source = ? AND s.agent_session_id = ?",
            (platform_source, session_id),
        ).fetchone()
        return str(row[0]) if row else None

    def session_events(self, platform_source: str, session_id: str, *, after_id: int = 0,
                       before_id: int | None = None, event_type: str | None = None) -> list[IngestEvent]:
        """Events of one session in order, between two ids (exclusive), of one queue type if given."""
        sql = "SELECT * FROM ingest_events WHERE platform_source = ? AND session_id = ? AND id > ?"
        params: list[Any] = [platform_source, session_id, int(after_id)]
        if before_id is not None:
            sql += " AND id < ?"
            params.append(int(before_id))
        if event_type is not None:
            sql += " AND event_type = ?"
            params.append(event_type)
        return [_row_to_event(r) for r in self._conn.execute(sql + " ORDER BY id", params)]

    def earlier_session_start(self, platform_source: str, session_id: str, before_epoch: int) -> int | None:
        """When the worker accepted this session's last SessionStart event before ``before_epoch`` whose context
        reached the agent; None when it has none (a session captured without its start, one whose events were
        never recorded, or whose every start went without its context).

        The hook's ``context_delivered`` field says whether the start's context reached the agent: a start
        whose context request failed or timed out (``false``) is passed over, since its transcript holds no
        context to replay. A start recorded without the field (an older hook) counts. A start that was given
        the one-line resume answer counts too: that answer is only given after an earlier start delivered the
        context, which the transcript replays, so a resume after a resume stays one line."""
        row = self._conn.execute(
            "SELECT MAX(created_at_epoch) FROM ingest_events WHERE platform_source = ? AND session_id = ? "
            f"AND event_type = 'session_init' AND {_json_field('$.event')} = 'session_start' "
            f"AND {_json_field('$.context_delivered', 'json_type')} IS NOT 'false' "
            "AND created_at_epoch < ?",
            (platform_source, session_id, int(before_epoch)),
        ).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def last_prompt_event(self, platform_source: str, session_id: str, before_id: int, *,
                          started_at: int | None = None) -> IngestEvent | None:
        """The session's last prompt event before ``before_id``: the prompt of the turn an event queued there
        belongs to, by arrival order.

        ``started_at`` (epoch ms: when the hook of an event that may have arrived late started, the
        ``hook_started_at`` of ``hooks.events`` bounded by its receipt) picks the turn by the hooks' own clock
        instead: the last prompt event before ``before_id`` whose hook started at or before it, passing over later
        prompts that arrived first (an async PostToolUse hook can be overtaken by the next UserPromptSubmit). A
        prompt event without a stamp (an older hook, an import) is taken where it stands, as arrival order would;
        a stamp is bounded by when the worker received its event, so a stamp in the future cannot move a prompt
        later.
        Should every earlier prompt have started after ``started_at`` (a clock stepped back), arrival order
        decides: a stamp never leaves an event outside every recorded turn.

        A walk down ``ix_ingest_events_session`` from ``before_id``, over this session's events only, that stops
        at the first prompt that qualifies (the turn's own, or the one before it): never a scan of the queue."""
        sql = ("SELECT * FROM ingest_events WHERE platform_source = ? AND session_id = ? AND id < ? "
               f"AND event_type = 'session_init' AND COALESCE({_json_field('$.event')}, 'user_prompt') "
               "= 'user_prompt' ")
        params: list[Any] = [platform_source, session_id, int(before_id)]
        if started_at is not None:
            row = self._conn.execute(
                sql + f"AND ({_json_field('$.hook_started_at', 'json_type')} IS NOT 'integer' "
                f"OR {_json_field('$.hook_started_at')} <= 0 "
                f"OR MIN({_json_field('$.hook_started_at')}, created_at_epoch) <= ?) "
                "ORDER BY id DESC LIMIT 1", [*params, int(started_at)]).fetchone()
            if row is not None:
                return _row_to_event(row)
        row = self._conn.execute(sql + "ORDER BY id DESC LIMIT 1", params).fetchone()
        return _row_to_event(row) if row else None

    def prune_ingest_events(self, older_than_epoch: int) -> int:
        """Delete processed events last touched before ``older_than_epoch`` (ms); return how many."""
        with atomic(self._conn) as conn:
            return conn.execute(
                "DELETE FROM ingest_events WHERE status = 'done' AND updated_at_epoch < ?", (int(older_than_epoch),)
            ).rowcount

    def live_hook_platforms(self, since_epoch: int) -> list[str]:
        """The agents whose own hooks sent an event since then (an import's replayed lines are not hooks)."""
        return [r[0] for r in self._conn.execute(
            "SELECT DISTINCT platform_source FROM ingest_events WHERE source_key IS NULL AND created_at_epoch >= ? "
            "ORDER BY platform_source", (int(since_epoch),))]

    def ingest_queue(self) -> dict[str, Any]:
        """Queue depth and the age of the oldest pending event, for stats, the stream and doctor."""
        counts = self.ingest_counts()
        oldest = self._conn.execute(
            "SELECT MIN(created_at_epoch) FROM ingest_events WHERE status = 'pending'").fetchone()[0]
        return {**counts, "oldest_pending_epoch": oldest}

    def requeue_failed_ingest(self, matching: str | None = None) -> int:
        """Give failed events another round of attempts (``memcairn doctor --fix``; the worker does it by
        itself for those whose error holds ``matching``, e.g. a full disk); return how many."""
        where, args = _failed_where(matching)
        with atomic(self._conn) as conn:
            return conn.execute(
                f"UPDATE ingest_events SET status = 'pending', attempts = 0, updated_at_epoch = ? WHERE {where}",
                (now_ms(), *args)).rowcount

    def failed_ingest_count(self, matching: str | None = None) -> int:
        """Failed events, or those whose error holds ``matching``."""
        where, args = _failed_where(matching)
        return self._conn.execute(f"SELECT COUNT(*) FROM ingest_events WHERE {where}", args).fetchone()[0]

    def failed_ingest_errors(self, limit: int = 3) -> list[str]:
        rows = self._conn.execute(
            "SELECT id, event_type, error FROM ingest_events WHERE status = 'failed' ORDER BY id DESC LIMIT ?",
            (int(limit),)).fetchall()
        return [f"event {r[0]} ({r[1]}): {r[2] or 'no error recorded'}" for r in rows]

    def pending_capture_notices(self) -> list[str]:
        """Warnings not shown at a SessionStart yet (read only: doctor does not mark them)."""
        return [r[0] for r in self._conn.execute(
            "SELECT message FROM capture_notices WHERE shown_at_epoch IS NULL ORDER BY id")]

    # -- model usage and capture notices ----------------------------------------------------------
    def record_usage(self, usage: Any, session_id: str | None) -> None:
        with atomic(self._conn) as conn:
            conn.execute(
                "INSERT INTO llm_usage(session_id, backend, model, input_tokens, output_tokens, created_at_epoch) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (session_id, usage.backend, usage.model, int(usage.input_tokens), int(usage.output_tokens),
                 now_ms()),
            )

    def tokens_spent(self, *, session_id: str | None = None, since_epoch: int | None = None) -> int:
        sql = "SELECT COALESCE(SUM(input_tokens + output_tokens), 0) FROM llm_usage WHERE 1 = 1"
        params: list[Any] = []
        if session_id is not None:
            sql += " AND session_id = ?"
            params.append(session_id)
        if since_epoch is not None:
            sql += " AND created_at_epoch >= ?"
            params.append(int(since_epoch))
        return int(self._conn.execute(sql, params).fetchone()[0])

    def add_capture_notice(self, kind: str, message: str, project: str | None = None) -> None:
        """Keep a warning for the next SessionStart; one unshown warning of a kind per project is kept (the
        first: it holds the failure's own words, later ones often only that it was not retried)."""
        with atomic(self._conn) as conn:
            seen = conn.execute(
                "SELECT 1 FROM capture_notices WHERE shown_at_epoch IS NULL AND kind = ? AND project IS ?",
                (kind, project)).fetchone()
            if seen is None:
                conn.execute(
                    "INSERT INTO capture_notices(kind, message, project, created_at_epoch) VALUES (?, ?, ?, ?)",
                    (kind, message, project, now_ms()))

    def take_capture_notices(self, projects: Sequence[str] | None = None, *, mark: bool = True) -> list[str]:
        """Warnings for these projects (and those of no project) not shown yet, oldest first, marked shown
        (unless ``mark`` is false: a read-only look). Ones shown in the last minute come back too: a
        SessionStart asks twice (for the model and, in colour, for the person) and both should carry them."""
        now = now_ms()
        sql = "SELECT id, message, shown_at_epoch FROM capture_notices WHERE (shown_at_epoch IS NULL " \
              "OR shown_at_epoch >= ?)"
        params: list[Any] = [now - NOTICE_REPEAT_MS]
        if projects:
            sql += f" AND (project IS NULL OR project IN ({','.join('?' * len(projects))}))"
            params += list(projects)
        rows = self._conn.execute(sql + " ORDER BY id", params).fetchall()
        fresh = [(now, r[0]) for r in rows if r[2] is None]
        if fresh and mark:
            with atomic(self._conn) as conn:
                conn.executemany("UPDATE capture_notices SET shown_at_epoch = ? WHERE id = ?", fresh)
        return [r[1] for r in rows]

    def ingest_counts(self) -> dict[str, int]:
        counts = {s: 0 for s in INGEST_STATUSES}
        counts.update({r[0]: r[1] for r in self._conn.execute(
            "SELECT status, COUNT(*) FROM ingest_events GROUP BY status"
        )})
        return counts
