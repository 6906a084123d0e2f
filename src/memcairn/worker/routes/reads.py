"""Search, timeline and the project list; in remote mode search and a team anchor's timeline ask the team
server first (``worker/remote_reads.py``)."""

from __future__ import annotations

import dataclasses
from datetime import tzinfo

from starlette.requests import Request
from starlette.responses import Response

from memcairn.core.errors import ValidationError
from memcairn.search import SearchRequest, parse_tz, render_index, render_timeline
from memcairn.search.request import clamp
from memcairn.search.rows import result_rows
from memcairn.search.timeline import MAX_DEPTH
from memcairn.wire.team_client import team_id, team_ref
from memcairn.worker import remote_reads
from memcairn.worker.routes.answers import JSON, endpoint, team_failed
from memcairn.worker.routes.params import answer_format, param, params, project_names, state_of
from memcairn.worker.state import WorkerState


@endpoint
async def projects(request: Request) -> Response:
    state = state_of(request)
    runtime = state.require()
    rows = await state.call(runtime.store.projects)
    return JSON({"projects": [{"name": p.name, "merged_into_project": p.merged_into_project, "items": p.items,
                               "last_epoch": p.last_epoch} for p in rows]})


@endpoint
async def search(request: Request) -> Response:
    state = state_of(request)
    state.require()
    fmt = answer_format(request)
    tz = parse_tz(param(request, "tz"))
    req = SearchRequest(
        query=param(request, "query", "q") or "",
        projects=project_names(request),
        kinds=params(request, "kind", "kinds"),
        types=params(request, "type", "obs_type"),
        concepts=params(request, "concepts", "concept"),
        files=params(request, "files", "file"),
        date_start=param(request, "dateStart"),
        date_end=param(request, "dateEnd"),
        platform_source=param(request, "platformSource"),
        limit=param(request, "limit") or 20,
        offset=param(request, "offset") or 0,
        order=param(request, "orderBy"),
        mode=param(request, "mode"),
        min_score=param(request, "min_score", "minScore"),
        tz=tz,
    )
    team = await remote_reads.team_search(state.settings, req, state.call, state.require().store) \
        if remote_reads.team_answerable(req) else None
    if team is not None and not isinstance(team, str):
        if fmt == "index":
            return JSON({"format": "index", "text": remote_reads.team_index_text(team), "strategy": "team",
                         "fallback_reason": None, "notes": team["notes"], "counts": team["counts"], "hidden": 0,
                         "latency_ms": team["latency_ms"], "source": "team",
                         "rows": remote_reads.team_index_rows(team, tz)})
        return JSON({"format": "json", **team})
    assert state.search is not None  # set with the runtime
    result = await state.call(state.search.search, req)
    if isinstance(team, str):  # remote mode, the server did not answer: the local copy, saying so
        result = dataclasses.replace(result, fallback_reason=remote_reads.FALLBACK_REASON,
                                     notes=[*result.notes, f"{team}; answered from the local copy"])
    if fmt == "index":
        out = {"format": "index", "text": render_index(result, tz=tz), "strategy": result.strategy,
               "fallback_reason": result.fallback_reason, "notes": list(result.notes), "counts": result.counts,
               "hidden": result.hidden, "latency_ms": result.latency_ms, "rows": result_rows(result, tz)}
    else:
        out = {"format": "json", **result.to_dict()}
    return JSON(out)


@endpoint
async def timeline(request: Request) -> Response:
    state = state_of(request)
    state.require()
    fmt = answer_format(request)
    tz = parse_tz(param(request, "tz"))
    team_anchor = team_id(param(request, "anchor"))
    if team_anchor is not None:  # remote mode: a team search's id; the server's timeline in the anchor's project
        return await _team_timeline(request, state, team_anchor, fmt, tz)
    assert state.search is not None  # set with the runtime
    result = await state.call(
        state.search.timeline, anchor=param(request, "anchor"), query=param(request, "query"),
        depth_before=param(request, "before", "depth_before") or 10,  # depth_*: the earlier names
        depth_after=param(request, "after", "depth_after") or 10,
        projects=project_names(request), tz=tz,
    )
    if fmt == "index":
        return JSON({"format": "index", "text": render_timeline(result, tz=tz), "anchor_id": result.anchor_id,
                     "notes": list(result.notes), "strategy": result.strategy})
    return JSON({"format": "json", **result.to_dict()})


async def _team_timeline(request: Request, state: WorkerState, anchor: int, fmt: str,
                         tz: tzinfo | None) -> Response:
    if param(request, "query") is not None:
        raise ValidationError("give anchor or query, not both")
    notes: list[str] = []
    before = clamp(param(request, "before", "depth_before") or 10, 0, MAX_DEPTH, "depth_before", notes)
    after = clamp(param(request, "after", "depth_after") or 10, 0, MAX_DEPTH, "depth_after", notes)
    try:
        rows = await remote_reads.team_timeline(state.settings, anchor, before, after)
    except remote_reads.TeamReadFailed as exc:
        return team_failed(exc)
    ref = team_ref(anchor)
    if fmt == "index":
        return JSON({"format": "index", "text": remote_reads.team_timeline_text(anchor, rows, tz, notes),
                     "anchor_id": ref, "notes": notes, "strategy": "team", "source": "team"})
    return JSON({"format": "json", "anchor_id": ref, "strategy": "team", "source": "team", "notes": notes,
                 "items": list((await remote_reads.team_records(state.call, state.require().store,
                                                                dict(enumerate(item for item, _ in rows)), "raw",
                                                                tz)).values())})
