"""``memcairn bench longmemeval-server``: the LongMemEval retrieval of ``bench/longmemeval.py`` on the team store
(PostgreSQL + pgvector), per question, beside the same numbers from the SQLite store when given its JSON.

Each question's haystack becomes turn items (``session_items``, granularity ``turn``) in a project of its own
(one tenant, one embedded PostgreSQL in a temp dir), and the question is searched there with the server's
search (``pgstore.search.search_tenant``: the search service over the tenant's store, with mode ``keyword``,
``semantic`` or ``auto`` for hybrid: the local plan of the words matched in the ``fts`` column and re-scored with
BM25, cosine over each item's chunk vectors, min-max fusion, the local relevance floor); hits map to distinct
sessions and are scored with the same metrics. Items are embedded in the chunks the SQLite mirror makes of them, so
the same ``EmbeddingCache`` file serves both benches.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from memcairn.bench.longmemeval import HITS_PER_QUERY
from memcairn.bench.longmemeval_data import Question
from memcairn.bench.longmemeval_items import session_items
from memcairn.bench.longmemeval_scores import TABLE_METRICS, aggregate, distinct_sessions, score_ranking
from memcairn.bench.timing import percentile, render_table
from memcairn.pgstore import backlog, db, keys
from memcairn.pgstore.embedded import EmbeddedPostgres
from memcairn.pgstore.items import MAX_LIMIT, TeamStore
from memcairn.search.request import SearchRequest
from memcairn.search.team import search_tenant
from memcairn.vectors.embedder import load_embedder
from memcairn.vectors.embedding_cache import EmbeddingCache

Log = Callable[[str], None]
SECRET = b"longmemeval bench secret........"


METHOD_MODES = {"keyword": "keyword", "semantic": "semantic", "hybrid": "auto"}


def run(questions: Sequence[Question], *, cache_path: Path | None, methods: Sequence[str] = ("hybrid",),
        log: Log = lambda _m: None) -> dict[str, Any]:
    """Every question with every method; ``{method: {"overall", "by_type", "questions", ...}}``."""
    root = Path(tempfile.mkdtemp(prefix="memcairn-lme-pg-"))
    root.chmod(0o755)
    cluster = EmbeddedPostgres(root / "cluster", password="bench", config={"fsync": "off"})
    embedder: Any = load_embedder()
    cache = EmbeddingCache(embedder, cache_path) if cache_path else None
    scored: dict[str, list[tuple[str, dict[str, float]]]] = {m: [] for m in methods}
    details: dict[str, list[dict[str, Any]]] = {m: [] for m in methods}
    query_ms: dict[str, list[float]] = {m: [] for m in methods}
    started = time.perf_counter()
    try:
        owner = cluster.start()
        db.prepare(owner, SECRET)
        with db.connect(owner) as conn:
            made = keys.create_key(conn, SECRET, "lme", scopes=["memories:read", "memories:write"])
            tenant = conn.execute("SELECT id FROM tenants WHERE name = 'lme'").fetchone()[0]
        db.hold_key(tenant, keys.digest(SECRET, made["key"]))  # the app role enters a tenant through a key only
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
            for method in methods:
                t0 = time.perf_counter()
                hits = search_tenant(team, tenant, SearchRequest(
                    query=question.text, projects=(project,), limit=min(HITS_PER_QUERY, MAX_LIMIT),
                    mode=METHOD_MODES[method])).hits
                query_ms[method].append((time.perf_counter() - t0) * 1000)
                ranked = distinct_sessions(hit.item.session for hit in hits)
                scored[method].append((question.type, score_ranking(ranked, question.answer_ids)))
                gold = set(question.answer_ids)
                details[method].append({"id": question.id, "type": question.type, "gold": list(question.answer_ids),
                                        "gold_ranks": [n for n, sid in enumerate(ranked, 1) if sid in gold],
                                        "top": ranked})
            log(f"[{n}/{len(questions)}] {question.id}: {len(hits)} hits")
        pool.close()
    finally:
        cluster.stop()
        if cache is not None:
            cache.close()
        shutil.rmtree(root, ignore_errors=True)
    seconds = round(time.perf_counter() - started, 1)
    return {method: {"store": "postgresql", "questions": len(scored[method]), "seconds": seconds,
                     "query_p50_ms": round(percentile(query_ms[method], 50), 1),
                     "query_p95_ms": round(percentile(query_ms[method], 95), 1),
                     **aggregate(scored[method]), "details": details[method]} for method in methods}


def render(result: dict[str, Any], sqlite: dict[str, Any] | None = None) -> str:
    """Per method: the SQLite figures (from ``memcairn bench longmemeval --json``), the PostgreSQL ones and the
    difference, every metric a column."""
    rows = []
    for method, pg in result.items():
        local = (sqlite or {}).get(method, {}).get("overall")
        if local is not None:
            rows.append({"method": method, "store": "sqlite", **{m: f"{local[m]:.3f}" for m in TABLE_METRICS}})
        rows.append({"method": method, "store": "postgresql",
                     **{m: f"{pg['overall'][m]:.3f}" for m in TABLE_METRICS}})
        if local is not None:  # one question of 48 moves a recall by 0.021: the difference to 4 places
            rows.append({"method": method, "store": "difference",
                         **{m: f"{pg['overall'][m] - local[m]:+.4f}" for m in TABLE_METRICS}})
    first = next(iter(result.values()))
    times = ", ".join(f"{m} p50 {r['query_p50_ms']} ms / p95 {r['query_p95_ms']} ms" for m, r in result.items())
    head = (f"LongMemEval, {first['questions']} questions, per-question scope; PostgreSQL queries (query "
            f"embedding included): {times}")
    return head + "\n\n" + render_table(rows)
