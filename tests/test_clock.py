"""One wall clock: every module of the package reads epoch milliseconds through ``core/clock.py``."""

from __future__ import annotations

import re
from pathlib import Path

from memcairn.core.clock import now_ms

SRC = Path(__file__).resolve().parents[1] / "src" / "memcairn"
INLINE = re.compile(r"time\.time\(\)\s*\*\s*(1000|1e3|1_000)\b|def now_ms\(")


def test_no_module_but_the_clock_computes_epoch_milliseconds() -> None:
    found = [f"{path.relative_to(SRC)}:{n}" for path in sorted(SRC.rglob("*.py")) if path != SRC / "core" / "clock.py"
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if INLINE.search(line)]
    assert found == []


def test_now_ms_follows_the_patched_time(monkeypatch) -> None:
    monkeypatch.setattr("time.time", lambda: 1_700_000_000.1234)
    assert now_ms() == 1_700_000_000_123
