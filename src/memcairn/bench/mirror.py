"""``memcairn bench mirror``: the mirror through the real sync layer, per backend.

Two tables. Sync: synthetic observations, their documents embedded once with the bundled model
(``embed s``; cached by content hash, so a re-run embeds nothing), then backfilled through ``MirrorSync``
into each backend (``sync s``: the sync layer and the index's own cost).
Query: random unit vectors at 10k and 100k documents (embedding 100k would take most of an hour here
and does not change an index's query cost).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from itertools import islice
from pathlib import Path
from typing import Any

from memcairn.bench import mirror_raw
from memcairn.bench.synthetic import synthetic_items
from memcairn.bench.timing import rss_mb
from memcairn.mirror.documents import documents_for
from memcairn.mirror.sync import MirrorSync
from memcairn.store import Store
from memcairn.vectors.embedding_cache import EmbeddingCache
from memcairn.vectors.factory import open_index


def _disk_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def sync_rows(items: int, backends: tuple[str, ...], cache_path: Path, model: str = "all-MiniLM-L6-v2-int8"
              ) -> list[dict[str, Any]]:
    from memcairn.vectors.embedder import load_embedder

    work = Path(tempfile.mkdtemp(prefix="memcairn-bench-mirror-"))
    rows = []
    try:
        store = Store(work / "memcairn.db")
        it = synthetic_items(items)
        while batch := list(islice(it, 1000)):
            store.add_items(batch)
        embedder = EmbeddingCache(load_embedder(model), cache_path)
        texts = [d.text for item in store.list_items(limit=items + 1) for d in documents_for(item)]
        t0 = time.perf_counter()
        for start in range(0, len(texts), 64):
            embedder.embed_documents(texts[start:start + 64])
        embed_s = time.perf_counter() - t0
        for backend in backends:
            home = work / backend
            index = open_index(backend, home=home, dimension=embedder.dimension)
            mirror = MirrorSync(store, index, embedder, index_key=backend)
            t0 = time.perf_counter()
            result = mirror.backfill()
            sync_s = time.perf_counter() - t0
            rows.append({
                "backend": backend, "items": items, "docs": result.documents,
                "embed s (cached after 1st run)": round(embed_s, 1),
                "sync s (vectors ready)": round(sync_s, 2),
                "docs/s synced": round(result.documents / sync_s) if sync_s else 0,
                "backfill s (embed + sync)": round(embed_s + sync_s, 1),
                "failed batches": result.failed_batches, "disk MB": round(_disk_mb(home), 1),
                "process RSS MB": round(rss_mb()),
            })
            index.close()
        embedder.close()
        store.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows


def query_rows(sizes: tuple[int, ...], backends: tuple[str, ...]) -> list[dict[str, Any]]:
    return mirror_raw.run(sizes, backends)


def render_query_table(rows: list[dict[str, Any]]) -> str:
    return mirror_raw.render_table(rows)
