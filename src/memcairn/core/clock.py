"""The one wall clock: epoch milliseconds, as every stored ``*_epoch`` value holds them. Standard library only
(the hooks import it)."""

from __future__ import annotations

import time


def now_ms() -> int:
    return int(time.time() * 1000)
