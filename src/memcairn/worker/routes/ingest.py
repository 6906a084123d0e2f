"""The hooks' ingest routes: an event checked, admitted and queued (``worker/intake.py``), answered 202."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from memcairn.wire import spool
from memcairn.wire.fastjson import encode_json
from memcairn.wire.privacy.scrubbing import scrub_event
from memcairn.worker.intake import INGEST_ROUTES, accept_event, ingest_fields
from memcairn.worker.routes.answers import JSON, Endpoint, endpoint
from memcairn.worker.routes.params import read_json, state_of
from memcairn.worker.state import WorkerState

log = logging.getLogger("memcairn.worker")

ACK_SECONDS = 0.5  # a hook's event whose insert takes longer (a held write lock) is acknowledged once spooled


def ingest_route(path: str) -> Endpoint:
    event_type, required = INGEST_ROUTES[path]

    async def accept(request: Request) -> Response:
        state = state_of(request)
        runtime = state.require()
        data = await read_json(request)
        fields = ingest_fields(data, required)

        def admit_and_queue() -> dict[str, Any]:
            return accept_event(runtime.store, state.settings, event_type, data, fields)

        job = asyncio.ensure_future(state.call(admit_and_queue, write=True))
        if fields.event_key is not None:  # a hook's event: durable in the spool is as good as queued
            done, _ = await asyncio.wait({job}, timeout=ACK_SECONDS)
            if not done and await _spool_late(state, path, data, job):
                return JSON({"status": "accepted", "spooled": True, "duplicate": False}, status_code=202)
        answer = await job
        if state.capture is not None and answer.get("duplicate") is False:
            state.capture.nudge()
        return JSON(answer, status_code=202)

    accept.__name__ = f"ingest_{event_type}"
    return endpoint(accept)


async def _spool_late(state: WorkerState, path: str, data: dict[str, Any], job: asyncio.Future[Any]) -> bool:
    """A write that waits (another process holds the store's write lock) is no outage: the event is written to
    the spool and acknowledged, the insert under way goes on, and the drainer queues the spooled copy once
    (``event_key``) after it, or in its place should it fail. False when the spool cannot be written."""
    try:
        # secrets out before the event rests on disk; the drainer admits the copy again as the route would
        await run_in_threadpool(lambda: spool.write(str(state.settings.home), path, encode_json(scrub_event(data))))
    except OSError as exc:
        log.warning("could not spool a slow %s event (%s); waiting for the store instead", path, exc)
        return False
    job.add_done_callback(lambda done: done.cancelled() or done.exception())  # its outcome is the spool's now
    return True
