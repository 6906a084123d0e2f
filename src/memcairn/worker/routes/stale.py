"""``GET /api/stale``: the memories the code no longer supports (``context/stale.py``); the doors render them."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from memcairn.context.freshness_check import checker_for
from memcairn.context.stale import LISTED_STATES, answer, unsupported
from memcairn.core.errors import ValidationError
from memcairn.worker.routes.answers import JSON, endpoint
from memcairn.worker.routes.params import params, project_names, state_of

PATH = "/api/stale"


@endpoint
async def stale(request: Request) -> Response:
    """Query: ``project`` (repeatable) or ``projects`` (comma-separated), ``state`` (``stale``, ``changed`` or
    both; default ``stale``)."""
    state = state_of(request)
    runtime = state.require()
    given = request.query_params.getlist("state")
    states = params(request, "state") or ["stale"]
    if not set(states) <= set(LISTED_STATES) or any(not value.strip() for value in given):
        raise ValidationError(f"state is {' or '.join(LISTED_STATES)}, not {', '.join(given) or 'empty'!r}")
    found = await state.call(unsupported, runtime.store, checker_for(runtime.store), project_names(request), states)
    return JSON(answer(found))
