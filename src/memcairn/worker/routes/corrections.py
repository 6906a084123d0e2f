"""``POST /api/memory/{id}/correct``: say a memory no longer holds (superseded by another, or wrong and why), or
take that back (``undo``); the memory stays, marked (``store/supersede.py``)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from memcairn.context.freshness_check import shared_checker
from memcairn.core.errors import NotFoundError, ValidationError
from memcairn.core.models import MAX_ITEM_ID, MemoryItem
from memcairn.search.freshness import with_corrections
from memcairn.search.records import raw_record
from memcairn.store import supersede
from memcairn.wire.team_client import team_id, team_ref
from memcairn.worker import remote_reads
from memcairn.worker.fields import text_field
from memcairn.worker.routes.answers import JSON, endpoint, team_failed
from memcairn.worker.routes.params import path_id, read_json, state_of

PATH = "/api/memory/{id:int}/correct"
TEAM_PATH = "/api/memory/team/{id:int}/correct"  # remote mode: a team server's memory (team#12), marked there


def _by(data: dict[str, Any]) -> int | None:
    by = data.get("by")
    if by is None:
        return None
    if team_id(by) is not None:
        by = team_id(by)
    if isinstance(by, str) and by.strip().lstrip("#").isdigit():
        by = int(by.strip().lstrip("#"))
    if not isinstance(by, int) or isinstance(by, bool) or not 0 < by <= MAX_ITEM_ID:
        raise ValidationError("by must be the id of the memory that supersedes this one, e.g. {\"by\": 15}")
    return by


async def _asked(request: Request) -> tuple[bool, str | None, int | None]:
    """(undo, why, by) of a correction's body."""
    data = await read_json(request)
    undo = data.get("undo", False)
    if not isinstance(undo, bool):
        raise ValidationError("undo must be true or false")
    why = text_field(data, "why", max_chars=supersede.MAX_WHY_CHARS, blank_ok=True)
    by = _by(data)
    if undo and (why or by is not None):
        raise ValidationError("undo takes back the correction in effect: give it alone, without why or by")
    return undo, why, by


@endpoint
async def correct_team_item(request: Request) -> Response:
    """A team memory (remote mode) corrected on the server, which keeps it as its audit trail; its record as
    ``/api/memory/team/N`` gives it (``by``: the team id of the memory superseding it, ``team#15`` or 15)."""
    state = state_of(request)
    runtime = state.require()
    item_id = request.path_params["id"]
    if not 0 < item_id <= MAX_ITEM_ID:
        raise NotFoundError(f"no memory {team_ref(item_id)}")
    undo, why, by = await _asked(request)
    body: dict[str, Any] = {"undo": True} if undo else {"why": why, "by": by}
    try:
        item = await remote_reads.team_correct(state.settings, item_id, body)
    except remote_reads.TeamReadFailed as exc:
        return team_failed(exc)
    made = await remote_reads.team_records(state.call, runtime.store, {item_id: item}, "raw", None)
    return JSON(made[item_id])


@endpoint
async def correct_item(request: Request) -> Response:
    state = state_of(request)
    runtime = state.require()
    item_id = path_id(request)
    undo, why, by = await _asked(request)

    def apply() -> MemoryItem:
        if undo:
            return supersede.undo(runtime.store, item_id)
        return supersede.correct(runtime.store, item_id, why=why, by=by)

    item = await state.call(apply, write=True)
    fresh = with_corrections([item], await state.call(shared_checker().check, [item]))
    return JSON(raw_record(item, fresh.get(item.id)))
