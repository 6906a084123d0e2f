"""Remote mode's read side: context and search asked of the team server first, within ``remote_timeout_ms``.

On a timeout, no answer or an error the worker answers from its local copy and says why: search in its
``fallback_reason`` (``team_server_unavailable``) and ``notes``, context in the ``X-Memcairn-Remote`` and
``X-Memcairn-Remote-Fallback`` headers (the text itself stays the local digest, untouched). A search with
filters the team API does not take (kinds, types, concepts, files, dates, platform, offset, order) is answered
locally. Team results carry the server's ids as ``team#N`` (``source: "team"``), not local ones; the doors that take ids
back (full records, one record, a timeline) ask the server for them (below).

How true a team memory still is, is said here, not by the server (it has no working directory): its anchors come
with its row and are checked against the project's files on this machine (``team_states``,
``worker/team_freshness.py``), so a team hit carries the same ``freshness``, mark and place after the current ones
as a local one.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import tzinfo
from typing import Any

from starlette.concurrency import run_in_threadpool

from memcairn.core.errors import ConfigError, NotFoundError, ValidationError
from memcairn.core.models import MemoryItem
from memcairn.search.freshness import BELOW, CHANGED, STALE, Freshness, with_mark
from memcairn.search.records import agent_record, freshness_json, raw_record
from memcairn.search.request import SearchRequest
from memcairn.search.rows import index_row, row_text
from memcairn.wire.config import Settings
from memcairn.wire.fence import clean_line
from memcairn.wire.team_client import (
    RemoteConfig,
    TeamClient,
    TeamResponse,
    TeamUnavailable,
    error_detail,
    load_remote,
    team_id,
    team_ref,
)
from memcairn.worker.team_freshness import check_here

log = logging.getLogger("memcairn.remote")
FALLBACK_REASON = "team_server_unavailable"
REMOTE_HEADER = "X-Memcairn-Remote"
FALLBACK_HEADER = "X-Memcairn-Remote-Fallback"


def remote_config(settings: Settings) -> RemoteConfig | None:
    try:
        return load_remote(settings.home)
    except ConfigError as exc:
        log.warning("remote mode is misconfigured, answering locally: %s", exc)
        return None


async def fetch(settings: Settings, cfg: RemoteConfig, path: str,
                params: dict[str, Any] | None = None) -> tuple[TeamResponse | None, str | None]:
    """(the server's response, None) or (None, why there is none) within the setting's timeout."""
    timeout = max(0.05, settings.remote_timeout_ms / 1000)
    client = TeamClient(cfg.url, cfg.key, timeout=timeout)
    try:
        resp = await asyncio.wait_for(run_in_threadpool(client.request, "GET", path, params=params), timeout)
    except TimeoutError:
        return None, f"the team server did not answer within {settings.remote_timeout_ms} ms"
    except TeamUnavailable as exc:
        if exc.timed_out:  # the socket's own wait (the same length) can run out before ours
            return None, f"the team server did not answer within {settings.remote_timeout_ms} ms"
        return None, f"the team server does not answer ({exc})"
    return resp, None


async def ask(settings: Settings, cfg: RemoteConfig, path: str, params: dict[str, Any]) -> tuple[Any, str | None]:
    """(the server's JSON answer, None) or (None, why not) within the setting's timeout."""
    resp, why = await fetch(settings, cfg, path, params)
    if resp is None:
        return None, why
    if resp.status != 200 or not isinstance(resp.body, dict):
        return None, f"the team server answered {resp.status}: {error_detail(resp)}"
    return resp.body, None


# What checks team memories against the files here: ``WorkerState.call`` (the read pool) and the local store,
# whose project roots say where each project's working directory is on this machine.
Call = Callable[..., Awaitable[Any]]


async def team_states(call: Call, store: object, items: Iterable[MemoryItem]) -> dict[int, Freshness]:
    """The team memories' freshness by id, as the files on this machine are now (``worker/team_freshness.py``);
    a corrected one's its correction (``superseded by #12``, ``wrong: …``), as the server keeps it."""
    items = list(items)
    return dict(await call(check_here, store, items)) if items else {}


def _state_of(hit: dict[str, Any], states: Mapping[int, Freshness]) -> str | None:
    found = states.get(hit["id"]) if isinstance(hit.get("id"), int) else None
    return found.state if found is not None else None


async def team_context(settings: Settings, cfg: RemoteConfig, call: Call, store: object, names: list[str],
                       budget: int) -> tuple[Any, str | None]:
    """The team's SessionStart digest (the server's JSON answer, or None and why), its memories checked against
    the files here: when any of them changed or went stale, the digest is asked for again with what was found
    (``server/told_freshness.py``), so it marks and drops them as a local digest does."""
    params: dict[str, Any] = {"project": [cfg.server_project(n) for n in names], "max_tokens": budget,
                              "anchors": "true"}
    body, why = await ask(settings, cfg, "/v1/context", params)
    anchored = body.get("anchored") if isinstance(body, dict) else None
    if not isinstance(anchored, list) or not anchored:
        return body, why
    items = [team_item({"id": a["id"], "anchors": a.get("anchors")}, cfg.local_project(str(a.get("project") or "")))
             for a in anchored if isinstance(a, dict) and isinstance(a.get("id"), int)]
    told = {str(n): {"state": f.state, "reasons": list(f.reasons)}
            for n, f in (await team_states(call, store, items)).items() if f.state in (CHANGED, STALE)}
    if not told:
        return body, why
    again, _ = await ask(settings, cfg, "/v1/context", {**params, "anchors": "false",
                                                         "states": json.dumps(told, separators=(",", ":"))})
    return (again, None) if isinstance(again, dict) and isinstance(again.get("context"), str) else (body, why)


def team_search_result(body: dict[str, Any], cfg: RemoteConfig, latency_ms: float,
                       states: Mapping[int, Freshness] | None = None) -> dict[str, Any]:
    """The server's hits in the shape of a local search result (``SearchResult.to_dict``); with ``states`` (by
    the server's id) each carries its freshness, and the stale ones follow the others, as a local search ranks
    them."""
    rows = []
    counts: dict[str, int] = {}
    states = states or {}
    hits = body.get("results") or []
    for hit in sorted(hits, key=lambda h: _state_of(h, states) in BELOW):  # stable: the server's order otherwise
        kind = hit.get("kind") or "observation"
        counts[kind] = counts.get(kind, 0) + 1
        ref = team_ref(hit["id"]) if isinstance(hit.get("id"), int) else hit.get("id")
        fresh = states.get(hit["id"]) if isinstance(hit.get("id"), int) else None
        rows.append({"id": ref, "source": "team", "kind": kind, "type": hit.get("type"),
                     "title": hit.get("title"), "display_title": hit.get("title") or "",
                     "project": cfg.local_project(str(hit.get("project") or "")),
                     "created_at_epoch": hit.get("created_at_epoch"), "text": hit.get("text"),
                     "score": hit.get("score"), "legs": {name: {} for name in hit.get("legs") or []},
                     "relevance": None, **({"freshness": freshness_json(fresh)} if fresh is not None else {})})
    return {"strategy": "team", "fallback_reason": None,
            "notes": [f"answered by the team server {cfg.url}; ids are the server's (team#N): get_observations, "
                      "timeline and show take them"],
            "counts": counts, "latency_ms": round(latency_ms, 1), "mirror_available": True, "hidden": 0,
            "min_score": None, "results": rows, "source": "team"}


def team_answerable(req: SearchRequest) -> bool:
    """A plain query (words, projects, limit, mode) is what the team API answers; filters stay local."""
    return bool(req.query.strip()) and not any((req.kinds, req.types, req.concepts, req.files, req.date_start,
                                                req.date_end, req.platform_source, req.order)) \
        and not int(req.offset or 0) and req.min_score is None


async def team_search(settings: Settings, req: SearchRequest, call: Call | None = None,
                      store: object = None) -> dict[str, Any] | str | None:
    """Remote mode: the team server's result, or why it gave none (a string); None in local mode. With ``call``
    and ``store`` its hits are checked against the files here (``team_states``)."""
    cfg = remote_config(settings)
    if cfg is None:
        return None
    started = time.perf_counter()
    params: dict[str, Any] = {"query": req.query, "limit": int(req.limit or 20)}
    if req.mode in ("keyword", "semantic"):
        params["mode"] = req.mode
    if req.projects:
        params["project"] = [cfg.server_project(p) for p in req.projects]
    body, why = await ask(settings, cfg, "/v1/search", params)
    if body is None:
        assert why is not None
        return why
    states: dict[int, Freshness] = {}
    if call is not None:
        hits = [h for h in body.get("results") or [] if isinstance(h, dict) and isinstance(h.get("id"), int)]
        states = await team_states(call, store, [team_item(h, cfg.local_project(str(h.get("project") or "")))
                                                 for h in hits])
    return team_search_result(body, cfg, (time.perf_counter() - started) * 1000, states)


def team_index_rows(result: dict[str, Any], tz: tzinfo | None) -> list[dict[str, Any]]:
    """The team hits as structured rows (``search.rows``), ids as ``team#N``."""
    several = len({row["project"] for row in result["results"]}) > 1
    return [index_row(team_item({**row, "id": team_id(row["id"])}, row["project"]), tz, ref=row["id"],
                      project=several) for row in result["results"] if team_id(row.get("id")) is not None]


def _row_freshness(row: dict[str, Any]) -> Freshness | None:
    said = row.get("freshness")
    return Freshness(str(said["state"]), tuple(said.get("reasons") or ())) if isinstance(said, dict) else None


def team_index_text(result: dict[str, Any]) -> str:
    lines = [f"{len(result['results'])} result(s) from the team server"]
    for row in result["results"]:  # any team member's stored text: one printable line each, markers defused
        kind, type_, title, project = (clean_line(str(row[f])) for f in ("kind", "type", "display_title", "project"))
        lines.append(f"{row['id']}  {kind}/{type_}  {with_mark(title, _row_freshness(row))}  ({project})")
    return "\n".join(lines)


# -- team ids taken back (``team#N``): full records, one record, a timeline ----------------------------------
class TeamReadFailed(Exception):
    """A read of team memories the team server did not answer (or answered with an error)."""


class NotConnected(TeamReadFailed):
    """A team id given to a worker in local mode."""


def _connected(settings: Settings, ref: str) -> RemoteConfig:
    cfg = remote_config(settings)
    if cfg is None:
        raise NotConnected(f"{ref} is a team server's memory and this worker is not connected to one; run "
                             "`memcairn connect URL --key KEY`, or use the local ids (#N) a local search shows")
    return cfg


def team_item(record: dict[str, Any], project: str) -> MemoryItem:
    """A team server's record (``/v1/memories/{id}``) as a memory item, so it renders and costs as a local one."""
    epoch = record.get("created_at_epoch") if isinstance(record.get("created_at_epoch"), int) else 0
    return MemoryItem(
        id=int(record["id"]), uuid="", project=project,
        merged_into_project=None, session=record.get("session"), kind=str(record.get("kind") or "observation"),
        type=str(record.get("type") or ""), title=record.get("title") or None, subtitle=None,
        text=record.get("text") or None, narrative=None, facts=[], concepts=[], files_read=[], files_modified=[],
        metadata={}, request=None, investigated=None, learned=None, completed=None, next_steps=None, notes=None,
        prompt_number=None, platform_source=None, content_hash=str(record.get("content_hash") or ""),
        created_at_epoch=epoch, updated_at_epoch=epoch,
        anchors=record["anchors"] if isinstance(record.get("anchors"), dict) else {},
        correction=record["correction"] if isinstance(record.get("correction"), dict) else {})


def team_record(item: MemoryItem, fmt: str, tz: tzinfo | None, freshness: Freshness | None = None) -> dict[str, Any]:
    """A team memory in the shape ``/api/observations/batch`` gives a local one, its id as ``team#N``, with its
    freshness as the files here say (``team_states``)."""
    record = agent_record(item, tz, freshness) if fmt == "agent" else raw_record(item, freshness)
    return {**record, "id": team_ref(item.id), "source": "team"}


async def team_records(call: Call, store: object, items: Mapping[int, MemoryItem], fmt: str,
                       tz: tzinfo | None) -> dict[int, dict[str, Any]]:
    """``team_record`` of each item (by the server's id), checked against the files here."""
    states = await team_states(call, store, items.values())
    return {n: team_record(item, fmt, tz, states.get(item.id)) for n, item in items.items()}


async def team_items(settings: Settings, ids: list[int]) -> tuple[dict[int, MemoryItem], list[int]]:
    """The team memories of ``ids`` (by id) and the ids the server holds none of (for this key).

    Raises:
        TeamReadFailed: not connected, or the server did not answer (why, and what to do)."""
    cfg = _connected(settings, team_ref(ids[0]))
    answers = await asyncio.gather(*(fetch(settings, cfg, f"/v1/memories/{i}") for i in ids))
    found: dict[int, MemoryItem] = {}
    missing: list[int] = []
    for item_id, (resp, why) in zip(ids, answers, strict=True):
        if resp is None:
            raise TeamReadFailed(f"{why}; {team_ref(item_id)} is held by the team server only, try again later")
        if resp.status == 404:
            missing.append(item_id)
        elif resp.status != 200 or not isinstance(resp.body, dict):
            raise TeamReadFailed(f"the team server answered {resp.status} for {team_ref(item_id)}: "
                                 f"{error_detail(resp)}")
        else:
            found[item_id] = team_item(resp.body, cfg.local_project(str(resp.body.get("project") or "")))
    return found, missing


async def team_correct(settings: Settings, item_id: int, body: dict[str, Any]) -> MemoryItem:
    """``memcairn correct team#N``: the server marks its memory (``POST /v1/memories/{id}/correction``: ``why``,
    ``by``, or ``undo``) and keeps it; the memory as it is then.

    Raises:
        TeamReadFailed: not connected, or the server did not answer.
        NotFoundError: the server holds no such memory (or no ``by``).
        ValidationError: the server refused the correction (its reason)."""
    ref = team_ref(item_id)
    cfg = _connected(settings, ref)
    client = TeamClient(cfg.url, cfg.key, timeout=max(1.0, settings.remote_timeout_ms / 1000))
    try:
        resp = await run_in_threadpool(client.request, "POST", f"/v1/memories/{item_id}/correction", body=body)
    except TeamUnavailable as exc:
        raise TeamReadFailed(f"the team server does not answer ({exc}); {ref} is corrected there only, try again "
                             "later") from None
    if resp.status == 404:
        raise NotFoundError(f"the team server: {error_detail(resp)}")
    if resp.status == 400:
        raise ValidationError(f"the team server refused it: {error_detail(resp)}")
    if resp.status != 200 or not isinstance(resp.body, dict):
        raise TeamReadFailed(f"the team server answered {resp.status} for {ref}: {error_detail(resp)}")
    return team_item(resp.body, cfg.local_project(str(resp.body.get("project") or "")))


async def team_timeline(settings: Settings, anchor: int, before: int, after: int) -> list[tuple[MemoryItem, bool]]:
    """The memories around the team memory ``anchor`` in its project, oldest first, each with whether it is it.

    Raises:
        TeamReadFailed: not connected, or the server did not answer.
        NotFoundError: the server holds no such memory."""
    ref = team_ref(anchor)
    cfg = _connected(settings, ref)
    resp, why = await fetch(settings, cfg, "/v1/timeline", {"anchor": anchor, "before": before, "after": after})
    if resp is None:
        raise TeamReadFailed(f"{why}; {ref} is held by the team server only, try again later")
    if resp.status == 404:
        raise NotFoundError(f"the team server holds no memory {ref}")
    if resp.status != 200 or not isinstance(resp.body, dict):
        raise TeamReadFailed(f"the team server answered {resp.status} for the timeline around {ref}: "
                             f"{error_detail(resp)}")
    return [(team_item(row, cfg.local_project(str(row.get("project") or ""))), bool(row.get("anchor")))
            for row in resp.body.get("items") or []]


def team_timeline_text(anchor: int, rows: list[tuple[MemoryItem, bool]], tz: tzinfo | None,
                       notes: list[str]) -> str:
    """The timeline's Markdown as ``render_timeline`` lays it out (by day), with the team's ids."""
    at = next((n for n, (_, is_anchor) in enumerate(rows) if is_anchor), None)
    head = f"Timeline around {team_ref(anchor)} · " + (
        f"{at} before, {len(rows) - at - 1} after" if at is not None else "nothing to show") + " · strategy: team"
    lines, day = [head, *(f"Note: {clean_line(n)}" for n in notes)], None
    show_project = len({item.project for item, _ in rows}) > 1
    for item, is_anchor in rows:
        row = index_row(item, tz, ref=team_ref(item.id), project=show_project)
        if row["day"] != day:
            day = row["day"]
            lines += ["", f"### {day}"]
        lines.append("- " + row_text(row, with_day=False) + (" <- ANCHOR" if is_anchor else ""))
    return "\n".join(lines) + "\n"
