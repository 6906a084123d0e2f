"""``/api/context/inject``: the SessionStart digest for an agent (the team's first in remote mode), one line for
a resumed session with nothing new (``worker/resume.py``)."""

from __future__ import annotations

import dataclasses

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from memcairn.capture.admission import project_excluded
from memcairn.context.memo import Answer, ContextMemo
from memcairn.core.errors import ValidationError
from memcairn.search import parse_tz
from memcairn.wire.config import Settings
from memcairn.wire.protocol import CONTEXT_HEADER
from memcairn.worker import remote_reads
from memcairn.worker.resume import RESUMED, RESUMED_NOTE, unchanged_since_start
from memcairn.worker.routes.answers import endpoint
from memcairn.worker.routes.params import flag, param, project_names, raw_param, read_json, state_of

# CONTEXT_HEADER says how the answer got its text: "memo" (a memoized render), "rendered" (rendered for this
# request), "team" (the team server's), RESUMED (resume.RESUMED_NOTE), or:
EXCLUDED = "excluded"  # the empty answer for a project exclude_projects names


def _context_settings(request: Request, settings: Settings) -> Settings:
    """The settings with the budget lowered to ``maxTokens`` (an agent's own size limit); never raised."""
    value = raw_param(request, "maxTokens")
    if value is None:
        return settings
    try:
        cap = int(value)  # blank is a mistake here, not "absent": only an agent's hook sends it
    except ValueError:
        raise ValidationError(f"maxTokens must be a whole number, got {value!r}") from None
    if cap < 1:
        raise ValidationError("maxTokens must be at least 1")
    return dataclasses.replace(settings, context_token_budget=min(settings.context_token_budget, cap))


def _resumed_session(request: Request) -> tuple[str, str, int | None] | None:
    """(agent, session id, when the asking hook started or None) when the context is asked for a resumed session
    (``source=resume``), else None."""
    started = param(request, "started")
    if started is not None and not (started.isascii() and started.isdecimal()):
        raise ValidationError(f"started must be epoch milliseconds (a whole number), got {started!r}")
    if (param(request, "source") or "").lower() != "resume":
        return None
    agent, session = param(request, "agent"), param(request, "session")
    return (agent, session, int(started) if started is not None else None) if agent and session else None


@endpoint
async def context_inject(request: Request) -> Response:
    state = state_of(request)
    runtime = state.require()
    # POST is the SessionStart hook giving the context to an agent: the capture notices in it are then marked
    # shown. GET reads only (a person, the demo, a benchmark): the notices are in the text and stay unshown.
    mark = request.method == "POST"
    if mark and (await request.body()).strip():
        await read_json(request)  # the parameters are the query's; a body, when sent, must still be JSON
    names = project_names(request)
    platform = param(request, "platformSource")
    colors, full, fresh = flag(request, "colors"), flag(request, "full"), flag(request, "fresh")
    tz = parse_tz(param(request, "tz"))
    settings = _context_settings(request, state.settings)
    if names and project_excluded(names, state.settings):  # the header tells the hook this is the worker
        return PlainTextResponse("", headers={CONTEXT_HEADER: EXCLUDED})
    memo = state.context_memo
    if memo is None:  # set with the runtime; a memo that always renders otherwise
        memo = ContextMemo(None)

    resumed = _resumed_session(request)

    def build() -> Answer:
        if runtime.store.damage is not None:  # writes are refused (marking notices shown too): say so on top
            notices = [f"memory is read-only: the database fails SQLite's check ({runtime.store.damage}); new "
                       "memories are not saved until it is restored: run `memcairn doctor`"]
        else:
            notices = runtime.store.take_capture_notices(names or None, mark=mark)
        # Capture warnings are shown at the top of a full context: a resume with some gets the context, or they
        # would wait for the next start.
        if resumed is not None and not notices and unchanged_since_start(runtime.store, names, *resumed):
            return Answer(RESUMED_NOTE, RESUMED)
        return memo.render(runtime.store, settings, projects=names, platform_source=platform, colors=colors,
                           full=full, tz=tz, notices=notices, fresh=fresh)

    cfg = remote_reads.remote_config(state.settings) if names else None
    if cfg is not None and resumed is None:  # remote mode: the team's digest first
        body, why = await remote_reads.team_context(state.settings, cfg, state.call, runtime.store, list(names or ()),
                                                    settings.context_token_budget)
        if body is not None and isinstance(body.get("context"), str):
            return PlainTextResponse(body["context"], headers={CONTEXT_HEADER: "team",
                                                               remote_reads.REMOTE_HEADER: "team"})
        answer = await state.call(build)
        return PlainTextResponse(answer.text, headers={CONTEXT_HEADER: answer.source,
                                                       remote_reads.REMOTE_HEADER: "local-fallback",
                                                       remote_reads.FALLBACK_HEADER: str(why)[:300]})
    answer = await state.call(build)
    return PlainTextResponse(answer.text, headers={CONTEXT_HEADER: answer.source})
