"""The worker's app in this process (Starlette's TestClient, no socket): what tests/test_worker_api.py and the
modules that drive the same app share. The fixtures built on it (``cfg``, ``app``, ``client``) are in conftest.py."""

from __future__ import annotations

import time
from typing import Any

from memcairn.core.models import NewItem

PORT = 37877
BASE = f"http://127.0.0.1:{PORT}"


def wait_ready(app: Any, timeout: float = 20.0) -> None:
    state = app.state.worker
    deadline = time.monotonic() + timeout
    while state.phase != "ready":
        assert state.phase in ("starting",), state.detail
        assert time.monotonic() < deadline, "worker did not become ready"
        time.sleep(0.01)


def store_of(app: Any) -> Any:
    return app.state.worker.runtime.store


def add(app: Any, **fields: Any) -> int:
    fields.setdefault("project", "demo")
    return store_of(app).add_item(NewItem(**fields)).id
