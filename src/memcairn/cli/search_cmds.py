"""``memcairn search`` and ``memcairn timeline``: thin doors onto ``memcairn.search.SearchService``.

When this home's worker is running and ready, both commands ask it (``GET /api/search`` and
``/api/timeline``): it has the store open and the embedding model and vector mirror warm, where opening
them in this process costs about a second. Otherwise, or with ``--local``, they search in-process. The
output is the same either way: the worker renders with the same functions, reads dates and prints times
in this process's zone (sent as ``tz``), and the JSON output is built from the same dictionaries.

"This home's worker" is the one whose pid is in ``$MEMCAIRN_HOME/worker.pid`` and which answers
``/api/health`` on the configured port with that pid, so a worker of another home that happens to listen
on the port is never asked.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import click

from memcairn.cli.common import emit_json, settings
from memcairn.core.errors import (
    ConfigError,
    MemcairnError,
    NotFoundError,
    StoreError,
    ValidationError,
    WorkerError,
    WorkerUnavailableError,
)
from memcairn.wire.team_client import team_id, team_ref

if TYPE_CHECKING:
    from memcairn.search import SearchService
    from memcairn.wire.client import WorkerClient
    from memcairn.wire.config import Settings

ORDER_CHOICES = click.Choice(["relevance", "newest", "oldest"])
PROBE_TIMEOUT = 1.0  # /api/health answers at once, even while the worker is busy
REQUEST_TIMEOUT = 30.0
SCAN_WAIT_SECONDS = 60.0  # reading the scan of a million documents from a warm page cache takes seconds
SEARCH_RESULT_KEYS = ("id", "kind", "type", "title", "project", "created_at_epoch", "score", "relevance", "weak")
LOCAL_HELP = "Search in this process even when a worker is running."
TEAM_IDS_NEED_WORKER = "start the worker (`memcairn worker start`) and leave out --local"


@contextlib.contextmanager
def _service() -> Iterator[SearchService]:
    """A SearchService over the store and, when it opens, the mirror (otherwise keyword + the reason)."""
    from memcairn.context.freshness_check import checker_for
    from memcairn.mirror.runtime import open_runtime
    from memcairn.search import SearchService

    cfg = settings()
    try:
        runtime = open_runtime(cfg)
    except StoreError:
        raise
    except Exception as exc:  # the mirror could not be opened: search without it, and say why
        runtime = open_runtime(cfg, with_mirror=False)
        runtime.mirror_error = f"{type(exc).__name__}: {exc}" if not isinstance(exc, MemcairnError) else str(exc)
    _ready_as_the_worker(runtime.mirror)
    try:
        yield SearchService(runtime.store, runtime.mirror, recency_window_days=cfg.recency_window_days,
                            mirror_error=runtime.mirror_error, evidence_snippets=cfg.search_evidence_snippets,
                            freshness=checker_for(runtime.store))
    finally:
        runtime.close()


def _ready_as_the_worker(mirror: Any) -> None:
    """Read the vector index's binary scan before searching, as the worker does at start, so an in-process
    search picks its semantic candidates the same way and ranks exactly as the worker would (one ranking).
    On a large index that costs a moment; without the scan (a small index, another backend) it costs nothing."""
    index = getattr(mirror, "index", None)
    warm, wait = getattr(index, "warm", None), getattr(index, "wait_for_scan", None)
    if callable(warm) and callable(wait):
        try:
            warm()
            wait(SCAN_WAIT_SECONDS)
        except Exception:  # noqa: BLE001 - the exact path still answers
            pass


def _caller_tz() -> str:
    """This process's zone, sent along so the worker reads dates and prints times as this process would."""
    from memcairn.search import local_tz_name

    return local_tz_name()


def running_worker(cfg: Settings) -> WorkerClient | None:
    """A client of this home's worker when it runs and is ready; None means: work in-process."""
    from memcairn.wire.client import WorkerClient
    from memcairn.wire.lifecycle import read_pid_file

    info = read_pid_file(cfg)
    if info is None:
        return None
    client = WorkerClient(port=cfg.port, host=cfg.host, token=cfg.token, timeout=REQUEST_TIMEOUT, settings=cfg)
    try:
        health = client.health(timeout=PROBE_TIMEOUT)
    except (WorkerUnavailableError, ConfigError):
        return None
    if health.get("pid") != info["pid"] or not health.get("ready"):
        return None
    return client


def _ask_worker(local: bool, path: str, params: dict[str, Any], *lists: tuple[str, ...]) -> dict[str, Any] | None:
    """The worker's JSON answer to ``GET path``, or None to work in-process instead.

    None when ``local`` is set, when no worker of this home is ready, when a value of ``lists`` holds a
    comma (the HTTP API splits repeated values on commas, this process does not), or when the worker fails
    to answer (a note on stderr says so). A refused request (bad input, unknown anchor) is raised as it
    would be in-process.
    """
    if local or any("," in value for values in lists for value in values):
        return None
    client = running_worker(settings())
    if client is None:
        return None
    try:
        answer = client.get_json(path, params=params)
    except (WorkerUnavailableError, WorkerError, ConfigError) as exc:
        click.echo(f"note: {exc}; working in-process instead", err=True)
        return None
    if not isinstance(answer, dict):
        click.echo(f"note: the worker answered {path} with something other than an object; working in-process "
                   "instead", err=True)
        return None
    return answer


def _worker_output(answer: dict[str, Any] | None, as_json: bool, build: Callable[[dict[str, Any]], Any]) -> bool:
    """Print the worker's answer (``build`` makes the --json value of it); False when there is none to print."""
    if answer is None:
        return False
    try:
        value = build(answer) if as_json else answer["text"]
    except (KeyError, TypeError, AttributeError) as exc:
        click.echo(f"note: the worker's answer lacks {exc}; working in-process instead", err=True)
        return False
    if as_json:
        emit_json(value)
    elif isinstance(value, str):
        click.echo(value, nl=False)
    else:
        click.echo("note: the worker's answer has no text; working in-process instead", err=True)
        return False
    return True


def search_json(data: dict[str, Any]) -> dict[str, Any]:
    """What ``search --json`` prints, from ``SearchResult.to_dict()`` (or the worker's format=json answer)."""
    return {
        "strategy": data["strategy"],
        "fallback_reason": data["fallback_reason"],
        "notes": data["notes"],
        "hidden": data.get("hidden", 0),
        "results": [{**{key: hit.get(key) for key in SEARCH_RESULT_KEYS},
                     **({"freshness": hit["freshness"]} if _said(hit.get("freshness")) else {})}
                    for hit in data["results"]],
    }


@click.command()
@click.argument("query", required=False, default="")
@click.option("--project", "projects", multiple=True, help="Only these projects (repeatable); merged ones included.")
@click.option("--kind", help="observation(s), summary/summaries, prompt(s), manual or all (comma-separated ok).")
@click.option("--type", "types", multiple=True, help="Only these types, e.g. bugfix, decision (repeatable).")
@click.option("--concept", "concepts", multiple=True, help="Only items tagged with this concept (repeatable).")
@click.option("--file", "files", multiple=True, help="Only items that read or changed a path containing this.")
@click.option("--since", help="From this date: 2026-12-01, 2026-12-01T14:30, epoch seconds/ms, or 7d / 24h.")
@click.option("--until", help="Up to this date (a plain date includes that whole day).")
@click.option("--platform", "platform_source", help="Only memories from this platform, e.g. claude-code.")
@click.option("--limit", default=20, show_default=True, type=int, help="Results per page (1..100).")
@click.option("--offset", default=0, show_default=True, type=int, help="Skip this many results.")
@click.option("--order", type=ORDER_CHOICES, help="relevance (default with a query) | newest | oldest.")
@click.option("--min-score", type=click.FloatRange(min=0), help="Relevance floor: 0.75 (default) hides what "
              "nothing relates to; hits under 1 show as weak; 0 shows every candidate.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--local", is_flag=True, help=LOCAL_HELP)
def search(query: str, projects: tuple[str, ...], kind: str | None, types: tuple[str, ...],
           concepts: tuple[str, ...], files: tuple[str, ...], since: str | None, until: str | None,
           platform_source: str | None, limit: int, offset: int, order: str | None, min_score: float | None,
           as_json: bool, local: bool) -> None:
    """Search memories: keyword and semantic together, best matches first; without a query, the newest.

    Prints a compact index (one line per memory, with its id); use `memcairn timeline --anchor ID` for
    what happened around one and `memcairn show ID` for its full record. If the semantic mirror is
    unavailable the search runs on keywords alone and says so. A running worker answers when there is one
    (its model and mirror are warm); --local searches in this process regardless.

    Example:

    \b
        memcairn search "login token expiry" --project demo --since 30d --limit 10
    """
    params = {"query": query or None, "project": list(projects), "kind": kind, "type": list(types),
              "concepts": list(concepts), "files": list(files), "dateStart": since, "dateEnd": until,
              "platformSource": platform_source, "limit": limit, "offset": offset, "orderBy": order,
              "min_score": min_score, "format": "json" if as_json else "index", "tz": _caller_tz()}
    answer = _ask_worker(local, "/api/search", params, projects, types, concepts, files)
    if _worker_output(answer, as_json, search_json):
        return

    from memcairn.search import SearchRequest, render_index

    req = SearchRequest(query=query, projects=projects, kinds=kind, types=types, concepts=concepts, files=files,
                        date_start=since, date_end=until, platform_source=platform_source, limit=limit,
                        offset=offset, order=order, min_score=min_score)
    with _service() as service:
        result = service.search(req)
    if as_json:
        emit_json(search_json(result.to_dict()))
        return
    click.echo(render_index(result), nl=False)


@click.command()
@click.option("--anchor", help="An item id (12 or #12), S<id> for a summary, or a date/time (2026-12-01T14:30).")
@click.option("--query", help="Anchor on the best match for this text instead.")
@click.option("--before", "depth_before", default=10, show_default=True, type=int, help="Items before (0..50).")
@click.option("--after", "depth_after", default=10, show_default=True, type=int, help="Items after (0..50).")
@click.option("--project", "projects", multiple=True, help="Only these projects (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--local", is_flag=True, help=LOCAL_HELP)
def timeline(anchor: str | None, query: str | None, depth_before: int, depth_after: int,
             projects: tuple[str, ...], as_json: bool, local: bool) -> None:
    """Show what happened around one memory: the items just before and after it, of every kind.

    Give exactly one of --anchor and --query. A running worker answers when there is one; --local works
    in this process regardless.

    Example:

    \b
        memcairn timeline --anchor 42 --before 5 --after 5
    """
    params = {"anchor": anchor, "query": query, "before": depth_before, "after": depth_after,
              "project": list(projects), "format": "json" if as_json else "index", "tz": _caller_tz()}
    # A blank anchor or query counts as absent over HTTP; in-process it is refused or matched as given.
    blank = any(v is not None and not v.strip() for v in (anchor, query))
    answer = _ask_worker(local or blank, "/api/timeline", params, projects)
    if _worker_output(answer, as_json, lambda data: {k: v for k, v in data.items() if k != "format"}):
        return
    if team_id(anchor) is not None:
        raise WorkerUnavailableError(f"{anchor.strip()} is a team server's memory: the worker asks the server for "
                                     f"it; {TEAM_IDS_NEED_WORKER}")

    from memcairn.search import render_timeline

    with _service() as service:
        result = service.timeline(anchor=anchor, query=query, depth_before=depth_before, depth_after=depth_after,
                                  projects=projects or None)
    if as_json:
        emit_json(result.to_dict())
        return
    click.echo(render_timeline(result), nl=False)


class ShowId(click.ParamType):
    """An id as searches print it: ``12``, ``#12``, or ``team#12`` for a team server's memory (remote mode)."""

    name = "id"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int | str:
        from memcairn.search.service import parse_item_id

        held = team_id(value)
        if held is not None:
            return team_ref(held)
        try:
            return parse_item_id(value if isinstance(value, int) else str(value))
        except ValidationError as exc:
            self.fail(f"{exc} (or team#12 for a team server's memory)", param, ctx)


def show_via_worker(ids: tuple[int | str, ...], as_json: bool) -> None:
    """``memcairn show`` of ids that include a team server's (``team#12``): the worker reads them (the local
    ones from its store, the team's from the server) and they print as local records do."""
    from memcairn.wire.fence import clean_line

    client = running_worker(settings())
    if client is None:
        raise WorkerUnavailableError(f"team ids are read through the worker, and none is running; "
                                     f"{TEAM_IDS_NEED_WORKER}")
    answer = client.post_json("/api/observations/batch", {"ids": list(dict.fromkeys(ids))})
    items = [i for i in answer.get("items") or [] if isinstance(i, dict)]
    if as_json:
        emit_json(items)
    else:  # one printable line per field, as `show` prints a local record
        for item in items:
            ref = item["id"] if isinstance(item.get("id"), str) else f"#{item.get('id')}"
            click.echo(f"{clean_line(ref)} [{clean_line(item.get('kind'))}/{clean_line(item.get('type'))}] "
                       f"{clean_line(item.get('project'))}: {clean_line(item.get('title'))}")
            for name in ("subtitle", "text", "narrative", "request", "investigated", "learned", "completed",
                         "next_steps", "notes"):
                if item.get(name):
                    click.echo(f"  {name}: {clean_line(item[name])}")
            for name in ("facts", "concepts", "files_read", "files_modified"):
                if item.get(name):
                    click.echo(f"  {name}: {', '.join(clean_line(v) for v in item[name])}")
    missing = answer.get("missing") or []
    if missing:
        raise NotFoundError("not found: " + ", ".join(m if isinstance(m, str) else f"#{m}" for m in missing))


def _said(freshness: Any) -> bool:
    """Whether a hit's freshness says anything: ``unknown`` (no anchors, or the code not on this machine) is left
    out, as the agent's records leave it out."""
    return isinstance(freshness, dict) and freshness.get("state") not in (None, "unknown")
