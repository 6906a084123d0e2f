"""The embedding backlog: items committed without their vector, embedded later in batches.

A write (``TeamStore.add``/``add_batch``) commits its item with ``embedding`` NULL and a row in
``embedding_backlog`` in the same transaction, so it never waits for the model. ``embed_batch`` takes the
oldest rows, reads their items, embeds them in one call of the embedder and then, in one transaction, writes
each vector and deletes its backlog row. That row is the progress mark, like the local mirror's watermark but
per item: items commit out of id order under concurrent writers, so a single "embedded up to id N" would skip
an item whose transaction committed after a higher id had been embedded. A crash before that commit leaves the
rows in place and the batch is embedded again after the restart (its vectors were never stored, so no item is
stored twice or embedded twice to effect); a crash after it has nothing left to do. A vector is only written
where the item still has none (``embedding IS NULL``), and a forgotten item takes its backlog row with it
(``ON DELETE CASCADE``).

Tenancy: the backlog rows hold item and tenant ids, never content, and have no row-level security, because the
task must see every tenant's backlog before it knows whom it acts for. Everything that touches an item — reading
its title and text, writing its vector — runs in ``tenant_transaction`` for the tenant the backlog row names,
with the ``memcairn_app`` role the requests use, so row-level security binds the task exactly as it binds a
request: a backlog row naming the wrong tenant finds no item and writes nothing (its row is dropped as stale).
No role with ``BYPASSRLS`` and no ``SECURITY DEFINER`` function is needed, which also keeps this working when
the database's owner is an ordinary role, for which ``FORCE ROW LEVEL SECURITY`` holds as well.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg

from memcairn.pgstore.db import Pool, tenant_transaction
from memcairn.pgstore.schema import EMBEDDING_DIM
from memcairn.vectors.base import Embedder

BATCH = 64  # items per embedder call: the model batches them; a batch is about 0.3-0.6 s of CPU here


@dataclass(frozen=True)
class Lag:
    """How far the vectors are behind the items: backlog rows and the age of the oldest, in seconds."""

    pending: int
    oldest_seconds: float

    def as_dict(self) -> dict[str, float | int]:
        return {"pending": self.pending, "oldest_pending_seconds": round(self.oldest_seconds, 3)}


def document(title: str, text: str) -> str:
    """What an item's embedding is computed from."""
    return f"{title}\n{text}".strip()


def vector_literal(values: Sequence[float]) -> str:
    if len(values) != EMBEDDING_DIM:
        raise ValueError(f"an embedding has {EMBEDDING_DIM} components, not {len(values)}")
    return "[" + ",".join(f"{float(v):.7g}" for v in values) + "]"


def lag(conn: psycopg.Connection) -> Lag:
    row = conn.execute("SELECT count(*), coalesce(extract(epoch FROM now() - min(queued_at)), 0)"
                       " FROM embedding_backlog").fetchone()
    assert row is not None
    return Lag(int(row[0]), float(row[1]))


def embed_batch(pool: Pool, embedder: Embedder, limit: int = BATCH) -> int:
    """Embed up to ``limit`` of the oldest waiting items and store their vectors; returns how many backlog rows
    were settled (0: nothing was waiting). Not safe to run in two places at once on one database (both would
    compute the same vectors; only the first write lands): the server runs one leader (``server/embedding.py``).
    """
    with pool.connection() as conn:
        rows = conn.execute("SELECT item_id, tenant_id FROM embedding_backlog ORDER BY item_id LIMIT %s",
                            (limit,)).fetchall()
        if not rows:
            return 0
        by_tenant: dict[int, list[int]] = defaultdict(list)
        for item_id, tenant_id in rows:
            by_tenant[int(tenant_id)].append(int(item_id))
        found: list[tuple[int, int, str]] = []  # tenant, item, document
        for tenant_id, ids in by_tenant.items():
            with tenant_transaction(conn, tenant_id) as cur:
                found += [(tenant_id, int(i), document(title, text)) for i, title, text in cur.execute(
                    "SELECT id, title, text FROM items WHERE tenant_id = %s AND id = ANY(%s)"
                    " AND embedding IS NULL ORDER BY id", (tenant_id, ids))]
    # no transaction is open while the model runs: writers and forgets never wait for it
    vectors = embedder.embed_documents([doc for _, _, doc in found]) if found else []
    literal = {item_id: vector_literal(v) for (_, item_id, _), v in zip(found, vectors, strict=True)}
    with pool.connection() as conn:
        for tenant_id, ids in by_tenant.items():
            with tenant_transaction(conn, tenant_id) as cur:
                mine = [i for i in ids if i in literal]
                if mine:
                    cur.execute("UPDATE items SET embedding = v.vec::vector FROM unnest(%s::bigint[], %s::text[])"
                                " AS v(id, vec) WHERE items.tenant_id = %s AND items.id = v.id"
                                " AND items.embedding IS NULL", (mine, [literal[i] for i in mine], tenant_id))
                # settled: embedded now, or no longer there for this tenant (forgotten, or already embedded)
                cur.execute("DELETE FROM embedding_backlog WHERE tenant_id = %s AND item_id = ANY(%s)",
                            (tenant_id, ids))
    return len(rows)


def drain(pool: Pool, embedder: Embedder, limit: int = BATCH) -> int:
    """Embed everything waiting (in-process users: the LongMemEval bench, tests); returns the rows settled."""
    total = 0
    while done := embed_batch(pool, embedder, limit):
        total += done
    return total
