"""``memcairn bench search``: search latency at several store sizes, through the real search service.

The mirror is sqlite-vec filled through ``MirrorSync`` with the bundled model (document vectors cached by
content hash, so only the first run pays for embedding). Hybrid timings include embedding the query:
queries go through the raw model, never the cache. Keyword timings use the same service without a mirror.
"""

from __future__ import annotations

import random
import shutil
import tempfile
import time
from itertools import islice
from pathlib import Path
from typing import Any

from memcairn.bench.synthetic import synthetic_items, synthetic_queries
from memcairn.bench.timing import rss_mb, summary_ms, time_calls
from memcairn.mirror.sync import MirrorSync
from memcairn.search import SearchService
from memcairn.store import Store
from memcairn.vectors.embedding_cache import EmbeddingCache
from memcairn.vectors.factory import open_index

STEP_MS = 60_000
START_MS = 1_700_000_000_000


def _fill(store: Store, size: int) -> None:
    it = synthetic_items(size, start_ms=START_MS, step_ms=STEP_MS)
    while batch := list(islice(it, 1000)):
        store.add_items(batch)


def _measure(store: Store, mirror: MirrorSync, size: int, qs: list[str], now: int) -> dict[str, list[float]]:
    hybrid = SearchService(store, mirror)
    keyword = SearchService(store, None)
    project = ["project-03"]
    rng = random.Random(5)
    anchors = [rng.randint(1, size) for _ in range(len(qs))]
    for q in qs[:5]:  # warm caches
        hybrid.search(query=q, projects=project, now=now)
    return {
        "keyword": time_calls(lambda q: keyword.search(query=q, now=now), qs),
        "keyword, 1 project": time_calls(lambda q: keyword.search(query=q, projects=project, now=now), qs),
        "hybrid": time_calls(lambda q: hybrid.search(query=q, now=now), qs),
        "hybrid, 1 project": time_calls(lambda q: hybrid.search(query=q, projects=project, now=now), qs),
        "filter-only, 1 project": time_calls(
            lambda _q: hybrid.search(projects=project, types=["bugfix"], now=now), qs),
        "timeline": time_calls(lambda a: hybrid.timeline(anchor=a, now=now), anchors),
    }


def run(sizes: tuple[int, ...], cache_path: Path, *, queries: int = 100, model: str = "all-MiniLM-L6-v2-int8",
        log=print) -> list[dict[str, Any]]:  # noqa: ANN001
    from memcairn.vectors.embedder import load_embedder

    raw = load_embedder(model)
    cached = EmbeddingCache(raw, cache_path)
    rows = []
    qs = synthetic_queries(queries, seed=23)
    try:
        for size in sizes:
            work = Path(tempfile.mkdtemp(prefix="memcairn-bench-search-"))
            try:
                store = Store(work / "memcairn.db")
                _fill(store, size)
                index = open_index("sqlite-vec", home=work, dimension=raw.dimension)
                t0 = time.perf_counter()
                MirrorSync(store, index, cached, index_key="bench").backfill()
                log(f"{size:,} items: mirror filled in {time.perf_counter() - t0:.0f} s")
                mirror = MirrorSync(store, index, raw, index_key="bench")
                now = START_MS + size * STEP_MS + 86_400_000
                for name, samples in _measure(store, mirror, size, qs, now).items():
                    rows.append({"items": size, "operation": name, **summary_ms(samples)})
                rows.append({"items": size, "operation": "process RSS MB", "median_ms": round(rss_mb()),
                             "p95_ms": ""})
                index.close()
                store.close()
            finally:
                shutil.rmtree(work, ignore_errors=True)
    finally:
        cached.close()
    return rows
