"""The ingest queue: events are accepted in one short transaction and stored as items later, exactly once.

``enqueue`` (``POST /v1/events``) validates each event, removes ``<private>`` parts and secrets and hashes it
*before* anything is written (so the queue never holds what the items may not), then commits the batch as
``ingest_queue`` rows (content, under row-level security) with one ``ingest_jobs`` row each (ids only), in one
transaction of the caller's tenant; the caller answers 202 with the queue rows' ids. An ``Idempotency-Key``
is claimed in that transaction: a retry gets the same ids back, also while the first request still runs (the
claim row makes it wait), and the key with another batch is refused.

``consume`` is one consumer step: in one transaction it claims the oldest waiting jobs with ``SELECT ... FOR
UPDATE SKIP LOCKED`` (so any number of consumers, in any number of server processes, share the queue and
never take the same job; the jobs are under row-level security, so the claim, the failure mark and the lag are
the owner's functions of migration 10, which return ids and counts only), reads their events tenant by tenant
(entering each tenant through a job it claimed, ``memcairn_enter_job_tenant`` of migration 11: row-level security
binds the consumer as it binds a request), stores them through
``TeamStore.insert_many`` (the dedupe by project and content hash, forgotten content refused as a capture is,
the audit row under the key and request that sent it, a fixed handful of statements per tenant whatever the
batch's size) and deletes the queue rows, their jobs with them. A crash before the commit leaves every claimed
job waiting and its items unstored; after it, nothing is left to do: no acknowledged event is lost and none is
stored twice. A batch that fails for a reason other than the connection is retried job by job; a job that fails
on its own is kept with ``failed_at`` and its error (``lag`` counts them) instead of being retried for ever.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from memcairn.capture.single_event import HookEvent, admitted, memories
from memcairn.core.clock import now_ms
from memcairn.core.errors import MemcairnError, NotFoundError, ValidationError
from memcairn.core.models import NewItem
from memcairn.pgstore import item_fields
from memcairn.pgstore.audit import Actor
from memcairn.pgstore.db import Pool, enter_by, tenant_transaction
from memcairn.pgstore.items import Prepared, Saved, TeamStore, prepare
from memcairn.wire.fastjson import nonfinite_path

CLAIM = 100  # jobs per consumer transaction
MAX_ERROR_CHARS = 500


class IdempotencyConflict(MemcairnError):
    """An Idempotency-Key sent again with another batch (HTTP 409)."""


@dataclass(frozen=True)
class Queued:
    ids: list[int | None]  # the queue rows, one per event, in the batch's order (None: a skipped tool's)
    replayed: bool  # an earlier request with the same Idempotency-Key queued them


@dataclass
class Consumed:
    jobs: int = 0  # jobs settled (stored, refused as forgotten, or marked failed)
    stored: list[Saved] = field(default_factory=list)
    failed: int = 0


@dataclass(frozen=True)
class Lag:
    pending: int
    oldest_seconds: float
    failed: int

    def as_dict(self) -> dict[str, float | int]:
        return {"pending": self.pending, "oldest_pending_seconds": round(self.oldest_seconds, 3),
                "failed": self.failed}


Event = NewItem | HookEvent  # a memory made by the client, or a raw hook event the server compresses


def payload(event: Event) -> dict[str, Any] | None:
    """A queue row's content: the event as validated and scrubbed, with a hash of it and its time of
    acceptance; None for a hook event that is never observed (a skipped tool). ValidationError when invalid
    (also for NaN or an infinity, which jsonb cannot hold)."""
    if isinstance(event, HookEvent):
        kept = admitted(event)
        if kept is None:
            return None
        where = nonfinite_path(kept.body)
        if where is not None:
            raise ValidationError(f"the number at {where} is not a finite number: NaN, Infinity and numbers beyond "
                                  "+-1.8e308 are not JSON; send it as text or as a smaller number")
        hook = {"event": kept.kind, "project": kept.project, "session": kept.session, "platform": kept.platform,
                "body": kept.body}
        digest = hashlib.sha256(json.dumps(hook, sort_keys=True, default=str).encode()).hexdigest()
        return {"hook": hook, "hash": digest, "epoch": kept.at_epoch or now_ms()}
    ready = prepare(event)
    item = ready.item
    return {"memory": {"project": item.project, "kind": item.kind, "type": item.type, "title": item.title,
                       "text": item.text, "session": item.session, "platform": item.platform_source,
                       **item_fields.event_fields(item)},
            "hash": ready.digest, "epoch": ready.epoch}


def from_payload(row: dict[str, Any]) -> list[Prepared]:
    """The items a queue row's content makes: its memory, or what the offline extractor observes in its hook
    event (nothing, one item or several), each validated and scrubbed again as every stored item is."""
    epoch = int(row["epoch"])
    if "hook" in row:
        h = row["hook"]
        event = HookEvent(h["event"], h["project"], h["session"], h["platform"], h["body"], epoch)
        return [prepare(item) for item in memories(event, epoch)]
    m = row["memory"]
    item = NewItem(project=m["project"], kind=m["kind"], type=m["type"], title=m["title"], text=m["text"],
                   session=m["session"], platform_source=m["platform"], created_at_epoch=epoch,
                   **{name: m[name] for name in item_fields.WRITTEN_NAMES if isinstance(m.get(name), dict)})
    return [Prepared(item, str(row["hash"]), epoch)]


def enqueue(pool: Pool, tenant_id: int, events: Sequence[Event], *, pin: int | None = None,
            actor: Actor | None = None, idempotency_key: str | None = None) -> Queued:
    """Queue a batch of events for the tenant (all or none); one id per event, None for a hook event that is
    never observed. ValidationError for an invalid event, NotFoundError when a pinned key names another
    project, IdempotencyConflict for a key reused."""
    contents = [payload(event) for event in events]
    kept = [c for c in contents if c is not None]
    fingerprint = hashlib.sha256("\n".join(f"{e.project}\x00{c['hash'] if c else '-'}"
                                           for e, c in zip(events, contents, strict=True)).encode()).hexdigest()
    who = actor or Actor()
    with pool.connection() as conn:
        try:
            with tenant_transaction(conn, tenant_id) as cur:
                if pin is not None:
                    row = cur.execute("SELECT name FROM projects WHERE tenant_id = %s AND id = %s",
                                      (tenant_id, pin)).fetchone()
                    if row is None or any(e.project != row[0] for e in events):
                        raise NotFoundError("this key may only write to its own project")
                # the rows, their jobs and the key's claim with its answer in one statement
                row = cur.execute(_ENQUEUE, {
                    "t": tenant_id, "pin": pin, "key_id": who.key_id, "request": who.request_id,
                    "payloads": [Jsonb(c) for c in kept], "key": idempotency_key,
                    "hash": fingerprint, "positions": [n for n, c in enumerate(contents) if c is not None],
                    "count": len(contents)}).fetchone()
                assert row is not None
                ids, claimed = [None if i is None else int(i) for i in row[0]], bool(row[1])
                if idempotency_key is not None and not claimed:
                    raise _Claimed  # rolls the rows back: an earlier request holds the key
            return Queued(ids, False)
        except _Claimed:
            pass
        assert idempotency_key is not None
        with tenant_transaction(conn, tenant_id) as cur:
            found = cur.execute("SELECT request_hash, response FROM idempotency WHERE tenant_id = %s AND key = %s",
                                (tenant_id, idempotency_key)).fetchone()
    assert found is not None
    if found[0] != fingerprint:
        raise IdempotencyConflict(f"Idempotency-Key {idempotency_key!r} was used for another batch; "
                                  "use a new key for new events")
    # a key answered before the queue existed (migration 5) kept the stored items, no queue ids: nothing to add
    answered = found[1].get("queued", []) if isinstance(found[1], dict) else []
    return Queued([None if i is None else int(i) for i in answered], True)


class _Claimed(Exception):
    """The Idempotency-Key is another request's (committed, or committed while this one waited for it)."""


# With a key, the claim is an insert that waits for a concurrent request holding the same key to end; when that
# one committed, nothing is claimed (k is empty) and the caller rolls its rows back and answers with the first.
_ENQUEUE = """
WITH q AS (
  INSERT INTO ingest_queue (tenant_id, pin, key_id, request_id, payload)
  SELECT %(t)s, %(pin)s, %(key_id)s, %(request)s, p FROM unnest(%(payloads)s::jsonb[]) WITH ORDINALITY AS u(p, n)
  ORDER BY n RETURNING id, tenant_id),
j AS (INSERT INTO ingest_jobs (queue_id, tenant_id) SELECT id, tenant_id FROM q),
-- one id per event, in the batch's order: the queue row's, NULL where nothing was queued (a skipped tool)
ids AS (SELECT array_agg(q.id ORDER BY slot.n) AS queued FROM generate_series(0, %(count)s - 1) AS slot(n)
  LEFT JOIN (SELECT id, row_number() OVER (ORDER BY id) - 1 AS k FROM q) q
    ON q.k = array_position(%(positions)s::int[], slot.n::int) - 1),
k AS (INSERT INTO idempotency (tenant_id, key, request_hash, response)
  SELECT %(t)s, %(key)s::text, %(hash)s, jsonb_build_object('queued', to_jsonb(ids.queued)) FROM ids
  WHERE %(key)s::text IS NOT NULL
  ON CONFLICT (tenant_id, key) DO NOTHING RETURNING 1)
SELECT (SELECT queued FROM ids), EXISTS (SELECT 1 FROM k)
"""


def consume(team: TeamStore, limit: int = CLAIM) -> Consumed:
    """Claim up to ``limit`` of the oldest waiting jobs and store their events; what was settled (no jobs: 0).
    Connection errors propagate with nothing settled (the jobs wait for the next attempt)."""
    jobs: list[tuple[int, int]] = []
    with team.pool.connection() as conn:
        try:
            with conn.transaction(), conn.cursor() as cur:
                jobs = cur.execute("SELECT queue_id, tenant_id FROM memcairn_claim_ingest_jobs(%s)",
                                   (limit,)).fetchall()
                done = _store(team, cur, jobs)
        except psycopg.OperationalError:
            raise
        except Exception:  # noqa: BLE001 - a job that cannot be stored (a payload it cannot read): each alone
            done = _one_by_one(team, conn, [int(j[0]) for j in jobs])
    if any(s.created for s in done.stored):
        team.written.set()  # wakes the embedding task
    return done


def _store(team: TeamStore, cur: psycopg.Cursor, jobs: Sequence[tuple[int, int]]) -> Consumed:
    by_tenant: dict[int, list[int]] = defaultdict(list)
    for queue_id, tenant_id in jobs:
        by_tenant[int(tenant_id)].append(int(queue_id))
    done = Consumed(jobs=len(jobs))
    for tenant_id, ids in by_tenant.items():
        # entered through a job this transaction claimed (the owner's function; no key is at hand)
        if not enter_by(cur, tenant_id, "SELECT memcairn_enter_job_tenant(%s)", (ids[0],)):
            raise RuntimeError(f"job {ids[0]} is no longer this consumer's")
        rows = cur.execute("SELECT id, pin, key_id, request_id, payload FROM ingest_queue WHERE tenant_id = %s"
                           " AND id = ANY(%s) ORDER BY id", (tenant_id, ids)).fetchall()
        done.stored += team.insert_many(cur, tenant_id, [(ready, pin, Actor(key_id, request_id))
                                                         for _, pin, key_id, request_id, content in rows
                                                         for ready in from_payload(content)])
        cur.execute("DELETE FROM ingest_queue WHERE tenant_id = %s AND id = ANY(%s)", (tenant_id, ids))
    return done


def _one_by_one(team: TeamStore, conn: psycopg.Connection, ids: Sequence[int]) -> Consumed:
    """Each job of a failed batch in a transaction of its own; one that fails alone is marked failed."""
    done = Consumed()
    for queue_id in ids:
        try:
            with conn.transaction(), conn.cursor() as cur:
                job = cur.execute("SELECT queue_id, tenant_id FROM memcairn_claim_ingest_job(%s)",
                                  (queue_id,)).fetchall()
                one = _store(team, cur, job)
        except psycopg.OperationalError:
            raise
        except Exception as exc:  # noqa: BLE001 - whatever this job's failure, it fails alone, set aside
            with conn.transaction():
                conn.execute("SELECT memcairn_fail_ingest_job(%s, %s)",
                             (queue_id, f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]))
            done.jobs += 1
            done.failed += 1
            continue
        done.jobs += one.jobs
        done.stored += one.stored
    return done


def drain(team: TeamStore, limit: int = CLAIM) -> int:
    """Consume until no job waits (tests and in-process users); the jobs settled."""
    total = 0
    while done := consume(team, limit).jobs:
        total += done
    return total


def lag(conn: psycopg.Connection) -> Lag:
    """Jobs waiting and the age of the oldest, and jobs failed, over all tenants (counts only, no content)."""
    row = conn.execute("SELECT coalesce(sum(pending), 0), coalesce(max(oldest_seconds), 0), coalesce(sum(failed), 0)"
                       " FROM memcairn_ingest_lag()").fetchone()
    assert row is not None
    return Lag(int(row[0]), float(row[1]), int(row[2]))
