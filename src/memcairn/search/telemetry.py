"""What searches did, kept locally: one envelope per search, never the query text or any content.

Each envelope goes to the ``memcairn.telemetry`` logger as one JSON line and into an in-process ring
buffer; ``Telemetry.snapshot()`` gives counters (searches per strategy and per fallback reason) and
latency percentiles over the buffer. Envelopes hold only counts, booleans, closed enums and the *names*
of the filters used, so a log can be shared without leaking a memory.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter, deque
from dataclasses import asdict, dataclass
from typing import Any

from memcairn.core.stats import percentile

log = logging.getLogger("memcairn.telemetry")

RING_SIZE = 1000


@dataclass(frozen=True)
class SearchEnvelope:
    at_epoch: int
    strategy: str
    fallback_reason: str | None
    mirror_available: bool
    has_query: bool
    query_truncated: bool
    filters: tuple[str, ...]
    order: str
    fusion: str | None
    limit: int
    offset: int
    keyword_count: int
    semantic_count: int
    result_count: int
    latency_ms: float

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["filters"] = list(self.filters)
        return data


class Telemetry:
    """A thread-safe ring buffer of envelopes with running counters."""

    def __init__(self, size: int = RING_SIZE, *, log_each: bool = True) -> None:
        self.log_each = log_each  # one INFO line a search (the team server, which keeps no such log, says False)
        self._ring: deque[SearchEnvelope] = deque(maxlen=size)
        self._strategies: Counter[str] = Counter()
        self._fallbacks: Counter[str] = Counter()
        self._total = 0
        self._lock = threading.Lock()

    def record(self, envelope: SearchEnvelope) -> None:
        with self._lock:
            self._ring.append(envelope)
            self._total += 1
            self._strategies[envelope.strategy] += 1
            if envelope.fallback_reason:
                self._fallbacks[envelope.fallback_reason] += 1
        if self.log_each and log.isEnabledFor(logging.INFO):  # the line costs more than the search's fusion
            log.info(json.dumps({"event": "search", **envelope.to_dict()}, sort_keys=True))

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            latencies = [e.latency_ms for e in self._ring]
            return {
                "searches": self._total,
                "strategies": dict(self._strategies),
                "fallbacks": dict(self._fallbacks),
                "window": len(latencies),
                "latency_ms": {
                    "p50": _round(percentile(latencies, 50)),
                    "p95": _round(percentile(latencies, 95)),
                    "p99": _round(percentile(latencies, 99)),
                    "max": _round(max(latencies)) if latencies else None,
                },
                "recent": [e.to_dict() for e in list(self._ring)[-10:]],
            }


def _round(value: float) -> float | None:
    return None if value != value else round(value, 2)  # NaN (no samples) -> None
