"""Liveness, readiness and the worker's statistics."""

from __future__ import annotations

import os
import time
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

import memcairn
from memcairn.capture.llm.compressor import local_day_start_ms
from memcairn.core.clock import now_ms
from memcairn.mirror.background import MirrorRunner
from memcairn.mirror.runtime import Runtime
from memcairn.store.doctor import HOOKS_HEARD_MS
from memcairn.worker.routes.answers import JSON, endpoint
from memcairn.worker.routes.params import state_of
from memcairn.worker.state import WorkerState

BACKLOG_SECONDS = 1.0  # a probe polling health reads the queue at most once a second (a thread hop: ~0.3 ms)


@endpoint
async def health(request: Request) -> Response:
    """Liveness (always 200 while the process serves HTTP, so a probe never restarts a worker for its store's
    state); ``status`` is ``ok``, or ``degraded`` when the store's state is not ``ok`` or the capture queue is
    stuck, each named in ``problems`` with its section (``store``, ``queue``) holding the fix."""
    state = state_of(request)
    upkeep = state.upkeep
    store = upkeep.status() if upkeep is not None else None
    queue = await _queue_health(state)
    problems = [f"store {store['state']}"] if store is not None and store["state"] != "ok" else []
    if queue is not None and queue["state"] != "ok":
        problems.append(f"capture queue {queue['state']}")
    return JSON({"status": "degraded" if problems else "ok", "problems": problems, "pid": os.getpid(),
                 "port": state.settings.port, "version": memcairn.__version__, "ready": state.ready,
                 "state": state.phase, "started_at": int(state.started_at), "store": store, "queue": queue})


async def _queue_health(state: WorkerState) -> dict[str, Any] | None:
    """The capture queue's state (``CaptureRunner.queue_state``) once the worker is ready; None before."""
    runtime, capture = state.runtime, state.capture
    if runtime is None or capture is None or not state.ready:
        return None
    now = time.monotonic()
    if state.backlog is not None and now - state.backlog[0] < BACKLOG_SECONDS:
        backlog = state.backlog[1]
    else:
        try:
            backlog = await run_in_threadpool(runtime.store.ingest_backlog)  # index seeks; never behind searches
        except Exception as exc:  # noqa: BLE001 - health answers whatever the store does
            return {"state": "unknown", "detail": f"the queue cannot be read: {exc}"}
        state.backlog = (now, backlog)
    return {**capture.queue_state(backlog["pending"], backlog["oldest_pending_epoch"]),
            "failed": backlog["failed"]}


@endpoint
async def readiness(request: Request) -> Response:
    state_of(request).require()
    return JSON({"status": "ready"})


def _mirror_summary(runtime: Runtime, runner: MirrorRunner | None) -> dict[str, Any]:
    mirror = runtime.mirror
    if mirror is None:
        disabled = runtime.settings.vector_backend == "none"
        return {"state": "disabled" if disabled else "unavailable", "error": runtime.mirror_error,
                "lag": None, "outbox": None}
    status = mirror.status()
    return {"state": status["state"], "backend": status["backend"], "model": status["model"],
            "lag": sum(r["lag"] for r in status["rows"]), "outbox": status["outbox"],
            "last_error": status["last_error"], "runner": runner is not None}


@endpoint
async def stats(request: Request) -> Response:
    state = state_of(request)
    runtime = state.require()

    def collect() -> dict[str, Any]:
        out = runtime.store.stats()
        out["mirror"] = _mirror_summary(runtime, state.runner)
        out["ingest"] = runtime.store.ingest_queue()
        out["hooks_heard"] = runtime.store.live_hook_platforms(now_ms() - HOOKS_HEARD_MS)
        out["llm_tokens_today"] = runtime.store.tokens_spent(since_epoch=local_day_start_ms())
        out["search"] = state.search.telemetry_snapshot() if state.search is not None else None
        out["keyword_index"] = runtime.store.keyword_index_stats()
        out["remote"] = dict(state.forwarder.status) if state.forwarder is not None else {"mode": "local"}
        out["worker"] = {"pid": os.getpid(), "version": memcairn.__version__,
                         "uptime_seconds": round(time.time() - state.started_at, 1),
                         "stream_clients": state.broadcaster.subscribers}
        return out

    return JSON(await state.call(collect))
