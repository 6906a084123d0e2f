"""``memcairn bench store``: insert throughput and keyword-search latency at several sizes."""

from __future__ import annotations

import tempfile
import time
from itertools import islice
from pathlib import Path
from typing import Any

from memcairn.bench.synthetic import synthetic_items, synthetic_queries
from memcairn.bench.timing import summary_ms, time_calls
from memcairn.core.models import ItemFilter
from memcairn.store import Store


def run(sizes: tuple[int, ...] = (10_000, 100_000), *, single: int = 2_000, queries: int = 200,
        workdir: Path | None = None) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        for size in sizes:
            path = Path(tmp) / f"bench-{size}.db"
            store = Store(path)
            items = list(synthetic_items(size + single))
            t0 = time.perf_counter()
            it = iter(items[:size])
            while batch := list(islice(it, 500)):
                store.add_items(batch)
            batched = size / (time.perf_counter() - t0)
            t0 = time.perf_counter()
            for item in items[size:]:
                store.add_item(item)
            one_by_one = single / (time.perf_counter() - t0)
            qs = synthetic_queries(queries)
            store.keyword_search(qs[0])  # warm the page cache
            all_projects = summary_ms(time_calls(lambda q, s=store: s.keyword_search(q, limit=20), qs))
            flt = ItemFilter(projects=["project-03"])
            scoped = summary_ms(time_calls(lambda q, s=store, f=flt: s.keyword_search(q, f, limit=20), qs))
            rows.append({
                "items": size,
                "insert batched (items/s)": round(batched),
                "insert one by one (items/s)": round(one_by_one),
                "keyword median ms": all_projects["median_ms"],
                "keyword p95 ms": all_projects["p95_ms"],
                "keyword 1 project median ms": scoped["median_ms"],
                "keyword 1 project p95 ms": scoped["p95_ms"],
                "db MB": round(store.stats()["db_bytes"] / 1e6, 1),
            })
            store.close()
    return rows
