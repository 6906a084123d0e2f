"""Memories one by one: read, delete, a batch of full records (a team server's too, in remote mode), and an
explicit save."""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from memcairn.capture.admission import scrub_item
from memcairn.context.freshness_check import checker_for
from memcairn.core.errors import NotFoundError, ValidationError
from memcairn.core.fields import FIELD, SAVED_FIELDS, Field
from memcairn.core.models import MAX_ITEM_ID, NewItem
from memcairn.search import parse_tz
from memcairn.search.freshness import with_corrections
from memcairn.search.records import agent_record, check_format, raw_record, said_once
from memcairn.wire.team_client import team_id, team_ref
from memcairn.worker import remote_reads
from memcairn.worker.fields import text_field, text_list
from memcairn.worker.openapi import MAX_BATCH_IDS
from memcairn.worker.routes.answers import JSON, endpoint, team_failed
from memcairn.worker.routes.params import path_id, read_json, state_of

log = logging.getLogger("memcairn.worker")

# /api/<kind>/<id> -> the kind of item it serves (memory: any)
KIND_ROUTES = {"observation": "observation", "summary": "summary", "prompt": "prompt", "memory": None}


def _batch_ids(ids: list[Any]) -> tuple[list[int], list[int]]:
    """(local ids, team server ids) of a batch: whole numbers, or ``team#N`` in remote mode."""
    local, team = [], []
    for i in ids:
        number = team_id(i)
        if number is not None:
            team.append(number)
        elif isinstance(i, int) and not isinstance(i, bool):
            if not 0 < i <= MAX_ITEM_ID:
                raise ValidationError(f"ids must be between 1 and {MAX_ITEM_ID}")
            local.append(i)
        else:
            raise ValidationError("ids must be whole numbers, or a team server's ids as \"team#12\", e.g. [12, 15]")
    return local, team


@endpoint
async def observations_batch(request: Request) -> Response:
    state = state_of(request)
    runtime = state.require()
    data = await read_json(request)
    ids = data.get("ids")
    if not isinstance(ids, list) or not ids:
        raise ValidationError("ids is required: a non-empty list of item ids, e.g. {\"ids\": [12, 15]}")
    if len(ids) > MAX_BATCH_IDS:
        raise ValidationError(f"at most {MAX_BATCH_IDS} ids per request")
    if all(isinstance(i, int) and not isinstance(i, bool) for i in ids) and not all(0 < i <= MAX_ITEM_ID
                                                                                    for i in ids):
        raise ValidationError(f"ids must be between 1 and {MAX_ITEM_ID}")
    local, team = _batch_ids(ids)
    if any(not isinstance(data[key], str) for key in ("format", "tz") if key in data):
        raise ValidationError("format and tz must be strings, e.g. {\"format\": \"agent\", \"tz\": \"UTC\"}")
    fmt, tz = check_format(data.get("format")), parse_tz(data.get("tz"))
    items = await state.call(runtime.store.get_items, local) if local else []
    found = {i.id for i in items}
    fresh = with_corrections(items, await state.call(checker_for(runtime.store).check, items) if items else {})
    records = [agent_record(i, tz, fresh.get(i.id)) if fmt == "agent" else raw_record(i, fresh.get(i.id))
               for i in items]
    if fmt == "agent":
        records = said_once(records)
    if not team:
        return JSON({"items": records, "missing": [i for i in dict.fromkeys(ids) if i not in found]})
    try:
        held, _ = await remote_reads.team_items(state.settings, list(dict.fromkeys(team)))
    except remote_reads.TeamReadFailed as exc:
        return team_failed(exc)
    by_ref: dict[Any, dict[str, Any]] = {r["id"]: r for r in records}
    made = await remote_reads.team_records(state.call, runtime.store, held, fmt, tz)
    by_ref.update({team_ref(n): record for n, record in made.items()})
    asked = list(dict.fromkeys(team_ref(n) if (n := team_id(i)) is not None else i for i in ids))
    return JSON({"items": [by_ref[i] for i in asked if i in by_ref], "missing": [i for i in asked if i not in by_ref]})


def _kind_of(request: Request) -> str | None:
    return KIND_ROUTES[request.url.path.split("/")[2]]


@endpoint
async def get_item(request: Request) -> Response:
    state = state_of(request)
    runtime = state.require()
    item_id, kind = path_id(request), _kind_of(request)
    item = await state.call(runtime.store.get_item, item_id)
    if kind is not None and item.kind != kind:
        raise NotFoundError(f"#{item_id} is a {item.kind}, not a {kind}; read it at /api/memory/{item_id}")
    fresh = with_corrections([item], await state.call(checker_for(runtime.store).check, [item]))
    return JSON(raw_record(item, fresh.get(item.id)))


@endpoint
async def delete_item(request: Request) -> Response:
    state = state_of(request)
    runtime = state.require()
    item_id, kind = path_id(request), _kind_of(request)

    def remove() -> dict[str, Any]:
        item = runtime.store.get_item(item_id)
        if kind is not None and item.kind != kind:
            raise NotFoundError(f"#{item_id} is a {item.kind}, not a {kind}; delete it at /api/memory/{item_id}")
        if not runtime.store.delete_items([item_id]):
            raise NotFoundError(f"no memory with id {item_id}")
        # The outbox (filled by a trigger) tells the mirror too; this drops the vectors now instead of at the
        # runner's next pass. It is idempotent, so the outbox replaying it later is harmless.
        if runtime.mirror is not None:
            try:
                runtime.mirror.index.delete_where_sqlite_ids([item_id], project=item.project)
            except Exception as exc:  # the outbox retries it
                log.warning("could not drop #%d from the mirror now (the outbox will): %s", item_id, exc)
        return {"id": item_id, "deleted": True, "kind": item.kind}

    return JSON(await state.call(remove, write=True))


async def item_route(request: Request) -> Response:
    """One route per path for both methods, so a 405 names every allowed method."""
    return await (delete_item if request.method == "DELETE" else get_item)(request)


@endpoint
async def team_item(request: Request) -> Response:
    """``/api/memory/team/12``: a team server's memory (remote mode), search's ``team#12``."""
    state = state_of(request)
    state.require()
    item_id = request.path_params["id"]
    ref = team_ref(item_id)
    if not 0 < item_id <= MAX_ITEM_ID:
        raise NotFoundError(f"no memory {ref}")
    try:
        held, _ = await remote_reads.team_items(state.settings, [item_id])
    except remote_reads.TeamReadFailed as exc:
        return team_failed(exc)
    if item_id not in held:
        raise NotFoundError(f"the team server holds no memory {ref}")
    made = await remote_reads.team_records(state.call, state.require().store, held, "raw", None)
    return JSON(made[item_id])


def _saved_value(data: dict[str, Any], f: Field) -> Any:
    """A field of a save's body (``core/fields.py``'s ``saved``), empty when left out."""
    if f.shape == "list":
        return text_list(data, f.name)
    if f.shape == "object":
        value = data.get(f.name)
        if value is not None and not isinstance(value, dict):
            raise ValidationError(f"{f.name} must be a JSON object")
        return value or {}
    return text_field(data, f.name, blank_ok=True)


@endpoint
async def save_memory(request: Request) -> Response:
    state = state_of(request)
    runtime = state.require()
    data = await read_json(request)
    item = NewItem(
        project=text_field(data, "project", max_chars=200) or "default",
        kind="manual",
        type=text_field(data, "type", max_chars=40),
        **{name: _saved_value(data, FIELD[name]) for name in SAVED_FIELDS if name != "text"},
        text=text_field(data, "text", required=True, hint=": the memory to save, as text"),
        platform_source=text_field(data, "platform_source", "platformSource", max_chars=100, blank_ok=True),
    )
    item = scrub_item(item)  # the privacy rules of captured events: <private> parts out, secrets redacted
    if item.text is None:
        raise ValidationError("text holds nothing but <private> parts; nothing was saved")
    # An explicit save: content the user deleted before is stored again.
    result = await state.call(runtime.store.add_item, item, revive=True, write=True)
    return JSON({"id": result.id, "created": result.created})
