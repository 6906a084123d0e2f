"""``POST /api/memory/{id}/correct``: say a memory no longer holds (superseded by another, or wrong and why), or
take that back (``undo``); the memory stays, marked (``store/supersede.py``)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from memcairn.context.freshness_check import shared_checker
from memcairn.core.errors import ValidationError
from memcairn.core.models import MAX_ITEM_ID, MemoryItem
from memcairn.search.freshness import with_corrections
from memcairn.search.records import raw_record
from memcairn.store import supersede
from memcairn.worker.fields import text_field
from memcairn.worker.routes.answers import JSON, endpoint
from memcairn.worker.routes.params import path_id, read_json, state_of

PATH = "/api/memory/{id:int}/correct"


def _by(data: dict[str, Any]) -> int | None:
    by = data.get("by")
    if by is None:
        return None
    if isinstance(by, str) and by.strip().lstrip("#").isdigit():
        by = int(by.strip().lstrip("#"))
    if not isinstance(by, int) or isinstance(by, bool) or not 0 < by <= MAX_ITEM_ID:
        raise ValidationError("by must be the id of the memory that supersedes this one, e.g. {\"by\": 15}")
    return by


@endpoint
async def correct_item(request: Request) -> Response:
    state = state_of(request)
    runtime = state.require()
    item_id = path_id(request)
    data = await read_json(request)
    undo = data.get("undo", False)
    if not isinstance(undo, bool):
        raise ValidationError("undo must be true or false")
    why = text_field(data, "why", max_chars=supersede.MAX_WHY_CHARS, blank_ok=True)
    by = _by(data)
    if undo and (why or by is not None):
        raise ValidationError("undo takes back the correction in effect: give it alone, without why or by")

    def apply() -> MemoryItem:
        if undo:
            return supersede.undo(runtime.store, item_id)
        return supersede.correct(runtime.store, item_id, why=why, by=by)

    item = await state.call(apply, write=True)
    fresh = with_corrections([item], await state.call(shared_checker().check, [item]))
    return JSON(raw_record(item, fresh.get(item.id)))
