"""Rows written straight into the team server's database before ``memcairn bench server`` starts the server, so
its reads can be measured at 100k memories without an hour of embedding first.

Through the HTTP API a server stores about 500 events a second, but embeds them at 30-80 a second on 2 cores: 100k
memories would take half an hour or more before the reads could begin. Here the memories are stored by the team
store's own batch insert (``TeamStore.insert_many``: items, sessions, audit and change rows as the ingest consumer
writes them), as the owner of the embedded cluster, for the tenant of the bench's key. Their vectors are not the
model's for each text: the model embeds ``POOL`` distinct texts of the same kind, and each memory gets one of them
with a little noise (normalised), so every memory has a vector of its own in the model's space at the cost of a
few seconds. The search path does not care which vector a row holds: the copies rank every vector of a project,
and the HNSW index (dropped during the load and built again once, far faster than 100k inserts into it) is walked
alike. The embedding backlog of these rows is cleared. The queries of the read scenarios still go through the
HTTP API and the model.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from memcairn.bench.synthetic import synthetic_items
from memcairn.pgstore import db
from memcairn.pgstore.audit import Actor
from memcairn.pgstore.items import TeamStore, prepare

Log = Callable[[str], None]
POOL = 512  # distinct texts the model embeds
NOISE = 0.15  # standard deviation of the noise added to each coordinate, before normalising (|v| = 1)
BATCH = 2_000
SEED = 101  # not the ingest scenario's seed (7): the preloaded memories are other texts


def preload(home: Path, tenant: str, items: int, projects: int, *, log: Log = lambda _m: None) -> dict[str, Any]:
    """Store ``items`` synthetic memories over ``projects`` projects for ``tenant`` (by name) in the embedded
    cluster of ``home`` (which no server runs yet), with vectors; the figures of the load."""
    from memcairn.server.run import owner_database
    from memcairn.vectors.embedder import load_embedder

    started = time.perf_counter()
    memories = [replace(item, title=f"{item.title} (earlier)")
                for item in synthetic_items(items, seed=SEED, projects=projects)]
    embedder = load_embedder()
    pool = np.asarray(embedder.embed_documents([f"{m.title}\n{m.narrative}" for m in memories[:POOL]]),
                      np.float32)
    embedded_s = time.perf_counter() - started
    rng = np.random.default_rng(SEED)
    team = TeamStore(pool=None)  # type: ignore[arg-type]  # insert_many writes on the cursor it is given
    with owner_database(home, None) as owner, db.connect(owner, autocommit=False) as conn:
        cur = conn.cursor()
        row = cur.execute("SELECT id FROM tenants WHERE name = %s", (tenant,)).fetchone()
        if row is None:
            raise RuntimeError(f"no tenant {tenant!r} to preload")
        tenant_id = int(row[0])
        index = cur.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'item_vectors_embedding'").fetchone()
        if index is not None:
            cur.execute("DROP INDEX item_vectors_embedding")
        stored = 0
        for start in range(0, len(memories), BATCH):
            batch = [(prepare(m), None, Actor()) for m in memories[start:start + BATCH]]
            saved = team.insert_many(cur, tenant_id, batch)
            ids = [s.id for s in saved if s.created]
            project_of = dict(cur.execute("SELECT id, project_id FROM items WHERE id = ANY(%s)", (ids,)).fetchall())
            vectors = pool[rng.integers(0, len(pool), len(ids))] + rng.normal(0, NOISE, (len(ids), pool.shape[1]))
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            text = io.StringIO()
            for item_id, vector in zip(ids, vectors, strict=True):
                literal = "[" + ",".join(f"{x:.6f}" for x in vector) + "]"
                text.write(f"{item_id}\t0\t{tenant_id}\t{project_of[item_id]}\t{literal}\n")
            with cur.copy("COPY item_vectors (item_id, chunk, tenant_id, project_id, embedding) FROM STDIN") as copy:
                copy.write(text.getvalue())
            cur.execute("DELETE FROM embedding_backlog WHERE item_id = ANY(%s)", (ids,))
            conn.commit()
            stored += len(ids)
            if (start // BATCH) % 10 == 0:
                log(f"preloaded {stored:,} of {items:,} memories")
        rows_s = time.perf_counter() - started
        if index is not None:
            cur.execute("SET maintenance_work_mem = '512MB'")
            cur.execute(index[0])
        cur.execute("ANALYZE")
        conn.commit()
    total = time.perf_counter() - started
    return {"memories": stored, "pool_embedded_s": round(embedded_s, 1), "rows_s": round(rows_s - embedded_s, 1),
            "index_s": round(total - rows_s, 1), "total_s": round(total, 1)}
