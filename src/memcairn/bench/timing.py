"""Small helpers shared by the benchmarks: timing, percentiles, tables, resident memory."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from memcairn.core.stats import percentile


def time_calls(fn: Callable[[Any], Any], args: Sequence[Any]) -> list[float]:
    """Milliseconds per call of fn(arg) for each arg."""
    out = []
    for arg in args:
        t0 = time.perf_counter()
        fn(arg)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def summary_ms(samples: Sequence[float]) -> dict[str, float]:
    return {"median_ms": round(statistics.median(samples), 2), "p95_ms": round(percentile(samples, 95), 2)}


def rss_mb() -> float:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def render_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """A Markdown table (pastes cleanly into notes and renders in a terminal)."""
    if not rows:
        return "(no rows)"
    cols = list(columns or rows[0].keys())
    cells = [[_fmt(r.get(c, "")) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += ["| " + " | ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)) + " |" for row in cells]
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)
