"""The ingest queue as an operator sees it (``memcairn server queue``): what waits and what failed, per tenant;
failed jobs retried or purged.

A job that failed on its own keeps ``failed_at`` and its error (``ingest.py``) and no consumer takes it again.
``retry`` clears both, so the running server's consumers take it at their next poll; if it fails again it is
marked failed again, as any job is (no loop). ``purge`` deletes the queue rows of failed jobs (their jobs go
with them, ``ON DELETE CASCADE``), one audit row ``ingest.purge`` per job. The ``idempotency`` row of the request
that queued an event is not touched: a client retrying that request is still answered with the ids it was given
first (``Idempotent-Replayed``), and the purged event is not queued again; the client sends it under a new key to
have it stored after all.

These are the owner's functions (the command line): the status reads ids, counts, times and errors only, never
a queue row's content. Every change selects and locks the jobs it acts on and checks what was asked for in the
same transaction, so an unknown tenant or job, or a job that is not failed, changes nothing. The owner may be
bound by row-level security (``--database`` with a role that owns the tables: ``FORCE ROW LEVEL SECURITY``), so
queue rows and audit rows are written while acting for their tenant (``db.act_as``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from memcairn.core.errors import NotFoundError, StoreError, ValidationError
from memcairn.pgstore.audit import Actor, audit
from memcairn.pgstore.db import act_as
from memcairn.pgstore.keys import tenant_named

LIST_LIMIT = 100  # failed jobs listed by default (the counts cover all of them)


@dataclass(frozen=True)
class TenantQueue:
    tenant: str
    waiting: int
    oldest_waiting_seconds: float
    failed: int


@dataclass(frozen=True)
class FailedJob:
    id: int  # the queue id, as POST /v1/events answered it
    tenant: str
    queued_at: datetime
    failed_at: datetime
    error: str


@dataclass(frozen=True)
class QueueStatus:
    tenants: list[TenantQueue]  # every tenant with a job (the one asked for, also without)
    failed: list[FailedJob]  # oldest first, at most the limit asked for

    def as_dict(self) -> dict[str, Any]:
        return {"tenants": [{"tenant": t.tenant, "waiting": t.waiting,
                             "oldest_waiting_seconds": round(t.oldest_waiting_seconds, 3), "failed": t.failed}
                            for t in self.tenants],
                "failed": [{"id": f.id, "tenant": f.tenant, "queued_at": f.queued_at.isoformat(),
                            "failed_at": f.failed_at.isoformat(), "error": f.error} for f in self.failed]}


def status(conn: psycopg.Connection, tenant: str | None = None, *, limit: int = LIST_LIMIT) -> QueueStatus:
    """Waiting and failed jobs per tenant and the failed jobs themselves (counts, times and errors only)."""
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")  # the counts and the list agree
        tid = None if tenant is None else tenant_named(conn, tenant)
        rows = conn.execute(
            "SELECT t.name, count(*) FILTER (WHERE j.failed_at IS NULL),"
            " coalesce(extract(epoch FROM now() - min(j.queued_at) FILTER (WHERE j.failed_at IS NULL)), 0),"
            " count(*) FILTER (WHERE j.failed_at IS NOT NULL)"
            " FROM ingest_jobs j JOIN tenants t ON t.id = j.tenant_id"
            " WHERE %(t)s::bigint IS NULL OR j.tenant_id = %(t)s GROUP BY t.name ORDER BY t.name",
            {"t": tid}).fetchall()
        failed = conn.execute(
            "SELECT j.queue_id, t.name, j.queued_at, j.failed_at, coalesce(j.error, '')"
            " FROM ingest_jobs j JOIN tenants t ON t.id = j.tenant_id"
            " WHERE j.failed_at IS NOT NULL AND (%(t)s::bigint IS NULL OR j.tenant_id = %(t)s)"
            " ORDER BY j.queue_id LIMIT %(n)s", {"t": tid, "n": limit}).fetchall()
    tenants = [TenantQueue(str(r[0]), int(r[1]), float(r[2]), int(r[3])) for r in rows]
    if tenant is not None and not tenants:
        tenants = [TenantQueue(tenant, 0, 0.0, 0)]
    return QueueStatus(tenants, [FailedJob(int(r[0]), str(r[1]), r[2], r[3], str(r[4])) for r in failed])


def retry(conn: psycopg.Connection, tenant: str | None = None, ids: Sequence[int] = (), *,
          actor: Actor | None = None) -> list[int]:
    """Make failed jobs wait again (all failed jobs, or the tenant's, or those of ``ids``); their queue ids.
    Each retry is audited (``ingest.retry``)."""
    with conn.transaction(), conn.cursor() as cur:
        chosen = _failed_jobs(cur, tenant, ids)
        cur.execute("UPDATE ingest_jobs SET failed_at = NULL, error = NULL WHERE queue_id = ANY(%s)",
                    ([q for q, _ in chosen],))
        _audit_each(cur, chosen, "ingest.retry", actor)
    return [q for q, _ in chosen]


def purge(conn: psycopg.Connection, tenant: str | None = None, ids: Sequence[int] = (), *,
          actor: Actor | None = None) -> list[int]:
    """Delete failed jobs with their queue rows (all failed, the tenant's, or those of ``ids``); their queue ids.
    Each purge is audited (``ingest.purge``); idempotency answers stay (see the module's note)."""
    with conn.transaction(), conn.cursor() as cur:
        chosen = _failed_jobs(cur, tenant, ids)
        for tid, queue_ids in _by_tenant(chosen).items():
            act_as(cur, tid)
            cur.execute("DELETE FROM ingest_queue WHERE tenant_id = %s AND id = ANY(%s)", (tid, queue_ids))
            if cur.rowcount != len(queue_ids):  # e.g. a role that row-level security hides them from
                raise StoreError(f"{len(queue_ids)} queue rows of tenant {tid} were to be purged but "
                                 f"{cur.rowcount} could be; nothing was purged")
        _audit_each(cur, chosen, "ingest.purge", actor)
    return [q for q, _ in chosen]


def _failed_jobs(cur: psycopg.Cursor, tenant: str | None, ids: Sequence[int]) -> list[tuple[int, int]]:
    """The failed jobs asked for, locked, as (queue id, tenant id) in queue order. NotFoundError for an unknown
    tenant or job or a job of another tenant, ValidationError for a job that is not failed (the caller's
    transaction then ends with nothing changed)."""
    tid = None if tenant is None else tenant_named(cur.connection, tenant)
    if not ids:
        return [(int(q), int(t)) for q, t in cur.execute(
            "SELECT queue_id, tenant_id FROM ingest_jobs WHERE failed_at IS NOT NULL"
            " AND (%(t)s::bigint IS NULL OR tenant_id = %(t)s) ORDER BY queue_id FOR UPDATE", {"t": tid})]
    wanted = sorted(set(ids))
    found = {int(q): (int(t), failed is not None) for q, t, failed in cur.execute(
        "SELECT queue_id, tenant_id, failed_at FROM ingest_jobs WHERE queue_id = ANY(%s) ORDER BY queue_id"
        " FOR UPDATE", (wanted,))}
    unknown = [q for q in wanted if q not in found or (tid is not None and found[q][0] != tid)]
    if unknown:
        where = "" if tid is None else f" of tenant {tenant!r}"
        raise NotFoundError(f"no queued job{where} with id {', '.join(map(str, unknown))}; nothing was changed"
                            " (`memcairn server queue status` lists the failed ones)")
    waiting = [q for q in wanted if not found[q][1]]
    if waiting:
        raise ValidationError(f"job {', '.join(map(str, waiting))} is waiting, not failed (a consumer takes it);"
                              " nothing was changed")
    return [(q, found[q][0]) for q in wanted]


def _by_tenant(jobs: Sequence[tuple[int, int]]) -> dict[int, list[int]]:
    grouped: dict[int, list[int]] = defaultdict(list)
    for queue_id, tid in jobs:
        grouped[tid].append(queue_id)
    return grouped


def _audit_each(cur: psycopg.Cursor, jobs: Sequence[tuple[int, int]], action: str, actor: Actor | None) -> None:
    """One audit row per job, written while acting for its tenant (the audit log has row-level security)."""
    for tid, queue_ids in _by_tenant(jobs).items():
        act_as(cur, tid)
        for queue_id in queue_ids:
            audit(cur, tid, action, actor, f"queue {queue_id}")
