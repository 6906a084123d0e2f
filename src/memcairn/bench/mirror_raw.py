"""Raw mirror speed: insert throughput and one-project KNN latency of each file-backed backend.

Random 384-d unit vectors (the size of the default embedder) spread over 20 projects, inserted in
batches of 100 (as the sync worker does), then 100 queries of k=50 against one project. No embedding
model runs: this measures the vector indexes alone.

    python -m memcairn.bench.mirror_raw [--interleaved] [SIZE ...]
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memcairn.bench import timing
from memcairn.vectors.base import VectorRecord
from memcairn.vectors.factory import open_index

DIMENSION = 384
PROJECTS = 20
BATCH = 100
QUERIES = 100
K = 50
BACKENDS = ("sqlite-vec", "chroma")
COLUMNS = (
    "backend",
    "docs",
    "batches",
    "insert_docs_per_s",
    "query_median_ms",
    "query_p95_ms",
    "query_all_median_ms",
    "disk_mb",
)


def _unit_vectors(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.standard_normal((n, DIMENSION)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v


def _project(i: int, size: int, interleaved: bool) -> str:
    return f"project-{(i % PROJECTS if interleaved else i * PROJECTS // size):02d}"


def _records(vectors: np.ndarray, start: int, stop: int, interleaved: bool) -> list[VectorRecord]:
    out = []
    for i in range(start, stop):
        project = _project(i, len(vectors), interleaved)
        out.append(
            VectorRecord(
                id=f"obs_{i + 1}_narrative",
                project=project,
                vector=vectors[i],
                document=f"synthetic observation {i + 1}",
                metadata={"sqlite_id": i + 1, "kind": "observation", "project": project},
            )
        )
    return out


def _disk_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def measure(backend: str, size: int, *, interleaved: bool = False, seed: int = 0) -> dict[str, Any]:
    """Insert ``size`` docs in batches of 100, then time queries.

    By default each project's documents arrive together (a batch holds one project, as when the worker
    drains one session); ``interleaved`` spreads every batch over all 20 projects instead, the worst
    case for a backend that writes one collection per project.
    """
    rng = np.random.default_rng(seed)
    vectors = _unit_vectors(rng, size)
    queries = _unit_vectors(rng, QUERIES)
    home = Path(tempfile.mkdtemp(prefix=f"memcairn-bench-{backend}-"))
    try:
        index = open_index(backend, home=home, dimension=DIMENSION)
        try:
            t0 = time.perf_counter()
            for start in range(0, size, BATCH):
                index.upsert(_records(vectors, start, min(size, start + BATCH), interleaved))
            insert_s = time.perf_counter() - t0
            assert index.count() == size

            for q in queries[:5]:  # warm the caches so p95 is not the first cold read
                index.query(q, projects=["project-07"], limit=K)
            one = timing.time_calls(lambda q: index.query(q, projects=["project-07"], limit=K), list(queries))
            every = timing.time_calls(lambda q: index.query(q, projects=None, limit=K), list(queries[:20]))
        finally:
            index.close()
        return {
            "backend": backend,
            "docs": size,
            "batches": "20 projects each" if interleaved else "1 project each",
            "insert_docs_per_s": round(size / insert_s),
            "query_median_ms": timing.summary_ms(one)["median_ms"],
            "query_p95_ms": timing.summary_ms(one)["p95_ms"],
            "query_all_median_ms": timing.summary_ms(every)["median_ms"],
            "disk_mb": round(_disk_mb(home), 1),
        }
    finally:
        shutil.rmtree(home, ignore_errors=True)


def run(
    sizes: Sequence[int] = (10_000, 100_000),
    backends: Sequence[str] = BACKENDS,
    *,
    interleaved: bool = False,
) -> list[dict[str, Any]]:
    """One row per (backend, size). ``query_*`` is one project (1/20 of the docs), k=50;
    ``query_all`` queries every project at once (20 queries only)."""
    rows = []
    for size in sizes:
        for backend in backends:
            rows.append(measure(backend, int(size), interleaved=interleaved))
    return rows


def render_table(rows: Sequence[dict[str, Any]]) -> str:
    return timing.render_table(rows, COLUMNS)


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    interleaved = "--interleaved" in args
    sizes = tuple(int(a) for a in args if a != "--interleaved") or (10_000, 100_000)
    print(render_table(run(sizes, interleaved=interleaved)))


if __name__ == "__main__":
    main()
