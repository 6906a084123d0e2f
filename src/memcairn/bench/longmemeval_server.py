"""``memcairn bench longmemeval-server``: the LongMemEval retrieval of ``bench/longmemeval.py`` on the team store
(PostgreSQL + pgvector), per question, beside the same numbers from the SQLite store when given its JSON.

Each question's haystack becomes turn items (``session_items``, granularity ``turn``) in a project of its own
(one tenant, one embedded PostgreSQL in a temp dir), and the question is searched there with the server's
hybrid search (``TeamStore.search``: ``ts_rank(fts, q, 1)`` over the OR of the words, HNSW/exact cosine over
one vector per item, RRF); hits map to distinct sessions and are scored with the same metrics. One vector per
item is a difference to the SQLite mirror, which embeds long messages in chunks: the bundled model reads 256
tokens of an item here. Vectors go through the same ``EmbeddingCache`` file as the SQLite bench.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from memcairn.bench.longmemeval import (
    HITS_PER_QUERY,
    TABLE_METRICS,
    Question,
    aggregate,
    distinct_sessions,
    score_ranking,
    session_items,
)
from memcairn.bench.timing import percentile, render_table
from memcairn.pgstore import backlog, db
from memcairn.pgstore.embedded import EmbeddedPostgres
from memcairn.pgstore.items import MAX_LIMIT, TeamStore
from memcairn.vectors.embedder import load_embedder
from memcairn.vectors.embedding_cache import EmbeddingCache

Log = Callable[[str], None]
SECRET = b"longmemeval bench secret........"


def run(questions: Sequence[Question], *, cache_path: Path | None, log: Log = lambda _m: None) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="memcairn-lme-pg-"))
    root.chmod(0o755)
    cluster = EmbeddedPostgres(root / "cluster", password="bench", config={"fsync": "off"})
    embedder: Any = load_embedder()
    cache = EmbeddingCache(embedder, cache_path) if cache_path else None
    scored: list[tuple[str, dict[str, float]]] = []
    query_ms: list[float] = []
    started = time.perf_counter()
    try:
        owner = cluster.start()
        db.prepare(owner, SECRET)
        with db.connect(owner) as conn:
            tenant = conn.execute("INSERT INTO tenants (name) VALUES ('lme') RETURNING id").fetchone()[0]
        pool = db.Pool(db.app_conninfo(owner, SECRET), size=2)
        team = TeamStore(pool, cache or embedder)
        for n, question in enumerate(questions, 1):
            if not question.scored:
                continue
            project = f"q-{question.id}"
            for session in question.sessions:
                for item in session_items(session):
                    team.add(tenant, replace(item, project=project), revive=False)
            backlog.drain(pool, cache or embedder)  # what the server's embedding task does behind the writes
            project_ids = team.project_ids(tenant, [project])
            t0 = time.perf_counter()
            hits = team.search(tenant, question.text, project_ids, limit=min(HITS_PER_QUERY, MAX_LIMIT))
            query_ms.append((time.perf_counter() - t0) * 1000)
            ranked = distinct_sessions(hit["session"] for hit in hits)
            scored.append((question.type, score_ranking(ranked, question.answer_ids)))
            log(f"[{n}/{len(questions)}] {question.id}: {len(hits)} hits")
        pool.close()
    finally:
        cluster.stop()
        if cache is not None:
            cache.close()
        shutil.rmtree(root, ignore_errors=True)
    return {"store": "postgresql", "questions": len(scored), "seconds": round(time.perf_counter() - started, 1),
            "query_p50_ms": round(percentile(query_ms, 50), 1), "query_p95_ms": round(percentile(query_ms, 95), 1),
            **aggregate(scored)}


def render(result: dict[str, Any], sqlite: dict[str, Any] | None = None) -> str:
    rows = []
    if sqlite is not None:
        rows.append({"store": "sqlite (hybrid)", **{m: sqlite[m] for m in TABLE_METRICS}})
    rows.append({"store": "postgresql (hybrid)", **{m: result["overall"][m] for m in TABLE_METRICS}})
    if sqlite is not None:
        rows.append({"store": "difference", **{m: round(result["overall"][m] - sqlite[m], 4) for m in TABLE_METRICS}})
    head = (f"LongMemEval, {result['questions']} questions, per-question scope; PostgreSQL query p50 "
            f"{result['query_p50_ms']} ms, p95 {result['query_p95_ms']} ms (query embedding included)")
    return head + "\n\n" + render_table(rows)
