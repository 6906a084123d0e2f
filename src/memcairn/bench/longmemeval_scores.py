"""LongMemEval's metrics of one ranking and their averages.

Metrics, per question, on the ranked distinct sessions ``r_1, r_2, ...`` and the gold set ``G``:

- ``recall_any@k`` = 1 if some ``r_i`` (i <= k) is in G, else 0;
- ``recall_all@k`` = 1 if every session of G is among ``r_1..r_k``, else 0;
- ``ndcg_any@k`` = DCG@k / IDCG@k with binary relevance, DCG@k = sum over i <= k of [r_i in G] / log2(i + 1)
  and IDCG@k the same sum for an ideal ranking (min(k, |G|) relevant sessions first).

Averages are reported overall and per question type.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

KS = (1, 3, 5, 10)
METRICS = tuple(f"{name}@{k}" for name in ("recall_any", "recall_all", "ndcg_any") for k in KS)
TABLE_METRICS = ("recall_any@1", "recall_any@3", "recall_any@5", "recall_any@10", "recall_all@5",
                 "recall_all@10", "ndcg_any@5", "ndcg_any@10")
TOP_SESSIONS = max(KS)


def recall_any(ranked: Sequence[str], gold: Iterable[str], k: int) -> float:
    top = set(ranked[:k])
    return 1.0 if any(g in top for g in gold) else 0.0


def recall_all(ranked: Sequence[str], gold: Iterable[str], k: int) -> float:
    top = set(ranked[:k])
    wanted = set(gold)
    return 1.0 if wanted and wanted <= top else 0.0


def ndcg(ranked: Sequence[str], gold: Iterable[str], k: int) -> float:
    wanted = set(gold)
    if not wanted:
        return 0.0
    dcg = sum(1.0 / math.log2(i + 1) for i, sid in enumerate(ranked[:k], 1) if sid in wanted)
    ideal = sum(1.0 / math.log2(i + 1) for i in range(1, min(k, len(wanted)) + 1))
    return dcg / ideal


def score_ranking(ranked: Sequence[str], gold: Sequence[str]) -> dict[str, float]:
    """Every metric of ``METRICS`` for one question (``ranked``: distinct session ids, best first)."""
    out: dict[str, float] = {}
    for k in KS:
        out[f"recall_any@{k}"] = recall_any(ranked, gold, k)
        out[f"recall_all@{k}"] = recall_all(ranked, gold, k)
        out[f"ndcg_any@{k}"] = ndcg(ranked, gold, k)
    return {m: out[m] for m in METRICS}


def _mean(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {m: round(statistics.fmean(r[m] for r in rows), 4) for m in METRICS}
    out["n"] = len(rows)
    return out


def aggregate(scored: Sequence[tuple[str, dict[str, float]]]) -> dict[str, Any]:
    """``{"overall": {...}, "by_type": {type: {...}}}`` of (question type, metrics) pairs; ``n`` counts."""
    by_type: dict[str, list[dict[str, float]]] = {}
    for qtype, metrics in scored:
        by_type.setdefault(qtype, []).append(metrics)
    return {
        "overall": _mean([m for _, m in scored]) if scored else {"n": 0},
        "by_type": {t: _mean(rows) for t, rows in sorted(by_type.items())},
    }


def distinct_sessions(session_ids: Iterable[str | None], top: int = TOP_SESSIONS) -> list[str]:
    """The first ``top`` distinct session ids, in order (items without a session are skipped)."""
    out: dict[str, None] = {}
    for sid in session_ids:
        if sid is not None and sid not in out:
            out[sid] = None
            if len(out) >= top:
                break
    return list(out)
