"""Order statistics shared by the search telemetry and the benches."""

from __future__ import annotations

from collections.abc import Sequence


def percentile(values: Sequence[float], pct: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[index]
