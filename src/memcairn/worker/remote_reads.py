"""Remote mode's read side: context and search asked of the team server first, within ``remote_timeout_ms``.

On a timeout, no answer or an error the worker answers from its local copy and says why: search in its
``fallback_reason`` (``team_server_unavailable``) and ``notes``, context in the ``X-Memcairn-Remote`` and
``X-Memcairn-Remote-Fallback`` headers (the text itself stays the local digest, untouched). A search with
filters the team API does not take (kinds, types, concepts, files, dates, platform, offset, order) is answered
locally. Team results carry the server's ids (``source: "team"``, ``team#N`` in the index text), not local ones.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from starlette.concurrency import run_in_threadpool

from memcairn.config import Settings
from memcairn.errors import ConfigError
from memcairn.fence import clean_line
from memcairn.team_client import RemoteConfig, TeamClient, TeamUnavailable, error_detail, load_remote

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


async def ask(settings: Settings, cfg: RemoteConfig, path: str, params: dict[str, Any]) -> tuple[Any, str | None]:
    """(the server's JSON answer, None) or (None, why not) within the setting's timeout."""
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
    if resp.status != 200 or not isinstance(resp.body, dict):
        return None, f"the team server answered {resp.status}: {error_detail(resp)}"
    return resp.body, None


def team_search_result(body: dict[str, Any], cfg: RemoteConfig, latency_ms: float) -> dict[str, Any]:
    """The server's hits in the shape of a local search result (``SearchResult.to_dict``)."""
    rows = []
    counts: dict[str, int] = {}
    for hit in body.get("results") or []:
        kind = hit.get("kind") or "observation"
        counts[kind] = counts.get(kind, 0) + 1
        rows.append({"id": hit.get("id"), "source": "team", "kind": kind, "type": hit.get("type"),
                     "title": hit.get("title"), "display_title": hit.get("title") or "",
                     "project": cfg.local_project(str(hit.get("project") or "")),
                     "created_at_epoch": hit.get("created_at_epoch"), "text": hit.get("text"),
                     "score": hit.get("score"), "legs": {name: {} for name in hit.get("legs") or []},
                     "relevance": None})
    return {"strategy": "team", "fallback_reason": None,
            "notes": [f"answered by the team server {cfg.url}; ids are the server's (team#N)"],
            "counts": counts, "latency_ms": round(latency_ms, 1), "mirror_available": True, "hidden": 0,
            "min_score": None, "results": rows, "source": "team"}


def team_index_text(result: dict[str, Any]) -> str:
    lines = [f"{len(result['results'])} result(s) from the team server"]
    for row in result["results"]:  # any team member's stored text: one printable line each, markers defused
        kind, type_, title, project = (clean_line(str(row[f])) for f in ("kind", "type", "display_title", "project"))
        lines.append(f"team#{row['id']}  {kind}/{type_}  {title}  ({project})")
    return "\n".join(lines)
