"""The answer to a request a full disk refused: a hook's event is held in memory (``worker/held_events.py``)."""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from memcairn.wire.fastjson import encode_json, loads
from memcairn.wire.privacy.scrubbing import scrub_event
from memcairn.wire.protocol import EVENT_KEY_FIELD, ROUTE_EVENT_TYPES
from memcairn.worker.state import WorkerState

log = logging.getLogger("memcairn.worker")

HELD = "memory"  # the answer's ``held``: where the event waits


async def on_disk_full(request: Request, detail: str) -> Response | None:
    """A full disk refused a request: the drainer empties the WAL before anything more is written (freeing the
    reserve for the checkpoint if need be); a hook's event is held in memory and acknowledged as held. None:
    answer 507 as before."""
    state: WorkerState = request.app.state.worker
    drainer = state.spool  # it flushes the held events, once the worker is ready
    if drainer is None:
        return None
    held = drainer.held
    if state.runtime is not None:
        held.checkpoint = state.runtime.store.checkpoint
    held.disk_full = True
    drainer.nudge()  # the drainer empties the WAL (in the reserve if need be) before it writes anything more
    if request.method != "POST" or request.url.path not in ROUTE_EVENT_TYPES:
        return None
    try:
        body = await request.body()  # read by the route already: Starlette keeps it
        data = loads(body)
    except Exception:  # noqa: BLE001 - no body to hold: the 507 stands
        return None
    key = data.get(EVENT_KEY_FIELD) if isinstance(data, dict) else None
    if isinstance(key, str) and key:
        body = encode_json(scrub_event(data))  # it may go to the spool: no secret rests on disk (admission again later)
    if not isinstance(key, str) or not key or not held.hold(key, request.url.path, body):
        return None
    log.warning("the disk is full: a %s event is held in memory (%d held) until the disk has room",
                request.url.path, len(held))
    return JSONResponse({"status": "accepted", "held": HELD, "duplicate": False,
                         "detail": f"the disk is full; the event is held in the worker's memory and queued once "
                                   f"there is room ({detail})"}, status_code=202)
