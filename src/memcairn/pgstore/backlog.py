"""The embedding backlog: items committed without their vector, embedded later in batches.

A write (``TeamStore.add``/``add_batch``) commits its item with ``embedding`` NULL and a row in
``embedding_backlog`` in the same transaction, so it never waits for the model. ``embed_batch`` takes rows
fairly over the tenants (round robin, oldest first within each: ``pick``), reads their items, embeds them in
one call of the embedder and then, in one transaction, writes each vector and deletes its backlog row. That
row is the progress mark, like the local mirror's watermark but per item: items commit out of id order under
concurrent writers, so a single "embedded up to id N" would skip an item whose transaction committed after a
higher id had been embedded. A crash before that commit leaves the
rows in place and the batch is embedded again after the restart (its vectors were never stored, so no item is
stored twice or embedded twice to effect); a crash after it has nothing left to do. An item's vectors, one per
chunk of its text (``item_vectors``), are written whole, replacing any it had, and a forgotten item takes its
backlog row and its vectors with it (``ON DELETE CASCADE``).

Tenancy: the backlog rows hold item and tenant ids, never content, under row-level security like every tenant
table (migration 10). The task must see every tenant's backlog before it knows whom it acts for, so the pick and
the lag are two functions of the owner (``memcairn_backlog_pick``, ``memcairn_backlog_lag``, ``SECURITY DEFINER``)
that return ids, counts and ages only. Everything that touches an item — reading its title and text, writing its
vector, settling its backlog row — runs in a transaction of the tenant the backlog row names, entered through that
row (``memcairn_enter_backlog_tenant``, migration 11: no key is at hand), with the application role the requests
use, so row-level security binds the task exactly as it binds a request: a backlog row naming the wrong tenant
finds no item and writes nothing (its row is dropped as stale). No role with ``BYPASSRLS`` is needed, which also
keeps this working when the database's owner is an ordinary role, for which ``FORCE ROW LEVEL SECURITY`` holds as
well.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import psycopg

from memcairn.mirror.documents import chunk_text
from memcairn.pgstore.db import Pool, enter_by
from memcairn.pgstore.schema import EMBEDDING_DIM
from memcairn.vectors.base import Embedder

# Items per embedder call. A new item of a quiet tenant waits for the batch in flight and then its own, so the
# batch bounds that wait: on 2 shared cores (load 7-9) one model thread embedded 32-41 documents/s whether in
# batches of 16, 32 or 64, a batch of 64 taking 1.6-1.7 s and one of 32 about 0.9 s.
BATCH = 32


@dataclass(frozen=True)
class Lag:
    """How far the vectors are behind the items: backlog rows and the age of the oldest, in seconds; for the
    whole backlog (``lag``) also each waiting tenant's own, by tenant id (``tenants``)."""

    pending: int
    oldest_seconds: float
    tenants: dict[int, Lag] | None = field(default=None, compare=False)

    def as_dict(self) -> dict[str, float | int]:
        totals = {"pending": self.pending, "oldest_pending_seconds": round(self.oldest_seconds, 3)}
        return totals if self.tenants is None else {**totals, **tenant_lag_summary(self.tenants)}


def documents(title: str, text: str) -> list[str]:
    """What an item's vectors are computed from: its title and text, split as the local mirror splits a long
    field (``mirror.documents.chunk_text``: pieces of at most 1,000 characters, at most 12), so the model reads
    all of a long message and the texts are the ones the local mirror embeds (an embedding cache serves both)."""
    title, text = title.strip(), text.strip()
    return chunk_text(f"{title}. {text}" if title and text else text or title)


def vector_literal(values: Sequence[float]) -> str:
    if len(values) != EMBEDDING_DIM:
        raise ValueError(f"an embedding has {EMBEDDING_DIM} components, not {len(values)}")
    return "[" + ",".join(f"{float(v):.7g}" for v in values) + "]"


def lag(conn: psycopg.Connection) -> Lag:
    """The whole backlog's lag, with each tenant's (``/v1/health`` shows them as ``tenant_lag_summary``)."""
    tenants = lag_by_tenant(conn)
    return Lag(sum(x.pending for x in tenants.values()), max((x.oldest_seconds for x in tenants.values()),
                                                             default=0.0), tenants)


def lag_by_tenant(conn: psycopg.Connection) -> dict[int, Lag]:
    """The backlog of each tenant that has one, by tenant id. Ids only, and ``/v1/health`` (read without a key)
    shows only their summary; an exporter of per-tenant gauges reads this (or ``lag(conn).tenants``)."""
    return {int(t): Lag(int(n), float(age)) for t, n, age in conn.execute(
        "SELECT tenant_id, pending, oldest_seconds FROM memcairn_backlog_lag()")}


def tenant_lag_summary(lags: dict[int, Lag]) -> dict[str, float | int]:
    """What fairness looks like without naming a tenant: how many tenants wait, the largest one's backlog, and
    the longest any tenant's oldest item has waited."""
    return {"tenants_waiting": len(lags), "largest_tenant_pending": max((x.pending for x in lags.values()), default=0),
            "oldest_tenant_wait_seconds": round(max((x.oldest_seconds for x in lags.values()), default=0.0), 3)}


# Round robin over the tenants with waiting items, oldest first within each: every tenant's first waiting item,
# then every tenant's second, and so on, up to the batch (each tenant's rows are read from the primary key
# (tenant_id, item_id), a skip scan over the tenants). So a tenant uploading thousands of memories takes most of
# a batch but never keeps another tenant's new memory out of the next one. The query is the owner's function
# ``memcairn_backlog_pick`` (migration 10): the backlog is under row-level security.
_FAIR_PICK = "SELECT item_id, tenant_id FROM memcairn_backlog_pick(%(limit)s, %(busy)s::bigint[])"


def pick(conn: psycopg.Connection, limit: int = BATCH, busy: Collection[int] = ()) -> list[tuple[int, int]]:
    """The next batch, as (item id, tenant id), fairly over the tenants (``_FAIR_PICK``), leaving out ``busy``
    items (those another worker of this process is embedding now)."""
    return [(int(i), int(t)) for i, t in conn.execute(_FAIR_PICK, {"busy": list(busy), "limit": limit})]


def embed_batch(pool: Pool, embedder: Embedder, limit: int = BATCH) -> int:
    """Embed up to ``limit`` waiting items, taken fairly over the tenants (``pick``), and store their vectors;
    returns how many backlog rows were settled (0: nothing was waiting). Not safe to run in two places at once on
    one database (both would compute the same vectors; only the first write lands): the server runs one leader
    (``server/embedding.py``), whose workers pass the items they hold to ``pick`` and call ``embed_rows``."""
    with pool.connection() as conn:
        rows = pick(conn, limit)
    return embed_rows(pool, embedder, rows)


def embed_rows(pool: Pool, embedder: Embedder, rows: Sequence[tuple[int, int]]) -> int:
    """Embed the items of these backlog rows (item id, tenant id) and settle the rows; returns how many."""
    if not rows:
        return 0
    by_tenant: dict[int, list[int]] = defaultdict(list)
    for item_id, tenant_id in rows:
        by_tenant[tenant_id].append(item_id)
    with pool.connection() as conn:
        found: list[tuple[int, int, int, str]] = []  # tenant, item, chunk, document
        for tenant_id, ids in by_tenant.items():
            with _backlog_transaction(conn, tenant_id, ids) as cur:
                for item_id, title, text in cur.execute(
                        "SELECT id, title, text FROM items WHERE tenant_id = %s AND id = ANY(%s) ORDER BY id",
                        (tenant_id, ids)):
                    found += [(tenant_id, int(item_id), n, doc) for n, doc in enumerate(documents(title, text))]
    # no transaction is open while the model runs: writers and forgets never wait for it
    vectors = embedder.embed_documents([doc for *_, doc in found]) if found else []
    chunks: dict[int, list[tuple[int, str]]] = defaultdict(list)  # item -> (chunk, vector)
    for (_, item_id, n, _), vector in zip(found, vectors, strict=True):
        chunks[item_id].append((n, vector_literal(vector)))
    with pool.connection() as conn:
        for tenant_id, ids in by_tenant.items():
            with _backlog_transaction(conn, tenant_id, ids) as cur:
                mine = [i for i in ids if i in chunks]
                if mine:  # an item's vectors are replaced whole (a re-queued item may have fewer chunks now)
                    cur.execute("DELETE FROM item_vectors WHERE tenant_id = %s AND item_id = ANY(%s)",
                                (tenant_id, mine))
                    new = [(i, n, vec) for i in mine for n, vec in chunks[i]]
                    # with a change per item, which the servers' copies of its project follow
                    cur.execute(
                        "WITH written AS (INSERT INTO item_vectors (item_id, chunk, tenant_id, project_id, embedding)"
                        " SELECT v.id, v.chunk, i.tenant_id, i.project_id, v.vec::vector"
                        " FROM unnest(%s::bigint[], %s::smallint[], %s::text[]) AS v(id, chunk, vec)"
                        " JOIN items i ON i.id = v.id AND i.tenant_id = %s RETURNING item_id, project_id)"
                        " INSERT INTO changes (tenant_id, project_id, item_id, op)"
                        " SELECT DISTINCT %s::bigint, project_id, item_id, 'embedded' FROM written",
                        ([r[0] for r in new], [r[1] for r in new], [r[2] for r in new], tenant_id, tenant_id))
                # settled: embedded now, or no longer there for this tenant (forgotten, or a stale row)
                cur.execute("DELETE FROM embedding_backlog WHERE tenant_id = %s AND item_id = ANY(%s)",
                            (tenant_id, ids))
    return len(rows)


@contextmanager
def _backlog_transaction(conn: psycopg.Connection, tenant_id: int, items: Sequence[int]) -> Iterator[psycopg.Cursor]:
    """A transaction acting for the tenant while one of these backlog rows of it waits (the owner's
    ``memcairn_enter_backlog_tenant``); when none does, it acts for no tenant, so it reads and writes nothing."""
    with conn.transaction(), conn.cursor() as cur:
        enter_by(cur, tenant_id, "SELECT memcairn_enter_backlog_tenant(%s, %s::bigint[])", (tenant_id, list(items)))
        yield cur


def drain(pool: Pool, embedder: Embedder, limit: int = BATCH) -> int:
    """Embed everything waiting (in-process users: the LongMemEval bench, tests); returns the rows settled."""
    total = 0
    while done := embed_batch(pool, embedder, limit):
        total += done
    return total
